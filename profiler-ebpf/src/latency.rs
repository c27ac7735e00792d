//! Adds one latency to an in-kernel `LatencyStat` aggregate (rpc and func families).

use core::intrinsics::{AtomicOrdering, atomic_xadd};

use aya_ebpf::{bindings::BPF_NOEXIST, maps::HashMap};
use profiler_common::latency::{LatencyStat, log2_slot};

use crate::shared::{count_loss, remember_current_task};

/// The value new keys start from; a global, so it is not copied onto the small BPF stack.
static EMPTY_STAT: LatencyStat = LatencyStat::EMPTY;

const EEXIST: i32 = 17;

/// Adds `latency_ns` under `key`, creating the row when needed; a full map is counted
/// in `loss_slot`.
#[inline(always)]
pub fn add_latency<K>(map: &HashMap<K, LatencyStat>, key: &K, latency_ns: u64, loss_slot: u32) {
    let stat = match map.get_ptr_mut(key) {
        Some(stat) => stat,
        None => {
            // By reference: a copy of the 352-byte value would not fit the BPF stack.
            #[allow(clippy::needless_borrows_for_generic_args)]
            let inserted = map.insert(key, &EMPTY_STAT, BPF_NOEXIST as u64);
            match inserted {
                Ok(()) => remember_current_task(),
                // Another CPU inserted the same key in between: use its row.
                Err(errno) if errno == -EEXIST => {}
                Err(_) => {
                    count_loss(loss_slot);
                    return;
                }
            }
            match map.get_ptr_mut(key) {
                Some(stat) => stat,
                None => {
                    count_loss(loss_slot);
                    return;
                }
            }
        }
    };
    let slot = log2_slot(latency_ns);
    // SAFETY: `stat` points into a map value valid for this program run; count, total
    // and the bucket are added atomically (several CPUs may share a key), max and min
    // are best effort. `slot` < HIST_SLOTS by construction of log2_slot.
    unsafe {
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*stat).count, 1);
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*stat).total_ns, latency_ns);
        if let Some(bucket) = (*stat).hist.get_mut(slot) {
            atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(bucket, 1);
        }
        if latency_ns > (*stat).max_ns {
            (*stat).max_ns = latency_ns;
        }
        if latency_ns < (*stat).min_ns {
            (*stat).min_ns = latency_ns;
        }
    }
}

#[inline(always)]
pub fn now_ns() -> u64 {
    // SAFETY: helper without arguments.
    unsafe { aya_ebpf::helpers::generated::bpf_ktime_get_ns() }
}
