//! Request / reply spans. A start remembers (time, issuing process, operation, stack)
//! under the request's key in `RPC_INFLIGHT`; the completion with the same key adds the
//! latency to `RPC_STATS` keyed by (provider, operation, process, start stack, completion
//! stack). Providers: FUSE raw tracepoints (key = the `struct fuse_req` address), and two
//! generic pairs used by sunrpc, lustre and `--span`: one on classic tracepoints (key
//! read at a format-file offset), one on kprobes (key = an argument).
//!
//! The start honours the target filter; the completion does not (a FUSE reply runs in
//! the server's thread, a Lustre reply in ptlrpcd): only started requests are in flight.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel},
    macros::{map, raw_tracepoint},
    maps::HashMap,
    programs::{ProbeContext, RawTracePointContext, TracePointContext, tracing::StackIdContext},
};
use profiler_common::{
    latency::LatencyStat,
    rpc::losses::{RPC_INFLIGHT_FULL, RPC_KEY_REUSED, RPC_MAP_FULL, RPC_OVERFLOW_FULL},
    rpc::{PROVIDER_FUSE, RpcId, RpcKey, RpcStart, fuse_requester},
};

use crate::{
    latency::add_latency,
    shared::{
        STACK_FLAGS_KERNEL, TASKS, count_loss, load_u32, now_ns, overflow_map,
        remember_current_task, stack_id, stack_id_or_loss, stats_map,
    },
    target::{is_target, is_target_process},
};

#[map]
pub static RPC_STATS: HashMap<RpcKey, LatencyStat> = stats_map();

/// Requests `RPC_STATS` had no room for, per provider, op and process, without stacks.
#[map]
pub static RPC_OVERFLOW: HashMap<RpcKey, LatencyStat> = overflow_map();

#[map]
static RPC_INFLIGHT: HashMap<RpcId, RpcStart> =
    HashMap::with_max_entries(profiler_common::rpc::RPC_INFLIGHT_ENTRIES, 0);

// `struct fuse_req` offsets from the BTF of vmlinux or of the fuse module: the
// request's `in.h.opcode`, `in.h.pid` and `flags`, and the bit number of FR_BACKGROUND.
#[unsafe(no_mangle)]
static FUSE_REQ_OPCODE: u32 = 0;
#[unsafe(no_mangle)]
static FUSE_REQ_PID: u32 = 0;
#[unsafe(no_mangle)]
static FUSE_REQ_FLAGS: u32 = 0;
#[unsafe(no_mangle)]
static FUSE_FR_BACKGROUND: u32 = 2;

// The generic tracepoint pair: provider, key offsets and sizes (4 or 8 bytes), and an
// optional connection field (size 0: none).
#[unsafe(no_mangle)]
static SPAN_TP_PROVIDER: u32 = 0;
#[unsafe(no_mangle)]
static SPAN_TP_BEGIN_KEY: u32 = 0;
#[unsafe(no_mangle)]
static SPAN_TP_BEGIN_KEY_SIZE: u32 = 8;
#[unsafe(no_mangle)]
static SPAN_TP_BEGIN_CONN: u32 = 0;
#[unsafe(no_mangle)]
static SPAN_TP_BEGIN_CONN_SIZE: u32 = 0;
#[unsafe(no_mangle)]
static SPAN_TP_END_KEY: u32 = 0;
#[unsafe(no_mangle)]
static SPAN_TP_END_KEY_SIZE: u32 = 8;
#[unsafe(no_mangle)]
static SPAN_TP_END_CONN: u32 = 0;
#[unsafe(no_mangle)]
static SPAN_TP_END_CONN_SIZE: u32 = 0;

// The generic kprobe pair: provider and the argument index holding the key.
#[unsafe(no_mangle)]
static SPAN_KP_PROVIDER: u32 = 0;
#[unsafe(no_mangle)]
static SPAN_KP_BEGIN_ARG: u32 = 0;
#[unsafe(no_mangle)]
static SPAN_KP_END_ARG: u32 = 0;

