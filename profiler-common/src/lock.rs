//! Lock contention: `lock:contention_begin` / `lock:contention_end`.

/// Flags of `lock:contention_begin` (include/trace/events/lock.h, `LCB_F_*`).
pub const LCB_F_SPIN: u32 = 1 << 0;
pub const LCB_F_READ: u32 = 1 << 1;
pub const LCB_F_WRITE: u32 = 1 << 2;
pub const LCB_F_RT: u32 = 1 << 3;
pub const LCB_F_PERCPU: u32 = 1 << 4;
pub const LCB_F_MUTEX: u32 = 1 << 5;

/// Aggregation key: one row per process, kernel stack, lock and lock type.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey {
    pub lock_addr: u64,
    /// Process id (tgid) of the waiter.
    pub tgid: u32,
    /// Stack id in the shared stack map, or a negative errno when the stack was lost.
    pub kstack_id: i32,
    /// `LCB_F_*` flags seen at contention_end time for this wait.
    pub flags: u32,
    pub _pad: u32,
}

/// Aggregated wait times of one key, in nanoseconds.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockStat {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    pub min_ns: u64,
}

/// A contention in progress (begin seen, end not yet).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct LockWait {
    pub start_ns: u64,
    pub lock_addr: u64,
    pub flags: u32,
    pub kstack_id: i32,
}

#[cfg(feature = "user")]
crate::impl_pod!(LockKey, LockStat, LockWait);
