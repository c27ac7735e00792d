//! Speed of `report` + `flamegraph` on a synthetic profile of one million rows, as JSON
//! and in the compact encoding (`lockpath convert big.json -o big.lpb`).

use std::{ffi::OsStr, fmt::Write as _, fs, path::Path};

use anyhow::Result;

use super::{program_cost::lockpath_usage, table_header, Bench, MIB};

/// Interleaved rounds (JSON report, JSON flamegraph, compact report, compact
/// flamegraph, again); every figure is the median over the rounds.
const ROUNDS: usize = 3;

/// (wall, CPU) seconds of one command, or why it failed.
type Run = Result<(f64, f64), String>;

/// Medians of one encoding's runs.
pub(super) struct Timing {
    pub(super) mib: f64,
    pub(super) report: Run,
    pub(super) flamegraph: Run,
    /// Median over the rounds of report + flamegraph.
    pub(super) both: Run,
}

pub(super) struct BigProfile {
    pub(super) rows: usize,
    pub(super) json: Timing,
    pub(super) compact: Timing,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Medians of wall and CPU time; the first failure if any run failed.
fn medians(runs: &[Run]) -> Run {
    let runs: Vec<(f64, f64)> = runs.iter().cloned().collect::<Result<_, _>>()?;
    if runs.is_empty() {
        return Err("not run".into());
    }
    Ok((
        median(runs.iter().map(|run| run.0).collect()),
        median(runs.iter().map(|run| run.1).collect()),
    ))
}

pub(super) fn big_profile_timing(bench: &Bench) -> BigProfile {
    const ROWS: usize = 1_000_000;
    let json = bench.scratch.join("big.json");
    let compact = bench.scratch.join("big.lpb");
    let svg = bench.scratch.join("big.svg");
    let written = lockpath_profile::synthetic::write_lock_profile(&json, ROWS)
        .map_err(|err| format!("{err:#}"))
        .and_then(|()| {
            run(
                bench,
                &[
                    "convert".as_ref(),
                    json.as_os_str(),
                    "-o".as_ref(),
                    compact.as_os_str(),
                ],
            )
            .map(|_| ())
        });
    let mib = |path: &Path| fs::metadata(path).map_or(0.0, |m| m.len() as f64 / MIB);
    let (json_mib, compact_mib) = (mib(&json), mib(&compact));
    // [encoding][step] -> runs
    let mut runs: [[Vec<Run>; 2]; 2] = Default::default();
    for _ in 0..ROUNDS {
        for (encoding, path) in [&json, &compact].into_iter().enumerate() {
            let time = |args: &[&OsStr]| match &written {
                Ok(()) => run(bench, args),
                Err(err) => Err(err.clone()),
            };
            let report = time(&["report".as_ref(), path.as_os_str()]);
            let flamegraph = time(&[
                "flamegraph".as_ref(),
                path.as_os_str(),
                "-o".as_ref(),
                svg.as_os_str(),
            ]);
            runs[encoding][0].push(report);
            runs[encoding][1].push(flamegraph);
        }
    }
    for path in [&json, &compact, &svg] {
        let _ = fs::remove_file(path);
    }
    let timing = |mib: f64, [report, flamegraph]: &[Vec<Run>; 2]| {
        let both: Vec<Run> = report
            .iter()
            .zip(flamegraph)
            .map(|(a, b)| match (a, b) {
                (Ok(a), Ok(b)) => Ok((a.0 + b.0, a.1 + b.1)),
                (Err(err), _) | (_, Err(err)) => Err(err.clone()),
            })
            .collect();
        Timing {
            mib,
            report: medians(report),
            flamegraph: medians(flamegraph),
            both: medians(&both),
        }
    };
    BigProfile {
        rows: ROWS,
        json: timing(json_mib, &runs[0]),
        compact: timing(compact_mib, &runs[1]),
    }
}

/// Runs lockpath with `args`: wall time, and CPU time (which the other builds on a busy
/// machine do not inflate).
fn run(bench: &Bench, args: &[&OsStr]) -> Run {
    let (usage, wall) = lockpath_usage(bench, args)?;
    if !usage.success {
        return Err(format!("lockpath {args:?} failed"));
    }
    Ok((wall, usage.cpu_s))
}

pub(super) fn big_profile_table(big: &BigProfile) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "### report + flamegraph of {} rows (JSON {:.0} MiB, compact {:.0} MiB)\n",
        big.rows, big.json.mib, big.compact.mib
    );
    let _ = writeln!(
        md,
        "Medians of {ROUNDS} interleaved rounds; each command loads the profile itself. \
         The compact profile is the same one written by `lockpath convert big.json -o big.lpb`.\n"
    );
    table_header(
        &mut md,
        "step | JSON: wall time | JSON: CPU time | compact: wall time | compact: CPU time",
        "lrrrr",
    );
    let show = |r: &Run| match r {
        Ok((wall, cpu)) => format!("{wall:.2} s | {cpu:.2} s"),
        Err(e) => format!("failed: {} |", e.chars().take(80).collect::<String>()),
    };
    for (step, json, compact) in [
        ("lockpath report", &big.json.report, &big.compact.report),
        (
            "lockpath flamegraph",
            &big.json.flamegraph,
            &big.compact.flamegraph,
        ),
        ("both", &big.json.both, &big.compact.both),
    ] {
        let _ = writeln!(md, "| {step} | {} | {} |", show(json), show(compact));
    }
    md.push('\n');
    md
}
