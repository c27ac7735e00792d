//! Lock contention from `lock:contention_begin` / `lock:contention_end` (kernel 5.19+),
//! or, on older kernels, from kprobes/kretprobes on the contention slow paths; both
//! fill the same in-flight maps and the same aggregate through the same helpers.
//!
//! At begin: remember the start time, the lock and the waiter's kernel stack. Spinning
//! waiters (spinlocks, rwlocks) cannot sleep or migrate until the end, so their start
//! lives in a per-CPU slot; sleeping waiters (mutex, rwsem, rt-mutex, semaphore) in a
//! hash keyed by thread id. At end: add the wait to the in-kernel aggregate keyed by
//! (lock, process, stack, flags). Nothing travels to user space per event.
//! Modelled on perf's `lock_contention.bpf.c`.

use core::intrinsics::{AtomicOrdering, atomic_xadd};

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_pid_tgid, bpf_probe_read_kernel,
        generated::{bpf_get_current_task, bpf_ktime_get_ns},
    },
    macros::map,
    maps::{HashMap, PerCpuArray},
    programs::{ProbeContext, RawTracePointContext, RetProbeContext, tracing::StackIdContext},
};
use profiler_common::{
    lock::{
        LCB_F_MUTEX, LCB_F_PERCPU, LCB_F_READ, LCB_F_RT, LCB_F_SPIN, LCB_F_WRITE,
        LOCK_CLASS_MMAP_LOCK, LOCK_CLASS_UNKNOWN, LockKey, LockLayout, LockStat, LockWait,
    },
    loss::{
        LOCK_KPROBE_RETURN_LOST, LOCK_MAP_FULL, LOCK_NEGATIVE_DELTA, LOCK_NESTED,
        LOCK_UNMATCHED_END, LOCK_WAIT_MAP_FULL,
    },
};

use crate::{
    offcpu::OFFCPU_START,
    shared::{
        STACK_FLAGS_KERNEL, STACKS, TASKS, count_loss, remember_current_task, stack_id_or_loss,
    },
    target::is_target,
};

/// The aggregate read by user space. Size set at load time (`--map-entries`).
#[map]
pub static LOCK_STATS: HashMap<LockKey, LockStat> =
    HashMap::with_max_entries(profiler_common::STATS_ENTRIES, 0);

/// Contention in progress of a spinning waiter, one per CPU.
#[map]
static LOCK_SPIN_WAIT: PerCpuArray<LockWait> = PerCpuArray::with_max_entries(1, 0);

/// Contention in progress of a sleeping waiter, by thread id.
#[map]
static LOCK_SLEEP_WAIT: HashMap<u32, LockWait> =
    HashMap::with_max_entries(profiler_common::lock::LOCK_SLEEP_WAIT_ENTRIES, 0);

const EEXIST: i32 = 17;

/// Struct offsets from the kernel's BTF, set at load time (see `LockLayout`).
#[unsafe(no_mangle)]
static LOCK_LAYOUT: LockLayout = LockLayout {
    enabled: 0,
    task_mm: 0,
    task_pid: 0,
    task_tgid: 0,
    task_comm: 0,
    mm_mmap_lock: 0,
    mutex_owner: 0,
    rwsem_owner: 0,
};

/// Low bits of `mutex.owner` and `rw_semaphore.owner` that are flags, not pointer.
const OWNER_FLAG_BITS: u64 = 0x7;
/// `RWSEM_READER_OWNED`: readers hold the rwsem; the pointer is only a hint.
const RWSEM_READER_OWNED: u64 = 0x1;

/// Spinlocks and rwlocks spin with preemption off; a mutex that spins optimistically
/// (MUTEX|SPIN) may still go to sleep, so it is tracked by thread.
#[inline(always)]
fn spins(flags: u32) -> bool {
    flags & LCB_F_SPIN != 0 && flags & LCB_F_MUTEX == 0
}

pub fn on_contention_begin(ctx: &RawTracePointContext) {
    let lock_addr: u64 = ctx.arg(0);
    let flags = ctx.arg::<u64>(1) as u32;
    if !is_target() {
        return;
    }
    if spins(flags) {
        let Some(slot) = LOCK_SPIN_WAIT.get_ptr_mut(0) else {
            return;
        };
        // SAFETY: per-CPU slot from a successful lookup; only this CPU writes it, and a
        // spinning waiter runs with preemption off until contention_end.
        if unsafe { (*slot).lock_addr } != 0 {
            // An interrupt contending while this CPU already waits: ignore the inner one.
            count_loss(LOCK_NESTED);
            return;
        }
        open_spin_wait(ctx, slot, lock_addr, flags);
        return;
    }
    let tid = bpf_get_current_pid_tgid() as u32;
    if let Some(open) = LOCK_SLEEP_WAIT.get_ptr_mut(tid) {
        // SAFETY: element of a hash map owned by this thread id; only this thread
        // writes it.
        let open = unsafe { &mut *open };
        if open.lock_addr == lock_addr {
            // The same wait goes on: a mutex that stopped spinning and now sleeps.
            open.flags = flags;
        } else {
            count_loss(LOCK_NESTED);
        }
        return;
    }
    open_sleep_wait(ctx, tid, lock_addr, flags);
}

