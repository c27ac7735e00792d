//! Throughput of each workload alone, under lockpath and under its peers, interleaved.

use std::{
    fmt::Write as _,
    fs,
    process::{Command, Stdio},
};

use anyhow::{bail, Context as _, Result};

use crate::util;

use super::{
    big_profile::{big_profile_table, big_profile_timing},
    families::{available_families, wanted, workloads, Family, LoopExt4, Workload},
    format_count, median,
    options::Options,
    program_cost::{cost_tables, program_costs},
    readme::{header, targets_table},
    table_header, Bench,
};

pub(super) fn overhead_report(bench: &Bench, options: &Options) -> Result<String> {
    let families = available_families(&bench.lockpath, options.families.as_deref())?;
    util::say(format!(
        "families offered by lockpath: {}",
        util::comma_list(families.iter().map(|f| f.name))
    ));
    let io_fs = match wanted(options.workloads.as_deref(), "io") {
        true => match LoopExt4::mount(&bench.scratch) {
            Ok(fs) => Some(fs),
            Err(err) => {
                util::say(format!("io workload skipped: {err:#}"));
                None
            }
        },
        false => None,
    };
    let io_dir = io_fs.as_ref().map(|fs| fs.mount_point.join("big"));
    let workloads: Vec<Workload> = workloads(io_dir.as_deref())
        .into_iter()
        .filter(|workload| wanted(options.workloads.as_deref(), workload.name))
        .collect();

    let mut md = header(options)?;
    let mut overheads: Vec<OverheadRow> = Vec::new();
    for workload in &workloads {
        let configs = configurations(workload, &families, options.peers);
        let results = measure_interleaved(bench, workload, &configs, options.runs)?;
        overheads.extend(results);
    }
    md.push_str(&overhead_table(&workloads, &overheads));
    drop(io_fs);

    let mut costs = Vec::new();
    for family in &families {
        let workload = family
            .aimed_at
            .iter()
            .find_map(|name| workloads.iter().find(|w| w.name == *name))
            .or_else(|| workloads.first());
        let Some(workload) = workload else { continue };
        util::say(format!(
            "per-event cost, map memory and RSS of `{}` on {}",
            family.name, workload.name
        ));
        match program_costs(bench, family, workload) {
            Ok(cost) => costs.push(cost),
            Err(err) => util::say(format!("{}: cost measurement failed: {err:#}", family.name)),
        }
    }
    md.push_str(&cost_tables(&costs));

    util::say("report + flamegraph of a synthetic profile with 1,000,000 rows");
    let big = big_profile_timing(bench);
    md.push_str(&big_profile_table(&big));
    util::say("outliers on a generated fleet of 2,000 profiles");
    md.push_str(&super::fleet::fleet_table(&super::fleet::fleet_timing(
        bench,
    )));
    md.push_str(&targets_table(&families, &overheads, &costs, &big));
    Ok(md)
}

