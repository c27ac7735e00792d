//! Request / reply spans (`--rpc fuse|sunrpc|lustre`, `--span BEGIN,END`): a request's
//! start is remembered under its key, its completion adds the latency to an aggregate.

/// Who produced a span.
pub const PROVIDER_FUSE: u32 = 1;
pub const PROVIDER_SUNRPC: u32 = 2;
pub const PROVIDER_LUSTRE: u32 = 3;
pub const PROVIDER_SPAN: u32 = 4;

/// A request in flight: provider, connection (RPC client; 0 for FUSE) and request id
/// (FUSE: the `struct fuse_req` address; sunrpc: the task id; kprobes: an argument).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RpcId {
    pub provider: u32,
    pub connection: u32,
    pub id: u64,
}

/// What the start of a request remembers until its completion.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RpcStart {
    pub start_ns: u64,
    /// Process that issued the request.
    pub tgid: u32,
    /// Operation (FUSE opcode, ...), 0 when the provider has none.
    pub op: u32,
    /// Kernel stack of the issuer (stack id or negative errno).
    pub start_kstack: i32,
    /// Thread that sent the request (for a synchronous request, the one waiting).
    pub tid: u32,
}

/// Aggregation key: one row per provider, operation, issuing process and the two stacks.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RpcKey {
    pub provider: u32,
    pub op: u32,
    pub tgid: u32,
    pub start_kstack: i32,
    /// Kernel stack of whoever ran the completion.
    pub end_kstack: i32,
    pub _pad: u32,
}

impl RpcKey {
    /// The row of `RPC_OVERFLOW` that takes this request when `RPC_STATS` is full: its
    /// provider, op and process, without stacks.
    pub const fn overflow(&self) -> RpcKey {
        RpcKey {
            provider: self.provider,
            op: self.op,
            tgid: self.tgid,
            start_kstack: -1,
            end_kstack: -1,
            _pad: 0,
        }
    }
}

/// The process a FUSE request is credited to.
///
/// `header_pid` is `req->in.h.pid`: the thread that made the request, numbered in the
/// connection's pid namespace (0 for requests the kernel makes on its own). A request
/// that is not a background one is sent by the requester itself, so the current task
/// is the requester. A background request (readahead, async release, ...) may be sent
/// later by another task (the server's thread completing an earlier one, a worker):
/// the header then names the requester, whose process is `header_tgid` when lockpath
/// knows that thread, else the header's number itself (a main thread's id is its
/// process id). Returns the tgid and whether it is the current task's process.
pub fn fuse_requester(
    header_pid: u32,
    background: bool,
    current_pid_tgid: u64,
    header_tgid: Option<u32>,
) -> (u32, bool) {
    let current_tid = current_pid_tgid as u32;
    let current_tgid = (current_pid_tgid >> 32) as u32;
    if !background || header_pid == 0 || header_pid == current_tid {
        return (current_tgid, true);
    }
    let tgid = header_tgid.unwrap_or(header_pid);
    (tgid, tgid == current_tgid)
}

/// Entries of the requests in flight (`RPC_INFLIGHT`).
pub const RPC_INFLIGHT_ENTRIES: u32 = 65536;

/// What the family's programs could not record: each loss's slot in `LOSSES`, its name
/// in a profile and what it means (`ALL`, which the report prints).
pub mod losses {
    crate::loss::losses! {
        RPC_INFLIGHT_FULL = 20, "rpc_inflight_full",
            "in-flight request map full: request not timed";
        RPC_MAP_FULL = 21, "rpc_map_full",
            "request aggregation map full: request counted in its (provider, op, process) row without \
             stacks (raise --map-entries for its own row)";
        RPC_KEY_REUSED = 22, "rpc_key_reused",
            "a request started under a key still in flight: the older start was replaced";
        RPC_OVERFLOW_FULL = 47, "rpc_overflow_full",
            "request aggregation map and its overflow map full: completed request dropped";
    }
}

pub mod names {
    crate::define_names! {
        RPC_STATS,
        RPC_OVERFLOW,
        RPC_INFLIGHT,
        FUSE_REQ_OPCODE,
        FUSE_REQ_PID,
        FUSE_REQ_FLAGS,
        FUSE_FR_BACKGROUND,
        SPAN_TP_PROVIDER,
        SPAN_TP_BEGIN_KEY,
        SPAN_TP_BEGIN_KEY_SIZE,
        SPAN_TP_BEGIN_CONN,
        SPAN_TP_BEGIN_CONN_SIZE,
        SPAN_TP_END_KEY,
        SPAN_TP_END_KEY_SIZE,
        SPAN_TP_END_CONN,
        SPAN_TP_END_CONN_SIZE,
        SPAN_KP_PROVIDER,
        SPAN_KP_BEGIN_ARG,
        SPAN_KP_END_ARG,
        RPC_FUSE_SEND = rpc_fuse_send,
        RPC_FUSE_END = rpc_fuse_end,
        RPC_SPAN_BEGIN_TP = rpc_span_begin_tp,
        RPC_SPAN_END_TP = rpc_span_end_tp,
        RPC_SPAN_BEGIN_KP = rpc_span_begin_kp,
        RPC_SPAN_END_KP = rpc_span_end_kp,
    }
}

#[cfg(feature = "user")]
crate::impl_pod!(RpcId, RpcStart, RpcKey);

#[cfg(test)]
mod tests {
    use super::*;

    const CURRENT: u64 = (100 << 32) | 101;

    #[test]
    fn a_synchronous_request_is_the_current_task_s() {
        // The header's number may be from another pid namespace: not used.
        assert_eq!(fuse_requester(7, false, CURRENT, None), (100, true));
        assert_eq!(fuse_requester(101, false, CURRENT, None), (100, true));
    }

    #[test]
    fn a_background_request_sent_by_its_requester() {
        assert_eq!(fuse_requester(101, true, CURRENT, None), (100, true));
        // Made by the kernel itself (no requester): the sender.
        assert_eq!(fuse_requester(0, true, CURRENT, None), (100, true));
    }

    #[test]
    fn a_background_request_sent_by_another_task_is_the_requester_s() {
        // A thread lockpath knows: its process.
        assert_eq!(fuse_requester(501, true, CURRENT, Some(500)), (500, false));
        // Unknown: the header's number (a main thread's id is its process id).
        assert_eq!(fuse_requester(500, true, CURRENT, None), (500, false));
    }
}
