//! Names and sizes of what every family shares: the stack map, the loss counters,
//! thread names and the process watcher.

/// Entries of the stack-trace map unless `--stack-entries` says otherwise.
pub const STACKS_ENTRIES: u32 = 16384;
/// Threads whose names are kept (`TASKS`).
pub const TASKS_ENTRIES: u32 = 16384;
/// Processes already noted for the process watcher (`PROCESSES_SEEN`).
pub const PROCESSES_SEEN_ENTRIES: u32 = 16384;
/// Bytes of the process watcher's notice ring (`NEW_PROCESSES`).
pub const NEW_PROCESSES_BYTES: u32 = 64 * 1024;

pub mod names {
    pub const STACKS: &str = "STACKS";
    pub const LOSSES: &str = "LOSSES";
    pub const TASKS: &str = "TASKS";
    pub const PROCESSES_SEEN: &str = "PROCESSES_SEEN";
    pub const NEW_PROCESSES: &str = "NEW_PROCESSES";
    /// Program: `sched:sched_process_exec`, notes processes whose user stacks are recorded.
    pub const PROCESSES_EXEC: &str = "processes_exec";

    /// Every name above (a name ending in `_` is a prefix: slot 0 is checked).
    pub const ALL: &[&str] = &[
        STACKS,
        LOSSES,
        TASKS,
        PROCESSES_SEEN,
        NEW_PROCESSES,
        PROCESSES_EXEC,
    ];
}
