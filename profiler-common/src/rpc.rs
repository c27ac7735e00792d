//! Request / reply spans (`--rpc fuse|sunrpc|lustre`, `--span BEGIN,END`): a request's
//! start is remembered under its key, its completion adds the latency to an aggregate.

/// Who produced a span.
pub const PROVIDER_FUSE: u32 = 1;
pub const PROVIDER_SUNRPC: u32 = 2;
pub const PROVIDER_LUSTRE: u32 = 3;
pub const PROVIDER_SPAN: u32 = 4;

/// A request in flight: provider, connection (FUSE device, RPC client) and request id.
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
    pub _pad: u32,
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

/// Entries of the requests in flight (`RPC_INFLIGHT`).
pub const RPC_INFLIGHT_ENTRIES: u32 = 65536;

pub mod names {
    pub const RPC_STATS: &str = "RPC_STATS";
    pub const RPC_INFLIGHT: &str = "RPC_INFLIGHT";
    pub const FUSE_SEND_CONNECTION: &str = "FUSE_SEND_CONNECTION";
    pub const FUSE_SEND_UNIQUE: &str = "FUSE_SEND_UNIQUE";
    pub const FUSE_SEND_OPCODE: &str = "FUSE_SEND_OPCODE";
    pub const FUSE_END_CONNECTION: &str = "FUSE_END_CONNECTION";
    pub const FUSE_END_UNIQUE: &str = "FUSE_END_UNIQUE";
    pub const SPAN_TP_PROVIDER: &str = "SPAN_TP_PROVIDER";
    pub const SPAN_TP_BEGIN_KEY: &str = "SPAN_TP_BEGIN_KEY";
    pub const SPAN_TP_BEGIN_KEY_SIZE: &str = "SPAN_TP_BEGIN_KEY_SIZE";
    pub const SPAN_TP_BEGIN_CONN: &str = "SPAN_TP_BEGIN_CONN";
    pub const SPAN_TP_BEGIN_CONN_SIZE: &str = "SPAN_TP_BEGIN_CONN_SIZE";
    pub const SPAN_TP_END_KEY: &str = "SPAN_TP_END_KEY";
    pub const SPAN_TP_END_KEY_SIZE: &str = "SPAN_TP_END_KEY_SIZE";
    pub const SPAN_TP_END_CONN: &str = "SPAN_TP_END_CONN";
    pub const SPAN_TP_END_CONN_SIZE: &str = "SPAN_TP_END_CONN_SIZE";
    pub const SPAN_KP_PROVIDER: &str = "SPAN_KP_PROVIDER";
    pub const SPAN_KP_BEGIN_ARG: &str = "SPAN_KP_BEGIN_ARG";
    pub const SPAN_KP_END_ARG: &str = "SPAN_KP_END_ARG";
    pub const RPC_FUSE_SEND: &str = "rpc_fuse_send";
    pub const RPC_FUSE_END: &str = "rpc_fuse_end";
    pub const RPC_SPAN_BEGIN_TP: &str = "rpc_span_begin_tp";
    pub const RPC_SPAN_END_TP: &str = "rpc_span_end_tp";
    pub const RPC_SPAN_BEGIN_KP: &str = "rpc_span_begin_kp";
    pub const RPC_SPAN_END_KP: &str = "rpc_span_end_kp";

    /// Every name above (a name ending in `_` is a prefix: slot 0 is checked).
    pub const ALL: &[&str] = &[
        RPC_STATS,
        RPC_INFLIGHT,
        FUSE_SEND_CONNECTION,
        FUSE_SEND_UNIQUE,
        FUSE_SEND_OPCODE,
        FUSE_END_CONNECTION,
        FUSE_END_UNIQUE,
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
        RPC_FUSE_SEND,
        RPC_FUSE_END,
        RPC_SPAN_BEGIN_TP,
        RPC_SPAN_END_TP,
        RPC_SPAN_BEGIN_KP,
        RPC_SPAN_END_KP,
    ];
}

#[cfg(feature = "user")]
crate::impl_pod!(RpcId, RpcStart, RpcKey);
