//! Block-IO latency from `block:block_rq_insert` (when present), `block_rq_issue` and
//! `block_rq_complete`, like biolatency but per device, operation and issuing process.
//!
//! Requests in flight are keyed by (dev, sector) in `IO_INFLIGHT`. The target filter is
//! applied when a request enters: at insert, or at issue when the insert was not seen,
//! by the task current then (the submitter; for requests issued later from a kworker or
//! the journal thread, that thread). Completion runs in interrupt context, so it only
//! closes requests already admitted. Nothing travels to user space per event.

use core::intrinsics::{AtomicOrdering, atomic_xadd};

use aya_ebpf::{
    bindings::BPF_NOEXIST, helpers::bpf_get_current_pid_tgid, macros::map, maps::HashMap,
    programs::TracePointContext,
};
use profiler_common::{
    io::{
        IO_HIST_SLOTS, IoInFlight, IoKey, IoRequestKey, IoStat, OP_DISCARD, OP_FLUSH, OP_OTHER,
        OP_READ, OP_WRITE,
    },
    loss::{IO_INFLIGHT_MAP_FULL, IO_MAP_FULL, IO_UNMATCHED_COMPLETE},
};

use crate::{
    shared::{count_loss, load_u32, now_ns, remember_current_task},
    target::{filter_is_all, is_target},
};

/// Record offsets, from the format files; the three events share dev/sector/rwbs
/// positions on current kernels but are read separately to be safe.
#[unsafe(no_mangle)]
static RQ_INSERT_DEV_OFFSET: u32 = 8;
#[unsafe(no_mangle)]
static RQ_INSERT_SECTOR_OFFSET: u32 = 16;
#[unsafe(no_mangle)]
static RQ_INSERT_BYTES_OFFSET: u32 = 28;
#[unsafe(no_mangle)]
static RQ_INSERT_RWBS_OFFSET: u32 = 34;
#[unsafe(no_mangle)]
static RQ_ISSUE_DEV_OFFSET: u32 = 8;
#[unsafe(no_mangle)]
static RQ_ISSUE_SECTOR_OFFSET: u32 = 16;
#[unsafe(no_mangle)]
static RQ_ISSUE_BYTES_OFFSET: u32 = 28;
#[unsafe(no_mangle)]
static RQ_ISSUE_RWBS_OFFSET: u32 = 34;
#[unsafe(no_mangle)]
static RQ_COMPLETE_DEV_OFFSET: u32 = 8;
#[unsafe(no_mangle)]
static RQ_COMPLETE_SECTOR_OFFSET: u32 = 16;

/// The aggregate read by user space. Size set at load time (`--map-entries`).
#[map]
pub static IO_STATS: HashMap<IoKey, IoStat> =
    HashMap::with_max_entries(profiler_common::STATS_ENTRIES, 0);

/// Requests inserted or issued and not yet completed.
#[map]
static IO_INFLIGHT: HashMap<IoRequestKey, IoInFlight> =
    HashMap::with_max_entries(profiler_common::io::IO_INFLIGHT_ENTRIES, 0);

const EEXIST: i32 = 17;
const RWBS_LEN: usize = 10;

struct Request {
    key: IoRequestKey,
    bytes: u32,
    op: u32,
}

#[inline(always)]
fn read_request(
    ctx: &TracePointContext,
    dev_offset: &'static u32,
    sector_offset: &'static u32,
    bytes_offset: &'static u32,
    rwbs_offset: &'static u32,
) -> Option<Request> {
    // SAFETY: offsets from this kernel's format files of the block events; reads are checked.
    let (dev, sector, bytes, rwbs) = unsafe {
        (
            ctx.read_at::<u32>(load_u32(dev_offset) as usize).ok()?,
            ctx.read_at::<u64>(load_u32(sector_offset) as usize).ok()?,
            ctx.read_at::<u32>(load_u32(bytes_offset) as usize).ok()?,
            ctx.read_at::<[u8; RWBS_LEN]>(load_u32(rwbs_offset) as usize)
                .ok()?,
        )
    };
    Some(Request {
        key: IoRequestKey {
            dev,
            _pad: 0,
            sector,
        },
        bytes,
        op: op_of(&rwbs),
    })
}

/// `rwbs` is `[F]{R|W|D|E|N}[F][A][S][M]`: a leading F is a pre-flush, the letter after
/// it the data direction. A request with no data direction but a flush is a flush.
#[inline(always)]
fn op_of(rwbs: &[u8; RWBS_LEN]) -> u32 {
    let mut flush = false;
    let mut index = 0;
    while index < RWBS_LEN {
        // SAFETY: index < RWBS_LEN; unchecked so no panic path reaches the verifier.
        match unsafe { *rwbs.get_unchecked(index) } {
            b'R' => return OP_READ,
            b'W' => return OP_WRITE,
            b'D' => return OP_DISCARD,
            b'F' => flush = true,
            0 => break,
            _ => {}
        }
        index += 1;
    }
    if flush { OP_FLUSH } else { OP_OTHER }
}

pub fn on_rq_insert(ctx: &TracePointContext) {
    let now = now_ns();
    if !is_target() {
        return;
    }
    let Some(request) = read_request(
        ctx,
        &RQ_INSERT_DEV_OFFSET,
        &RQ_INSERT_SECTOR_OFFSET,
        &RQ_INSERT_BYTES_OFFSET,
        &RQ_INSERT_RWBS_OFFSET,
    ) else {
        return;
    };
    admit(&request, now, 0);
}

