//! On-CPU sampling: a perf_event software CPU clock on every CPU; each sample adds one
//! to the count of (process, thread, kernel stack, user stack).

/// Aggregation key of one on-CPU sample.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuKey {
    /// Process id (tgid) of the task that was on the CPU.
    pub tgid: u32,
    /// Thread id of that task.
    pub tid: u32,
    /// Kernel stack id in `STACKS`, or a negative errno (no kernel stack: sampled in user mode
    /// with an empty kernel part, or lost).
    pub kstack_id: i32,
    /// User stack id in `STACKS`, or a negative errno (kernel threads have none).
    pub ustack_id: i32,
}

pub mod names {
    pub const CPU_SAMPLES: &str = "CPU_SAMPLES";
    pub const CPU_SAMPLE: &str = "cpu_sample";

    /// Every name above (a name ending in `_` is a prefix: slot 0 is checked).
    pub const ALL: &[&str] = &[CPU_SAMPLES, CPU_SAMPLE];
}

#[cfg(feature = "user")]
crate::impl_pod!(CpuKey);
