//! The kernel side of a period of an always-on recording (`record --rotate`): the
//! aggregation maps (`MapSize::Stats` and `MapSize::Overflow` of every recorded family)
//! are emptied into user-space copies of themselves, entry by entry with
//! BPF_MAP_LOOKUP_AND_DELETE_ELEM, while the programs keep running into the emptied
//! maps. The family drains then read the copies (swapped into the `MapSet` under the
//! kernel maps' names, so no drain changes), and the copies are emptied for the next
//! period. The maps never fill, and
//! an event is counted in exactly one period: an entry is read and removed in one step
//! (kernels before 5.14 lack that step for hash maps: there a lookup then a delete,
//! which can drop the events of that key that land between the two calls).
//!
//! Shared counters (losses) are cumulative in the kernel; the agent keeps the previous
//! reading and each period gets the difference.

use std::{
    collections::BTreeMap,
    os::fd::{FromRawFd, OwnedFd},
};

use anyhow::{bail, Context, Result};
use aya::maps::{Map, MapData, PerCpuArray, PerCpuValues};

use crate::probes::{
    shared::{bpfsys::*, MapSet},
    MapSize, Recorded, FAMILIES,
};

/// One hash map of the kernel and its user-space copy.
struct Pair {
    name: &'static str,
    /// Held here while the copy stands in the `MapSet` (during a drain).
    kernel: Option<Map>,
    copy: Option<Map>,
    key_size: usize,
    value_size: usize,
}

/// The user-space copies of the aggregation maps of a recording.
pub struct Staging {
    pairs: Vec<Pair>,
    /// BPF_MAP_LOOKUP_AND_DELETE_ELEM works on hash maps (Linux 5.14+).
    atomic: bool,
}

/// How many entries a period moved out of the kernel maps, per map.
pub type Moved = BTreeMap<&'static str, usize>;

impl Staging {
    /// An empty copy of each aggregation map of the recorded families.
    pub fn new(maps: &MapSet, families: &[Recorded]) -> Result<Self> {
        let mut pairs = Vec::new();
        for registration in FAMILIES {
            if !families.iter().any(|f| f.name == registration.name) {
                continue;
            }
            for &(name, size) in registration.maps {
                if !matches!(size, MapSize::Stats | MapSize::Overflow) {
                    continue;
                }
                let Map::HashMap(data) = maps.get(name)? else {
                    bail!("{name} is not a hash map: it cannot be drained by periods");
                };
                let info = data
                    .info()
                    .with_context(|| format!("cannot read the description of map {name}"))?;
                let mut attr = CreateAttr {
                    map_type: BPF_MAP_TYPE_HASH,
                    key_size: info.key_size(),
                    value_size: info.value_size(),
                    max_entries: info.max_entries(),
                    // Memory for what a period holds, not for a full map.
                    map_flags: BPF_F_NO_PREALLOC,
                    ..Default::default()
                };
                attr.map_name[..8].copy_from_slice(b"lp_stage");
                let fd = bpf(BPF_MAP_CREATE, &mut attr)
                    .with_context(|| format!("cannot create the user-space copy of map {name}"))?;
                // SAFETY: a file descriptor BPF_MAP_CREATE just returned, owned by no one else.
                let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
                let copy = Map::HashMap(
                    MapData::from_fd(fd)
                        .with_context(|| format!("cannot use the copy of map {name}"))?,
                );
                pairs.push(Pair {
                    name,
                    kernel: None,
                    copy: Some(copy),
                    key_size: info.key_size() as usize,
                    value_size: info.value_size() as usize,
                });
            }
        }
        Ok(Staging {
            pairs,
            atomic: true,
        })
    }

    /// Moves the kernel maps' entries into the copies, runs `drain` with the copies in
    /// place of the kernel maps, then puts the kernel maps back and empties the copies
    /// (also when `drain` fails).
    pub fn drain_period<T>(
        &mut self,
        maps: &mut MapSet,
        drain: impl FnOnce(&mut MapSet) -> Result<T>,
    ) -> Result<(T, Moved)> {
        let mut moved = Moved::new();
        for index in 0..self.pairs.len() {
            let count = self.move_entries(maps, index)?;
            moved.insert(self.pairs[index].name, count);
        }
        // Swap: the drains read the copies under the kernel maps' names.
        let mut swap_error = None;
        for pair in &mut self.pairs {
            if let Some(copy) = pair.copy.take() {
                match maps.replace(pair.name, copy) {
                    Ok(kernel) => pair.kernel = Some(kernel),
                    Err(err) => swap_error = Some(err),
                }
            }
        }
        let result = match swap_error {
            Some(err) => Err(err),
            None => drain(maps),
        };
        for pair in &mut self.pairs {
            if let Some(kernel) = pair.kernel.take() {
                pair.copy = Some(maps.replace(pair.name, kernel)?);
            }
        }
        for pair in &self.pairs {
            if let Some(copy) = &pair.copy {
                clear(raw_fd(copy)?, pair.key_size)
                    .with_context(|| format!("cannot empty the copy of {}", pair.name))?;
            }
        }
        Ok((result?, moved))
    }