pub fn on_contention_end(ctx: &RawTracePointContext) {
    let lock_addr: u64 = ctx.arg(0);
    let end_ns = now_ns();
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;

    let wait = if let Some(slot) = LOCK_SPIN_WAIT.get_ptr_mut(0)
        // SAFETY: per-CPU slot from a successful lookup, written only by this CPU.
        && unsafe { (*slot).lock_addr } == lock_addr
    {
        // SAFETY: as above.
        take_spin_wait(unsafe { &mut *slot })
    } else if let Some(open) = LOCK_SLEEP_WAIT.get_ptr(tid) {
        // SAFETY: element of a hash map owned by this thread id.
        let wait = unsafe { *open };
        if wait.lock_addr != lock_addr {
            // The end of a nested contention whose begin was ignored.
            return;
        }
        let _ = LOCK_SLEEP_WAIT.remove(tid);
        wait
    } else {
        // Began before the recording started, or belongs to a task outside the targets.
        count_unmatched_end();
        return;
    };
    close_wait(&wait, end_ns, pid_tgid);
}

// ---- kprobe fallback (kernels before 5.19: no lock:contention_* tracepoints) ----
//
// Entry of a contention slow path = contention_begin (lock = first argument, flags
// synthesized from which slow path it is); its return = contention_end. A return has
// no lock argument, so the wait opened at entry is closed by CPU (spinning) or by
// thread (sleeping) alone.

/// Per-CPU nesting depth of spin slow paths entered by a target (the kprobe fallback has
/// no lock address at return time to tell an interrupt's inner wait from the outer one).
#[map]
static LOCK_SPIN_DEPTH: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// A spin wait open for longer than this lost its return probe (nobody spins for a second
/// without the soft-lockup detector firing): the slot is reclaimed.
const SPIN_STALE_NS: u64 = 1_000_000_000;

/// Entry of `queued_spin_lock_slowpath` (or its native_/__pv_ variant).
pub fn on_spin_slowpath_entry(ctx: &ProbeContext) {
    let Some(lock_addr) = ctx.arg::<u64>(0) else {
        return;
    };
    if !is_target() {
        return;
    }
    let (Some(depth), Some(slot)) = (
        LOCK_SPIN_DEPTH.get_ptr_mut(0),
        LOCK_SPIN_WAIT.get_ptr_mut(0),
    ) else {
        return;
    };
    // SAFETY: per-CPU slots from successful lookups; only this CPU writes them, and the
    // spin slow path runs with preemption off until it returns.
    let (depth, slot) = unsafe { (&mut *depth, &mut *slot) };
    if *depth > 0 {
        if now_ns().saturating_sub(slot.start_ns) < SPIN_STALE_NS {
            // An interrupt contending while this CPU already waits: ignore the inner one.
            *depth += 1;
            count_loss(LOCK_NESTED);
            return;
        }
        count_loss(LOCK_KPROBE_RETURN_LOST);
        *depth = 0;
    }
    *depth = 1;
    open_spin_wait(ctx, slot, lock_addr, LCB_F_SPIN);
}

/// Return of the spin slow path: the lock is held.
pub fn on_spin_slowpath_return(_ctx: &RetProbeContext) {
    let end_ns = now_ns();
    let (Some(depth), Some(slot)) = (
        LOCK_SPIN_DEPTH.get_ptr_mut(0),
        LOCK_SPIN_WAIT.get_ptr_mut(0),
    ) else {
        return;
    };
    // SAFETY: as in on_spin_slowpath_entry.
    let (depth, slot) = unsafe { (&mut *depth, &mut *slot) };
    if *depth == 0 {
        // Entered before the recording started, or by a task outside the targets.
        count_unmatched_end();
        return;
    }
    *depth -= 1;
    if *depth > 0 {
        // The inner (ignored) wait of an interrupt ended.
        return;
    }
    let wait = take_spin_wait(slot);
    close_wait(&wait, end_ns, bpf_get_current_pid_tgid());
}

