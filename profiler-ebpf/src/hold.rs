//! Hold times of one named lock (`--hold LOCK`). The acquire programs run at the return
//! of a lock function (fexit, or a kprobe/kretprobe pair), the release program at the
//! entry of an unlock function (fentry or kprobe). Every program compares the lock
//! argument with the one lock asked for before anything else: these are the hottest
//! functions of the kernel, and every other lock must cost one compare.
//!
//! Holds are recorded for every task, whatever the target filter: the holder that makes
//! a target wait is often another process or a kernel thread.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::bpf_get_current_pid_tgid,
    macros::{fentry, fexit, kprobe, kretprobe, map},
    maps::HashMap,
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext, tracing::StackIdContext},
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

/// Hold times (`--hold`): one program set per acquire slot (an entry point such as
/// `mutex_lock` or `down_write_killable`): fexit where the kernel allows, else a
/// kprobe/kretprobe pair. Every acquire function takes the lock as its only argument,
/// so an fexit program finds the return value right after it; functions that return
/// nothing get the `_void` fexit, which does not read it (the verifier refuses that).
macro_rules! hold_acquire_slots {
    ($($slot:literal => $fexit:ident, $fexit_void:ident, $kprobe:ident, $kretprobe:ident;)*) => {
        $(
            #[fexit]
            pub fn $fexit(ctx: FExitContext) -> i32 {
                if is_held_lock(ctx.arg::<u64>(0)) {
                    on_acquire_return(&ctx, $slot, ctx.arg::<i64>(1));
                }
                0
            }

            #[fexit]
            pub fn $fexit_void(ctx: FExitContext) -> i32 {
                if is_held_lock(ctx.arg::<u64>(0)) {
                    on_acquire_return(&ctx, $slot, 0);
                }
                0
            }

            #[kprobe]
            pub fn $kprobe(ctx: ProbeContext) -> u32 {
                if is_held_lock(ctx.arg::<u64>(0).unwrap_or(0)) {
                    on_acquire_entry(&ctx);
                }
                0
            }

            #[kretprobe]
            pub fn $kretprobe(ctx: RetProbeContext) -> u32 {
                on_acquire_kretprobe($slot, ctx.ret::<i64>());
                0
            }
        )*
    };
}

hold_acquire_slots! {
    0 => hold_fexit_0, hold_fexit_void_0, hold_kprobe_0, hold_kretprobe_0;
    1 => hold_fexit_1, hold_fexit_void_1, hold_kprobe_1, hold_kretprobe_1;
    2 => hold_fexit_2, hold_fexit_void_2, hold_kprobe_2, hold_kretprobe_2;
    3 => hold_fexit_3, hold_fexit_void_3, hold_kprobe_3, hold_kretprobe_3;
    4 => hold_fexit_4, hold_fexit_void_4, hold_kprobe_4, hold_kretprobe_4;
    5 => hold_fexit_5, hold_fexit_void_5, hold_kprobe_5, hold_kretprobe_5;
    6 => hold_fexit_6, hold_fexit_void_6, hold_kprobe_6, hold_kretprobe_6;
    7 => hold_fexit_7, hold_fexit_void_7, hold_kprobe_7, hold_kretprobe_7;
    8 => hold_fexit_8, hold_fexit_void_8, hold_kprobe_8, hold_kretprobe_8;
    9 => hold_fexit_9, hold_fexit_void_9, hold_kprobe_9, hold_kretprobe_9;
    10 => hold_fexit_10, hold_fexit_void_10, hold_kprobe_10, hold_kretprobe_10;
    11 => hold_fexit_11, hold_fexit_void_11, hold_kprobe_11, hold_kretprobe_11;
    12 => hold_fexit_12, hold_fexit_void_12, hold_kprobe_12, hold_kretprobe_12;
    13 => hold_fexit_13, hold_fexit_void_13, hold_kprobe_13, hold_kretprobe_13;
    14 => hold_fexit_14, hold_fexit_void_14, hold_kprobe_14, hold_kretprobe_14;
    15 => hold_fexit_15, hold_fexit_void_15, hold_kprobe_15, hold_kretprobe_15;
}

/// Release: one fentry program per unlock entry point (an fentry program is bound to
/// its function at load time), or this one kprobe attached to all of them.
macro_rules! hold_release_slots {
    ($($fentry:ident),*) => {
        $(
            #[fentry]
            pub fn $fentry(ctx: FEntryContext) -> i32 {
                if is_held_lock(ctx.arg::<u64>(0)) {
                    on_release();
                }
                0
            }
        )*
    };
}

hold_release_slots!(hold_fentry_0, hold_fentry_1, hold_fentry_2, hold_fentry_3);

#[kprobe]
pub fn hold_release_kprobe(ctx: ProbeContext) -> u32 {
    if is_held_lock(ctx.arg::<u64>(0).unwrap_or(0)) {
        on_release();
    }
    0
}
