//! Speed of `lockpath outliers` on a generated fleet of 2,000 profiles, compact and JSON:
//! each command reads every profile, ranks the hosts and must name the generated
//! outlier, by its lock.

use std::{ffi::OsStr, fmt::Write as _, fs};

use lockpath_profile::synthetic::{write_fleet, FLEET_OUTLIER};

use super::{program_cost::lockpath_usage, table_header, Bench, MIB};

/// Hosts of the generated fleet.
const HOSTS: usize = 2_000;
/// Rounds per encoding; every figure is the median.
const ROUNDS: usize = 3;

/// (wall, CPU) seconds of one `outliers`, or why it failed.
type Run = Result<(f64, f64), String>;

/// One encoding's fleet: its size and its runs' medians.
pub(super) struct FleetTiming {
    pub(super) encoding: &'static str,
    pub(super) mib: f64,
    pub(super) run: Run,
}

/// Generates the fleet in both encodings and times `outliers` on each.
pub(super) fn fleet_timing(bench: &Bench) -> Vec<FleetTiming> {
    [("compact", true), ("JSON", false)]
        .into_iter()
        .map(|(encoding, compact)| {
            let dir = bench.scratch.join(format!("fleet-{encoding}"));
            let timing = match write_fleet(&dir, HOSTS, compact) {
                Ok(()) => {
                    let mib = dir_mib(&dir);
                    let runs: Vec<Run> = (0..ROUNDS).map(|_| outliers(bench, &dir)).collect();
                    FleetTiming {
                        encoding,
                        mib,
                        run: median(runs),
                    }
                }
                Err(err) => FleetTiming {
                    encoding,
                    mib: 0.0,
                    run: Err(format!("cannot write the fleet: {err:#}")),
                },
            };
            let _ = fs::remove_dir_all(&dir);
            timing
        })
        .collect()
}

fn dir_mib(dir: &std::path::Path) -> f64 {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| entry.metadata().ok())
                .map(|meta| meta.len() as f64)
                .sum::<f64>()
                / MIB
        })
        .unwrap_or(0.0)
}

fn median(runs: Vec<Run>) -> Run {
    let mut runs: Vec<(f64, f64)> = runs.into_iter().collect::<Result<_, _>>()?;
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    runs.get(runs.len() / 2)
        .copied()
        .ok_or_else(|| "not run".into())
}

/// One `outliers DIR --format json`: it must exit 1 and rank the generated outlier
/// first, by its lock.
fn outliers(bench: &Bench, dir: &std::path::Path) -> Run {
    let report = bench.scratch.join("fleet-outliers.json");
    let mut args = ["outliers", "--format", "json", "-o"]
        .map(OsStr::new)
        .to_vec();
    args.extend([report.as_os_str(), dir.as_os_str()]);
    let (usage, wall) = lockpath_usage(bench, args)?;
    if usage.exit_code != Some(1) {
        return Err(format!("exit {:?}, not 1 (an outlier)", usage.exit_code));
    }
    let text = fs::read_to_string(&report).map_err(|err| err.to_string())?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|err| err.to_string())?;
    let first = &json["ranking"][0];
    let named = first["name"] == FLEET_OUTLIER.0
        && first["causes"][0]["cause"]
            .as_str()
            .is_some_and(|cause| cause.contains(FLEET_OUTLIER.1));
    let others = json["ranking"].as_array().map_or(0, |ranking| {
        ranking.iter().filter(|r| r["outlier"] == true).count()
    });
    if !named || others != 1 {
        return Err(format!("wrong answer: first {first}, {others} outliers"));
    }
    Ok((wall, usage.cpu_s))
}

pub(super) fn fleet_table(timings: &[FleetTiming]) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "### `outliers` on {HOSTS} profiles\n\nA generated fleet of {HOSTS} 30-second profiles \
         (400 lock rows, 100 off-CPU rows and 200 stacks each; one host with one more \
         spinlock); the median of {ROUNDS} runs of `lockpath outliers DIR --format json`, \
         each checked to name that host first, by that lock, and no other.\n"
    );
    table_header(&mut md, "encoding | files | wall time | CPU time", "lrrr");
    for timing in timings {
        let cells = match &timing.run {
            Ok((wall, cpu)) => format!("{wall:.2} s | {cpu:.2} s"),
            Err(err) => format!("failed: {} |", err.chars().take(80).collect::<String>()),
        };
        let _ = writeln!(
            md,
            "| {} | {:.0} MiB | {cells} |",
            timing.encoding, timing.mib
        );
    }
    md.push('\n');
    md
}
