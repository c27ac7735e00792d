//! Hold times of one named lock (`--hold LOCK`). The acquire programs run at the return
//! of a lock function (fexit, or a kprobe/kretprobe pair), the release program at the
//! entry of an unlock function (fentry or kprobe). Every program compares the lock
//! argument with the one lock asked for before anything else: these are the hottest
//! functions of the kernel, and every other lock must cost one compare.
//!
//! Holds are recorded for every task, whatever the target filter: the holder that makes
//! a target wait is often another process or a kernel thread.

use aya_ebpf::{
    bindings::BPF_NOEXIST, helpers::bpf_get_current_pid_tgid, macros::map, maps::HashMap,
    programs::tracing::StackIdContext,
};
use profiler_common::{
    hold::losses::{HOLD_MAP_FULL, HOLD_NEGATIVE_DELTA, HOLD_OPEN_FULL, HOLD_OVERFLOW_FULL},
    hold::{HOLD_RET_ONE, HOLD_RET_ZERO, HoldConfig, HoldKey, HoldOpen, HoldPending, HoldSlot},
    latency::LatencyStat,
};

use crate::{
    latency::add_latency,
    shared::{
        STACK_FLAGS_KERNEL, close_nested, count_loss, load_u64, now_ns, overflow_map, stack_id,
        stack_id_or_loss, stats_map,
    },
};

/// The lock and the acquire slots, set at load time (see `HoldConfig`).
#[unsafe(no_mangle)]
static HOLD_CONFIG: HoldConfig = HoldConfig::DISABLED;

/// The aggregate read by user space: per holder process, acquisition stack and mode.
#[map]
pub static HOLD_STATS: HashMap<HoldKey, LatencyStat> = stats_map();

/// Holds `HOLD_STATS` had no room for, per process and mode, without stack.
#[map]
pub static HOLD_OVERFLOW: HashMap<HoldKey, LatencyStat> = overflow_map();

/// Holds in progress, by thread id.
#[map]
static HOLD_OPEN: HashMap<u32, HoldOpen> =
    HashMap::with_max_entries(profiler_common::hold::HOLD_OPEN_ENTRIES, 0);

/// kprobe method: acquisitions whose function has not returned yet, by thread id.
#[map]
static HOLD_PENDING: HashMap<u32, HoldPending> =
    HashMap::with_max_entries(profiler_common::hold::HOLD_PENDING_ENTRIES, 0);

/// True when `lock` is the lock asked for (the first thing every hold program does).
#[inline(always)]
pub fn is_held_lock(lock: u64) -> bool {
    lock == load_u64(&HOLD_CONFIG.lock_addr) && lock != 0
}

#[inline(always)]
fn slot(index: usize) -> HoldSlot {
    match HOLD_CONFIG.slots.get(index) {
        // SAFETY: reading a load-time global; volatile so the default is not folded in.
        Some(slot) => unsafe { core::ptr::read_volatile(slot) },
        None => HoldSlot::default(),
    }
}

/// Whether the function of acquire slot `index` returned "acquired".
#[inline(always)]
fn acquired(index: usize, ret: i64) -> bool {
    match slot(index).ret {
        HOLD_RET_ZERO => ret == 0,
        HOLD_RET_ONE => ret as i32 == 1,
        _ => true,
    }
}

/// fexit of an acquire function: `lock` was its argument, `ret` its return value.
#[inline(always)]
pub fn on_acquire_return<C: StackIdContext>(ctx: &C, index: usize, ret: i64) {
    if !acquired(index, ret) {
        return;
    }
    let kstack_id = stack_id_or_loss(stack_id(ctx, STACK_FLAGS_KERNEL));
    open_hold(bpf_get_current_pid_tgid() as u32, index, kstack_id);
}

/// kprobe at the entry of an acquire function (the lock already matched): the stack is
/// taken here, where the caller is still on it; the return decides.
#[inline(always)]
pub fn on_acquire_entry<C: StackIdContext>(ctx: &C) {
    let tid = bpf_get_current_pid_tgid() as u32;
    let pending = HoldPending {
        kstack_id: stack_id_or_loss(stack_id(ctx, STACK_FLAGS_KERNEL)),
        _pad: 0,
    };
    if HOLD_PENDING.insert(tid, pending, 0).is_err() {
        count_loss(HOLD_OPEN_FULL);
    }
}

/// kretprobe of an acquire function: no lock argument here, so only threads with a
/// pending acquisition of the lock go on.
#[inline(always)]
pub fn on_acquire_kretprobe(index: usize, ret: i64) {
    let tid = bpf_get_current_pid_tgid() as u32;
    // SAFETY: lookup in a map of plain data; the value is copied out.
    let Some(pending) = (unsafe { HOLD_PENDING.get(tid) }).copied() else {
        return;
    };
    let _ = HOLD_PENDING.remove(tid);
    if acquired(index, ret) {
        open_hold(tid, index, pending.kstack_id);
    }
}

#[inline(always)]
fn open_hold(tid: u32, index: usize, kstack_id: i32) {
    if let Some(open) = HOLD_OPEN.get_ptr_mut(tid) {
        // SAFETY: element owned by this thread id; only this thread writes it.
        unsafe { (*open).depth += 1 };
        return;
    }
    let open = HoldOpen {
        start_ns: now_ns(),
        kstack_id,
        flags: slot(index).flags,
        depth: 0,
        _pad: 0,
    };
    if HOLD_OPEN.insert(tid, open, BPF_NOEXIST as u64).is_err() {
        count_loss(HOLD_OPEN_FULL);
    }
}

/// Entry of an unlock function whose lock matched: the calling thread's hold ends.
/// A release by a thread that holds nothing (taken before the recording started, or a
/// reader released by another task) is ignored.
#[inline(always)]
pub fn on_release() {
    let now = now_ns();
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let Some(open) = close_nested(&HOLD_OPEN, &tid) else {
        return;
    };
    if now < open.start_ns {
        count_loss(HOLD_NEGATIVE_DELTA);
        return;
    }
    let key = HoldKey {
        tgid: (pid_tgid >> 32) as u32,
        kstack_id: open.kstack_id,
        flags: open.flags,
        _pad: 0,
    };
    add_latency(
        (&HOLD_STATS, &HOLD_OVERFLOW),
        &key,
        HoldKey::overflow,
        now - open.start_ns,
        (HOLD_MAP_FULL, HOLD_OVERFLOW_FULL),
        true,
    );
}
