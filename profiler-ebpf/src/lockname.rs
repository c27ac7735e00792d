//! What a contended lock is (lock family), from the waiting task's structures: its
//! mm's `mmap_lock` and `page_table_lock`, its fd table's `file_lock`, `siglock`,
//! `fs->lock`, `cred_guard_mutex`, a task's `pi_lock` or `alloc_lock` (its own, or
//! another task's found by checking the task structure around the lock), and the
//! runqueue lock of the CPU it runs on. Run on the stack cache's misses only (the class
//! is cached with the stack), so the reads cost nothing on the common path. Each CPU's
//! runqueue lock address is noted in `LOCK_RQ_ADDRS`, so user space also names the
//! runqueue locks of other CPUs (taken by wake-ups and load balancing). A lock none of
//! these is, inside a slab object, is named after its slab cache where the kernel has
//! `bpf_get_kmem_cache` (6.13): the cache's name goes to `LOCK_SLAB_NAMES`.

use crate::shared::EEXIST;
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_probe_read_kernel,
        generated::{bpf_get_current_task, bpf_get_smp_processor_id},
    },
    macros::map,
    maps::{Array, HashMap},
};
use profiler_common::{
    lock::{LOCK_CLASS_MMAP_LOCK, LOCK_CLASS_UNKNOWN, is_plain_spinlock},
    lockname::{
        KMEM_CACHE_CALL_MARK, LOCK_CLASS_ALLOC_LOCK, LOCK_CLASS_CRED_GUARD, LOCK_CLASS_FILE_LOCK,
        LOCK_CLASS_FS_LOCK, LOCK_CLASS_PAGE_TABLE_LOCK, LOCK_CLASS_PI_LOCK, LOCK_CLASS_RQ_LOCK,
        LOCK_CLASS_SIGLOCK, LOCK_CLASS_SLAB, LOCK_RQ_ADDRS_ENTRIES, LOCK_SLAB_NAMES_ENTRIES,
        LockNameLayout, NO_OFFSET, SLAB_NAME_LEN, SlabName,
    },
};

/// Struct offsets from the kernel's BTF, set at load time.
#[unsafe(no_mangle)]
static LOCK_NAME_LAYOUT: LockNameLayout = LockNameLayout::OFF;

/// One member of `LOCK_NAME_LAYOUT`, read on its own: a copy of the whole layout would
/// take BPF stack the lock programs do not have (kernels before the private stacks of
/// 6.14 count it with their callers' frames against the 512-byte limit).
macro_rules! layout {
    ($field:ident) => {
        // SAFETY: reading a load-time global; volatile so the default value is not
        // folded into the program (user space rewrites it before load).
        unsafe { core::ptr::read_volatile(&raw const LOCK_NAME_LAYOUT.$field) }
    };
}

/// The runqueue lock address of each CPU, as seen from tasks running there.
#[map]
pub static LOCK_RQ_ADDRS: Array<u64> = Array::with_max_entries(LOCK_RQ_ADDRS_ENTRIES, 0);

/// The slab cache names of locks in slab objects, by lock address. A plain hash map,
/// not an LRU one: it is written inside lock contention, where the hash map's bucket
/// lock guards against recursion on the same CPU and an LRU list's locks do not. When
/// full, further slab locks stay addresses.
#[map]
pub static LOCK_SLAB_NAMES: HashMap<u64, SlabName> =
    HashMap::with_max_entries(LOCK_SLAB_NAMES_ENTRIES, 0);

/// `bpf_get_kmem_cache(addr)`: the `struct kmem_cache *` of the slab object holding
/// `addr`, or 0. The call is a stand-in that user space rewrites before loading
/// (`KMEM_CACHE_CALL_MARK`): into the kfunc, or into `r0 = 0` on kernels without it.
#[inline(always)]
fn kmem_cache_of(addr: u64) -> u64 {
    // SAFETY: a BPF helper call by number, as aya-ebpf calls helpers; the number is the
    // stand-in rewritten before load, and the argument is a plain integer.
    unsafe {
        let call: unsafe extern "C" fn(u64) -> u64 =
            core::mem::transmute(KMEM_CACHE_CALL_MARK as usize);
        call(addr)
    }
}

