//! Function latency, entry to return, per thread. Each traced function has a slot;
//! the entry remembers (time, stack) under (thread, slot), the return adds the latency
//! to `FUNC_STATS` keyed by (slot, process, entry stack). A recursive entry of the same
//! function on the same thread only deepens the open call: the outermost call is timed.
//! main.rs wires one program pair per slot and hook kind (fentry/fexit, kprobe/kretprobe,
//! uprobe/uretprobe).

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid, macros::map, maps::HashMap,
    programs::tracing::StackIdContext,
};
use profiler_common::{
    func::losses::{FUNC_ENTRY_FULL, FUNC_MAP_FULL, FUNC_NEGATIVE_DELTA, FUNC_OVERFLOW_FULL},
    func::{FuncCall, FuncEntry, FuncKey},
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
