//! Lock names (lock family): what a contended lock is, decided in the kernel on the
//! stack cache's misses from the waiting task's own structures, and per-CPU objects
//! (runqueues) noted for user space.

/// Classes of `LockKey::lock_class` beyond `lock::LOCK_CLASS_UNKNOWN` and
/// `lock::LOCK_CLASS_MMAP_LOCK`.
pub const LOCK_CLASS_PAGE_TABLE_LOCK: u32 = 2;
/// The waiting task's `files->file_lock` (the fd table).
pub const LOCK_CLASS_FILE_LOCK: u32 = 3;
/// The waiting task's `sighand->siglock`.
pub const LOCK_CLASS_SIGLOCK: u32 = 4;
/// The waiting task's `fs->lock` (cwd and root).
pub const LOCK_CLASS_FS_LOCK: u32 = 5;
/// A task's `pi_lock` (the waiter's own, or another task's: a wake-up).
pub const LOCK_CLASS_PI_LOCK: u32 = 6;
/// A task's `alloc_lock` (`task_lock()`).
pub const LOCK_CLASS_ALLOC_LOCK: u32 = 7;
/// A CPU's runqueue lock (`rq->__lock`).
pub const LOCK_CLASS_RQ_LOCK: u32 = 8;
/// The waiting task's `signal->cred_guard_mutex`.
pub const LOCK_CLASS_CRED_GUARD: u32 = 9;

/// A lock inside a slab object, named after its slab cache (`bpf_get_kmem_cache`,
/// Linux 6.13); the cache's name is in `LOCK_SLAB_NAMES`.
pub const LOCK_CLASS_SLAB: u32 = 10;

/// The helper id the kernel side calls in place of the kfunc `bpf_get_kmem_cache`: user
/// space rewrites each such call before loading, into the kfunc where the kernel has it
/// and into `r0 = 0` where it does not (aya 0.14 relocates no kfunc calls).
pub const KMEM_CACHE_CALL_MARK: i32 = 0x0b7f_cac0;

/// Bytes kept of a slab cache's name (`kmalloc-rcl-512`, `ext4_inode_cache`).
pub const SLAB_NAME_LEN: usize = 32;

/// The slab cache of a lock (`LOCK_SLAB_NAMES`, by lock address): its name, NUL-padded,
/// and where the lock lies in its object (`NO_OFFSET`: not known).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SlabName {
    pub name: [u8; SLAB_NAME_LEN],
    pub offset: u32,
    pub _pad: u32,
}

/// Locks whose slab cache is noted (`LOCK_SLAB_NAMES`; when full, further ones stay
/// addresses).
pub const LOCK_SLAB_NAMES_ENTRIES: u32 = 4096;

/// Struct offsets from BTF for naming locks, the load-time global `LOCK_NAME_LAYOUT`.
/// An offset of `NO_OFFSET` is a member this kernel lacks (its check is skipped);
/// `enabled` 0 turns naming off.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockNameLayout {
    pub enabled: u32,
    pub task_mm: u32,
    pub task_files: u32,
    pub task_sighand: u32,
    pub task_fs: u32,
    pub task_signal: u32,
    pub task_pi_lock: u32,
    pub task_alloc_lock: u32,
    pub task_group_leader: u32,
    pub task_tgid: u32,
    pub task_se_cfs_rq: u32,
    pub mm_mmap_lock: u32,
    pub mm_page_table_lock: u32,
    pub files_file_lock: u32,
    pub sighand_siglock: u32,
    pub fs_lock: u32,
    pub signal_cred_guard: u32,
    pub cfs_rq_rq: u32,
    pub rq_lock: u32,
    /// `kmem_cache.name`; `NO_OFFSET` also where the kernel has no `bpf_get_kmem_cache`.
    pub kmem_cache_name: u32,
    /// `kmem_cache.size` (object stride), `.red_left_pad` and `.oo` (order in the top
    /// 16 bits), to find the lock's offset in its object.
    pub kmem_cache_size: u32,
    pub kmem_cache_red_left_pad: u32,
    pub kmem_cache_oo: u32,
}

/// A member this kernel does not have.
pub const NO_OFFSET: u32 = u32::MAX;

impl LockNameLayout {
    pub const OFF: LockNameLayout = LockNameLayout {
        enabled: 0,
        task_mm: NO_OFFSET,
        task_files: NO_OFFSET,
        task_sighand: NO_OFFSET,
        task_fs: NO_OFFSET,
        task_signal: NO_OFFSET,
        task_pi_lock: NO_OFFSET,
        task_alloc_lock: NO_OFFSET,
        task_group_leader: NO_OFFSET,
        task_tgid: NO_OFFSET,
        task_se_cfs_rq: NO_OFFSET,
        mm_mmap_lock: NO_OFFSET,
        mm_page_table_lock: NO_OFFSET,
        files_file_lock: NO_OFFSET,
        sighand_siglock: NO_OFFSET,
        fs_lock: NO_OFFSET,
        signal_cred_guard: NO_OFFSET,
        cfs_rq_rq: NO_OFFSET,
        rq_lock: NO_OFFSET,
        kmem_cache_name: NO_OFFSET,
        kmem_cache_size: NO_OFFSET,
        kmem_cache_red_left_pad: NO_OFFSET,
        kmem_cache_oo: NO_OFFSET,
    };
}

/// What the stack cache keeps per (lock, call path): the stack id, the lock's class and
/// when the stack was walked (`STACK_REFRESH_NS`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct StackCacheValue {
    pub kstack_id: i32,
    pub lock_class: u32,
    pub walked_ns: u64,
}

/// CPUs whose runqueue lock address is noted (`LOCK_RQ_ADDRS`, indexed by CPU).
pub const LOCK_RQ_ADDRS_ENTRIES: u32 = 1024;

pub mod names {
    crate::define_names! {
        LOCK_NAME_LAYOUT,
        LOCK_RQ_ADDRS,
        LOCK_SLAB_NAMES,
    }
}

#[cfg(feature = "user")]
crate::impl_pod!(LockNameLayout, StackCacheValue, SlabName);
