//! Markdown around the tables: header, run context, targets, and the bench blocks of
//! docs/performance.md.

use std::{fmt::Write as _, fs, process::Command};

use anyhow::{Context as _, Result};

use crate::util;

use super::{
    big_profile::BigProfile, families::Family, options::Options, overhead::OverheadRow,
    program_cost::FamilyCost, table_header, MIB,
};

pub(super) const README_START: &str = "<!-- bench:start (cargo xtask bench --readme) -->";
pub(super) const README_END: &str = "<!-- bench:end -->";
pub(super) const HOLD_README_START: &str =
    "<!-- bench-hold:start (cargo xtask bench --families hold --readme) -->";
pub(super) const HOLD_README_END: &str = "<!-- bench-hold:end -->";

/// Replaces a block of docs/performance.md (between the markers; appended if absent).
/// `--readme` keeps its name from when the tables were in the README.
pub(super) fn update_readme(start_marker: &str, end_marker: &str, body: &str) -> Result<()> {
    let path = util::workspace_root().join("docs/performance.md");
    let readme = fs::read_to_string(&path)
        .with_context(|| format!("bench: cannot read {}", path.display()))?;
    let section = format!("{start_marker}\n{body}{end_marker}\n");
    let updated = match (readme.find(start_marker), readme.find(end_marker)) {
        (Some(start), Some(end)) if end > start => format!(
            "{}{section}{}",
            &readme[..start],
            readme[end + end_marker.len()..].trim_start_matches('\n')
        ),
        _ => format!(
            "{}\n{section}",
            readme.trim_end_matches('\n').to_string() + "\n"
        ),
    };
    fs::write(&path, updated).with_context(|| format!("bench: cannot write {}", path.display()))?;
    util::say(format!("bench tables of {} updated", path.display()));
    Ok(())
}

pub(super) fn header(options: &Options) -> Result<String> {
    let mut md = String::new();
    let _ = writeln!(md, "## Performance\n");
    let _ = writeln!(
        md,
        "{} Throughput is the workload's own ops/s, overhead = 1 - median / median of the \
         baseline.\n",
        run_context(options.runs, options.seconds)
    );
    Ok(md)
}

/// When and where the benchmark ran, and how many runs of what length.
pub(super) fn run_context(runs: usize, seconds: f64) -> String {
    let date = util::capture(
        Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]),
        "bench: reading the date",
        "install coreutils",
    )
    .map(|date| date.trim().to_string())
    .unwrap_or_else(|_| "an unknown date".into());
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_string())
        .unwrap_or_default();
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load = fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    format!(
        "`cargo xtask bench` on {date} — {nproc} CPUs ({cpu}), Linux {kernel}, load average at \
         start {load}. {runs} interleaved runs of {seconds} s per configuration."
    )
}

pub(super) fn targets_table(
    families: &[&'static Family],
    overheads: &[OverheadRow],
    costs: &[FamilyCost],
    big: &BigProfile,
) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "### Targets\n");
    table_header(&mut md, "target | measured | met", "lrl");
    let verdict = |ok: bool| if ok { "yes" } else { "**no**" };
    for family in families {
        let (Some(limit), Some(workload)) = (family.target_overhead, family.aimed_at.first())
        else {
            continue;
        };
        let baseline = overheads
            .iter()
            .find(|r| r.workload == *workload && r.family.is_none())
            .and_then(OverheadRow::median);
        let ours = overheads
            .iter()
            .find(|r| r.workload == *workload && r.is_lockpath && r.family == Some(family.name))
            .and_then(OverheadRow::median);
        if let (Some(base), Some(ours)) = (baseline, ours) {
            let overhead = 1.0 - ours / base;
            let _ = writeln!(
                md,
                "| {} probe on {workload}: overhead <= {:.0}% | {:+.1}% | {} |",
                family.name,
                limit * 100.0,
                overhead * 100.0,
                verdict(overhead <= limit)
            );
        }
    }
    if let Some(worst) = costs.iter().max_by_key(|c| c.map_memlock) {
        let mib = worst.map_memlock as f64 / MIB;
        let _ = writeln!(
            md,
            "| kernel map memory at defaults <= 64 MiB | {mib:.1} MiB ({}) | {} |",
            worst.family,
            verdict(mib <= 64.0)
        );
    }
    if let Some(worst) = costs.iter().max_by_key(|c| c.max_rss_kib) {
        let mib = worst.max_rss_kib as f64 / 1024.0;
        let _ = writeln!(
            md,
            "| lockpath RSS <= 100 MiB | {mib:.1} MiB ({}) | {} |",
            worst.family,
            verdict(mib <= 100.0)
        );
    }
    if let Ok((wall, cpu)) = &big.compact.both {
        let json = match &big.json.both {
            Ok((wall, _)) => format!("; JSON {wall:.2} s"),
            Err(_) => String::new(),
        };
        let _ = writeln!(
            md,
            "| report + flamegraph of 1M rows < 1 s (compact profile) | {wall:.2} s wall, {cpu:.2} s CPU{json} | {} |",
            verdict(*wall < 1.0)
        );
    }
    md.push('\n');
    md
}