/// An empty slab name, inserted first and then filled in place (the BPF stack of the
/// lock programs has no room for one).
static NO_SLAB_NAME: SlabName = SlabName {
    name: [0; SLAB_NAME_LEN],
    offset: NO_OFFSET,
    _pad: 0,
};

/// Notes the slab cache name of the lock at `lock_addr`, and the lock's offset in its
/// object, if it lies in a slab object.
// `&NO_SLAB_NAME` on purpose: the helper reads the static in place; by value it would be
// copied onto the BPF stack first.
#[allow(clippy::needless_borrows_for_generic_args)]
#[inline(always)]
fn note_slab_cache(lock_addr: u64) -> bool {
    if layout!(kmem_cache_name) == NO_OFFSET {
        return false;
    }
    let cache = kmem_cache_of(lock_addr);
    if cache == 0 {
        return false;
    }
    let name_ptr = read_ptr(cache, layout!(kmem_cache_name));
    if name_ptr == 0 {
        return false;
    }
    // Inserted empty only the first time: a lock noted again (its stack walk refreshed)
    // is updated in place below, so a drain never reads a name emptied meanwhile.
    match LOCK_SLAB_NAMES.insert(lock_addr, &NO_SLAB_NAME, BPF_NOEXIST as u64) {
        Ok(()) => {}
        Err(err) if err == -EEXIST => {}
        Err(_) => return false,
    }
    let Some(slab) = LOCK_SLAB_NAMES.get_ptr_mut(lock_addr) else {
        return false;
    };
    // SAFETY: `slab` points into a map value valid for this program run;
    // bpf_probe_read_kernel_str checks the source address and writes at most the
    // buffer's length.
    unsafe {
        (*slab).offset = object_offset(lock_addr, cache).unwrap_or(NO_OFFSET);
        aya_ebpf::helpers::bpf_probe_read_kernel_str_bytes(name_ptr as *const u8, &mut (*slab).name)
            .is_ok()
    }
}

/// The offset of `addr` in its slab object: a slab of order N starts at an address
/// aligned to 4 KiB << N (its folio is naturally aligned, and so is the direct map), and
/// its objects follow at a stride of the cache's `size`, after `red_left_pad`.
#[inline(always)]
fn object_offset(addr: u64, cache: u64) -> Option<u32> {
    let size = read_u32(cache, layout!(kmem_cache_size))? as u64;
    let pad = read_u32(cache, layout!(kmem_cache_red_left_pad))? as u64;
    let order = (read_u32(cache, layout!(kmem_cache_oo))? >> 16) as u64;
    if size == 0 || order > 10 {
        return None;
    }
    let slab_start = addr & !((4096u64 << order) - 1);
    let into = addr.checked_sub(slab_start + pad)?;
    Some((into % size) as u32)
}

/// `*(base + offset)` as a pointer, 0 when the member is absent or the read fails.
#[inline(always)]
fn read_ptr(base: u64, offset: u32) -> u64 {
    if base == 0 || offset == NO_OFFSET {
        return 0;
    }
    // SAFETY: bpf_probe_read_kernel checks the address; a bad one is an error.
    unsafe { bpf_probe_read_kernel((base + offset as u64) as *const u64) }.unwrap_or(0)
}

#[inline(always)]
fn read_u32(base: u64, offset: u32) -> Option<u32> {
    if base == 0 || offset == NO_OFFSET {
        return None;
    }
    // SAFETY: as above.
    unsafe { bpf_probe_read_kernel((base + offset as u64) as *const u32) }.ok()
}

/// Whether `lock_addr` is member `offset` of the struct at `base`.
#[inline(always)]
fn is_member(lock_addr: u64, base: u64, offset: u32) -> bool {
    base != 0 && offset != NO_OFFSET && lock_addr == base + offset as u64
}

/// The largest process id a kernel hands out (`PID_MAX_LIMIT`, 4M on 64-bit).
const PID_MAX_LIMIT: u32 = 4 * 1024 * 1024;