/// One way of running a workload.
#[derive(Clone)]
pub(super) enum Config {
    Baseline,
    Lockpath(&'static Family),
    Bpftrace(&'static Family),
    Perf(&'static Family),
}

impl Config {
    fn label(&self) -> String {
        match self {
            Config::Baseline => "baseline (alone)".into(),
            Config::Lockpath(family) => format!("lockpath {}", family.flags.join(" ")),
            Config::Bpftrace(family) => format!("bpftrace ({})", family.name),
            Config::Perf(family) => format!("perf {}", family.perf.unwrap_or(&[]).join(" ")),
        }
    }
}

pub(super) fn configurations(
    workload: &Workload,
    families: &[&'static Family],
    peers: bool,
) -> Vec<Config> {
    let mut configs = vec![Config::Baseline];
    for family in families {
        configs.push(Config::Lockpath(family));
    }
    if peers {
        for family in families {
            if !family.aimed_at.contains(&workload.name) {
                continue;
            }
            if family.bpftrace.is_some() && util::find_in_path("bpftrace").is_some() {
                configs.push(Config::Bpftrace(family));
            }
            if family.perf.is_some() && util::find_in_path("perf").is_some() {
                configs.push(Config::Perf(family));
            }
        }
    }
    configs
}

pub(super) struct OverheadRow {
    pub(super) workload: &'static str,
    pub(super) config: String,
    pub(super) family: Option<&'static str>,
    pub(super) is_lockpath: bool,
    pub(super) ops_per_s: Vec<f64>,
    pub(super) error: Option<String>,
}

impl OverheadRow {
    pub(super) fn median(&self) -> Option<f64> {
        median(&self.ops_per_s)
    }
}

/// Runs every configuration `runs` times, interleaved (A B C A B C ...), so that a
/// change of machine load hits all of them alike.
pub(super) fn measure_interleaved(
    bench: &Bench,
    workload: &Workload,
    configs: &[Config],
    runs: usize,
) -> Result<Vec<OverheadRow>> {
    let mut rows: Vec<OverheadRow> = configs
        .iter()
        .map(|config| OverheadRow {
            workload: workload.name,
            config: config.label(),
            family: match config {
                Config::Baseline => None,
                Config::Lockpath(f) | Config::Bpftrace(f) | Config::Perf(f) => Some(f.name),
            },
            is_lockpath: matches!(config, Config::Lockpath(_)),
            ops_per_s: Vec::new(),
            error: None,
        })
        .collect();
    for round in 0..runs {
        util::say(format!(
            "{}: round {}/{runs} ({} configurations)",
            workload.name,
            round + 1,
            configs.len()
        ));
        for (config, row) in configs.iter().zip(rows.iter_mut()) {
            if row.error.is_some() {
                continue;
            }
            match run_once(bench, workload, config) {
                Ok(ops) => row.ops_per_s.push(ops as f64 / bench.seconds),
                Err(err) => {
                    util::say(format!("{} / {}: {err:#}", workload.name, row.config));
                    row.error = Some(format!("{err:#}"));
                }
            }
        }
    }
    Ok(rows)
}

pub(super) fn workload_command(bench: &Bench, workload: &Workload) -> Vec<String> {
    let mut command = vec![bench.bin_dir.join(workload.binary).display().to_string()];
    command.extend(workload.args.iter().cloned());
    command.push("--seconds".into());
    command.push(bench.seconds.to_string());
    command
}

/// One run; returns the workload's own `ops=N`.
pub(super) fn run_once(bench: &Bench, workload: &Workload, config: &Config) -> Result<u64> {
    let command = workload_command(bench, workload);
    let output_file = bench.scratch.join("run.out");
    let mut cmd = match config {
        Config::Baseline => {
            let mut cmd = Command::new(&command[0]);
            cmd.args(&command[1..]);
            cmd
        }
        Config::Lockpath(family) => {
            let mut cmd = Command::new(&bench.lockpath);
            cmd.arg("record")
                .args(family.flags)
                .arg("-o")
                .arg(&output_file)
                .arg("--top")
                .arg("1")
                .arg("--")
                .args(&command);
            cmd
        }
        Config::Bpftrace(family) => {
            let mut cmd = Command::new("bpftrace");
            cmd.arg("-e")
                .arg(family.bpftrace.unwrap_or_default())
                .arg("-o")
                .arg(&output_file)
                .arg("-c")
                .arg(command.join(" "));
            cmd
        }
        Config::Perf(family) => {
            let mut cmd = Command::new("perf");
            cmd.args(family.perf.unwrap_or_default())
                .arg("-o")
                .arg(&output_file)
                .arg("--")
                .args(&command);
            cmd
        }
    };
    let output = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot start {}", util::describe(&cmd)))?;
    let _ = fs::remove_file(&output_file);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let ops = stdout
        .lines()
        .find_map(|line| line.trim().strip_prefix("ops="))
        .and_then(|ops| ops.parse().ok());
    match ops {
        Some(ops) if output.status.success() => Ok(ops),
        _ => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let reason = stderr
                .lines()
                .rev()
                .find(|line| !line.trim().is_empty())
                .unwrap_or("no error output");
            bail!("failed ({}): {reason}", output.status)
        }
    }
}

pub(super) fn overhead_table(workloads: &[Workload], rows: &[OverheadRow]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "### Overhead\n");
    table_header(
        &mut md,
        "workload | run under | median ops/s | spread (min-max) | vs baseline | overhead",
        "llrrrr",
    );
    for workload in workloads {
        let group: Vec<&OverheadRow> = rows
            .iter()
            .filter(|r| r.workload == workload.name)
            .collect();
        let baseline = group.first().and_then(|row| row.median());
        for row in group {
            let name = format!("{} ({})", workload.name, workload.what);
            if let Some(error) = &row.error {
                let short: String = error.chars().take(80).collect();
                let _ = writeln!(md, "| {name} | {} | failed: {short} | | | |", row.config);
                continue;
            }
            let Some(median) = row.median() else { continue };
            let min = row.ops_per_s.iter().copied().fold(f64::INFINITY, f64::min);
            let max = row.ops_per_s.iter().copied().fold(0.0, f64::max);
            let (ratio, overhead) = match baseline {
                Some(base) if base > 0.0 => (
                    format!("{:.3}", median / base),
                    format!("{:+.1}%", (1.0 - median / base) * 100.0),
                ),
                _ => (String::new(), String::new()),
            };
            let _ = writeln!(
                md,
                "| {name} | {} | {} | {:.0}% | {ratio} | {overhead} |",
                row.config,
                format_count(median),
                (max - min) / median * 100.0
            );
        }
    }
    md.push('\n');
    md
}
