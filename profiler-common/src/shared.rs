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
    crate::define_names! {
        STACKS,
        LOSSES,
        TASKS,
        PROCESSES_SEEN,
        NEW_PROCESSES,
        /// Program: `sched:sched_process_exec`, notes processes whose user stacks are recorded.
        PROCESSES_EXEC = processes_exec,
    }
}
