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

/// Aggregation key: one row per device, operation, issuing process and file.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IoKey {
    /// Kernel `dev_t` of the disk, as the block tracepoints report it: major << 20 | minor.
    pub dev: u32,
    /// `OP_*`.
    pub op: u32,
    /// Process (tgid) that inserted or issued the request; kernel threads included.
    pub tgid: u32,
    /// The file whose page cache the request's first page belongs to: its file system's
    /// `dev_t` (`s_dev`, major << 20 | minor) and inode number. Both 0 when the request
    /// has no page of a file (direct IO into user memory, flushes, passthrough); a file
    /// system's `dev_t` is never 0 (a block device's own inode, on the kernel's internal
    /// block-device file system, has number 0 before 6.x).
    pub file_dev: u32,
    pub ino: u64,
}

impl IoKey {
    /// The row of `IO_OVERFLOW` that takes this request when `IO_STATS` is full: its
    /// device, op and process, without file.
    pub const fn overflow(&self) -> IoKey {
        IoKey {
            dev: self.dev,
            op: self.op,
            tgid: self.tgid,
            file_dev: 0,
            ino: 0,
        }
    }
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

impl IoStat {
    /// The value a new row starts from.
    pub const EMPTY: IoStat = IoStat {
        count: 0,
        bytes: 0,
        total_ns: 0,
        max_ns: 0,
        queued: 0,
        queue_ns: 0,
        hist: [0; IO_HIST_SLOTS],
    };
}

impl Default for IoStat {
    fn default() -> Self {
        IoStat::EMPTY
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
    /// The file of the request's first page, as in `IoKey`.
    pub file_dev: u32,
    pub ino: u64,
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
    /// From a request to the inode of its first page: `request.bio`, `bio.bi_io_vec`,
    /// `bio_vec.bv_page`, `page.compound_head` (a tail page's head, with bit 0 set),
    /// `page.mapping`, `address_space.host`. `rq_bio` is `IO_NO_OFFSET` when this
    /// kernel's layout was not found: requests then have no file; `page_compound_head`
    /// when the kernel has no such member (7.x).
    pub rq_bio: u32,
    pub bio_io_vec: u32,
    pub bv_page: u32,
    pub page_compound_head: u32,
    pub page_mapping: u32,
    pub mapping_host: u32,
    /// `inode.i_ino`, `inode.i_sb`, `super_block.s_dev`.
    pub inode_ino: u32,
    pub inode_sb: u32,
    pub sb_dev: u32,
    /// From an inode to its name: `inode.i_dentry` (the first alias),
    /// `dentry.d_u.d_alias` (subtracted), `dentry.d_parent`, `dentry.d_name.name`.
    /// `inode_dentry` is `IO_NO_OFFSET` when unknown: files then have no name.
    pub inode_dentry: u32,
    pub dentry_alias: u32,
    pub dentry_parent: u32,
    pub dentry_name: u32,
    /// `task_struct.group_leader` and `task_struct.comm`: a worker thread's process is
    /// named as its leader is (`IO_NO_OFFSET`: not known).
    pub task_group_leader: u32,
    pub task_comm: u32,
    /// From a thread's file descriptor to the file's inode (`--file-calls`):
    /// `task_struct.files`, `files_struct.fdt`, `fdtable.max_fds`, `fdtable.fd`,
    /// `file.f_inode`, and `inode.i_mode` (only regular files are timed).
    /// `task_files` is `IO_NO_OFFSET` when unknown.
    pub task_files: u32,
    pub files_fdt: u32,
    pub fdt_max_fds: u32,
    pub fdt_fd: u32,
    pub file_inode: u32,
    pub inode_mode: u32,
    /// `file.f_flags` and this architecture's `O_DIRECT` (0: direct IO is not charged
    /// to files): a direct read or write of a timed call carries no page of its file,
    /// so its requests are charged to the file of the call.
    pub file_f_flags: u32,
    pub o_direct: u32,
}

/// Bytes of one path component in `IoFile` (longer names are cut, NUL included).
pub const IO_NAME_LEN: usize = 32;
/// Path components read from a file's dentry upwards.
pub const IO_NAME_PARTS: usize = 6;

/// `IoFile::flags`: a target process dirtied pages of the file (its writeback is then
/// the target's IO, whoever issues it).
pub const IO_FILE_CAUSED: u32 = 1;
/// `IoFile::flags`: the names reach the file system's root (the path is whole below
/// its mount point).
pub const IO_FILE_ROOT: u32 = 2;
/// `IoFile::flags`: names could be read, and the inode has none (no dentry): a block
/// device's own inode, whose page cache holds file system metadata and raw device IO.
pub const IO_FILE_NO_DENTRY: u32 = 4;

/// A file seen in a block request or dirtied, by its `struct inode` address.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoFile {
    pub ino: u64,
    /// `s_dev` of its file system (major << 20 | minor).
    pub dev: u32,
    /// `IO_FILE_*`.
    pub flags: u32,
    /// Path components, the file's own name first, then its parents'; NUL-terminated,
    /// empty after the last one read.
    pub names: [[u8; IO_NAME_LEN]; IO_NAME_PARTS],
}

impl Default for IoFile {
    fn default() -> Self {
        IoFile {
            ino: 0,
            dev: 0,
            flags: 0,
            names: [[0; IO_NAME_LEN]; IO_NAME_PARTS],
        }
    }
}

/// Who dirtied a file's pages: one row per (inode, process).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DirtyKey {
    /// `struct inode` address.
    pub inode: u64,
    pub tgid: u32,
    pub _pad: u32,
}

