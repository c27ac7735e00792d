//! Wakers (`--wakers`): `sched:sched_waking` runs in the task that wakes another (or in
//! the interrupt that does). When the woken thread has an open off-CPU wait, the waker
//! and its stacks are kept by the woken thread id in `WAKER_PENDING`; the off-CPU
//! program takes them back when it closes the wait at switch-in and adds the wait's
//! time under (waiter, waker) to `WAKER_STATS`. Nothing travels to user space per
//! event, and a wake-up of a thread that is not waiting costs one hash lookup.

use core::intrinsics::{AtomicOrdering, atomic_xadd};

use aya_ebpf::{
    bindings::BPF_NOEXIST, helpers::bpf_get_current_pid_tgid, macros::map, maps::HashMap,
    programs::TracePointContext, programs::tracing::StackIdContext,
};
use profiler_common::{
    loss::{WAKER_MAP_FULL, WAKER_PENDING_FULL},
    offcpu::{OffcpuKey, OffcpuStat},
    wakers::{WakeInfo, WakerKey},
};

use crate::{
    offcpu::OFFCPU_START,
    shared::{
        STACK_FLAGS_KERNEL, STACK_FLAGS_USER, STACKS, count_loss, load_u32, note_user_process,
        remember_current_task, stack_id_or_loss,
    },
};

/// 1 when wakers are recorded (`--wakers`).
#[unsafe(no_mangle)]
static WAKERS_ON: u32 = 0;
/// Offset of `pid` (the woken thread) in `sched_waking`'s record, from its format file.
#[unsafe(no_mangle)]
static WAKING_PID_OFFSET: u32 = 24;

/// The aggregate read by user space. Size set at load time (`--map-entries`).
#[map]
pub static WAKER_STATS: HashMap<WakerKey, OffcpuStat> =
    HashMap::with_max_entries(profiler_common::STATS_ENTRIES, 0);

/// Wakers of threads woken but not yet back on a CPU, by woken thread id.
#[map]
pub static WAKER_PENDING: HashMap<u32, WakeInfo> =
    HashMap::with_max_entries(profiler_common::wakers::WAKER_PENDING_ENTRIES, 0);

const EEXIST: i32 = 17;

/// `sched_waking(comm, pid, prio, target_cpu)`, in the waker's context.
pub fn on_sched_waking(ctx: &TracePointContext) {
    // SAFETY: offset from this kernel's format file of sched_waking; the read is checked.
    let Ok(woken) = (unsafe { ctx.read_at::<i32>(load_u32(&WAKING_PID_OFFSET) as usize) }) else {
        return;
    };
    let woken = woken as u32;
    // Only wake-ups that end a recorded wait matter (the off-CPU family's filter and
    // states decided which waits are recorded).
    // SAFETY: lookup in a map of plain data; the reference is not kept.
    if woken == 0 || unsafe { OFFCPU_START.get(woken) }.is_none() {
        return;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let tid = pid_tgid as u32;
    let kstack_id = stack_id_or_loss(ctx.get_stackid(&STACKS, STACK_FLAGS_KERNEL));
    // Kernel threads and the idle task have no user stack: only a collision is a loss.
    let ustack_id = if tgid == 0 {
        -1
    } else {
        match ctx.get_stackid(&STACKS, STACK_FLAGS_USER) {
            Ok(id) => id as i32,
            Err(errno) if errno == -EEXIST => stack_id_or_loss(Err(errno)),
            Err(errno) => errno,
        }
    };
    if ustack_id >= 0 {
        note_user_process(tgid);
    }
    let info = WakeInfo {
        tgid,
        tid,
        kstack_id,
        ustack_id,
    };
    if WAKER_PENDING.insert(woken, info, 0).is_err() {
        count_loss(WAKER_PENDING_FULL);
        return;
    }
    // The waker's name, while it is current.
    if tid != 0 {
        remember_current_task();
    }
}

/// Whether `--wakers` is recorded (the off-CPU program asks before any lookup).
#[inline(always)]
pub fn enabled() -> bool {
    load_u32(&WAKERS_ON) != 0
}

/// The waker of thread `tid`'s wait, taken out of `WAKER_PENDING` (its wait is closed).
#[inline(always)]
pub fn take_waker(tid: u32) -> Option<WakeInfo> {
    let info = WAKER_PENDING.get_ptr(tid)?;
    // SAFETY: element of a hash map from a successful lookup; copied at once.
    let info = unsafe { *info };
    let _ = WAKER_PENDING.remove(tid);
    Some(info)
}

/// Adds a closed wait's time to its (waiter, waker) row.
#[inline(always)]
pub fn add_waker_wait(waiter: &OffcpuKey, waker: WakeInfo, wait_ns: u64) {
    let key = WakerKey {
        waiter: *waiter,
        waker,
    };
    if let Some(stat) = WAKER_STATS.get_ptr_mut(key) {
        accumulate(stat, wait_ns);
        return;
    }
    let first = OffcpuStat {
        count: 1,
        total_ns: wait_ns,
        max_ns: wait_ns,
    };
    match WAKER_STATS.insert(key, first, BPF_NOEXIST as u64) {
        Ok(()) => {}
        // Another CPU inserted the same key in between.
        Err(errno) if errno == -EEXIST => {
            if let Some(stat) = WAKER_STATS.get_ptr_mut(key) {
                accumulate(stat, wait_ns);
            }
        }
        Err(_) => count_loss(WAKER_MAP_FULL),
    }
}

#[inline(always)]
fn accumulate(stat: *mut OffcpuStat, wait_ns: u64) {
    // SAFETY: `stat` points into a map value valid for this program run; count and
    // total are atomic (CPUs share keys), max is best effort.
    unsafe {
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*stat).count, 1);
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*stat).total_ns, wait_ns);
        if wait_ns > (*stat).max_ns {
            (*stat).max_ns = wait_ns;
        }
    }
}
