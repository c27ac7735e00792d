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
// cpu + user stacks: 16..=19
pub const CPU_MAP_FULL: u32 = 16;
pub const USER_STACK_FAILED: u32 = 17;
pub const PROCESS_NOTE_LOST: u32 = 18;
pub const PROCESS_SEEN_MAP_FULL: u32 = 19;
/// vm/kprobe fallback range: 26..=27.
pub const LOCK_KPROBE_RETURN_LOST: u32 = 26;

/// Number of slots in `LOSSES` (room for the other probe families).
pub const LOSS_SLOTS: u32 = 32;

/// Names for the report, by index. `None` slots are unused.
pub const LOSS_NAMES: [(u32, &str, &str); 14] = [
    (
        STACK_COLLISION,
        "stack_collision",
        "stack map hash collision (-EEXIST): stack not recorded",
    ),
    (
        STACK_FAILED,
        "stack_failed",
        "stack could not be taken (map full or walk failed)",
    ),
    (
        LOCK_MAP_FULL,
        "lock_map_full",
        "lock aggregation map full: contention dropped",
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
        CPU_MAP_FULL,
        "cpu_map_full",
        "on-CPU sample map full: sample dropped",
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
        LOCK_KPROBE_RETURN_LOST,
        "lock_kprobe_return_lost",
        "kprobe fallback: a slow path's return was missed (kretprobe instances exhausted); wait dropped",
    ),
];
