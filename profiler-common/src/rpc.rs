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

#[cfg(feature = "user")]
crate::impl_pod!(RpcId, RpcStart, RpcKey);
