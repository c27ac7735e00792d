//! What the drains of waits in progress share: which of them are listed, and how a map
//! of them becomes rows.

use anyhow::Result;

use super::MapSet;
use crate::{probes::DrainMoment, profile::WaitingRow};

/// Waits in progress shorter than this are not listed one by one (with `--offcpu-all`
/// every sleeping thread has a wait in progress at any moment).
pub const WAITING_MIN_NS: u64 = 100_000_000;

/// The age at `now_ns` of a wait begun at `start_ns`, when it is listed (it began
/// before `now_ns` and has lasted `WAITING_MIN_NS`).
pub fn listed_age(start_ns: u64, now_ns: u64) -> Option<u64> {
    now_ns
        .checked_sub(start_ns)
        .filter(|age| *age >= WAITING_MIN_NS)
}

/// The rows of the waits in progress in map `name` that are listed at `moment`, in the
/// map's order: `start_ns` reads when an entry's wait began, and `row` makes the row of
/// a listed entry (its key, its value, its age), or leaves it out with `None`.
pub fn drain_listed<K: aya::Pod, V: aya::Pod>(
    maps: &MapSet,
    name: &str,
    moment: DrainMoment,
    start_ns: impl Fn(&V) -> u64,
    mut row: impl FnMut(K, V, u64) -> Option<WaitingRow>,
) -> Result<Vec<WaitingRow>> {
    Ok(maps
        .entries::<K, V>(name)?
        .into_iter()
        .filter_map(|(key, entry)| {
            let age_ns = listed_age(start_ns(&entry), moment.now_ns)?;
            row(key, entry, age_ns)
        })
        .collect())
}
