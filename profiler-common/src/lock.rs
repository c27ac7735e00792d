//! Lock contention: `lock:contention_begin` / `lock:contention_end`.

/// Flags of `lock:contention_begin` (include/trace/events/lock.h, `LCB_F_*`).
pub const LCB_F_SPIN: u32 = 1 << 0;
pub const LCB_F_READ: u32 = 1 << 1;
pub const LCB_F_WRITE: u32 = 1 << 2;
pub const LCB_F_RT: u32 = 1 << 3;
pub const LCB_F_PERCPU: u32 = 1 << 4;
pub const LCB_F_MUTEX: u32 = 1 << 5;

/// Aggregation key: one row per process, kernel stack, lock and lock type.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey {
    pub lock_addr: u64,
    /// Process id (tgid) of the waiter.
    pub tgid: u32,
    /// Stack id in the shared stack map, or a negative errno when the stack was lost.
    pub kstack_id: i32,
    /// `LCB_F_*` flags seen at contention_end time for this wait.
    pub flags: u32,
    /// What the lock is, when the kernel side can tell (`LOCK_CLASS_*`).
    pub lock_class: u32,
    /// Process (tgid) holding a sleeping lock when the wait began; 0 when unknown
    /// (spinlocks, reader-owned rwsems, no BTF).
    pub owner_tgid: u32,
    /// Kernel stack where the owner sleeps (from its off-CPU switch-out, when the
    /// off-CPU family records it), or a negative value when unknown.
    pub owner_kstack_id: i32,
}

/// The lock is not recognized.
pub const LOCK_CLASS_UNKNOWN: u32 = 0;
/// The lock is the waiting task's own `mm->mmap_lock`.
pub const LOCK_CLASS_MMAP_LOCK: u32 = 1;

/// Kernel struct offsets (from BTF) that let the lock programs read a lock's owner and
/// recognize `mmap_lock`. Passed as the load-time global `LOCK_LAYOUT`; `enabled` is 0
/// when the kernel has no BTF, and then neither is read.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockLayout {
    pub enabled: u32,
    pub task_mm: u32,
    pub task_pid: u32,
    pub task_tgid: u32,
    pub task_comm: u32,
    pub mm_mmap_lock: u32,
    pub mutex_owner: u32,
    pub rwsem_owner: u32,
}

/// Aggregated wait times of one key, in nanoseconds.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockStat {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    pub min_ns: u64,
}

/// A contention in progress (begin seen, end not yet).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct LockWait {
    pub start_ns: u64,
    pub lock_addr: u64,
    pub flags: u32,
    pub kstack_id: i32,
    pub lock_class: u32,
    pub owner_tgid: u32,
    pub owner_kstack_id: i32,
    pub _pad: u32,
}

/// Entries of the sleeping-lock waits in progress (`LOCK_SLEEP_WAIT`), by thread.
pub const LOCK_SLEEP_WAIT_ENTRIES: u32 = 16384;

pub mod names {
    pub const LOCK_STATS: &str = "LOCK_STATS";
    pub const LOCK_SLEEP_WAIT: &str = "LOCK_SLEEP_WAIT";
    pub const LOCK_SPIN_WAIT: &str = "LOCK_SPIN_WAIT";
    pub const LOCK_SPIN_DEPTH: &str = "LOCK_SPIN_DEPTH";
    pub const LOCK_LAYOUT: &str = "LOCK_LAYOUT";
    pub const LOCK_CONTENTION_BEGIN: &str = "lock_contention_begin";
    pub const LOCK_CONTENTION_END: &str = "lock_contention_end";
    pub const LOCK_KPROBE_SPIN: &str = "lock_kprobe_spin";
    pub const LOCK_KRETPROBE_SPIN: &str = "lock_kretprobe_spin";
    pub const LOCK_KPROBE_MUTEX: &str = "lock_kprobe_mutex";
    pub const LOCK_KPROBE_RWSEM_READ: &str = "lock_kprobe_rwsem_read";
    pub const LOCK_KPROBE_RWSEM_WRITE: &str = "lock_kprobe_rwsem_write";
    pub const LOCK_KRETPROBE_SLEEP: &str = "lock_kretprobe_sleep";

    /// Every name above (a name ending in `_` is a prefix: slot 0 is checked).
    pub const ALL: &[&str] = &[
        LOCK_STATS,
        LOCK_SLEEP_WAIT,
        LOCK_SPIN_WAIT,
        LOCK_SPIN_DEPTH,
        LOCK_LAYOUT,
        LOCK_CONTENTION_BEGIN,
        LOCK_CONTENTION_END,
        LOCK_KPROBE_SPIN,
        LOCK_KRETPROBE_SPIN,
        LOCK_KPROBE_MUTEX,
        LOCK_KPROBE_RWSEM_READ,
        LOCK_KPROBE_RWSEM_WRITE,
        LOCK_KRETPROBE_SLEEP,
    ];
}

#[cfg(feature = "user")]
crate::impl_pod!(LockKey, LockStat, LockWait, LockLayout);
