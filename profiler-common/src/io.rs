//! Block IO latency from `block:block_rq_insert` / `block_rq_issue` / `block_rq_complete`.

/// Operation of a request, from the `rwbs` string of the tracepoints.
pub const OP_READ: u32 = 0;
pub const OP_WRITE: u32 = 1;
pub const OP_FLUSH: u32 = 2;
pub const OP_DISCARD: u32 = 3;
pub const OP_OTHER: u32 = 4;

/// log2 latency buckets, in microseconds: bucket `i` holds [2^i, 2^(i+1)) us, bucket 0
/// also holds latencies under 1 us (like biolatency's slots).
pub const IO_HIST_SLOTS: usize = 32;

/// Aggregation key: one row per device, operation and issuing process.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IoKey {
    /// Kernel `dev_t` as the tracepoints report it: major << 20 | minor.
    pub dev: u32,
    /// `OP_*`.
    pub op: u32,
    /// Process (tgid) that inserted or issued the request; kernel threads included.
    pub tgid: u32,
    pub _pad: u32,
}

/// Aggregated requests of one key.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoStat {
    pub count: u64,
    pub bytes: u64,
    /// Issue to completion (device time), like biolatency without -Q.
    pub total_ns: u64,
    pub max_ns: u64,
    /// Requests whose insert was seen, and their time in the queue (insert to issue).
    pub queued: u64,
    pub queue_ns: u64,
    pub hist: [u64; IO_HIST_SLOTS],
}

impl Default for IoStat {
    fn default() -> Self {
        IoStat {
            count: 0,
            bytes: 0,
            total_ns: 0,
            max_ns: 0,
            queued: 0,
            queue_ns: 0,
            hist: [0; IO_HIST_SLOTS],
        }
    }
}

/// A request in flight, keyed by (dev, sector).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IoRequestKey {
    pub dev: u32,
    pub _pad: u32,
    pub sector: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct IoInFlight {
    /// 0 when the insert was not seen (no scheduler queue, or issued directly).
    pub insert_ns: u64,
    /// 0 while the request is queued and not yet issued.
    pub issue_ns: u64,
    pub bytes: u32,
    pub op: u32,
    pub tgid: u32,
    pub _pad: u32,
}

/// Entries of the requests in flight (`IO_INFLIGHT`).
pub const IO_INFLIGHT_ENTRIES: u32 = 16384;

pub mod names {
    pub const IO_STATS: &str = "IO_STATS";
    pub const IO_INFLIGHT: &str = "IO_INFLIGHT";
    pub const RQ_INSERT_DEV_OFFSET: &str = "RQ_INSERT_DEV_OFFSET";
    pub const RQ_INSERT_SECTOR_OFFSET: &str = "RQ_INSERT_SECTOR_OFFSET";
    pub const RQ_INSERT_BYTES_OFFSET: &str = "RQ_INSERT_BYTES_OFFSET";
    pub const RQ_INSERT_RWBS_OFFSET: &str = "RQ_INSERT_RWBS_OFFSET";
    pub const RQ_ISSUE_DEV_OFFSET: &str = "RQ_ISSUE_DEV_OFFSET";
    pub const RQ_ISSUE_SECTOR_OFFSET: &str = "RQ_ISSUE_SECTOR_OFFSET";
    pub const RQ_ISSUE_BYTES_OFFSET: &str = "RQ_ISSUE_BYTES_OFFSET";
    pub const RQ_ISSUE_RWBS_OFFSET: &str = "RQ_ISSUE_RWBS_OFFSET";
    pub const RQ_COMPLETE_DEV_OFFSET: &str = "RQ_COMPLETE_DEV_OFFSET";
    pub const RQ_COMPLETE_SECTOR_OFFSET: &str = "RQ_COMPLETE_SECTOR_OFFSET";
    pub const IO_RQ_INSERT: &str = "io_rq_insert";
    pub const IO_RQ_ISSUE: &str = "io_rq_issue";
    pub const IO_RQ_COMPLETE: &str = "io_rq_complete";

    /// Every name above (a name ending in `_` is a prefix: slot 0 is checked).
    pub const ALL: &[&str] = &[
        IO_STATS,
        IO_INFLIGHT,
        RQ_INSERT_DEV_OFFSET,
        RQ_INSERT_SECTOR_OFFSET,
        RQ_INSERT_BYTES_OFFSET,
        RQ_INSERT_RWBS_OFFSET,
        RQ_ISSUE_DEV_OFFSET,
        RQ_ISSUE_SECTOR_OFFSET,
        RQ_ISSUE_BYTES_OFFSET,
        RQ_ISSUE_RWBS_OFFSET,
        RQ_COMPLETE_DEV_OFFSET,
        RQ_COMPLETE_SECTOR_OFFSET,
        IO_RQ_INSERT,
        IO_RQ_ISSUE,
        IO_RQ_COMPLETE,
    ];
}

#[cfg(feature = "user")]
crate::impl_pod!(IoKey, IoStat, IoRequestKey, IoInFlight);
