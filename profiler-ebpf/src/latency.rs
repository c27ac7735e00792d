//! Adds one latency to an in-kernel `LatencyStat` aggregate (rpc and func families).

use aya_ebpf::maps::HashMap;
use profiler_common::latency::{LatencyStat, log2_slot};

use crate::shared::{atomic_add, update_row_or_overflow};

/// The value new keys start from; a global, so it is not copied onto the small BPF stack.
static EMPTY_STAT: LatencyStat = LatencyStat::EMPTY;

/// Adds `latency_ns` under `key`, creating the row when needed; when the family's
/// aggregation map is full, under `overflow(key)` in its overflow map (see
/// `add_to_row_or_overflow`). Full maps are counted in `loss_slots`. `remember` names
/// the current thread when its row is new (see `add_to_row`).
#[inline(always)]
pub fn add_latency<K>(
    maps: (&HashMap<K, LatencyStat>, &HashMap<K, LatencyStat>),
    key: &K,
    overflow: impl FnOnce(&K) -> K,
    latency_ns: u64,
    loss_slots: (u32, u32),
    remember: bool,
) {
    // By reference: a copy of the 352-byte value would not fit the BPF stack.
    update_row_or_overflow(
        maps,
        key,
        overflow,
        (&EMPTY_STAT, &EMPTY_STAT),
        loss_slots,
        remember,
        |stat| {
            let slot = log2_slot(latency_ns);
            // SAFETY: `stat` points into a map value valid for this program run; count, total
            // and the bucket are added atomically (several CPUs may share a key), max and min
            // are best effort. `slot` < HIST_SLOTS by construction of log2_slot.
            unsafe {
                atomic_add(&raw mut (*stat).count, 1);
                atomic_add(&raw mut (*stat).total_ns, latency_ns);
                if let Some(bucket) = (*stat).hist.get_mut(slot) {
                    atomic_add(bucket, 1);
                }
                if latency_ns > (*stat).max_ns {
                    (*stat).max_ns = latency_ns;
                }
                if latency_ns < (*stat).min_ns {
                    (*stat).min_ns = latency_ns;
                }
            }
        },
    );
}
