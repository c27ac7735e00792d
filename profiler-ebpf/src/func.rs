//! Function latency, entry to return, per thread. Each traced function has a slot;
//! the entry remembers (time, stack) under (thread, slot), the return adds the latency
//! to `FUNC_STATS` keyed by (slot, process, entry stack). A recursive entry of the same
//! function on the same thread only deepens the open call: the outermost call is timed.
//! One program pair per slot and hook kind (`func_slots!`, at the end) (fentry/fexit, kprobe/kretprobe,
//! uprobe/uretprobe).

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::map,
    maps::HashMap,
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext, tracing::StackIdContext},
};
use profiler_common::{
    func::losses::{FUNC_ENTRY_FULL, FUNC_MAP_FULL, FUNC_NEGATIVE_DELTA, FUNC_OVERFLOW_FULL},
    func::{FuncCall, FuncEntry, FuncKey, UFUNC_SLOT_BASE},
    latency::LatencyStat,
};

use crate::{
    latency::add_latency,
    shared::{
        STACK_FLAGS_KERNEL, STACK_FLAGS_USER, close_nested, count_loss, note_user_process, now_ns,
        overflow_map, stack_id, stack_id_or_loss, stats_map,
    },
    target::is_target,
};

#[map]
pub static FUNC_STATS: HashMap<FuncKey, LatencyStat> = stats_map();

/// Calls `FUNC_STATS` had no room for, per function and process, without stack.
#[map]
pub static FUNC_OVERFLOW: HashMap<FuncKey, LatencyStat> = overflow_map();

#[map]
static FUNC_CALLS: HashMap<FuncCall, FuncEntry> =
    HashMap::with_max_entries(profiler_common::func::FUNC_CALLS_ENTRIES, 0);

#[inline(always)]
pub fn on_entry<C: StackIdContext>(ctx: &C, slot: u32, user: bool) {
    if !is_target() {
        return;
    }
    let call = FuncCall {
        tid: bpf_get_current_pid_tgid() as u32,
        slot,
    };
    if let Some(open) = FUNC_CALLS.get_ptr_mut(call) {
        // SAFETY: element owned by this thread id; only this thread writes it.
        unsafe { (*open).depth += 1 };
        return;
    }
    let flags = if user {
        STACK_FLAGS_USER
    } else {
        STACK_FLAGS_KERNEL
    };
    let stack_id = stack_id_or_loss(stack_id(ctx, flags));
    if user && stack_id >= 0 {
        // User space snapshots this process's memory map to name the user frames.
        note_user_process((bpf_get_current_pid_tgid() >> 32) as u32);
    }
    let entry = FuncEntry {
        start_ns: now_ns(),
        stack_id,
        depth: 0,
    };
    if FUNC_CALLS.insert(call, entry, 0).is_err() {
        count_loss(FUNC_ENTRY_FULL);
    }
}

#[inline(always)]
pub fn on_return(slot: u32) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let call = FuncCall {
        tid: pid_tgid as u32,
        slot,
    };
    let Some(entry) = close_nested(&FUNC_CALLS, &call) else {
        return;
    };
    let now = now_ns();
    if now < entry.start_ns {
        count_loss(FUNC_NEGATIVE_DELTA);
        return;
    }
    let key = FuncKey {
        slot,
        tgid: (pid_tgid >> 32) as u32,
        stack_id: entry.stack_id,
        _pad: 0,
    };
    add_latency(
        (&FUNC_STATS, &FUNC_OVERFLOW),
        &key,
        FuncKey::overflow,
        now - entry.start_ns,
        (FUNC_MAP_FULL, FUNC_OVERFLOW_FULL),
        true,
    );
}

/// One program set per function slot: user space loads the fentry/fexit pair where
/// the kernel allows it, else the kprobe/kretprobe pair; user functions use uprobes.
macro_rules! func_slots {
    ($($slot:literal => $fentry:ident, $fexit:ident, $kprobe:ident, $kretprobe:ident,
       $uprobe:ident, $uretprobe:ident;)*) => {
        $(
            crate::programs! {
                fentry $fentry(FEntryContext) =>
                    |ctx: &FEntryContext| on_entry(ctx, $slot, false);
                fexit $fexit(FExitContext) => |_: &FExitContext| on_return($slot);
                kprobe $kprobe(ProbeContext) =>
                    |ctx: &ProbeContext| on_entry(ctx, $slot, false);
                kretprobe $kretprobe(RetProbeContext) =>
                    |_: &RetProbeContext| on_return($slot);
                uprobe $uprobe(ProbeContext) =>
                    |ctx: &ProbeContext| on_entry(ctx, UFUNC_SLOT_BASE + $slot, true);
                uretprobe $uretprobe(RetProbeContext) =>
                    |_: &RetProbeContext| on_return(UFUNC_SLOT_BASE + $slot);
            }
        )*
    };
}

func_slots! {
    0 => func_fentry_0, func_fexit_0, func_kprobe_0, func_kretprobe_0,
        ufunc_entry_0, ufunc_return_0;
    1 => func_fentry_1, func_fexit_1, func_kprobe_1, func_kretprobe_1,
        ufunc_entry_1, ufunc_return_1;
    2 => func_fentry_2, func_fexit_2, func_kprobe_2, func_kretprobe_2,
        ufunc_entry_2, ufunc_return_2;
    3 => func_fentry_3, func_fexit_3, func_kprobe_3, func_kretprobe_3,
        ufunc_entry_3, ufunc_return_3;
    4 => func_fentry_4, func_fexit_4, func_kprobe_4, func_kretprobe_4,
        ufunc_entry_4, ufunc_return_4;
    5 => func_fentry_5, func_fexit_5, func_kprobe_5, func_kretprobe_5,
        ufunc_entry_5, ufunc_return_5;
    6 => func_fentry_6, func_fexit_6, func_kprobe_6, func_kretprobe_6,
        ufunc_entry_6, ufunc_return_6;
    7 => func_fentry_7, func_fexit_7, func_kprobe_7, func_kretprobe_7,
        ufunc_entry_7, ufunc_return_7;
}
