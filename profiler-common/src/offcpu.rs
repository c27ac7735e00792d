//! Off-CPU time from `sched:sched_switch`: how long threads wait off the CPU, in which
//! state, through which kernel and user stacks.

/// `prev_state` bits as `sched_switch` reports them (TASK_REPORT: one bit per state).
pub const STATE_INTERRUPTIBLE: u32 = 0x1; // S
pub const STATE_UNINTERRUPTIBLE: u32 = 0x2; // D

/// Aggregation key: one row per thread, state and (kernel stack, user stack).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OffcpuKey {
    /// Process id (tgid) of the waiting thread.
    pub tgid: u32,
    /// Thread id: threads are kept apart (a client's IO thread vs its workers); the
    /// thread name comes from the shared `TASKS` map.
    pub tid: u32,
    /// Kernel stack id in the shared stack map, or a negative errno when lost.
    pub kstack_id: i32,
    /// User stack id in the shared stack map, or a negative errno (kernel threads have none).
    pub ustack_id: i32,
    /// `STATE_*` bit the thread left the CPU in.
    pub state: u32,
    /// Owner process of the file lock the thread waits for (file-lock waits whose
    /// blocker the `filelock` tracepoints named), else 0.
    pub holder_tgid: u32,
}

impl OffcpuKey {
    /// The row of `OFFCPU_OVERFLOW` that takes this wait when `OFFCPU_STATS` is full: its
    /// thread, state and file-lock holder, without stacks.
    pub const fn overflow(&self) -> OffcpuKey {
        OffcpuKey {
            tgid: self.tgid,
            tid: self.tid,
            kstack_id: -1,
            ustack_id: -1,
            state: self.state,
            holder_tgid: self.holder_tgid,
        }
    }
}

/// Aggregated off-CPU time of one key, in nanoseconds.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffcpuStat {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
}

/// A thread off the CPU since `start_ns` (switched out, not yet back).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OffcpuStart {
    pub start_ns: u64,
    pub tgid: u32,
    pub kstack_id: i32,
    pub ustack_id: i32,
    pub state: u32,
    /// See `OffcpuKey::holder_tgid`.
    pub holder_tgid: u32,
    pub _pad: u32,
    /// The wait's time counts into the profile from here: `start_ns` for a wait that
    /// began while recording; the start of the recording for a wait found already in
    /// progress; the start of the period under `--rotate` once a period boundary has
    /// passed (user space moves it forward when it ends a period). The whole wait,
    /// `start_ns` to its end, is still the row's maximum.
    pub counted_from_ns: u64,
}

/// The part of a wait that falls in the profile (`counted_ns`, added to the total) and
/// its whole length (`whole_ns`, for the maximum).
#[derive(Clone, Copy, Debug, Default)]
pub struct WaitPart {
    pub counted_ns: u64,
    pub whole_ns: u64,
}

impl WaitPart {
    /// A wait from `start_ns` to `end_ns` whose time counts from `counted_from_ns`.
    #[inline(always)]
    pub fn of(start_ns: u64, counted_from_ns: u64, end_ns: u64) -> WaitPart {
        let from = if counted_from_ns > start_ns {
            counted_from_ns
        } else {
            start_ns
        };
        WaitPart {
            counted_ns: end_ns.saturating_sub(from),
            whole_ns: end_ns.saturating_sub(start_ns),
        }
    }
}

/// Stack ids from this value up name stacks that user space read itself (`/proc`) for
/// waits that began before the recording: a stack map's ids are far below it.
pub const SCANNED_STACK_BASE: i32 = 0x4000_0000;

/// The holder of the file lock a thread was just queued behind (`filelock` tracepoints).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FilelockWait {
    pub holder_tgid: u32,
    pub _pad: u32,
    /// When the tracepoint named it.
    pub at_ns: u64,
}

/// Entries of the file-lock waiters noted by the `filelock` tracepoints, by thread.
pub const FILELOCK_WAITERS_ENTRIES: u32 = 16384;

/// Entries of the sleeps in progress (`OFFCPU_START`), by thread.
pub const OFFCPU_START_ENTRIES: u32 = 65536;

/// What the family's programs could not record: each loss's slot in `LOSSES`, its name
/// in a profile and what it means (`ALL`, which the report prints).
pub mod losses {
    crate::loss::losses! {
        OFFCPU_MAP_FULL = 10, "offcpu_map_full",
            "off-CPU aggregation map full: wait counted in its thread's row without stacks (raise \
             --map-entries for its own row)";
        OFFCPU_START_MAP_FULL = 11, "offcpu_start_map_full",
            "map of threads off the CPU full: a wait dropped";
        OFFCPU_NEGATIVE_DELTA = 12, "offcpu_negative_delta",
            "switch-in before switch-out: a wait dropped";
        OFFCPU_OVERFLOW_FULL = 44, "offcpu_overflow_full",
            "off-CPU aggregation map and its overflow map full: a wait dropped";
    }
}

pub mod names {
    crate::define_names! {
        OFFCPU_STATS,
        OFFCPU_OVERFLOW,
        OFFCPU_START,
        SWITCH_PREV_PID_OFFSET,
        SWITCH_PREV_STATE_OFFSET,
        SWITCH_NEXT_PID_OFFSET,
        OFFCPU_STATES,
        OFFCPU_MIN_NS,
        OFFCPU_SCHED_SWITCH = offcpu_sched_switch,
        /// The same program with the waker join and wait chains (`--wakers`).
        OFFCPU_SCHED_SWITCH_WAKERS = offcpu_sched_switch_wakers,
        FILELOCK_WAITERS,
        FILELOCK_TP_BLOCKER_OFFSET,
        FILELOCK_TP_RET_OFFSET,
        FILELOCK_LOCK_BLOCKER_OFFSET,
        FILELOCK_LOCK_PID_OFFSET,
        OFFCPU_FILELOCK = offcpu_filelock,
        FILELOCK_LEASE_BLOCKER_OFFSET,
        OFFCPU_FILELOCK_LEASE = offcpu_filelock_lease,
    }
}

#[cfg(feature = "user")]
crate::impl_pod!(OffcpuKey, OffcpuStat, OffcpuStart, FilelockWait);
