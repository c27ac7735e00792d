//! Loss counters: every event the kernel side could not record is counted in the
//! per-CPU array `LOSSES` at one of these indices. User space sums the CPUs.

pub const STACK_COLLISION: u32 = 0;
pub const STACK_FAILED: u32 = 1;
pub const LOCK_MAP_FULL: u32 = 2;
pub const LOCK_UNMATCHED_END: u32 = 3;
pub const LOCK_NEGATIVE_DELTA: u32 = 4;
pub const LOCK_NESTED: u32 = 5;
pub const LOCK_WAIT_MAP_FULL: u32 = 6;
pub const TASK_MAP_FULL: u32 = 7;
pub const TARGET_MAP_FULL: u32 = 8;
pub const LOCK_INTERRUPT_WAIT_LOST: u32 = 9;
// offcpu + io: 10..=15
pub const OFFCPU_MAP_FULL: u32 = 10;
pub const OFFCPU_START_MAP_FULL: u32 = 11;
pub const OFFCPU_NEGATIVE_DELTA: u32 = 12;
pub const IO_MAP_FULL: u32 = 13;
pub const IO_INFLIGHT_MAP_FULL: u32 = 14;
pub const IO_UNMATCHED_COMPLETE: u32 = 15;
// cpu + user stacks: 16..=19
pub const CPU_MAP_FULL: u32 = 16;
pub const USER_STACK_FAILED: u32 = 17;
pub const PROCESS_NOTE_LOST: u32 = 18;
pub const PROCESS_SEEN_MAP_FULL: u32 = 19;
// rpc + func: 20..=25.
pub const RPC_INFLIGHT_FULL: u32 = 20;
pub const RPC_MAP_FULL: u32 = 21;
pub const RPC_KEY_REUSED: u32 = 22;
pub const FUNC_ENTRY_FULL: u32 = 23;
pub const FUNC_MAP_FULL: u32 = 24;
pub const FUNC_NEGATIVE_DELTA: u32 = 25;
/// vm/kprobe fallback range: 26..=27.
pub const LOCK_KPROBE_RETURN_LOST: u32 = 26;
// hold times (--hold): 27..=29.
pub const HOLD_MAP_FULL: u32 = 27;
pub const HOLD_OPEN_FULL: u32 = 28;
pub const HOLD_NEGATIVE_DELTA: u32 = 29;
// io by request pointer: 33.
pub const IO_STALE_REPLACED: u32 = 33;
// io by cause and file calls: 35..=38.
pub const IO_DIRTIED_MAP_FULL: u32 = 35;
pub const IO_FILES_MAP_FULL: u32 = 36;
pub const IO_CALLS_MAP_FULL: u32 = 37;
pub const IO_CALL_START_FULL: u32 = 38;

// wakers (--wakers): 40..=41.
pub const WAKER_MAP_FULL: u32 = 40;
pub const WAKER_PENDING_FULL: u32 = 41;
pub const CHAIN_MAP_FULL: u32 = 42;

// lock accuracy: 30..=32 and 34.
pub const LOCK_STALE_WAIT: u32 = 30;
pub const LOCK_HOLD_MAP_FULL: u32 = 31;
pub const LOCK_STACK_CACHE_FAILED: u32 = 32;
pub const LOCK_STACK_FINGERPRINT_SHORT: u32 = 34;
pub const LOCK_OVERFLOW_FULL: u32 = 39;
pub const CPU_OVERFLOW_FULL: u32 = 43;
pub const OFFCPU_OVERFLOW_FULL: u32 = 44;
pub const IO_OVERFLOW_FULL: u32 = 45;
pub const IO_CALLS_OVERFLOW_FULL: u32 = 46;
pub const RPC_OVERFLOW_FULL: u32 = 47;
pub const FUNC_OVERFLOW_FULL: u32 = 48;
pub const HOLD_OVERFLOW_FULL: u32 = 49;
pub const WAKER_OVERFLOW_FULL: u32 = 50;
pub const LOCK_HOLD_OVERFLOW_FULL: u32 = 51;

/// Number of slots in `LOSSES` (room for the other probe families).
pub const LOSS_SLOTS: u32 = 56;

