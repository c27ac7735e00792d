//! Which processes are profiled. The filter lives in the kernel: `FILTER_MODE`
//! selects, `TARGETS` holds the tracked process ids (kept current on fork and exit),
//! `CGROUPS` the tracked cgroup v2 ids.

/// Every process.
pub const FILTER_ALL: u32 = 0;
/// Processes whose tgid is in `TARGETS`.
pub const FILTER_PIDS: u32 = 1;
/// Processes whose cgroup id is in `CGROUPS`.
pub const FILTER_CGROUP: u32 = 2;

/// Name and cgroup of a thread, keyed by thread id in the `TASKS` map.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TaskInfo {
    pub tgid: u32,
    pub _pad: u32,
    pub comm: [u8; 16],
    /// The thread's cgroup v2 id (the inode number of its directory under the cgroup2
    /// mount); 0 when unknown (a lock owner named from its task struct).
    pub cgroup_id: u64,
}

/// Entries of the target-process set (`TARGETS`).
pub const TARGETS_ENTRIES: u32 = 65536;
/// Entries of the target-cgroup set (`CGROUPS`).
pub const CGROUPS_ENTRIES: u32 = 1024;

pub mod names {
    crate::define_names! {
        TARGETS,
        CGROUPS,
        FILTER_MODE,
        FORK_CHILD_PID_OFFSET,
        EXIT_GROUP_DEAD_OFFSET,
        /// Program: `sched:sched_process_fork`, adds children of targets.
        TARGET_FORK = target_fork,
        /// Program: `sched:sched_process_exit`.
        TARGET_EXIT = target_exit,
    }
}

#[cfg(feature = "user")]
crate::impl_pod!(TaskInfo);