/// Entry of a sleeping lock's slow path (`__mutex_lock_slowpath`, `rwsem_down_*_slowpath`).
#[inline(always)]
pub fn on_sleep_slowpath_entry(ctx: &ProbeContext, flags: u32) {
    let Some(lock_addr) = ctx.arg::<u64>(0) else {
        return;
    };
    if !is_target() {
        return;
    }
    let tid = bpf_get_current_pid_tgid() as u32;
    if LOCK_SLEEP_WAIT.get_ptr(tid).is_some() {
        // A thread sleeps on one lock at a time: an open wait is one whose return probe
        // was lost (kretprobe instances exhausted). Drop it, keep the new one.
        count_loss(LOCK_KPROBE_RETURN_LOST);
        let _ = LOCK_SLEEP_WAIT.remove(tid);
    }
    open_sleep_wait(ctx, tid, lock_addr, flags);
}

/// Return of a sleeping lock's slow path (the lock is held, or the wait was interrupted).
pub fn on_sleep_slowpath_return(_ctx: &RetProbeContext) {
    let end_ns = now_ns();
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let Some(open) = LOCK_SLEEP_WAIT.get_ptr(tid) else {
        count_unmatched_end();
        return;
    };
    // SAFETY: element of a hash map owned by this thread id.
    let wait = unsafe { *open };
    let _ = LOCK_SLEEP_WAIT.remove(tid);
    close_wait(&wait, end_ns, pid_tgid);
}

// ---- shared by both methods ----

#[inline(always)]
fn open_spin_wait<C: StackIdContext>(ctx: &C, slot: *mut LockWait, lock_addr: u64, flags: u32) {
    // SAFETY: the caller passes this CPU's slot of LOCK_SPIN_WAIT.
    let wait = unsafe { &mut *slot };
    wait.start_ns = now_ns();
    wait.lock_addr = lock_addr;
    wait.flags = flags;
    wait.kstack_id = stack_id_or_loss(ctx.get_stackid(&STACKS, STACK_FLAGS_KERNEL));
    wait.owner_tgid = 0;
    wait.owner_kstack_id = -1;
}

#[inline(always)]
fn take_spin_wait(slot: &mut LockWait) -> LockWait {
    let wait = *slot;
    slot.lock_addr = 0;
    wait
}

#[inline(always)]
fn open_sleep_wait<C: StackIdContext>(ctx: &C, tid: u32, lock_addr: u64, flags: u32) {
    // SAFETY: reading a load-time global; volatile so the default is not folded in.
    let layout = unsafe { core::ptr::read_volatile(&LOCK_LAYOUT) };
    let (lock_class, owner) = if layout.enabled != 0 {
        (
            classify_lock(&layout, lock_addr),
            read_owner(&layout, lock_addr, flags),
        )
    } else {
        (LOCK_CLASS_UNKNOWN, NO_OWNER)
    };
    let wait = LockWait {
        start_ns: now_ns(),
        lock_addr,
        flags,
        kstack_id: stack_id_or_loss(ctx.get_stackid(&STACKS, STACK_FLAGS_KERNEL)),
        lock_class,
        owner_tgid: owner.tgid,
        owner_kstack_id: owner.kstack_id,
        _pad: 0,
    };
    if LOCK_SLEEP_WAIT
        .insert(tid, wait, BPF_NOEXIST as u64)
        .is_err()
    {
        count_loss(LOCK_WAIT_MAP_FULL);
    }
}

/// `mmap_lock` when the lock is the waiting task's own `mm->mmap_lock`.
#[inline(always)]
fn classify_lock(layout: &LockLayout, lock_addr: u64) -> u32 {
    // SAFETY: helper without arguments; the task pointer is only read through
    // bpf_probe_read_kernel, which tolerates any address.
    let task = unsafe { bpf_get_current_task() };
    // SAFETY: as above.
    let mm: u64 =
        unsafe { bpf_probe_read_kernel((task + layout.task_mm as u64) as *const u64) }.unwrap_or(0);
    if mm != 0 && lock_addr == mm + layout.mm_mmap_lock as u64 {
        LOCK_CLASS_MMAP_LOCK
    } else {
        LOCK_CLASS_UNKNOWN
    }
}

/// Who holds a sleeping lock when a wait on it begins.
#[derive(Clone, Copy)]
struct Owner {
    tgid: u32,
    /// Where the owner sleeps, when it is off-CPU and the off-CPU family saw it leave.
    kstack_id: i32,
}

const NO_OWNER: Owner = Owner {
    tgid: 0,
    kstack_id: -1,
};