/// Names for the report, by index. `None` slots are unused.
pub const LOSS_NAMES: [(u32, &str, &str); 52] = [
    (
        STACK_COLLISION,
        "stack_collision",
        "stack map hash collision (-EEXIST) and the spare stacks full: stack not recorded",
    ),
    (
        STACK_FAILED,
        "stack_failed",
        "stack could not be taken (map full or walk failed)",
    ),
    (
        LOCK_MAP_FULL,
        "lock_map_full",
        "lock aggregation map full: contention counted in its process's \"[stats map full]\" row \
         (raise --map-entries for its own row)",
    ),
    (
        LOCK_OVERFLOW_FULL,
        "lock_overflow_full",
        "lock aggregation map and its overflow map full: contention dropped",
    ),
    (
        LOCK_UNMATCHED_END,
        "lock_unmatched_end",
        "contention_end without a matching begin",
    ),
    (
        LOCK_NEGATIVE_DELTA,
        "lock_negative_delta",
        "contention with end before begin",
    ),
    (
        LOCK_NESTED,
        "lock_nested",
        "nested contention ignored (a begin while another is open)",
    ),
    (
        LOCK_WAIT_MAP_FULL,
        "lock_wait_map_full",
        "in-flight sleeping-lock map full: contention dropped",
    ),
    (
        TASK_MAP_FULL,
        "task_map_full",
        "thread-name map full: thread shown without a name",
    ),
    (
        TARGET_MAP_FULL,
        "target_map_full",
        "target map full: a forked child was not followed",
    ),
    (
        OFFCPU_MAP_FULL,
        "offcpu_map_full",
        "off-CPU aggregation map full: wait counted in its thread's row without stacks (raise \
         --map-entries for its own row)",
    ),
    (
        OFFCPU_OVERFLOW_FULL,
        "offcpu_overflow_full",
        "off-CPU aggregation map and its overflow map full: a wait dropped",
    ),
    (
        OFFCPU_START_MAP_FULL,
        "offcpu_start_map_full",
        "map of threads off the CPU full: a wait dropped",
    ),
    (
        OFFCPU_NEGATIVE_DELTA,
        "offcpu_negative_delta",
        "switch-in before switch-out: a wait dropped",
    ),
    (
        IO_MAP_FULL,
        "io_map_full",
        "block-IO aggregation map full: request counted in its (device, op, process) row without \
         file (raise --map-entries for its own row)",
    ),
    (
        IO_OVERFLOW_FULL,
        "io_overflow_full",
        "block-IO aggregation map and its overflow map full: a request dropped",
    ),
    (
        IO_INFLIGHT_MAP_FULL,
        "io_inflight_map_full",
        "map of requests in flight full: a request dropped",
    ),
    (
        IO_UNMATCHED_COMPLETE,
        "io_unmatched_complete",
        "request with data completed without a seen issue (in flight at start)",
    ),
    (
        CPU_MAP_FULL,
        "cpu_map_full",
        "on-CPU sample map full: sample counted in its thread's row without stacks (raise \
         --map-entries for its own row)",
    ),
    (
        CPU_OVERFLOW_FULL,
        "cpu_overflow_full",
        "on-CPU sample map and its overflow map full: sample dropped",
    ),
    (
        USER_STACK_FAILED,
        "user_stack_failed",
        "user stack of a sample could not be taken (shown without user frames)",
    ),
    (
        PROCESS_NOTE_LOST,
        "process_note_lost",
        "new-process notice lost (ring buffer full): its memory map may be missing",
    ),
    (
        PROCESS_SEEN_MAP_FULL,
        "process_seen_map_full",
        "seen-process map full: a process's memory map may be missing",
    ),
    (
        RPC_INFLIGHT_FULL,
        "rpc_inflight_full",
        "in-flight request map full: request not timed",
    ),
    (
        RPC_MAP_FULL,
        "rpc_map_full",
        "request aggregation map full: request counted in its (provider, op, process) row \
         without stacks (raise --map-entries for its own row)",
    ),
    (
        RPC_OVERFLOW_FULL,
        "rpc_overflow_full",
        "request aggregation map and its overflow map full: completed request dropped",
    ),
    (
        RPC_KEY_REUSED,
        "rpc_key_reused",
        "a request started under a key still in flight: the older start was replaced",
    ),
    (
        FUNC_ENTRY_FULL,
        "func_entry_full",
        "in-flight call map full: function call not timed",
    ),
    (
        FUNC_MAP_FULL,
        "func_map_full",
        "function aggregation map full: call counted in its (function, process) row without \
         stack (raise --map-entries for its own row)",
    ),
    (
        FUNC_OVERFLOW_FULL,
        "func_overflow_full",
        "function aggregation map and its overflow map full: call dropped",
    ),
    (
        FUNC_NEGATIVE_DELTA,
        "func_negative_delta",
        "function return before its entry: call dropped",
    ),
    (
        LOCK_KPROBE_RETURN_LOST,
        "lock_kprobe_return_lost",
        "kprobe fallback: a slow path's return was missed (kretprobe instances exhausted); wait \
         dropped",
    ),
    (
        HOLD_MAP_FULL,
        "hold_map_full",
        "hold aggregation map full: hold counted in its (process, mode) row without stack \
         (raise --map-entries for its own row)",
    ),
    (
        HOLD_OVERFLOW_FULL,
        "hold_overflow_full",
        "hold aggregation map and its overflow map full: hold dropped",
    ),
    (
        HOLD_OPEN_FULL,
        "hold_open_full",
        "in-flight hold map full: hold dropped",
    ),
    (
        HOLD_NEGATIVE_DELTA,
        "hold_negative_delta",
        "hold with release before acquisition",
    ),
    (
        LOCK_INTERRUPT_WAIT_LOST,
        "lock_interrupt_wait_lost",
        "a spin wait of an interrupt that came while the end program ran: the kernel \
         skipped its end (one run of a program per CPU), so it was dropped once the CPU was \
         seen past it",
    ),
    (
        LOCK_STALE_WAIT,
        "lock_stale_wait",
        "a wait whose end never came (lost before the recording or the end probe) was replaced \
         by a new one",
    ),
    (
        LOCK_HOLD_MAP_FULL,
        "lock_hold_map_full",
        "map of holds under contention full: hold counted in its (process, mode) row without \
         lock or stack (raise --map-entries for its own row)",
    ),
    (
        LOCK_HOLD_OVERFLOW_FULL,
        "lock_hold_overflow_full",
        "map of holds under contention and its overflow map full: a hold dropped",
    ),
    (
        LOCK_STACK_CACHE_FAILED,
        "lock_stack_cache_failed",
        "the kernel stack above a lock tracepoint could not be read: stack walked instead",
    ),
    (
        LOCK_STACK_FINGERPRINT_SHORT,
        "lock_stack_fingerprint_short",
        "the kernel stack above a lock tracepoint showed too few call-path frames to tell its \
         call path from others: stack walked instead, and not cached",
    ),
    (
        IO_STALE_REPLACED,
        "io_stale_replaced",
        "a request address reused while an older request there was open (its completion was \
         missed): the older one dropped",
    ),
    (
        IO_DIRTIED_MAP_FULL,
        "io_dirtied_map_full",
        "map of who dirtied which file full: a process's dirtied pages not counted (its \
         writeback is charged to the issuer only)",
    ),
    (
        IO_FILES_MAP_FULL,
        "io_files_map_full",
        "map of files seen full: a request or dirtied page without its file",
    ),
    (
        IO_CALLS_MAP_FULL,
        "io_calls_map_full",
        "map of timed file calls full: call counted in its (process, call) row without file \
         (raise --map-entries for its own row)",
    ),
    (
        IO_CALLS_OVERFLOW_FULL,
        "io_calls_overflow_full",
        "map of timed file calls and its overflow map full: a call dropped",
    ),
    (
        IO_CALL_START_FULL,
        "io_call_start_full",
        "map of file calls in progress full: a call not timed",
    ),
    (
        WAKER_MAP_FULL,
        "waker_map_full",
        "waker aggregation map full: wait counted in its (waiter, waker thread) row without \
         stacks (raise --map-entries for its own row)",
    ),
    (
        WAKER_OVERFLOW_FULL,
        "waker_overflow_full",
        "waker aggregation map and its overflow map full: a wait's waker dropped (the wait \
         itself is kept)",
    ),
    (
        WAKER_PENDING_FULL,
        "waker_pending_full",
        "map of wake-ups awaiting their thread full: a wait's waker dropped (the wait itself is \
         kept)",
    ),
    (
        CHAIN_MAP_FULL,
        "chain_map_full",
        "wait-chain aggregation map full: a chain dropped (the wait and its waker are kept)",
    ),
];

/// Name prefix of a program's `recursion_misses` in a profile's losses (user space reads
/// them from `bpf_prog_info`: runs the kernel skipped because another BPF program was
/// already running on that CPU).
pub const PROGRAM_MISS_PREFIX: &str = "prog_recursion_miss:";

/// What a loss in a profile means, by its name.
pub fn loss_meaning(name: &str) -> &'static str {
    if name.starts_with(PROGRAM_MISS_PREFIX) {
        return "the kernel skipped this program (another BPF program was running on the CPU): \
                event lost";
    }
    LOSS_NAMES
        .iter()
        .find(|(_, known, _)| *known == name)
        .map_or("", |(_, _, why)| why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_is_named_once() {
        for (index, (slot, name, _)) in LOSS_NAMES.iter().enumerate() {
            assert!(*slot < LOSS_SLOTS, "{name}: slot {slot} out of range");
            for (other_slot, other_name, _) in &LOSS_NAMES[index + 1..] {
                assert_ne!(slot, other_slot, "{name} and {other_name} share a slot");
                assert_ne!(name, other_name);
            }
        }
    }
}
