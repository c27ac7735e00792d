//! Block-IO latency from the raw tracepoints `block_rq_insert` (when present),
//! `block_rq_issue`, `block_rq_requeue`, `block_rq_merge` and `block_rq_complete`, like
//! biolatency but per device, operation and submitting process.
//!
//! Requests in flight are keyed by their `struct request` address in `IO_INFLIGHT`
//! (not by (dev, sector): flushes and passthrough commands have no sector, and two
//! requests can share one). Fields are read from the request itself at offsets taken
//! from the kernel's BTF by user space (`IO_LAYOUT`); Rust eBPF has no CO-RE.
//!
//! The target filter is applied when a request is first seen: at insert, or at issue
//! when the insert was not seen, by the task current then (the submitter; for requests
//! issued later from a kworker or the journal thread, that thread). That task stays
//! credited through requeues. Completion runs in interrupt context, so it only closes
//! requests already admitted. Nothing travels to user space per event.
//!
//! Raw tracepoints do not filter the event for perf and other tracers (a classic
//! tracepoint program returning 0 would), and are cheaper.

use core::intrinsics::{AtomicOrdering, atomic_xadd};

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel},
    macros::map,
    maps::HashMap,
};
use profiler_common::{
    io::{
        IO_FLIGHT_REQUEUED, IO_HIST_SLOTS, IO_NO_OFFSET, IoInFlight, IoKey, IoLayout, IoStat, Seen,
        completes, seen_again,
    },
    latency::log2_slot_of,
    loss::{IO_INFLIGHT_MAP_FULL, IO_MAP_FULL, IO_STALE_REPLACED, IO_UNMATCHED_COMPLETE},
};

use crate::{
    shared::{count_loss, now_ns, remember_current_task, stats_map, update_row},
    target::{filter_is_all, is_target},
};

/// `struct request` offsets from this kernel's BTF (see `IoLayout`); user space
/// overrides the whole value before load.
#[unsafe(no_mangle)]
static IO_LAYOUT: IoLayout = IoLayout::MAINLINE;

/// The aggregate read by user space. Size set at load time (`--map-entries`).
#[map]
pub static IO_STATS: HashMap<IoKey, IoStat> = stats_map();

/// Requests inserted or issued and not yet completed, by `struct request` address.
#[map]
static IO_INFLIGHT: HashMap<u64, IoInFlight> =
    HashMap::with_max_entries(profiler_common::io::IO_INFLIGHT_ENTRIES, 0);

/// Reads one field of the load-time layout; volatile so the compiler does not fold the
/// defaults above into the program (user space rewrites them before load).
macro_rules! layout {
    ($field:ident) => {
        // SAFETY: reading a field of a load-time global.
        unsafe { core::ptr::read_volatile(&raw const IO_LAYOUT.$field) }
    };
}

#[inline(always)]
fn read_u32(addr: u64) -> u32 {
    // SAFETY: bpf_probe_read_kernel checks the address; a bad one yields an error.
    unsafe { bpf_probe_read_kernel(addr as *const u32) }.unwrap_or(0)
}

#[inline(always)]
fn read_u64(addr: u64) -> u64 {
    // SAFETY: as in `read_u32`.
    unsafe { bpf_probe_read_kernel(addr as *const u64) }.unwrap_or(0)
}

/// The disk's `dev_t`, through the pointer chain of this kernel (6.x: `rq->q->disk->
/// part0->bd_dev`; 5.10: `rq->rq_disk->part0.__dev.devt`). 0 when a pointer is NULL
/// (a passthrough queue without a disk). Unrolled: the verifier wants no loop here.
#[inline(always)]
fn read_dev(rq: u64) -> u32 {
    let hops = layout!(dev_hops);
    let offsets = layout!(dev_offsets);
    let mut addr = rq;
    if hops > 0 {
        addr = read_u64(addr + offsets[0] as u64);
        if addr == 0 {
            return 0;
        }
    }
    if hops > 1 {
        addr = read_u64(addr + offsets[1] as u64);
        if addr == 0 {
            return 0;
        }
    }
    if hops > 2 {
        addr = read_u64(addr + offsets[2] as u64);
        if addr == 0 {
            return 0;
        }
    }
    let last = match hops {
        0 => offsets[0],
        1 => offsets[1],
        2 => offsets[2],
        _ => offsets[3],
    };
    read_u32(addr + last as u64)
}

