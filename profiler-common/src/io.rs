//! Block IO latency from the raw tracepoints `block_rq_insert` / `block_rq_issue` /
//! `block_rq_complete` (plus `block_rq_requeue` and `block_rq_merge`), keyed by the
//! kernel's `struct request` pointer.

/// Operation of a request, from `rq->cmd_flags & REQ_OP_MASK`.
pub const OP_READ: u32 = 0;
pub const OP_WRITE: u32 = 1;
pub const OP_FLUSH: u32 = 2;
pub const OP_DISCARD: u32 = 3;
pub const OP_OTHER: u32 = 4;
/// A passthrough request (`REQ_OP_DRV_IN/OUT`, and `REQ_OP_SCSI_IN/OUT` before 5.11):
/// a driver-private command such as an NVMe admin or SG_IO command, without a sector.
pub const OP_PASSTHROUGH: u32 = 5;

/// log2 latency buckets, in microseconds: bucket `i` holds [2^i, 2^(i+1)) us, bucket 0
/// also holds latencies under 1 us (like biolatency's slots).
pub const IO_HIST_SLOTS: usize = 32;

/// Aggregation key: one row per device, operation and issuing process.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IoKey {
    /// Kernel `dev_t` of the disk, as the block tracepoints report it: major << 20 | minor.
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

/// `IoInFlight::flags`: the request went back to the queue (`block_rq_requeue`) and
/// will be inserted and issued again; it is still the same request.
pub const IO_FLIGHT_REQUEUED: u32 = 1;

/// A request in flight, keyed by its `struct request` address.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoInFlight {
    /// When lockpath first saw the request (its insert, or its issue when the insert
    /// was not seen).
    pub start_ns: u64,
    /// 0 when the insert was not seen (no scheduler queue, or issued directly).
    pub insert_ns: u64,
    /// 0 while the request is queued and not yet issued (or requeued).
    pub issue_ns: u64,
    pub dev: u32,
    /// Data length at the first issue (a merge can grow it until then).
    pub bytes: u32,
    pub op: u32,
    /// The process current when the request was first seen: the submitter.
    pub tgid: u32,
    /// `IO_FLIGHT_*`.
    pub flags: u32,
    pub _pad: u32,
}

/// Where the IO programs find what they read in a `struct request`, from the kernel's
/// BTF (set at load time): byte offsets, and the device through a chain of pointers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoLayout {
    /// `request.cmd_flags`, `request.__data_len`.
    pub cmd_flags: u32,
    pub data_len: u32,
    /// `request.start_time_ns` (allocation time), or `IO_NO_OFFSET`.
    pub start_time_ns: u32,
    /// Pointer hops before the final `dev_t` read (0..=3): `dev_offsets[0..hops]` are
    /// offsets of pointers followed one after the other from the request,
    /// `dev_offsets[hops]` the offset of the `dev_t` in the last struct reached.
    pub dev_hops: u32,
    pub dev_offsets: [u32; 4],
    /// `REQ_OP_MASK` and the operation numbers of this kernel (`IO_NO_OP` when absent).
    pub op_mask: u32,
    pub op_read: u32,
    pub op_write: u32,
    pub op_flush: u32,
    pub op_discard: u32,
    pub op_secure_erase: u32,
    pub op_passthrough: [u32; 4],
}

/// An offset that does not exist in this kernel.
pub const IO_NO_OFFSET: u32 = u32::MAX;
/// An operation number that does not exist in this kernel.
pub const IO_NO_OP: u32 = u32::MAX;

impl IoLayout {
    /// No offsets, and the operation numbers of mainline kernels (`REQ_OP_MASK` 0xff,
    /// `REQ_OP_READ` 0 ... `REQ_OP_DRV_IN` 34, `REQ_OP_DRV_OUT` 35).
    pub const MAINLINE: IoLayout = IoLayout {
        cmd_flags: 0,
        data_len: 0,
        start_time_ns: IO_NO_OFFSET,
        dev_hops: 0,
        dev_offsets: [0; 4],
        op_mask: 0xff,
        op_read: 0,
        op_write: 1,
        op_flush: 2,
        op_discard: 3,
        op_secure_erase: 5,
        op_passthrough: [34, 35, IO_NO_OP, IO_NO_OP],
    };

    /// `OP_*` of a request's `cmd_flags`.
    #[inline(always)]
    pub fn op_of(&self, cmd_flags: u32) -> u32 {
        let op = cmd_flags & self.op_mask;
        if op == self.op_read {
            OP_READ
        } else if op == self.op_write {
            OP_WRITE
        } else if op == self.op_flush {
            OP_FLUSH
        } else if op == self.op_discard || op == self.op_secure_erase {
            OP_DISCARD
        } else if op == self.op_passthrough[0]
            || op == self.op_passthrough[1]
            || op == self.op_passthrough[2]
            || op == self.op_passthrough[3]
        {
            OP_PASSTHROUGH
        } else {
            OP_OTHER
        }
    }
}

