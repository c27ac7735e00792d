//! The kernel maps of a recording, and the drains every family shares: loss counters,
//! thread names, latency aggregates.

use std::collections::{BTreeMap, HashMap as StdHashMap};

use anyhow::{Context, Result};
use aya::{
    maps::{HashMap, Map, MapData, PerCpuArray, PerCpuValues},
    Ebpf,
};
use profiler_common::{
    latency::LatencyStat,
    loss::{every_loss, LOSS_SLOTS},
    shared::names,
    target::TaskInfo,
};

use crate::profile::{Latency, Process, Thread};

/// The kernel maps, taken out of the loaded object so that dropping the object detaches
/// every program and link while the maps stay readable for the drain.
pub struct MapSet {
    maps: StdHashMap<String, Map>,
}

impl MapSet {
    pub fn take_all(ebpf: &mut Ebpf) -> MapSet {
        let names: Vec<String> = ebpf.maps().map(|(name, _)| name.to_string()).collect();
        let maps = names
            .into_iter()
            .filter_map(|name| ebpf.take_map(&name).map(|map| (name, map)))
            .collect();
        MapSet { maps }
    }

    pub fn get(&self, name: &str) -> Result<&Map> {
        self.maps
            .get(name)
            .with_context(|| format!("map {name} missing from the eBPF object"))
    }

    pub fn get_mut(&mut self, name: &str) -> Result<&mut Map> {
        self.maps
            .get_mut(name)
            .with_context(|| format!("map {name} missing from the eBPF object"))
    }

    /// A hash map of the set, typed (`K`, `V` as the eBPF side declares them).
    pub fn hash_map<K: aya::Pod, V: aya::Pod>(
        &self,
        name: &str,
    ) -> Result<HashMap<&MapData, K, V>> {
        HashMap::try_from(self.get(name)?).with_context(|| format!("{name} has an unexpected type"))
    }

    /// Every entry of a hash map of the set, typed as [`MapSet::hash_map`].
    pub fn entries<K: aya::Pod, V: aya::Pod>(&self, name: &str) -> Result<Vec<(K, V)>> {
        self.hash_map::<K, V>(name)?
            .iter()
            .map(|entry| entry.with_context(|| format!("cannot read {name}")))
            .collect()
    }

    /// Every entry of a family's aggregation map `name`, then of its overflow map: the
    /// rows, without the detail the key drops, of what the full map had no room for.
    pub fn entries_with_overflow<K: aya::Pod, V: aya::Pod>(
        &self,
        name: &str,
        overflow: &str,
    ) -> Result<Vec<(K, V)>> {
        let mut entries = self.entries(name)?;
        entries.extend(self.entries::<K, V>(overflow)?);
        Ok(entries)
    }

    /// The rows of a family's latency aggregate `name` and of its overflow map, the
    /// longest total first: `row` makes a key's row from its latency, or leaves the key
    /// out (`None`).
    pub fn latency_rows<K: aya::Pod, R>(
        &self,
        name: &str,
        overflow: &str,
        mut row: impl FnMut(K, Latency) -> Option<R>,
    ) -> Result<Vec<R>> {
        let mut rows = Vec::new();
        for (key, stat) in self.entries_with_overflow::<K, LatencyStat>(name, overflow)? {
            let latency = latency_from(&stat);
            let total_ns = latency.total_ns;
            if let Some(row) = row(key, latency) {
                rows.push((total_ns, row));
            }
        }
        rows.sort_by_key(|(total_ns, _)| std::cmp::Reverse(*total_ns));
        Ok(rows.into_iter().map(|(_, row)| row).collect())
    }

    /// Puts `map` under `name` and returns the map it replaces (`record --rotate`
    /// swaps a period's copy of an aggregation map in for the drain).
    pub fn replace(&mut self, name: &str, map: Map) -> Result<Map> {
        let slot = self
            .maps
            .get_mut(name)
            .with_context(|| format!("map {name} missing from the eBPF object"))?;
        Ok(std::mem::replace(slot, map))
    }

    /// The values of element 0 of a per-CPU array of the set, one per possible CPU.
    pub fn per_cpu<V: aya::Pod>(&self, name: &str) -> Result<Vec<V>> {
        let map: PerCpuArray<_, V> = PerCpuArray::try_from(self.get(name)?)
            .with_context(|| format!("{name} has an unexpected type"))?;
        let values = map
            .get(&0, 0)
            .with_context(|| format!("cannot read {name}"))?;
        Ok(values.iter().copied().collect())
    }

