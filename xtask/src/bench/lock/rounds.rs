//! Interleaved rounds of every tool: spin-wait accuracy and slowdown.

use std::{
    collections::BTreeMap,
    fs,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use crate::util;

use super::{
    counters::{attached_tracepoints, fdinfo_counters, ContentionCost, Counters},
    median,
    reaper::{last_line, output_file, Reaper},
    storm_command, Bench, BpfStats, Storm, Tool, ATTEMPTS, MIN_WAITS, OUTCOME_SHIFT,
    REFERENCE_SCRIPT, SPIN_MASK, STACK_SCRIPT, TOOLS,
};

/// How often a run looks up where bpftrace's programs are attached, until all are.
const LOOKUP_EVERY: Duration = Duration::from_millis(300);

/// What one run gave.
#[derive(Default)]
pub(super) struct Run {
    pub(super) ops_per_s: f64,
    /// Spinning waits of the workload (count, total ns): lockpath and the reference.
    pub(super) spin: Option<(u64, u64)>,
    /// The reference's BPF time per contention, from the last sample before it exited.
    pub(super) cost: Option<ContentionCost>,
}

#[derive(Default)]
pub(super) struct ToolRuns {
    pub(super) runs: Vec<Run>,
    pub(super) error: Option<String>,
    /// Runs repeated because the workload barely contended.
    pub(super) repeated: usize,
}

impl ToolRuns {
    pub(super) fn median_ops(&self) -> Option<f64> {
        median(&self.runs.iter().map(|r| r.ops_per_s).collect::<Vec<_>>())
    }

    pub(super) fn median_spin_ns(&self) -> Option<f64> {
        let averages: Vec<f64> = self
            .runs
            .iter()
            .filter_map(|run| run.spin)
            .filter(|(count, _)| *count > 0)
            .map(|(count, total)| total as f64 / count as f64)
            .collect();
        median(&averages)
    }

    pub(super) fn median_waits(&self) -> Option<f64> {
        let counts: Vec<f64> = self
            .runs
            .iter()
            .filter_map(|run| run.spin.map(|(count, _)| count as f64))
            .collect();
        median(&counts)
    }
}

/// Rounds of every tool, interleaved (alone, lockpath, reference, bpftrace, perf, alone,
/// ...), so that a change of machine load hits all of them alike.
pub(super) fn interleaved(bench: &Bench, storm: &Storm, runs: usize) -> BTreeMap<Tool, ToolRuns> {
    let mut results: BTreeMap<Tool, ToolRuns> = BTreeMap::new();
    for tool in TOOLS {
        let entry = results.entry(tool).or_default();
        if let Some(program) = tool.program() {
            if util::find_in_path(program).is_none() {
                entry.error = Some(format!("{program} not installed"));
            }
        }
    }
    for round in 1..=runs {
        util::say(format!("lock part, {}: round {round}/{runs}", storm.mode));
        for tool in TOOLS {
            let Some(entry) = results.get_mut(&tool) else {
                continue;
            };
            if entry.error.is_some() {
                continue;
            }
            for attempt in 1..=ATTEMPTS {
                match run_tool(bench, storm, tool) {
                    Ok(run) => {
                        let waits = run.spin.map(|(count, _)| count);
                        if waits.is_some_and(|n| n < MIN_WAITS) && attempt < ATTEMPTS {
                            util::say(format!(
                                "lock part, {} / {}: only {} spinning waits, again",
                                storm.mode,
                                tool.label(),
                                waits.unwrap_or(0)
                            ));
                            entry.repeated += 1;
                            continue;
                        }
                        entry.runs.push(run);
                    }
                    Err(err) => {
                        util::say(format!(
                            "lock part, {} / {}: {err:#}",
                            storm.mode,
                            tool.label()
                        ));
                        entry.error = Some(format!("{err:#}"));
                    }
                }
                break;
            }
        }
    }
    results
}

/// One run of the workload for `bench.seconds` under `tool`.
pub(super) fn run_tool(bench: &Bench, storm: &Storm, tool: Tool) -> Result<Run> {
    let command = storm_command(bench, storm, bench.seconds);
    let output = bench.scratch.join("lock-run.data");
    let stdout_path = bench.scratch.join("lock-run.stdout");
    let stderr_path = bench.scratch.join("lock-run.stderr");
    let _ = fs::remove_file(&output);
    let mut cmd = match tool {
        Tool::Alone => {
            let mut cmd = Command::new(&command[0]);
            cmd.args(&command[1..]);
            cmd
        }
        Tool::Lockpath => {
            let mut cmd = Command::new(&bench.lockpath);
            cmd.args(["record", "--lock", "--top", "1", "-o"])
                .arg(&output)
                .arg("--")
                .args(&command);
            cmd
        }
        Tool::Reference | Tool::BpftraceStack => {
            let script = match tool {
                Tool::Reference => REFERENCE_SCRIPT.to_string(),
                _ => STACK_SCRIPT.replace("TARGET", "cpid"),
            };
            let mut cmd = Command::new("bpftrace");
            cmd.args(["-f", "json", "-e"])
                .arg(script)
                .arg("-o")
                .arg(&output)
                .arg("-c")
                .arg(command.join(" "));
            cmd
        }
        Tool::PerfLock => {
            let mut cmd = Command::new("perf");
            cmd.args(["lock", "record", "-a", "-o"])
                .arg(&output)
                .arg("--")
                .args(&command);
            cmd
        }
    };
    cmd.stdin(Stdio::null())
        .stdout(output_file(&stdout_path)?)
        .stderr(output_file(&stderr_path)?);
    // The reference's own cost needs bpf_stats while it runs (and only then: the other
    // tools' elapsed times are measured without the two clock reads per program run).
    let stats = match tool {
        Tool::Reference => Some(BpfStats::enable()?),
        _ => None,
    };
    let mut child = Reaper::spawn(&mut cmd, Duration::from_secs(30))?;
    let deadline = Instant::now() + Duration::from_secs_f64(bench.seconds + 120.0);
    let mut last_sample: BTreeMap<u64, Counters> = BTreeMap::new();
    let mut attached: BTreeMap<u64, String> = BTreeMap::new();
    let mut last_lookup: Option<Instant> = None;
    let status = loop {
        if let Some(status) = child.exited()? {
            break status;
        }
        if Instant::now() > deadline {
            bail!("did not finish within {:.0} s", bench.seconds + 120.0);
        }
        if tool == Tool::Reference {
            // Poll the counters while it runs and keep the latest reading of each
            // program: they go with the programs when bpftrace exits.
            let sample = fdinfo_counters(child.pid());
            if !sample.is_empty() {
                // bpftrace loads its programs before it attaches them, and its start-up
                // can take seconds on a busy machine: look again (bpftool, at most every
                // 300 ms) until every program it holds is attached somewhere.
                if sample.keys().any(|id| !attached.contains_key(id))
                    && last_lookup.is_none_or(|at: Instant| at.elapsed() >= LOOKUP_EVERY)
                {
                    last_lookup = Some(Instant::now());
                    attached = attached_tracepoints(child.pid());
                }
                // Per program, its latest reading: bpftrace closes its programs one by
                // one as it exits, so the last sample may lack some of them.
                last_sample.extend(sample);
            }
            std::thread::sleep(Duration::from_millis(100));
        } else {
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    drop(stats);
    let stdout = fs::read_to_string(&stdout_path).unwrap_or_default();
    let ops: Option<u64> = stdout
        .lines()
        .find_map(|line| line.trim().strip_prefix("ops="))
        .and_then(|ops| ops.parse().ok());
    let Some(ops) = ops.filter(|_| status.success()) else {
        bail!("failed ({status}): {}", last_line(&stderr_path));
    };
    let mut run = Run {
        ops_per_s: ops as f64 / bench.seconds,
        ..Run::default()
    };
    match tool {
        Tool::Lockpath => run.spin = Some(lockpath_spin(&output)?),
        Tool::Reference => {
            run.spin = Some(reference_spin(&output)?);
            let cost = ContentionCost::of(&last_sample, &attached);
            run.cost = cost.complete().then_some(cost);
        }
        _ => {}
    }
    let _ = fs::remove_file(&output);
    Ok(run)
}

/// Spinning waits of the workload in a lockpath profile: rows of lock-storm's processes
/// whose flags are a spinning type (`flags & 0x21 == 1`) with outcome 0.
pub(super) fn lockpath_spin(path: &Path) -> Result<(u64, u64)> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let profile: serde_json::Value =
        serde_json::from_str(&text).context("lockpath wrote invalid JSON")?;
    let workload: Vec<u64> = profile["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|process| process["comm"].as_str() == Some("lock-storm"))
        .filter_map(|process| process["pid"].as_u64())
        .collect();
    if workload.is_empty() {
        bail!("the profile names no lock-storm process");
    }
    let (mut count, mut total) = (0u64, 0u64);
    for row in profile["locks"].as_array().into_iter().flatten() {
        let (Some(pid), Some(flags)) = (row["pid"].as_u64(), row["flags"].as_u64()) else {
            continue;
        };
        if !workload.contains(&pid) || flags & SPIN_MASK != 1 || flags >> OUTCOME_SHIFT != 0 {
            continue;
        }
        count += row["count"].as_u64().unwrap_or(0);
        total += row["total_ns"].as_u64().unwrap_or(0);
    }
    Ok((count, total))
}

/// `@n` and `@total` of the reference script's JSON output (one object per line).
pub(super) fn reference_spin(path: &Path) -> Result<(u64, u64)> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let (mut count, mut total) = (0u64, 0u64);
    for line in text.lines() {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if value["type"].as_str() != Some("map") {
            continue;
        }
        if let Some(n) = value["data"]["@n"].as_u64() {
            count = n;
        }
        if let Some(sum) = value["data"]["@total"].as_u64() {
            total = sum;
        }
    }
    Ok((count, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `read` of a file `name` holding `contents`, in a temporary directory removed after.
    fn read_written<T>(name: &str, contents: &str, read: impl FnOnce(&Path) -> T) -> Result<T> {
        let dir =
            std::env::temp_dir().join(format!("xtask-lock-test-{name}-{}", std::process::id()));
        fs::create_dir_all(&dir)?;
        let path = dir.join(name);
        fs::write(&path, contents)?;
        let value = read(&path);
        let _ = fs::remove_dir_all(&dir);
        Ok(value)
    }

    #[test]
    fn reference_output_is_read_from_bpftrace_json() -> Result<()> {
        let spin = read_written(
            "ref.json",
            "{\"type\": \"attached_probes\", \"data\": {\"probes\": 2}}\n\
             {\"type\": \"map\", \"data\": {\"@n\": 1958}}\n\
             {\"type\": \"map\", \"data\": {\"@total\": 13855862}}\n",
            reference_spin,
        )?;
        assert_eq!(spin?, (1958, 13855862));
        Ok(())
    }

    #[test]
    fn lockpath_spin_keeps_spinning_acquired_rows_of_the_workload() -> Result<()> {
        // spinlock (1), rwlock:W (5), mutex:spin (33), mutex (32), spinlock !ETIMEDOUT,
        // and a spinlock of another process.
        let spin = read_written(
            "profile.json",
            r#"{"processes":[{"pid":7,"comm":"lock-storm"},{"pid":8,"comm":"other"}],"locks":[
              {"pid":7,"flags":1,"count":10,"total_ns":1000},
              {"pid":7,"flags":5,"count":2,"total_ns":400},
              {"pid":7,"flags":33,"count":50,"total_ns":50000},
              {"pid":7,"flags":32,"count":50,"total_ns":50000},
              {"pid":7,"flags":131073,"count":3,"total_ns":9000},
              {"pid":8,"flags":1,"count":9,"total_ns":9000}]}"#,
            lockpath_spin,
        )?;
        assert_eq!(spin?, (12, 1400));
        Ok(())
    }
}