#[inline(always)]
fn begin<C: StackIdContext>(ctx: &C, id: RpcId, op: u32) {
    if !is_target() {
        return;
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    start(ctx, id, op, tgid);
}

/// Opens request `id` for process `tgid` (already admitted by the target filter).
#[inline(always)]
fn start<C: StackIdContext>(ctx: &C, id: RpcId, op: u32, tgid: u32) {
    let start = RpcStart {
        start_ns: now_ns(),
        tgid,
        op,
        start_kstack: stack_id_or_loss(stack_id(ctx, STACK_FLAGS_KERNEL)),
        tid: bpf_get_current_pid_tgid() as u32,
    };
    // SAFETY: lookup in a map of plain data; the reference is not kept.
    if unsafe { RPC_INFLIGHT.get(id) }.is_some() {
        // An earlier request under this key never ended (for FUSE: a freed and reused
        // fuse_req whose end was missed): replaced, so nobody inherits its start.
        count_loss(RPC_KEY_REUSED);
    }
    if RPC_INFLIGHT.insert(id, start, 0).is_err() {
        count_loss(RPC_INFLIGHT_FULL);
    }
}

#[inline(always)]
fn end<C: StackIdContext>(ctx: &C, id: RpcId) {
    // SAFETY: lookup in a map of plain data; the value is copied out.
    let Some(start) = (unsafe { RPC_INFLIGHT.get(id) }).copied() else {
        return;
    };
    let _ = RPC_INFLIGHT.remove(id);
    let now = now_ns();
    if now < start.start_ns {
        return;
    }
    let key = RpcKey {
        provider: id.provider,
        op: start.op,
        tgid: start.tgid,
        start_kstack: start.start_kstack,
        end_kstack: stack_id_or_loss(stack_id(ctx, STACK_FLAGS_KERNEL)),
        _pad: 0,
    };
    add_latency(
        (&RPC_STATS, &RPC_OVERFLOW),
        &key,
        RpcKey::overflow,
        now - start.start_ns,
        (RPC_MAP_FULL, RPC_OVERFLOW_FULL),
        true,
    );
}

/// Reads a 4- or 8-byte unsigned field of a classic tracepoint record.
#[inline(always)]
fn read_field(ctx: &TracePointContext, offset: u32, size: u32) -> u64 {
    // SAFETY: offsets and sizes come from this kernel's format file for the event.
    unsafe {
        match size {
            8 => ctx.read_at::<u64>(offset as usize).unwrap_or(0),
            4 => ctx
                .read_at::<u32>(offset as usize)
                .map(u64::from)
                .unwrap_or(0),
            _ => 0,
        }
    }
}

#[inline(always)]
fn read_kernel<T>(addr: u64) -> Option<T> {
    // SAFETY: bpf_probe_read_kernel checks the address; a bad one yields an error.
    unsafe { bpf_probe_read_kernel(addr as *const T) }.ok()
}

/// `fuse_request_send(const struct fuse_req *req)`, a raw tracepoint: the key is the
/// request's address, not `in.h.unique` (still 0 at this tracepoint on kernels that
/// trace before the unique id is assigned), and the opcode and requester come from the
/// request itself. Raw, so perf keeps seeing the event.
#[raw_tracepoint(tracepoint = "fuse_request_send")]
pub fn rpc_fuse_send(ctx: RawTracePointContext) -> i32 {
    on_fuse_send(&ctx);
    0
}

/// `fuse_request_end(const struct fuse_req *req)`: runs in the task that delivers the
/// reply (the server's write to /dev/fuse), or in the issuer when the request is aborted.
#[raw_tracepoint(tracepoint = "fuse_request_end")]
pub fn rpc_fuse_end(ctx: RawTracePointContext) -> i32 {
    let id = RpcId {
        provider: PROVIDER_FUSE,
        connection: 0,
        id: ctx.arg::<u64>(0),
    };
    end(&ctx, id);
    0
}

#[inline(always)]
fn on_fuse_send(ctx: &RawTracePointContext) {
    let req = ctx.arg::<u64>(0);
    let op = read_kernel::<u32>(req + load_u32(&FUSE_REQ_OPCODE) as u64).unwrap_or(0);
    let header_pid = read_kernel::<u32>(req + load_u32(&FUSE_REQ_PID) as u64).unwrap_or(0);
    let flags = read_kernel::<u64>(req + load_u32(&FUSE_REQ_FLAGS) as u64).unwrap_or(0);
    let background = (flags >> (load_u32(&FUSE_FR_BACKGROUND) & 63)) & 1 != 0;
    let pid_tgid = bpf_get_current_pid_tgid();
    let header_tgid = if background && header_pid != 0 && header_pid != pid_tgid as u32 {
        // SAFETY: lookup in a map of plain data; the value is copied out.
        unsafe { TASKS.get(header_pid) }.map(|task| task.tgid)
    } else {
        None
    };
    let (tgid, current) = fuse_requester(header_pid, background, pid_tgid, header_tgid);
    let admitted = if current {
        is_target()
    } else {
        is_target_process(tgid)
    };
    if !admitted {
        return;
    }
    if current {
        // Names the requesting thread now, so a later background request of this
        // thread sent by another task finds its process in TASKS.
        remember_current_task();
    }
    let id = RpcId {
        provider: PROVIDER_FUSE,
        connection: 0,
        id: req,
    };
    start(ctx, id, op, tgid);
}

/// The span id in a classic tracepoint's record: the connection and key fields at the
/// offsets and sizes of the begin or the end side's load-time globals.
#[inline(always)]
fn tp_span_id(ctx: &TracePointContext, end: bool) -> RpcId {
    let (conn, conn_size, key, key_size) = if end {
        (
            &SPAN_TP_END_CONN,
            &SPAN_TP_END_CONN_SIZE,
            &SPAN_TP_END_KEY,
            &SPAN_TP_END_KEY_SIZE,
        )
    } else {
        (
            &SPAN_TP_BEGIN_CONN,
            &SPAN_TP_BEGIN_CONN_SIZE,
            &SPAN_TP_BEGIN_KEY,
            &SPAN_TP_BEGIN_KEY_SIZE,
        )
    };
    RpcId {
        provider: load_u32(&SPAN_TP_PROVIDER),
        connection: read_field(ctx, load_u32(conn), load_u32(conn_size)) as u32,
        id: read_field(ctx, load_u32(key), load_u32(key_size)),
    }
}

crate::classic_tracepoint!(
    /// The start of a span on any classic tracepoint (attached by user space).
    rpc_span_begin_tp,
    "tracepoint/span/begin",
    |ctx: &TracePointContext| begin(ctx, tp_span_id(ctx, false), 0)
);

crate::classic_tracepoint!(
    /// The end of a span on any classic tracepoint.
    rpc_span_end_tp,
    "tracepoint/span/end",
    |ctx: &TracePointContext| end(ctx, tp_span_id(ctx, true))
);

#[inline(always)]
fn kprobe_key(ctx: &ProbeContext, index: u32) -> u64 {
    match index {
        0 => ctx.arg::<u64>(0),
        1 => ctx.arg::<u64>(1),
        2 => ctx.arg::<u64>(2),
        3 => ctx.arg::<u64>(3),
        4 => ctx.arg::<u64>(4),
        _ => ctx.arg::<u64>(5),
    }
    .unwrap_or(0)
}

/// The start of a span on a kprobe (Lustre's `ptl_send_rpc`, or `--span kprobe:...`).
pub fn on_span_begin_kprobe(ctx: &ProbeContext) {
    let id = RpcId {
        provider: load_u32(&SPAN_KP_PROVIDER),
        connection: 0,
        id: kprobe_key(ctx, load_u32(&SPAN_KP_BEGIN_ARG)),
    };
    begin(ctx, id, 0);
}

/// The completion of a span on a kprobe (Lustre's `after_reply`, ...).
pub fn on_span_end_kprobe(ctx: &ProbeContext) {
    let id = RpcId {
        provider: load_u32(&SPAN_KP_PROVIDER),
        connection: 0,
        id: kprobe_key(ctx, load_u32(&SPAN_KP_END_ARG)),
    };
    end(ctx, id);
}

crate::programs! {
    /// Span start / completion on kprobes (Lustre's `ptl_send_rpc` / `after_reply`, or a
    /// user's `--span kprobe:...`). The fuse and tracepoint span programs are above.
    kprobe rpc_span_begin_kp(ProbeContext) => on_span_begin_kprobe;
    kprobe rpc_span_end_kp(ProbeContext) => on_span_end_kprobe;
}