/// The process holding a mutex or a writer-held rwsem when the wait begins (like
/// `perf lock contention -o`); its thread name goes to TASKS so the report can name it.
/// An owner that is off-CPU (holding the lock across a sleep: IO, an RPC, another lock)
/// has its switch-out stack in OFFCPU_START when the off-CPU family is recorded: that
/// stack is where the owner is while it makes the waiters wait.
#[inline(always)]
fn read_owner(layout: &LockLayout, lock_addr: u64, flags: u32) -> Owner {
    let owner_offset = if flags & LCB_F_MUTEX != 0 {
        layout.mutex_owner
    } else if flags & (LCB_F_READ | LCB_F_WRITE) != 0
        && flags & (LCB_F_SPIN | LCB_F_PERCPU | LCB_F_RT) == 0
    {
        layout.rwsem_owner
    } else {
        return NO_OWNER;
    };
    // SAFETY: bpf_probe_read_kernel checks the address; a bad one yields an error.
    let Ok(owner) =
        (unsafe { bpf_probe_read_kernel((lock_addr + owner_offset as u64) as *const u64) })
    else {
        return NO_OWNER;
    };
    if flags & LCB_F_MUTEX == 0 && owner & RWSEM_READER_OWNED != 0 {
        return NO_OWNER;
    }
    let task = owner & !OWNER_FLAG_BITS;
    if task == 0 {
        return NO_OWNER;
    }
    // SAFETY: as above, for fields of the owner task.
    let (tid, tgid) = unsafe {
        (
            bpf_probe_read_kernel((task + layout.task_pid as u64) as *const u32).unwrap_or(0),
            bpf_probe_read_kernel((task + layout.task_tgid as u64) as *const u32).unwrap_or(0),
        )
    };
    // SAFETY: lookup in a map of plain data; the reference is not kept.
    if tid != 0 && unsafe { TASKS.get(tid) }.is_none() {
        // SAFETY: as above, for the owner's 16-byte comm.
        let comm =
            unsafe { bpf_probe_read_kernel((task + layout.task_comm as u64) as *const [u8; 16]) }
                .unwrap_or([0u8; 16]);
        let info = profiler_common::target::TaskInfo {
            tgid,
            _pad: 0,
            comm,
        };
        let _ = TASKS.insert(tid, info, BPF_NOEXIST as u64);
    }
    // SAFETY: lookup in a map of plain data; the value is copied out.
    let kstack_id = match unsafe { OFFCPU_START.get(tid) } {
        Some(start) if tid != 0 => start.kstack_id,
        _ => -1,
    };
    Owner { tgid, kstack_id }
}

#[inline(always)]
fn count_unmatched_end() {
    // Only meaningful system-wide: with a target filter most ends belong to others.
    if crate::target::filter_is_all() {
        count_loss(LOCK_UNMATCHED_END);
    }
}

/// Adds a finished wait to the aggregate.
#[inline(always)]
fn close_wait(wait: &LockWait, end_ns: u64, pid_tgid: u64) {
    if end_ns < wait.start_ns {
        count_loss(LOCK_NEGATIVE_DELTA);
        return;
    }
    let key = LockKey {
        lock_addr: wait.lock_addr,
        tgid: (pid_tgid >> 32) as u32,
        kstack_id: wait.kstack_id,
        flags: wait.flags,
        lock_class: wait.lock_class,
        owner_tgid: wait.owner_tgid,
        owner_kstack_id: wait.owner_kstack_id,
    };
    add_wait(&key, end_ns - wait.start_ns);
}

#[inline(always)]
fn now_ns() -> u64 {
    // SAFETY: helper without arguments.
    unsafe { bpf_ktime_get_ns() }
}

#[inline(always)]
fn add_wait(key: &LockKey, wait_ns: u64) {
    if let Some(stat) = LOCK_STATS.get_ptr_mut(key) {
        accumulate(stat, wait_ns);
        return;
    }
    let first = LockStat {
        count: 1,
        total_ns: wait_ns,
        max_ns: wait_ns,
        min_ns: wait_ns,
    };
    match LOCK_STATS.insert(key, first, BPF_NOEXIST as u64) {
        Ok(()) => remember_current_task(),
        // Another CPU inserted the same key in between.
        Err(errno) if errno == -EEXIST => {
            if let Some(stat) = LOCK_STATS.get_ptr_mut(key) {
                accumulate(stat, wait_ns);
            }
        }
        Err(_) => count_loss(LOCK_MAP_FULL),
    }
}

#[inline(always)]
fn accumulate(stat: *mut LockStat, wait_ns: u64) {
    // SAFETY: `stat` points into a map value that stays valid for this program run;
    // count and total are updated atomically (several CPUs may share a key), max and
    // min are best effort like perf's.
    unsafe {
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*stat).count, 1);
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*stat).total_ns, wait_ns);
        if wait_ns > (*stat).max_ns {
            (*stat).max_ns = wait_ns;
        }
        if wait_ns < (*stat).min_ns {
            (*stat).min_ns = wait_ns;
        }
    }
}