impl DirtyKey {
    /// The row of `IO_DIRTIED_OVERFLOW` that takes these folios when `IO_DIRTIED` is
    /// full: their process, without file.
    pub const fn overflow(&self) -> DirtyKey {
        DirtyKey {
            inode: 0,
            tgid: self.tgid,
            _pad: 0,
        }
    }
}

/// Folios one process dirtied in one file (`writeback_dirty_folio`, or
/// `writeback_dirty_page` before 5.17: each newly dirtied folio once).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirtyStat {
    pub folios: u64,
    /// The file (as in `IoKey`); 0 and 0 in the rows of `IO_DIRTIED_OVERFLOW`.
    pub ino: u64,
    pub dev: u32,
    pub _pad: u32,
}

/// Entries of `IO_FILES`.
pub const IO_FILES_ENTRIES: u32 = 8192;

/// `CallKey::call`: the system calls `--file-calls` times, by what they do.
pub const CALL_READ: u32 = 0;
pub const CALL_WRITE: u32 = 1;
pub const CALL_FSYNC: u32 = 2;
pub const CALL_OPEN: u32 = 3;

/// One row of timed calls: (process, call, file). Counted in an `IoStat` (bytes: what
/// reads and writes returned; no queue times).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CallKey {
    pub tgid: u32,
    /// `CALL_*`.
    pub call: u32,
    /// As in `IoKey`.
    pub file_dev: u32,
    pub _pad: u32,
    pub ino: u64,
}

impl CallKey {
    /// The row of `IO_CALLS_OVERFLOW` that takes this call when `IO_CALLS` is full: its
    /// process and call, without file.
    pub const fn overflow(&self) -> CallKey {
        CallKey {
            tgid: self.tgid,
            call: self.call,
            file_dev: 0,
            _pad: 0,
            ino: 0,
        }
    }
}

/// A timed call in progress, by thread id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallStart {
    pub start_ns: u64,
    /// The file descriptor (an open's comes with its return).
    pub fd: i64,
    pub call: u32,
    pub _pad: u32,
}

/// Entries of `IO_CALL_START` (threads in a timed call at once).
pub const IO_CALL_START_ENTRIES: u32 = 16384;

