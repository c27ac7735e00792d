//! Who holds a file lock a thread waits for (part of the off-CPU family).
//!
//! `filelock:posix_lock_inode` and `filelock:flock_lock_inode` fire at the end of each
//! attempt to take a POSIX, OFD or flock lock. When the attempt must wait (`ret` is
//! `FILE_LOCK_DEFERRED`), the request's blocker is the lock it waits behind: an applied
//! lock, or another blocked request (the kernel keeps waiters in a tree), whose own
//! blocker leads on to the applied lock. The owner process of that applied lock is kept
//! by thread id until the thread's next switch-out (`offcpu.rs`), which puts it into the
//! wait's key. Each retry after a wake-up fires the tracepoint again.
//! `filelock:break_lease_block` does the same for an open that waits for a lease to be
//! broken: the lease's owner is the holder.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel},
    macros::map,
    maps::LruHashMap,
    programs::TracePointContext,
};
use profiler_common::offcpu::{FILELOCK_WAITERS_ENTRIES, FilelockWait};

use crate::{
    shared::{load_u32, now_ns},
    target::is_target,
};

/// Offsets in the tracepoint record (`blocker` / `fl_blocker`, `ret`), from the format file.
#[unsafe(no_mangle)]
static FILELOCK_TP_BLOCKER_OFFSET: u32 = 32;
#[unsafe(no_mangle)]
static FILELOCK_TP_RET_OFFSET: u32 = 80;
/// Offset of `blocker` (`fl_blocker` before 6.9) in the `break_lease_block` record.
#[unsafe(no_mangle)]
static FILELOCK_LEASE_BLOCKER_OFFSET: u32 = 32;
/// Offsets in the lock (`file_lock_core` since 6.9, `file_lock` before), from BTF.
#[unsafe(no_mangle)]
static FILELOCK_LOCK_BLOCKER_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static FILELOCK_LOCK_PID_OFFSET: u32 = 0;

/// The waiting threads' holders, by thread id. LRU: a wait interrupted by a signal
/// before it slept leaves its entry, which must not fill the map.
#[map]
pub static FILELOCK_WAITERS: LruHashMap<u32, FilelockWait> =
    LruHashMap::with_max_entries(FILELOCK_WAITERS_ENTRIES, 0);

/// `FILE_LOCK_DEFERRED`: the request was queued behind a blocker.
const FILE_LOCK_DEFERRED: i32 = 1;
/// Blocked requests to follow to the applied lock (the chain is short in practice).
const MAX_HOPS: u32 = 8;
/// A holder noted longer ago than this before the switch-out belongs to another wait.
const MAX_AGE_NS: u64 = 1_000_000_000;

pub fn on_lock_inode(ctx: &TracePointContext) {
    if !is_target() {
        return;
    }
    let tid = bpf_get_current_pid_tgid() as u32;
    // SAFETY: offsets from this kernel's format file; reads are checked.
    let (ret, blocker) = unsafe {
        (
            ctx.read_at::<i32>(load_u32(&FILELOCK_TP_RET_OFFSET) as usize),
            ctx.read_at::<u64>(load_u32(&FILELOCK_TP_BLOCKER_OFFSET) as usize),
        )
    };
    let (Ok(FILE_LOCK_DEFERRED), Ok(blocker)) = (ret, blocker) else {
        let _ = FILELOCK_WAITERS.remove(tid);
        return;
    };
    note_holder(tid, blocker);
}

/// `filelock:break_lease_block`: an open (or truncate) waits for a lease to be given
/// up; the record's blocker is the lease it is queued behind.
pub fn on_lease_block(ctx: &TracePointContext) {
    if !is_target() {
        return;
    }
    let tid = bpf_get_current_pid_tgid() as u32;
    // SAFETY: offset from this kernel's format file; the read is checked.
    let blocker = unsafe { ctx.read_at::<u64>(load_u32(&FILELOCK_LEASE_BLOCKER_OFFSET) as usize) };
    note_holder(tid, blocker.unwrap_or(0));
}

/// Keeps, for thread `tid` about to wait behind `blocker`, the owner of the applied
/// lock or lease that blocks it (or forgets an older one when there is none).
#[inline(always)]
fn note_holder(tid: u32, blocker: u64) {
    if blocker == 0 {
        let _ = FILELOCK_WAITERS.remove(tid);
        return;
    }
    let holder = applied_lock_owner(blocker);
    if holder == 0 {
        let _ = FILELOCK_WAITERS.remove(tid);
        return;
    }
    let wait = FilelockWait {
        holder_tgid: holder,
        _pad: 0,
        at_ns: now_ns(),
    };
    let _ = FILELOCK_WAITERS.insert(tid, wait, 0);
}

/// The owner process of the applied lock at the end of the chain of blockers.
#[inline(always)]
fn applied_lock_owner(blocker: u64) -> u32 {
    let blocker_offset = load_u32(&FILELOCK_LOCK_BLOCKER_OFFSET) as u64;
    let mut lock = blocker;
    for _ in 0..MAX_HOPS {
        // SAFETY: bpf_probe_read_kernel checks the address; a bad one is an error.
        let next =
            unsafe { bpf_probe_read_kernel((lock + blocker_offset) as *const u64) }.unwrap_or(0);
        if next == 0 {
            break;
        }
        lock = next;
    }
    let pid_offset = load_u32(&FILELOCK_LOCK_PID_OFFSET) as u64;
    // SAFETY: as above.
    unsafe { bpf_probe_read_kernel((lock + pid_offset) as *const u32) }.unwrap_or(0)
}

/// The holder noted for `tid` just before it leaves the CPU (0: none), taken once.
#[inline(always)]
pub fn take_holder(tid: u32, now: u64) -> u32 {
    let Some(wait) = FILELOCK_WAITERS.get_ptr(tid) else {
        return 0;
    };
    // SAFETY: element of a hash map from a successful lookup; copied at once.
    let wait = unsafe { *wait };
    let _ = FILELOCK_WAITERS.remove(tid);
    if now >= wait.at_ns && now - wait.at_ns <= MAX_AGE_NS {
        wait.holder_tgid
    } else {
        0
    }
}

crate::classic_tracepoint!(
    /// `filelock:posix_lock_inode` and `filelock:flock_lock_inode` (one record format):
    /// the holder of the file lock a thread is about to wait for (off-CPU family).
    offcpu_filelock,
    "tracepoint/filelock/posix_lock_inode",
    on_lock_inode
);

crate::classic_tracepoint!(
    /// `filelock:break_lease_block`: the owner of the lease an open waits for.
    offcpu_filelock_lease,
    "tracepoint/filelock/break_lease_block",
    on_lease_block
);
