//! Wakers (`record --wakers`): who woke each off-CPU wait. `sched:sched_waking` runs in
//! the waker; when the woken thread has an open off-CPU wait (`OFFCPU_START`), the
//! waker's identity and stacks are kept by the woken thread id (`WAKER_PENDING`). When
//! the off-CPU program closes that wait at switch-in, its time is added to
//! `WAKER_STATS` under (waiter key, waker).

use crate::offcpu::OffcpuKey;

/// The task that woke a thread, kept until the thread runs again.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WakeInfo {
    /// Process and thread of the waker (0/0: the idle task, i.e. an interrupt that
    /// came while the CPU idled).
    pub tgid: u32,
    pub tid: u32,
    /// Kernel stack id of the waker in the shared stack map, or a negative errno.
    pub kstack_id: i32,
    /// User stack id of the waker, or a negative errno (kernel threads have none).
    pub ustack_id: i32,
}

/// Aggregation key: one row per (off-CPU row of the waiter, waker).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WakerKey {
    pub waiter: OffcpuKey,
    pub waker: WakeInfo,
}

/// Entries of the wake-ups waiting for their thread to run (`WAKER_PENDING`).
pub const WAKER_PENDING_ENTRIES: u32 = crate::offcpu::OFFCPU_START_ENTRIES;

pub mod names {
    pub const WAKER_STATS: &str = "WAKER_STATS";
    pub const WAKER_PENDING: &str = "WAKER_PENDING";
    /// 1 when `--wakers` is recorded: the off-CPU program then closes waits with
    /// their waker.
    pub const WAKERS_ON: &str = "WAKERS_ON";
    pub const WAKING_PID_OFFSET: &str = "WAKING_PID_OFFSET";
    pub const WAKERS_SCHED_WAKING: &str = "wakers_sched_waking";

    pub const ALL: &[&str] = &[
        WAKER_STATS,
        WAKER_PENDING,
        WAKERS_ON,
        WAKING_PID_OFFSET,
        WAKERS_SCHED_WAKING,
    ];
}

#[cfg(feature = "user")]
crate::impl_pod!(WakeInfo, WakerKey);