    /// Moves every entry of the kernel map into its copy; returns how many.
    fn move_entries(&mut self, maps: &MapSet, index: usize) -> Result<usize> {
        let pair = &self.pairs[index];
        let kernel = raw_fd(maps.get(pair.name)?)?;
        let copy = raw_fd(pair.copy.as_ref().context("copy in use")?)?;
        let (key_size, value_size, name) = (pair.key_size, pair.value_size, pair.name);
        // The keys first, then each one moved: entries that arrive meanwhile stay for
        // the next period.
        let keys = keys_of(kernel, key_size).with_context(|| format!("cannot list {name}"))?;
        let mut value = vec![0u8; value_size];
        let mut count = 0;
        for key in keys.chunks_exact(key_size) {
            let taken = match self.atomic {
                true => {
                    let mut attr = elem(kernel, key, &mut value, 0);
                    match bpf(BPF_MAP_LOOKUP_AND_DELETE_ELEM, &mut attr) {
                        Ok(_) => true,
                        Err(err) if err.raw_os_error() == Some(libc::ENOENT) => false,
                        Err(err)
                            if matches!(
                                err.raw_os_error(),
                                Some(libc::EINVAL) | Some(ENOTSUPP) | Some(libc::EOPNOTSUPP)
                            ) =>
                        {
                            log::info!(
                                "this kernel cannot look up and delete a hash entry in one \
                                 step (Linux 5.14+): periods use a lookup then a delete"
                            );
                            self.atomic = false;
                            lookup_then_delete(kernel, key, &mut value)?
                        }
                        Err(err) => return Err(err).with_context(|| format!("cannot move {name}")),
                    }
                }
                false => lookup_then_delete(kernel, key, &mut value)?,
            };
            if !taken {
                continue;
            }
            let mut attr = elem(copy, key, &mut value, 0);
            bpf(BPF_MAP_UPDATE_ELEM, &mut attr)
                .with_context(|| format!("cannot copy an entry of {name}"))?;
            count += 1;
        }
        Ok(count)
    }
}

/// Kernels before 5.14: the entry's value, then its removal.
fn lookup_then_delete(fd: i32, key: &[u8], value: &mut [u8]) -> Result<bool> {
    let mut attr = elem(fd, key, value, 0);
    match bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) {
        Ok(_) => {}
        Err(err) if err.raw_os_error() == Some(libc::ENOENT) => return Ok(false),
        Err(err) => return Err(err).context("cannot read a map entry"),
    }
    match delete(fd, key) {
        Ok(_) => Ok(true),
        Err(err) if err.raw_os_error() == Some(libc::ENOENT) => Ok(true),
        Err(err) => Err(err).context("cannot delete a map entry"),
    }
}

/// Every key of a hash map, concatenated.
fn keys_of(fd: i32, key_size: usize) -> Result<Vec<u8>> {
    let mut keys = Vec::new();
    let mut next = vec![0u8; key_size];
    let mut current: Option<Vec<u8>> = None;
    loop {
        let mut attr = ElemAttr {
            map_fd: fd as u32,
            key: current.as_ref().map_or(0, |key| key.as_ptr() as u64),
            value: next.as_mut_ptr() as u64,
            ..Default::default()
        };
        match bpf(BPF_MAP_GET_NEXT_KEY, &mut attr) {
            Ok(_) => {}
            Err(err) if err.raw_os_error() == Some(libc::ENOENT) => return Ok(keys),
            Err(err) => return Err(err.into()),
        }
        keys.extend_from_slice(&next);
        current = Some(next.clone());
    }
}