/// Whether `task` looks like a `task_struct`: its group leader is a group leader (its
/// own `group_leader`) and has its tgid, a process id. Two words that happen to match
/// (a pointer and two equal numbers in some other object) are not enough.
#[inline(always)]
fn is_task(task: u64) -> bool {
    let leader = read_ptr(task, layout!(task_group_leader));
    if leader < 0xffff_0000_0000_0000 || read_ptr(leader, layout!(task_group_leader)) != leader {
        return false;
    }
    match (
        read_u32(task, layout!(task_tgid)),
        read_u32(leader, layout!(task_tgid)),
    ) {
        (Some(tgid), Some(leader_tgid)) => {
            tgid != 0 && tgid <= PID_MAX_LIMIT && tgid == leader_tgid
        }
        _ => false,
    }
}

/// The class of the lock at `lock_addr` (`LOCK_CLASS_*`), contended with `flags`, as
/// far as the current task and the current CPU tell.
#[inline(always)]
pub fn classify(lock_addr: u64, flags: u32) -> u32 {
    if layout!(enabled) == 0 {
        return LOCK_CLASS_UNKNOWN;
    }
    // SAFETY: helper without arguments; the pointer is only read through
    // bpf_probe_read_kernel.
    let task = unsafe { bpf_get_current_task() };
    let rq = read_ptr(read_ptr(task, layout!(task_se_cfs_rq)), layout!(cfs_rq_rq));
    if rq != 0 && layout!(rq_lock) != NO_OFFSET {
        // SAFETY: helper without arguments.
        let cpu = unsafe { bpf_get_smp_processor_id() };
        let rq_lock = rq + layout!(rq_lock) as u64;
        if let Some(slot) = LOCK_RQ_ADDRS.get_ptr_mut(cpu) {
            // SAFETY: element of an array map from a successful lookup.
            unsafe { *slot = rq_lock };
        }
        if lock_addr == rq_lock {
            return LOCK_CLASS_RQ_LOCK;
        }
    }
    // Locks in the structures the task points to: (the pointer in the task, the lock
    // in what it points to, the class).
    let pointed = [
        (
            layout!(task_mm),
            layout!(mm_mmap_lock),
            LOCK_CLASS_MMAP_LOCK,
        ),
        (
            layout!(task_mm),
            layout!(mm_page_table_lock),
            LOCK_CLASS_PAGE_TABLE_LOCK,
        ),
        (
            layout!(task_files),
            layout!(files_file_lock),
            LOCK_CLASS_FILE_LOCK,
        ),
        (
            layout!(task_sighand),
            layout!(sighand_siglock),
            LOCK_CLASS_SIGLOCK,
        ),
        (layout!(task_fs), layout!(fs_lock), LOCK_CLASS_FS_LOCK),
        (
            layout!(task_signal),
            layout!(signal_cred_guard),
            LOCK_CLASS_CRED_GUARD,
        ),
    ];
    // Entries of one pointer are adjacent: read each pointer once.
    let mut read = (NO_OFFSET, 0);
    for (pointer, member, class) in pointed {
        if read.0 != pointer {
            read = (pointer, read_ptr(task, pointer));
        }
        if is_member(lock_addr, read.1, member) {
            return class;
        }
    }
    // A task's own pi_lock / alloc_lock, or another task's (wake-ups take the wakee's):
    // spinlocks, so never a sleeping lock's or a rwlock's address.
    let task_members = if is_plain_spinlock(flags) {
        [
            (layout!(task_pi_lock), LOCK_CLASS_PI_LOCK),
            (layout!(task_alloc_lock), LOCK_CLASS_ALLOC_LOCK),
        ]
    } else {
        [(NO_OFFSET, LOCK_CLASS_UNKNOWN); 2]
    };
    for (member, class) in task_members {
        if member != NO_OFFSET && lock_addr > member as u64 {
            let candidate = lock_addr - member as u64;
            if candidate == task || is_task(candidate) {
                return class;
            }
        }
    }
    if note_slab_cache(lock_addr) {
        return LOCK_CLASS_SLAB;
    }
    LOCK_CLASS_UNKNOWN
}