pub fn on_rq_issue(ctx: &TracePointContext) {
    let now = now_ns();
    let Some(request) = read_request(
        ctx,
        &RQ_ISSUE_DEV_OFFSET,
        &RQ_ISSUE_SECTOR_OFFSET,
        &RQ_ISSUE_BYTES_OFFSET,
        &RQ_ISSUE_RWBS_OFFSET,
    ) else {
        return;
    };
    if let Some(open) = IO_INFLIGHT.get_ptr_mut(request.key)
        // SAFETY: element of a hash map from a successful lookup.
        && unsafe { (*open).issue_ns } == 0
    {
        // Inserted earlier (by a target): now on its way to the device.
        // SAFETY: as above; only the issuing path writes an open request.
        unsafe {
            (*open).issue_ns = now;
            (*open).bytes = request.bytes;
            (*open).op = request.op;
        }
        return;
    }
    if !is_target() {
        return;
    }
    admit(&request, 0, now);
}

#[inline(always)]
fn admit(request: &Request, insert_ns: u64, issue_ns: u64) {
    let open = IoInFlight {
        insert_ns,
        issue_ns,
        bytes: request.bytes,
        op: request.op,
        tgid: (bpf_get_current_pid_tgid() >> 32) as u32,
        _pad: 0,
    };
    // Overwrites a stale entry at the same sector (a requeued request).
    if IO_INFLIGHT.insert(request.key, open, 0).is_err() {
        count_loss(IO_INFLIGHT_MAP_FULL);
        return;
    }
    remember_current_task();
}

pub fn on_rq_complete(ctx: &TracePointContext) {
    let now = now_ns();
    // SAFETY: offsets from this kernel's format file of block_rq_complete.
    let (dev, sector) = unsafe {
        (
            ctx.read_at::<u32>(load_u32(&RQ_COMPLETE_DEV_OFFSET) as usize),
            ctx.read_at::<u64>(load_u32(&RQ_COMPLETE_SECTOR_OFFSET) as usize),
        )
    };
    let (Ok(dev), Ok(sector)) = (dev, sector) else {
        return;
    };
    let request_key = IoRequestKey {
        dev,
        _pad: 0,
        sector,
    };
    let Some(open) = IO_INFLIGHT.get_ptr(request_key) else {
        // Issued before the recording, or by a task outside the targets (not a loss then).
        if filter_is_all() {
            count_loss(IO_UNMATCHED_COMPLETE);
        }
        return;
    };
    // SAFETY: element of a hash map from a successful lookup; copied at once.
    let open = unsafe { *open };
    let _ = IO_INFLIGHT.remove(request_key);
    if open.issue_ns == 0 || now < open.issue_ns {
        // Completed without a seen issue (should not happen): not a latency.
        count_loss(IO_UNMATCHED_COMPLETE);
        return;
    }
    let key = IoKey {
        dev,
        op: open.op,
        tgid: open.tgid,
        _pad: 0,
    };
    let queue_ns = if open.insert_ns != 0 && open.issue_ns >= open.insert_ns {
        Some(open.issue_ns - open.insert_ns)
    } else {
        None
    };
    add_request(&key, open.bytes as u64, now - open.issue_ns, queue_ns);
}

#[inline(always)]
fn add_request(key: &IoKey, bytes: u64, latency_ns: u64, queue_ns: Option<u64>) {
    let mut stat = IO_STATS.get_ptr_mut(key);
    if stat.is_none() {
        let zero = IoStat::default();
        match IO_STATS.insert(key, zero, BPF_NOEXIST as u64) {
            Ok(()) => {}
            Err(errno) if errno == -EEXIST => {}
            Err(_) => {
                count_loss(IO_MAP_FULL);
                return;
            }
        }
        stat = IO_STATS.get_ptr_mut(key);
    }
    let Some(stat) = stat else {
        count_loss(IO_MAP_FULL);
        return;
    };
    let slot = log2_slot(latency_ns / 1000);
    // SAFETY: `stat` points into a map value valid for this program run; counters are
    // atomic (completions of one key run on several CPUs), max is best effort. `slot`
    // is below IO_HIST_SLOTS.
    unsafe {
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*stat).count, 1);
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*stat).bytes, bytes);
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*stat).total_ns, latency_ns);
        if latency_ns > (*stat).max_ns {
            (*stat).max_ns = latency_ns;
        }
        if let Some(queue_ns) = queue_ns {
            atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*stat).queued, 1);
            atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(
                &raw mut (*stat).queue_ns,
                queue_ns,
            );
        }
        // Masked index: no bounds check (and no panic path) the verifier would refuse.
        let bucket = (&raw mut (*stat).hist as *mut u64).add(slot & (IO_HIST_SLOTS - 1));
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(bucket, 1);
    }
}

/// floor(log2(value)), 0 for 0 and 1; capped to the last slot. Branch-free steps (the
/// verifier dislikes unbounded loops).
#[inline(always)]
fn log2_slot(value: u64) -> usize {
    let mut v = value;
    let mut r: u64 = 0;
    let mut shift: u64;
    shift = ((v > 0xFFFF_FFFF) as u64) << 5;
    v >>= shift;
    r |= shift;
    shift = ((v > 0xFFFF) as u64) << 4;
    v >>= shift;
    r |= shift;
    shift = ((v > 0xFF) as u64) << 3;
    v >>= shift;
    r |= shift;
    shift = ((v > 0xF) as u64) << 2;
    v >>= shift;
    r |= shift;
    shift = ((v > 0x3) as u64) << 1;
    v >>= shift;
    r |= shift;
    r |= v >> 1;
    let slot = r as usize;
    if slot >= IO_HIST_SLOTS {
        IO_HIST_SLOTS - 1
    } else {
        slot
    }
}
