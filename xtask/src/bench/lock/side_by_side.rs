//! Per-event BPF cost: lockpath and the bpftrace stack script attached to one run.

use std::process::Command;

use anyhow::{anyhow, bail, Result};

use crate::util;

use super::{
    attach::Run, counters::ContentionCost, Bench, BpfStats, Storm, ATTEMPTS, MIN_WAITS,
    STACK_SCRIPT,
};

pub(super) struct SideBySide {
    pub(super) lockpath: ContentionCost,
    pub(super) bpftrace: ContentionCost,
    pub(super) window_s: f64,
    /// The workload's own `contention_begin` events in the window (`perf stat -p`).
    pub(super) workload_events: Option<u64>,
    pub(super) attempts: usize,
    /// lockpath's and bpftrace's BPF time per contention in every window of the run, in
    /// order; the fields above are of the window with lockpath's median figure.
    pub(super) windows: Vec<(f64, f64)>,
}

/// Consecutive windows of one side-by-side run: one window's figure moves by a third
/// from run to run on this shared VM, the median of three much less.
const WINDOWS: usize = 3;

/// One run of the workload with lockpath (`-p PID`) and the bpftrace stack script attached
/// at the same time; counters over three consecutive steady-state windows (two samples
/// each, delta), the window with lockpath's median figure reported. Repeated when the
/// workload barely contended in the window.
pub(super) fn side_by_side(bench: &Bench, storm: &Storm) -> Result<SideBySide> {
    let _stats = BpfStats::enable()?;
    let mut last_err = anyhow!("not run");
    for attempt in 1..=ATTEMPTS {
        match side_by_side_once(bench, storm) {
            Ok(mut result) => {
                result.attempts = attempt;
                if result.lockpath.begin.run_cnt >= MIN_WAITS || attempt == ATTEMPTS {
                    return Ok(result);
                }
                util::say(format!(
                    "lock part, {}: only {} contentions in the window, again",
                    storm.mode, result.lockpath.begin.run_cnt
                ));
                last_err = anyhow!("too few contentions");
            }
            Err(err) => {
                util::say(format!(
                    "lock part, {}: side-by-side attempt {attempt} failed: {err:#}",
                    storm.mode
                ));
                last_err = err;
            }
        }
    }
    Err(last_err)
}

/// One attempt of [`side_by_side`]: starts the workload, then lockpath and bpftrace on
/// it, waits until both are attached, measures [`WINDOWS`] windows and returns the one
/// with lockpath's median figure, every window's figures in `windows`.
pub(super) fn side_by_side_once(bench: &Bench, storm: &Storm) -> Result<SideBySide> {
    let mut run = Run::start(
        bench,
        storm,
        ("side", WINDOWS),
        &["contention_begin", "contention_end"],
        |pid| {
            let mut lockpath = Command::new(&bench.lockpath);
            lockpath
                .args(["record", "--lock", "--top", "1", "-p"])
                .arg(pid.to_string());
            let mut bpftrace = Command::new("bpftrace");
            bpftrace
                .arg("-e")
                .arg(STACK_SCRIPT.replace("TARGET", &pid.to_string()));
            [("lockpath", lockpath), ("bpftrace", bpftrace)]
        },
    )?;
    let mut windows: Vec<SideBySide> = Vec::new();
    for _ in 0..WINDOWS {
        let window = run.window(bench, true)?;
        let [lockpath, bpftrace] = window.costs;
        if !lockpath.complete() || !bpftrace.complete() {
            bail!("a lock program of lockpath or bpftrace did not run in the window");
        }
        windows.push(SideBySide {
            lockpath,
            bpftrace,
            window_s: window.window_s,
            workload_events: window.workload_events,
            attempts: 1,
            windows: Vec::new(),
        });
    }
    Ok(median_window(windows))
}

/// Of the measured `windows` (at least one), the one with lockpath's median BPF time
/// per contention (the upper middle one when their number is even), with every
/// window's lockpath / bpftrace figures, in order, in its `windows`.
fn median_window(mut windows: Vec<SideBySide>) -> SideBySide {
    let figures: Vec<(f64, f64)> = windows
        .iter()
        .map(|window| {
            (
                window.lockpath.per_contention().unwrap_or(0.0),
                window.bpftrace.per_contention().unwrap_or(0.0),
            )
        })
        .collect();
    let mut order: Vec<usize> = (0..windows.len()).collect();
    order.sort_by(|&a, &b| figures[a].0.total_cmp(&figures[b].0));
    let middle = order[order.len() / 2];
    let mut result = windows.swap_remove(middle);
    result.windows = figures;
    result
}

/// How many of the window's contentions were the workload's, and what the tools' BPF time
/// comes to per contention of the workload (an upper bound: it includes the filtering of
/// every other process's contentions).
pub(super) fn workload_share(side: &SideBySide) -> String {
    let Some(events) = side.workload_events.filter(|n| *n > 0) else {
        return String::new();
    };
    let total = side.lockpath.begin.run_cnt.max(1) as f64;
    let per_workload_event = |cost: &ContentionCost| {
        (cost.begin.run_time_ns + cost.end.run_time_ns) as f64 / events as f64
    };
    format!(
        ", about {events} ({:.0}%) of them the workload's (`perf stat -p` over the window), \
         which puts all BPF time per contention of the workload at {:.0} ns for lockpath and \
         {:.0} ns for bpftrace (an upper bound: it includes filtering out everyone else's)",
        (events as f64 / total * 100.0).min(100.0),
        per_workload_event(&side.lockpath),
        per_workload_event(&side.bpftrace)
    )
}