/// What an insert or issue does with an entry already open under the same request
/// pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// The same request, one step further (issued after its insert, or inserted or
    /// issued again after a requeue): keep its start and submitter.
    Continue,
    /// An entry of an earlier request at the same address whose end was missed (a
    /// completion or merge lockpath did not see): replace it, and count the loss.
    Stale,
}

/// Decides whether `open` belongs to the request now seen at `insert` or issue.
///
/// `rq_alloc_ns` is the request's own `start_time_ns` (0 when the kernel did not stamp
/// it): an entry opened before the request was allocated belongs to an earlier request
/// at the same address. Without a stamp, the sequence decides: a request is inserted
/// at most once and issued at most once unless it was requeued in between.
pub fn seen_again(open: &IoInFlight, rq_alloc_ns: u64, is_issue: bool) -> Seen {
    if rq_alloc_ns != 0 && open.start_ns < rq_alloc_ns {
        return Seen::Stale;
    }
    if open.flags & IO_FLIGHT_REQUEUED != 0 {
        return Seen::Continue;
    }
    if is_issue && open.issue_ns == 0 {
        return Seen::Continue;
    }
    Seen::Stale
}

/// True when a completion of `nr_bytes` ends a request that had `remaining` bytes left
/// (`blk_update_request` traces before it updates the request): a partial completion
/// (a driver completing a large request in pieces) leaves it open.
pub fn completes(nr_bytes: u32, remaining: u32) -> bool {
    nr_bytes >= remaining
}

/// Entries of the requests in flight (`IO_INFLIGHT`).
pub const IO_INFLIGHT_ENTRIES: u32 = 16384;

pub mod names {
    crate::define_names! {
        IO_STATS,
        IO_INFLIGHT,
        IO_LAYOUT,
        IO_RQ_COMPLETE = io_rq_complete,
        IO_RQ_MERGE = io_rq_merge,
        IO_RQ_MERGE_Q = io_rq_merge_q,
        IO_RQ_REQUEUE = io_rq_requeue,
        IO_RQ_REQUEUE_Q = io_rq_requeue_q,
        IO_RQ_INSERT = io_rq_insert,
        IO_RQ_INSERT_Q = io_rq_insert_q,
        IO_RQ_ISSUE = io_rq_issue,
        IO_RQ_ISSUE_Q = io_rq_issue_q,
    }
}

#[cfg(feature = "user")]
crate::impl_pod!(IoKey, IoStat, IoInFlight, IoLayout);

#[cfg(test)]
mod tests {
    use super::*;

    fn open(start_ns: u64, insert_ns: u64, issue_ns: u64, flags: u32) -> IoInFlight {
        IoInFlight {
            start_ns,
            insert_ns,
            issue_ns,
            flags,
            ..Default::default()
        }
    }

    #[test]
    fn issue_after_insert_continues() {
        let inserted = open(100, 100, 0, 0);
        assert_eq!(seen_again(&inserted, 90, true), Seen::Continue);
        assert_eq!(seen_again(&inserted, 0, true), Seen::Continue);
    }

    #[test]
    fn an_entry_older_than_the_request_is_stale() {
        // Opened at 100, the request now seen was allocated at 200: a reused address.
        let inserted = open(100, 100, 0, 0);
        assert_eq!(seen_again(&inserted, 200, true), Seen::Stale);
        let requeued = open(100, 100, 0, IO_FLIGHT_REQUEUED);
        assert_eq!(seen_again(&requeued, 200, false), Seen::Stale);
    }

    #[test]
    fn a_second_insert_or_issue_without_requeue_is_stale() {
        let inserted = open(100, 100, 0, 0);
        assert_eq!(
            seen_again(&inserted, 0, false),
            Seen::Stale,
            "inserted twice"
        );
        let issued = open(100, 0, 100, 0);
        assert_eq!(seen_again(&issued, 0, true), Seen::Stale, "issued twice");
        assert_eq!(
            seen_again(&issued, 50, false),
            Seen::Stale,
            "inserted after issue"
        );
    }

    #[test]
    fn a_requeued_request_continues() {
        let requeued = open(100, 100, 0, IO_FLIGHT_REQUEUED);
        assert_eq!(
            seen_again(&requeued, 50, false),
            Seen::Continue,
            "re-inserted"
        );
        assert_eq!(seen_again(&requeued, 50, true), Seen::Continue, "re-issued");
    }

    #[test]
    fn partial_completions_leave_the_request_open() {
        assert!(!completes(4096, 8192));
        assert!(completes(4096, 4096));
        // Sector-less requests (flush, passthrough without data) end with 0 of 0.
        assert!(completes(0, 0));
    }

    #[test]
    fn operations_by_number() {
        let layout = IoLayout::MAINLINE;
        // REQ_PREFLUSH and other flag bits above the mask do not change the operation.
        assert_eq!(layout.op_of(1 | (1 << 18)), OP_WRITE);
        assert_eq!(layout.op_of(2), OP_FLUSH);
        assert_eq!(layout.op_of(5), OP_DISCARD);
        assert_eq!(layout.op_of(35), OP_PASSTHROUGH);
        assert_eq!(layout.op_of(9), OP_OTHER);
    }
}