/// Empties a map only this process uses.
fn clear(fd: i32, key_size: usize) -> Result<()> {
    let keys = keys_of(fd, key_size)?;
    for key in keys.chunks_exact(key_size) {
        match delete(fd, key) {
            Ok(_) => {}
            Err(err) if err.raw_os_error() == Some(libc::ENOENT) => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}

/// Removes what the kernel keeps per thread or process for threads and processes that
/// no longer exist (after a period's drain used it): thread names (`TASKS`) and the
/// processes already noted for the process watcher (`PROCESSES_SEEN`). The maps stay as
/// big as what lives, not everything ever seen; a thread seen again is named again, a
/// process id reused by a new process is noted again. The lock programs' memory of the
/// threads they named (`LOCK_NAMED`) forgets the same threads, so that a new thread
/// that reuses a forgotten id is named at its first contention.
pub fn forget_exited(maps: &mut MapSet) {
    use profiler_common::shared::names::{PROCESSES_SEEN, TASKS};
    let mut forgotten_threads = Vec::new();
    for name in [TASKS, PROCESSES_SEEN] {
        let Ok(map) = maps.get(name) else { continue };
        let Ok(fd) = raw_fd(map) else { continue };
        let Ok(keys) = keys_of(fd, 4) else { continue };
        for key in keys.chunks_exact(4) {
            let id = u32::from_ne_bytes([key[0], key[1], key[2], key[3]]);
            if std::path::Path::new(&format!("/proc/{id}")).exists() {
                continue;
            }
            if delete(fd, key).is_ok() && name == TASKS {
                forgotten_threads.push(id);
            }
        }
    }
    if let Err(err) = forget_named(maps, &forgotten_threads) {
        log::debug!(
            "LOCK_NAMED kept {} exited threads: {err:#}",
            forgotten_threads.len()
        );
    }
}

/// Empties the `LOCK_NAMED` slots (`tid % LOCK_NAMED_ENTRIES`, on every CPU) that still
/// hold one of `tids`. A CPU whose begin program rewrote the slot between this read and
/// this write gets its earlier thread back, never a forgotten one: at worst a thread is
/// named once more. Without the lock family (no such map) there is nothing to do.
pub(crate) fn forget_named(maps: &mut MapSet, tids: &[u32]) -> Result<()> {
    use profiler_common::lock::{named_tid, names::LOCK_NAMED, LOCK_NAMED_ENTRIES};
    let Ok(map) = maps.get_mut(LOCK_NAMED) else {
        return Ok(());
    };
    let mut named: PerCpuArray<_, u64> =
        PerCpuArray::try_from(map).context("LOCK_NAMED has an unexpected type")?;
    for &tid in tids {
        let slot = tid % LOCK_NAMED_ENTRIES;
        let mut values = named
            .get(&slot, 0)
            .with_context(|| format!("cannot read LOCK_NAMED[{slot}]"))?
            .to_vec();
        if !values.iter().any(|value| named_tid(*value) == tid) {
            continue;
        }
        for value in values.iter_mut().filter(|value| named_tid(**value) == tid) {
            *value = 0;
        }
        let values = PerCpuValues::try_from(values).context("LOCK_NAMED has no CPU")?;
        named
            .set(slot, values, 0)
            .with_context(|| format!("cannot write LOCK_NAMED[{slot}]"))?;
    }
    Ok(())
}

/// Removes the slab cache names of locks no row of the period names (`LOCK_SLAB_NAMES`):
/// a lock that contends again is named again at its next stack walk (a lock without
/// contention for a period has no cached stack left).
pub fn forget_idle_slab_names(maps: &MapSet, profile: &crate::profile::Profile) {
    let Ok(map) = maps.get(profiler_common::lockname::names::LOCK_SLAB_NAMES) else {
        return;
    };
    let Ok(fd) = raw_fd(map) else { return };
    let Ok(keys) = keys_of(fd, 8) else { return };
    let named: std::collections::HashSet<u64> = profile
        .locks
        .iter()
        .map(|row| row.lock_addr)
        .chain(profile.contended_holds.iter().map(|row| row.lock_addr))
        .chain(profile.holds.iter().map(|row| row.lock_addr))
        .chain(profile.waiting.iter().filter_map(|row| row.lock_addr))
        .collect();
    for key in keys.chunks_exact(8) {
        let mut addr = [0u8; 8];
        addr.copy_from_slice(key);
        if !named.contains(&u64::from_ne_bytes(addr)) {
            let _ = delete(fd, key);
        }
    }
}

/// `now - before`, per cause, for cumulative counters; zeros left out.
pub fn difference(
    now: &BTreeMap<String, u64>,
    before: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    now.iter()
        .filter_map(|(cause, &count)| {
            let delta = count.saturating_sub(before.get(cause).copied().unwrap_or(0));
            (delta > 0).then(|| (cause.clone(), delta))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_of_cumulative_counters() {
        let before = BTreeMap::from([("a".to_string(), 5), ("b".to_string(), 2)]);
        let now = BTreeMap::from([
            ("a".to_string(), 9),
            ("b".to_string(), 2),
            ("c".to_string(), 1),
        ]);
        let delta = difference(&now, &before);
        assert_eq!(
            delta,
            BTreeMap::from([("a".to_string(), 4), ("c".to_string(), 1)])
        );
    }
}
