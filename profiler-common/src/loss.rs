//! Loss counters: every event the kernel side could not record is counted in the
//! per-CPU array `LOSSES` at one of these indices. User space sums the CPUs.

/// Number of slots in `LOSSES` (room for the other probe families).
pub const LOSS_SLOTS: u32 = 56;

/// Declares each loss once: its slot in `LOSSES` (a constant the programs count with),
/// its name in a profile and what it means (`LOSS_NAMES`, which the report prints).
macro_rules! losses {
    ($($name:ident = $slot:literal, $label:literal, $why:literal;)*) => {
        $(pub const $name: u32 = $slot;)*

        /// Every loss: slot, name and meaning.
        pub const LOSS_NAMES: &[(u32, &str, &str)] = &[$(($slot, $label, $why),)*];
    };
}

losses! {
    STACK_COLLISION = 0, "stack_collision",
        "stack map hash collision (-EEXIST) and the spare stacks full: stack not recorded";
    STACK_FAILED = 1, "stack_failed",
        "stack could not be taken (map full or walk failed)";
    STACK_SPARE_BUSY = 52, "stack_spare_busy",
        "stack map hash collision in a program that interrupted programs already using every \
         spare stack scratch of the CPU: stack not recorded";
    LOCK_MAP_FULL = 2, "lock_map_full",
        "lock aggregation map full: contention counted in its process's \"[stats map full]\" row \
         (raise --map-entries for its own row)";
    LOCK_OVERFLOW_FULL = 39, "lock_overflow_full",
        "lock aggregation map and its overflow map full: contention dropped";
    LOCK_UNMATCHED_END = 3, "lock_unmatched_end",
        "contention_end without a matching begin";
    LOCK_NEGATIVE_DELTA = 4, "lock_negative_delta",
        "contention with end before begin";
    LOCK_NESTED = 5, "lock_nested",
        "nested contention ignored (a begin while another is open)";
    LOCK_WAIT_MAP_FULL = 6, "lock_wait_map_full",
        "in-flight sleeping-lock map full: contention dropped";
    TASK_MAP_FULL = 7, "task_map_full",
        "thread-name map full: thread shown without a name";
    TARGET_MAP_FULL = 8, "target_map_full",
        "target map full: a forked child was not followed";
    OFFCPU_MAP_FULL = 10, "offcpu_map_full",
        "off-CPU aggregation map full: wait counted in its thread's row without stacks (raise \
         --map-entries for its own row)";
    OFFCPU_OVERFLOW_FULL = 44, "offcpu_overflow_full",
        "off-CPU aggregation map and its overflow map full: a wait dropped";
    OFFCPU_START_MAP_FULL = 11, "offcpu_start_map_full",
        "map of threads off the CPU full: a wait dropped";
    OFFCPU_NEGATIVE_DELTA = 12, "offcpu_negative_delta",
        "switch-in before switch-out: a wait dropped";
    IO_MAP_FULL = 13, "io_map_full",
        "block-IO aggregation map full: request counted in its (device, op, process) row without \
         file (raise --map-entries for its own row)";
    IO_OVERFLOW_FULL = 45, "io_overflow_full",
        "block-IO aggregation map and its overflow map full: a request dropped";
    IO_INFLIGHT_MAP_FULL = 14, "io_inflight_map_full",
        "map of requests in flight full: a request dropped";
    IO_UNMATCHED_COMPLETE = 15, "io_unmatched_complete",
        "request with data completed without a seen issue (in flight at start)";
    CPU_MAP_FULL = 16, "cpu_map_full",
        "on-CPU sample map full: sample counted in its thread's row without stacks (raise \
         --map-entries for its own row)";
    CPU_OVERFLOW_FULL = 43, "cpu_overflow_full",
        "on-CPU sample map and its overflow map full: sample dropped";
    USER_STACK_FAILED = 17, "user_stack_failed",
        "user stack of a sample could not be taken (shown without user frames)";
    PROCESS_NOTE_LOST = 18, "process_note_lost",
        "new-process notice lost (ring buffer full): its memory map may be missing";
    PROCESS_SEEN_MAP_FULL = 19, "process_seen_map_full",
        "seen-process map full: a process's memory map may be missing";
    RPC_INFLIGHT_FULL = 20, "rpc_inflight_full",
        "in-flight request map full: request not timed";
    RPC_MAP_FULL = 21, "rpc_map_full",
        "request aggregation map full: request counted in its (provider, op, process) row without \
         stacks (raise --map-entries for its own row)";
    RPC_OVERFLOW_FULL = 47, "rpc_overflow_full",
        "request aggregation map and its overflow map full: completed request dropped";
    RPC_KEY_REUSED = 22, "rpc_key_reused",
        "a request started under a key still in flight: the older start was replaced";
    FUNC_ENTRY_FULL = 23, "func_entry_full",
        "in-flight call map full: function call not timed";
    FUNC_MAP_FULL = 24, "func_map_full",
        "function aggregation map full: call counted in its (function, process) row without stack \
         (raise --map-entries for its own row)";
    FUNC_OVERFLOW_FULL = 48, "func_overflow_full",
        "function aggregation map and its overflow map full: call dropped";
    FUNC_NEGATIVE_DELTA = 25, "func_negative_delta",
        "function return before its entry: call dropped";
    LOCK_KPROBE_RETURN_LOST = 26, "lock_kprobe_return_lost",
        "kprobe fallback: a slow path's return was missed (kretprobe instances exhausted); wait \
         dropped";
    HOLD_MAP_FULL = 27, "hold_map_full",
        "hold aggregation map full: hold counted in its (process, mode) row without stack (raise \
         --map-entries for its own row)";
    HOLD_OVERFLOW_FULL = 49, "hold_overflow_full",
        "hold aggregation map and its overflow map full: hold dropped";
    HOLD_OPEN_FULL = 28, "hold_open_full",
        "in-flight hold map full: hold dropped";
    HOLD_NEGATIVE_DELTA = 29, "hold_negative_delta",
        "hold with release before acquisition";
    LOCK_INTERRUPT_WAIT_LOST = 9, "lock_interrupt_wait_lost",
        "a spin wait of an interrupt that came while the end program ran: the kernel skipped its \
         end (one run of a program per CPU), so it was dropped once the CPU was seen past it";
    LOCK_STALE_WAIT = 30, "lock_stale_wait",
        "a wait whose end never came (lost before the recording or the end probe) was replaced by \
         a new one";
    LOCK_HOLD_MAP_FULL = 31, "lock_hold_map_full",
        "map of holds under contention full: hold counted in its (process, mode) row without lock \
         or stack (raise --map-entries for its own row)";
    LOCK_HOLD_OVERFLOW_FULL = 51, "lock_hold_overflow_full",
        "map of holds under contention and its overflow map full: a hold dropped";
    LOCK_STACK_CACHE_FAILED = 32, "lock_stack_cache_failed",
        "the kernel stack above a lock tracepoint could not be read: stack walked instead";
    LOCK_STACK_FINGERPRINT_SHORT = 34, "lock_stack_fingerprint_short",
        "the kernel stack above a lock tracepoint showed too few call-path frames to tell its \
         call path from others: stack walked instead, and not cached";
    IO_STALE_REPLACED = 33, "io_stale_replaced",
        "a request address reused while an older request there was open (its completion was \
         missed): the older one dropped";
    IO_DIRTIED_MAP_FULL = 35, "io_dirtied_map_full",
        "map of who dirtied which file full: dirtied pages counted in their process's row \
         without file (raise --map-entries for its own row; that file's writeback is charged to \
         its other dirtiers, or to the issuer)";
    IO_DIRTIED_OVERFLOW_FULL = 53, "io_dirtied_overflow_full",
        "map of who dirtied which file and its overflow map full: a process's dirtied pages not \
         counted (its writeback is charged to the issuer only)";
    IO_FILES_MAP_FULL = 36, "io_files_map_full",
        "map of files seen full: a request or dirtied page without its file";
    IO_CALLS_MAP_FULL = 37, "io_calls_map_full",
        "map of timed file calls full: call counted in its (process, call) row without file \
         (raise --map-entries for its own row)";
    IO_CALLS_OVERFLOW_FULL = 46, "io_calls_overflow_full",
        "map of timed file calls and its overflow map full: a call dropped";
    IO_CALL_START_FULL = 38, "io_call_start_full",
        "map of file calls in progress full: a call not timed";
    WAKER_MAP_FULL = 40, "waker_map_full",
        "waker aggregation map full: wait counted in its (waiter, waker thread) row without \
         stacks (raise --map-entries for its own row)";
    WAKER_OVERFLOW_FULL = 50, "waker_overflow_full",
        "waker aggregation map and its overflow map full: a wait's waker dropped (the wait itself \
         is kept)";
    WAKER_PENDING_FULL = 41, "waker_pending_full",
        "map of wake-ups awaiting their thread full: a wait's waker dropped (the wait itself is \
         kept)";
    CHAIN_MAP_FULL = 42, "chain_map_full",
        "wait-chain aggregation map full: chain counted in its row of the same threads without \
         the waits' stacks (raise --map-entries for its own row)";
    CHAIN_OVERFLOW_FULL = 54, "chain_overflow_full",
        "wait-chain aggregation map and its overflow map full: a chain dropped (the wait and its \
         waker are kept)";
}

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