/// Offset of a syscall tracepoint's first argument (`sys_enter_*`) and of the return
/// value (`sys_exit_*`) in its record, after the common fields and `__syscall_nr`.
pub const SYSCALL_ARG0_OFFSET: u32 = 16;

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
        rq_bio: IO_NO_OFFSET,
        bio_io_vec: 0,
        bv_page: 0,
        page_compound_head: 0,
        page_mapping: 0,
        mapping_host: 0,
        inode_ino: 0,
        inode_sb: 0,
        sb_dev: 0,
        inode_dentry: IO_NO_OFFSET,
        dentry_alias: 0,
        dentry_parent: 0,
        dentry_name: 0,
        task_group_leader: IO_NO_OFFSET,
        task_comm: 0,
        task_files: IO_NO_OFFSET,
        files_fdt: 0,
        fdt_max_fds: 0,
        fdt_fd: 0,
        file_inode: 0,
        inode_mode: 0,
        file_f_flags: 0,
        o_direct: 0,
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

/// What the family's programs could not record: each loss's slot in `LOSSES`, its name
/// in a profile and what it means (`ALL`, which the report prints).
pub mod losses {
    crate::loss::losses! {
        IO_MAP_FULL = 13, "io_map_full",
            "block-IO aggregation map full: request counted in its (device, op, process) row without \
             file (raise --map-entries for its own row)";
        IO_INFLIGHT_MAP_FULL = 14, "io_inflight_map_full",
            "map of requests in flight full: a request dropped";
        IO_UNMATCHED_COMPLETE = 15, "io_unmatched_complete",
            "request with data completed without a seen issue (in flight at start)";
        IO_STALE_REPLACED = 33, "io_stale_replaced",
            "a request address reused while an older request there was open (its completion was \
             missed): the older one dropped";
        IO_DIRTIED_MAP_FULL = 35, "io_dirtied_map_full",
            "map of who dirtied which file full: dirtied pages counted in their process's row \
             without file (raise --map-entries for its own row; that file's writeback is charged to \
             its other dirtiers, or to the issuer)";
        IO_FILES_MAP_FULL = 36, "io_files_map_full",
            "map of files seen full: a request or dirtied page without its file";
        IO_CALLS_MAP_FULL = 37, "io_calls_map_full",
            "map of timed file calls full: call counted in its (process, call) row without file \
             (raise --map-entries for its own row)";
        IO_CALL_START_FULL = 38, "io_call_start_full",
            "map of file calls in progress full: a call not timed";
        IO_OVERFLOW_FULL = 45, "io_overflow_full",
            "block-IO aggregation map and its overflow map full: a request dropped";
        IO_CALLS_OVERFLOW_FULL = 46, "io_calls_overflow_full",
            "map of timed file calls and its overflow map full: a call dropped";
        IO_DIRTIED_OVERFLOW_FULL = 53, "io_dirtied_overflow_full",
            "map of who dirtied which file and its overflow map full: a process's dirtied pages not \
             counted (its writeback is charged to the issuer only)";
    }
}

pub mod names {
    crate::define_names! {
        IO_STATS,
        IO_OVERFLOW,
        IO_INFLIGHT,
        IO_LAYOUT,
        IO_FILES,
        IO_DIRTIED,
        IO_DIRTIED_OVERFLOW,
        IO_DIRTY = io_dirty,
        IO_CALLS,
        IO_CALLS_OVERFLOW,
        IO_CALL_START,
        IO_CALL_READ = io_call_read,
        IO_CALL_WRITE = io_call_write,
        IO_CALL_FSYNC = io_call_fsync,
        IO_CALL_OPEN = io_call_open,
        IO_CALL_EXIT = io_call_exit,
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
crate::impl_pod!(
    IoKey, IoStat, IoInFlight, IoLayout, IoFile, DirtyKey, DirtyStat, CallKey, CallStart
);

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