/// The request's allocation time, 0 when unknown (the kernel stamps it only when
/// iostats, an IO scheduler or blk stats need it).
#[inline(always)]
fn read_alloc_ns(rq: u64) -> u64 {
    let offset = layout!(start_time_ns);
    if offset == IO_NO_OFFSET {
        return 0;
    }
    read_u64(rq + offset as u64)
}

/// What a request looks like now: device, operation and data length.
#[inline(always)]
fn describe(rq: u64, open: &mut IoInFlight) {
    // SAFETY: reading the whole load-time global for its `op_of`; a copy of 96 bytes.
    let layout = unsafe { core::ptr::read_volatile(&IO_LAYOUT) };
    open.dev = read_dev(rq);
    open.op = layout.op_of(read_u32(rq + layout.cmd_flags as u64));
    open.bytes = read_u32(rq + layout.data_len as u64);
}

/// The open entry at `rq` when this event continues its request (a requeued request
/// back in the queue, or an inserted one issued), else `None`. An entry this event does
/// not continue is stale (its completion was missed): counted, and `stale` set.
#[inline(always)]
fn continued(rq: u64, is_issue: bool, stale: &mut bool) -> Option<*mut IoInFlight> {
    let open = IO_INFLIGHT.get_ptr_mut(rq)?;
    // SAFETY: element of a hash map from a successful lookup.
    if seen_again(unsafe { &*open }, read_alloc_ns(rq), is_issue) == Seen::Continue {
        return Some(open);
    }
    count_loss(IO_STALE_REPLACED);
    *stale = true;
    None
}

/// `block_rq_insert`: the request `rq` enters the scheduler's queue.
pub fn on_rq_insert(rq: u64) {
    let now = now_ns();
    let mut stale = false;
    if continued(rq, false, &mut stale).is_some() {
        // Back in the queue after a requeue: same request, same submitter.
        return;
    }
    start(rq, now, 0, stale);
}

/// `block_rq_issue`: the request `rq` goes to the driver.
pub fn on_rq_issue(rq: u64) {
    let now = now_ns();
    let mut stale = false;
    let Some(open) = continued(rq, true, &mut stale) else {
        start(rq, 0, now, stale);
        return;
    };
    // SAFETY: element of a hash map from a successful lookup; a request is issued on one
    // CPU at a time.
    unsafe {
        let requeued = (*open).flags & IO_FLIGHT_REQUEUED != 0;
        (*open).issue_ns = now;
        (*open).flags &= !IO_FLIGHT_REQUEUED;
        if !requeued {
            // First issue: merges may have grown it since the insert. After a requeue
            // the request keeps the size of its first issue.
            describe(rq, &mut *open);
        }
    }
}

/// A request seen for the first time: admitted when the current task is a target.
/// A stale entry at its address is dropped either way, so no other process's request
/// inherits it.
#[inline(always)]
fn start(rq: u64, insert_ns: u64, issue_ns: u64, stale: bool) {
    if !is_target() {
        if stale {
            let _ = IO_INFLIGHT.remove(rq);
        }
        return;
    }
    admit(rq, insert_ns, issue_ns);
}

