//! BPF programs' run counters (bpftool, fdinfo) and a tool's cost per contention.

use std::{collections::BTreeMap, fs, process::Command};

use anyhow::Result;

use crate::util;

use super::fdinfo_fields;

/// Run counters of one program.
#[derive(Clone, Copy, Default)]
pub(super) struct Counters {
    pub(super) run_time_ns: u64,
    pub(super) run_cnt: u64,
    pub(super) recursion_misses: u64,
}

impl Counters {
    pub(super) fn since(self, before: Counters) -> Counters {
        Counters {
            run_time_ns: self.run_time_ns.saturating_sub(before.run_time_ns),
            run_cnt: self.run_cnt.saturating_sub(before.run_cnt),
            recursion_misses: self
                .recursion_misses
                .saturating_sub(before.recursion_misses),
        }
    }

    pub(super) fn per_run(self) -> Option<f64> {
        (self.run_cnt > 0).then(|| self.run_time_ns as f64 / self.run_cnt as f64)
    }
}

/// `bpftool prog show -j`: counters of every loaded program by id.
pub(super) fn bpftool_counters() -> Result<BTreeMap<u64, Counters>> {
    let programs = super::super::program_cost::bpftool_programs()?;
    Ok(programs
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|program| {
            let id = program["id"].as_u64()?;
            Some((
                id,
                Counters {
                    run_time_ns: program["run_time_ns"].as_u64().unwrap_or(0),
                    run_cnt: program["run_cnt"].as_u64().unwrap_or(0),
                    recursion_misses: program["recursion_misses"].as_u64().unwrap_or(0),
                },
            ))
        })
        .collect())
}

/// Counters of the programs a process holds, from `/proc/PID/fdinfo` (the kernel prints
/// the same run_time_ns / run_cnt there as bpftool shows), without starting a process:
/// cheap enough to poll while a measured workload runs.
pub(super) fn fdinfo_counters(pid: u32) -> BTreeMap<u64, Counters> {
    let mut counters = BTreeMap::new();
    for fields in fdinfo_fields(pid) {
        // Link descriptors name a program too, but only program descriptors count.
        if let (Some(&id), Some(&run_time_ns), Some(&run_cnt)) = (
            fields.get("prog_id"),
            fields.get("run_time_ns"),
            fields.get("run_cnt"),
        ) {
            counters.insert(
                id,
                Counters {
                    run_time_ns,
                    run_cnt,
                    recursion_misses: fields.get("recursion_misses").copied().unwrap_or(0),
                },
            );
        }
    }
    counters
}

/// The tracepoint each program of a process is attached to, by program id: from
/// `bpftool perf show -j` (perf-event attachments: bpftrace's tracepoints; raw
/// tracepoints too) and from the process's raw tracepoint links (`tp_name` in fdinfo).
pub(super) fn attached_tracepoints(pid: u32) -> BTreeMap<u64, String> {
    let mut attached = BTreeMap::new();
    if let Ok(json) = util::capture(
        Command::new("bpftool").args(["-j", "perf", "show"]),
        "bench: bpftool perf show",
        "install bpftool",
    ) {
        if let Ok(serde_json::Value::Array(entries)) = serde_json::from_str(&json) {
            for entry in entries {
                if entry["pid"].as_u64() != Some(u64::from(pid)) {
                    continue;
                }
                if let (Some(id), Some(tracepoint)) =
                    (entry["prog_id"].as_u64(), entry["tracepoint"].as_str())
                {
                    attached.insert(id, tracepoint.to_string());
                }
            }
        }
    }
    if let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fdinfo")) {
        for entry in entries.flatten() {
            let Ok(info) = fs::read_to_string(entry.path()) else {
                continue;
            };
            let field = |name: &str| {
                info.lines()
                    .find_map(|line| line.strip_prefix(name))
                    .map(|value| value.trim().to_string())
            };
            if let (Some(id), Some(tracepoint)) = (
                field("prog_id:").and_then(|id| id.parse::<u64>().ok()),
                field("tp_name:"),
            ) {
                attached.entry(id).or_insert(tracepoint);
            }
        }
    }
    attached
}

/// A tool's BPF time per contention: its `contention_begin` and `contention_end` programs;
/// and apart, its program on `sched_waking` if it has one (lockpath's, which runs per
/// wake-up, not per contention).
#[derive(Clone, Copy, Default)]
pub(super) struct ContentionCost {
    pub(super) begin: Counters,
    pub(super) end: Counters,
    pub(super) waking: Counters,
}

impl ContentionCost {
    /// From counters by program id and the tracepoint of each program. Several programs on
    /// one tracepoint all run per event: their times add up.
    pub(super) fn of(counters: &BTreeMap<u64, Counters>, attached: &BTreeMap<u64, String>) -> Self {
        let mut cost = ContentionCost::default();
        for (id, tracepoint) in attached {
            let Some(counters) = counters.get(id) else {
                continue;
            };
            let slot = match tracepoint.as_str() {
                "contention_begin" => &mut cost.begin,
                "contention_end" => &mut cost.end,
                "sched_waking" => &mut cost.waking,
                _ => continue,
            };
            slot.run_time_ns += counters.run_time_ns;
            slot.run_cnt = slot.run_cnt.max(counters.run_cnt);
            slot.recursion_misses += counters.recursion_misses;
        }
        cost
    }

    pub(super) fn complete(&self) -> bool {
        self.begin.run_cnt > 0 && self.end.run_cnt > 0
    }

    pub(super) fn per_contention(&self) -> Option<f64> {
        Some(self.begin.per_run()? + self.end.per_run()?)
    }

    /// The `sched_waking` program's runs and time per run, and its time per contention,
    /// when it ran.
    pub(super) fn show_waking(&self) -> Option<String> {
        let per_run = self.waking.per_run()?;
        Some(format!(
            "{} runs of {per_run:.0} ns, {:.0} ns per contention",
            self.waking.run_cnt,
            self.waking.run_time_ns as f64 / self.begin.run_cnt.max(1) as f64
        ))
    }

    pub(super) fn show(&self) -> String {
        match (self.begin.per_run(), self.end.per_run()) {
            (Some(begin), Some(end)) => {
                format!("{begin:.0} + {end:.0} = **{:.0} ns**", begin + end)
            }
            _ => "no runs".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_adds_begin_and_end_of_one_tool() {
        let counters = BTreeMap::from([
            (
                1,
                Counters {
                    run_time_ns: 3000,
                    run_cnt: 10,
                    recursion_misses: 0,
                },
            ),
            (
                2,
                Counters {
                    run_time_ns: 1000,
                    run_cnt: 10,
                    recursion_misses: 1,
                },
            ),
            (
                3,
                Counters {
                    run_time_ns: 99_000,
                    run_cnt: 10,
                    recursion_misses: 0,
                },
            ),
        ]);
        // Program 3 belongs to someone else: not in this tool's attachments.
        let attached = BTreeMap::from([
            (1, "contention_begin".to_string()),
            (2, "contention_end".to_string()),
        ]);
        let cost = ContentionCost::of(&counters, &attached);
        assert!(cost.complete());
        assert_eq!(cost.per_contention(), Some(400.0));
        assert_eq!(cost.end.recursion_misses, 1);
    }
}
