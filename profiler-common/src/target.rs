//! Which processes are profiled. The filter lives in the kernel: `FILTER_MODE`
//! selects, `TARGETS` holds the tracked process ids (kept current on fork and exit),
//! `CGROUPS` the tracked cgroup v2 ids.

/// Every process.
pub const FILTER_ALL: u32 = 0;
/// Processes whose tgid is in `TARGETS`.
pub const FILTER_PIDS: u32 = 1;
/// Processes whose cgroup id is in `CGROUPS`.
pub const FILTER_CGROUP: u32 = 2;

/// Name of a thread, keyed by thread id in the `TASKS` map.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TaskInfo {
    pub tgid: u32,
    pub _pad: u32,
    pub comm: [u8; 16],
}

#[cfg(feature = "user")]
crate::impl_pod!(TaskInfo);