#[inline(always)]
fn admit(rq: u64, insert_ns: u64, issue_ns: u64) {
    let mut open = IoInFlight {
        start_ns: if insert_ns != 0 { insert_ns } else { issue_ns },
        insert_ns,
        issue_ns,
        tgid: (bpf_get_current_pid_tgid() >> 32) as u32,
        ..IoInFlight::default()
    };
    describe(rq, &mut open);
    // Replaces a stale entry at the same address (counted by the caller).
    if IO_INFLIGHT.insert(rq, open, 0).is_err() {
        count_loss(IO_INFLIGHT_MAP_FULL);
        return;
    }
    remember_current_task();
}

/// `block_rq_requeue`: the driver gave the request back; it will
/// be inserted and issued again and is counted once, at its final completion. Its next
/// issue restarts the device clock (the time back in the queue is queue time).
pub fn on_rq_requeue(rq: u64) {
    if let Some(open) = IO_INFLIGHT.get_ptr_mut(rq) {
        // SAFETY: element of a hash map from a successful lookup.
        unsafe {
            (*open).flags |= IO_FLIGHT_REQUEUED;
            (*open).issue_ns = 0;
        }
    }
}

/// `block_rq_merge`: `rq` was merged into another queued request and is freed; its
/// data is counted with the request it joined.
pub fn on_rq_merge(rq: u64) {
    let _ = IO_INFLIGHT.remove(rq);
}

/// `block_rq_complete(rq, error, nr_bytes)` (interrupt context). Traced before the
/// kernel updates the request, so `__data_len` is what remained before this completion.
pub fn on_rq_complete(rq: u64, nr_bytes: u32) {
    let now = now_ns();
    let Some(open) = IO_INFLIGHT.get_ptr(rq) else {
        // Issued before the recording, or by a task outside the targets (not a loss
        // then). A completion without data and without a start is the submitter's side
        // of a flush (the device flush is its own request, counted as such) or the
        // second completion of a FUA write on a device without FUA: not a loss either.
        if filter_is_all() && nr_bytes != 0 {
            count_loss(IO_UNMATCHED_COMPLETE);
        }
        return;
    };
    if !completes(nr_bytes, read_u32(rq + layout!(data_len) as u64)) {
        // A partial completion: the request stays open until its last bytes.
        return;
    }
    // SAFETY: element of a hash map from a successful lookup; copied at once.
    let open = unsafe { *open };
    let _ = IO_INFLIGHT.remove(rq);
    if open.issue_ns == 0 || now < open.issue_ns {
        // Ended without a seen issue (failed in the queue): not a latency.
        count_loss(IO_UNMATCHED_COMPLETE);
        return;
    }
    let key = IoKey {
        dev: open.dev,
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
    update_row(
        &IO_STATS,
        key,
        &IoStat::default(),
        IO_MAP_FULL,
        false,
        |stat| {
            // Through the stack, volatile: the compiler then cannot prove slot < IO_HIST_SLOTS
            // and drop the bounds check below, which the verifier needs to see (6.1's verifier
            // lost the bound of the masked index: "math between map_value pointer and register
            // with unbounded min value").
            let slot = log2_slot_of::<IO_HIST_SLOTS>(latency_ns / 1000);
            // SAFETY: reading a local just written.
            let slot = unsafe { core::ptr::read_volatile(&slot) };
            // SAFETY: `stat` points into a map value valid for this program run; counters are
            // atomic (completions of one key run on several CPUs), max is best effort; the
            // bucket index is checked.
            unsafe {
                atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*stat).count, 1);
                atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*stat).bytes, bytes);
                atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(
                    &raw mut (*stat).total_ns,
                    latency_ns,
                );
                if latency_ns > (*stat).max_ns {
                    (*stat).max_ns = latency_ns;
                }
                if let Some(queue_ns) = queue_ns {
                    atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(
                        &raw mut (*stat).queued,
                        1,
                    );
                    atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(
                        &raw mut (*stat).queue_ns,
                        queue_ns,
                    );
                }
                // Checked index without a panic path.
                if let Some(bucket) = (*stat).hist.get_mut(slot) {
                    atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(bucket, 1);
                }
            }
        },
    );
}
