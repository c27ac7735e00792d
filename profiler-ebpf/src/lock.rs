//! Lock contention from `lock:contention_begin` / `lock:contention_end` (kernel 5.19+).
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
    helpers::{bpf_get_current_pid_tgid, generated::bpf_ktime_get_ns},
    macros::map,
    maps::{HashMap, PerCpuArray},
    programs::{RawTracePointContext, tracing::StackIdContext},
};
use profiler_common::{
    lock::{LCB_F_MUTEX, LCB_F_SPIN, LockKey, LockStat, LockWait},
    loss::{
        LOCK_MAP_FULL, LOCK_NEGATIVE_DELTA, LOCK_NESTED, LOCK_UNMATCHED_END, LOCK_WAIT_MAP_FULL,
    },
};

use crate::{
    shared::{STACK_FLAGS_KERNEL, STACKS, count_loss, remember_current_task, stack_id_or_loss},
    target::is_target,
};

/// The aggregate read by user space. Size set at load time (`--map-entries`).
#[map]
pub static LOCK_STATS: HashMap<LockKey, LockStat> = HashMap::with_max_entries(16384, 0);

/// Contention in progress of a spinning waiter, one per CPU.
#[map]
static LOCK_SPIN_WAIT: PerCpuArray<LockWait> = PerCpuArray::with_max_entries(1, 0);

/// Contention in progress of a sleeping waiter, by thread id.
#[map]
static LOCK_SLEEP_WAIT: HashMap<u32, LockWait> = HashMap::with_max_entries(16384, 0);

const EEXIST: i32 = 17;

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
    let tid = bpf_get_current_pid_tgid() as u32;
    if spins(flags) {
        let Some(slot) = LOCK_SPIN_WAIT.get_ptr_mut(0) else {
            return;
        };
        // SAFETY: per-CPU slot from a successful lookup; only this CPU writes it, and a
        // spinning waiter runs with preemption off until contention_end.
        let wait = unsafe { &mut *slot };
        if wait.lock_addr != 0 {
            // An interrupt contending while this CPU already waits: ignore the inner one.
            count_loss(LOCK_NESTED);
            return;
        }
        wait.start_ns = now_ns();
        wait.lock_addr = lock_addr;
        wait.flags = flags;
        wait.kstack_id = stack_id_or_loss(ctx.get_stackid(&STACKS, STACK_FLAGS_KERNEL));
        return;
    }
    if let Some(open) = LOCK_SLEEP_WAIT.get_ptr_mut(&tid) {
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
    let wait = LockWait {
        start_ns: now_ns(),
        lock_addr,
        flags,
        kstack_id: stack_id_or_loss(ctx.get_stackid(&STACKS, STACK_FLAGS_KERNEL)),
    };
    if LOCK_SLEEP_WAIT
        .insert(&tid, &wait, BPF_NOEXIST as u64)
        .is_err()
    {
        count_loss(LOCK_WAIT_MAP_FULL);
    }
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
        let slot = unsafe { &mut *slot };
        let wait = *slot;
        slot.lock_addr = 0;
        wait
    } else if let Some(open) = LOCK_SLEEP_WAIT.get_ptr(&tid) {
        // SAFETY: element of a hash map owned by this thread id.
        let wait = unsafe { *open };
        if wait.lock_addr != lock_addr {
            // The end of a nested contention whose begin was ignored.
            return;
        }
        let _ = LOCK_SLEEP_WAIT.remove(&tid);
        wait
    } else {
        // Began before the recording started, or belongs to a task outside the targets.
        if crate::target::filter_is_all() {
            count_loss(LOCK_UNMATCHED_END);
        }
        return;
    };

    if end_ns < wait.start_ns {
        count_loss(LOCK_NEGATIVE_DELTA);
        return;
    }
    let key = LockKey {
        lock_addr,
        tgid: (pid_tgid >> 32) as u32,
        kstack_id: wait.kstack_id,
        flags: wait.flags,
        _pad: 0,
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
    match LOCK_STATS.insert(key, &first, BPF_NOEXIST as u64) {
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