    /// Adds to the row of `key` in a family's aggregation map (`add`, or `first` for a
    /// new row), as the programs do, and when that map is full, to the row of
    /// `overflow_key` in its overflow map. For what the programs left for user space to
    /// add once they are detached. False when neither map had room.
    pub fn add_to_row<K: aya::Pod, V: aya::Pod>(
        &mut self,
        (name, overflow): (&str, &str),
        (key, overflow_key): (K, K),
        first: V,
        add: impl Fn(&mut V),
    ) -> Result<bool> {
        for (name, key) in [(name, key), (overflow, overflow_key)] {
            let mut map: HashMap<_, K, V> = HashMap::try_from(self.get_mut(name)?)
                .with_context(|| format!("{name} has an unexpected type"))?;
            let row = match map.get(&key, 0) {
                Ok(mut row) => {
                    add(&mut row);
                    row
                }
                Err(aya::maps::MapError::KeyNotFound) => first,
                Err(err) => return Err(err).with_context(|| format!("cannot read {name}")),
            };
            // An insert fails only when the map is full: the overflow map's turn.
            if map.insert(key, row, 0).is_ok() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Counts one event user space could not record (a row it found no room for) in
    /// `LOSSES[slot]`, beside the programs' counts, so that the profile's losses say so.
    pub fn count_loss(&mut self, slot: u32) -> Result<()> {
        let mut losses: PerCpuArray<_, u64> = PerCpuArray::try_from(self.get_mut(names::LOSSES)?)
            .context("LOSSES has an unexpected type")?;
        let mut values: Vec<u64> = losses
            .get(&slot, 0)
            .with_context(|| format!("cannot read LOSSES[{slot}]"))?
            .to_vec();
        if let Some(first) = values.first_mut() {
            *first += 1;
        }
        let values = PerCpuValues::try_from(values).context("LOSSES has no CPU")?;
        losses
            .set(slot, values, 0)
            .with_context(|| format!("cannot write LOSSES[{slot}]"))
    }

    pub fn take(&mut self, name: &str) -> Result<Map> {
        self.maps
            .remove(name)
            .with_context(|| format!("map {name} missing from the eBPF object"))
    }
}

/// Sums the per-CPU loss counters, by name; zero counters are left out.
pub fn drain_losses(maps: &MapSet) -> Result<BTreeMap<String, u64>> {
    let map = maps.get(names::LOSSES)?;
    let losses: PerCpuArray<_, u64> =
        PerCpuArray::try_from(map).context("LOSSES has an unexpected type")?;
    let mut out = BTreeMap::new();
    for slot in 0..LOSS_SLOTS {
        let values = losses
            .get(&slot, 0)
            .with_context(|| format!("cannot read LOSSES[{slot}]"))?;
        let total: u64 = values.iter().sum();
        if total == 0 {
            continue;
        }
        let name = every_loss()
            .find(|loss| loss.slot == slot)
            .map(|loss| loss.name.to_string())
            .unwrap_or_else(|| format!("loss_{slot}"));
        out.insert(name, total);
    }
    Ok(out)
}

/// Processes and their threads, from the kernel's thread-name map, completed from
/// /proc for processes still alive. `pids` lists every process some row refers to.
/// A process's cgroup is the one most of its threads were recorded in (crate::cgroups).
pub fn drain_processes(maps: &MapSet, pids: &[u32]) -> Result<Vec<Process>> {
    let mut by_pid: BTreeMap<u32, Process> = BTreeMap::new();
    // pid -> the cgroup ids its threads were recorded in (main thread first).
    let mut cgroup_ids: StdHashMap<u32, Vec<u64>> = StdHashMap::new();
    for (tid, info) in maps.entries::<u32, TaskInfo>(names::TASKS)? {
        let process = by_pid.entry(info.tgid).or_insert_with(|| Process {
            pid: info.tgid,
            ..Default::default()
        });
        let comm = comm_to_string(&info.comm);
        let ids = cgroup_ids.entry(info.tgid).or_default();
        if tid == info.tgid {
            process.comm = comm.clone();
            ids.insert(0, info.cgroup_id);
        } else {
            ids.push(info.cgroup_id);
        }
        process.threads.push(Thread { tid, comm });
    }
    let mut cgroups = crate::cgroups::CgroupNames::new();
    for &pid in pids {
        by_pid.entry(pid).or_insert_with(|| Process {
            pid,
            ..Default::default()
        });
    }
    for process in by_pid.values_mut() {
        if process.comm.is_empty() {
            process.comm = std::fs::read_to_string(format!("/proc/{}/comm", process.pid))
                .map(|comm| comm.trim_end().to_string())
                .ok()
                .or_else(|| process.threads.first().map(|thread| thread.comm.clone()))
                .unwrap_or_else(|| format!("pid {}", process.pid));
        }
        if process.pid == 0 {
            process.comm = "swapper".into();
        }
        let id = cgroup_ids
            .get(&process.pid)
            .map_or(0, |ids| crate::cgroups::most_common(ids));
        process.cgroup = if id != 0 {
            cgroups.path(id)
        } else if process.pid != 0 {
            // Seen only as a lock owner (no cgroup recorded): its cgroup now, if alive.
            crate::cgroups::live_process_cgroup(process.pid)
        } else {
            None
        };
        process.threads.sort_by_key(|thread| thread.tid);
    }
    Ok(by_pid.into_values().collect())
}

pub fn comm_to_string(comm: &[u8]) -> String {
    let end = comm
        .iter()
        .position(|&byte| byte == 0)
        .unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

/// The profile's form of an in-kernel latency aggregate (trailing empty buckets cut).
pub fn latency_from(stat: &LatencyStat) -> Latency {
    let used = stat
        .hist
        .iter()
        .rposition(|&count| count != 0)
        .map_or(0, |last| last + 1);
    Latency {
        count: stat.count,
        total_ns: stat.total_ns,
        max_ns: stat.max_ns,
        min_ns: if stat.count == 0 { 0 } else { stat.min_ns },
        hist: stat.hist[..used].to_vec(),
    }
}
