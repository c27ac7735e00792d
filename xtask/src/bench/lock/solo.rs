//! Per-program BPF cost without a peer beside it, each in its own run of the workload:
//!
//! - **lockpath alone** (`record --lock -p PID`): its begin, end and wake-up programs, as
//!   a user running lockpath alone pays them (beside bpftrace, whose end program holds the
//!   lock for a microsecond, the workload contends far more and every figure grows);
//! - **the floor**: what `kernel.bpf_stats_enabled` charges a program on `contention_end`
//!   that does nothing, and one that only reads the clock (two bpftrace programs, each in
//!   its own process). An end program that measures a wait reads the clock, so it cannot
//!   cost less than the second figure.

use std::process::Command;

use anyhow::{bail, Result};

use super::{attach::Run, counters::ContentionCost, Bench, BpfStats, Storm, ATTEMPTS, MIN_WAITS};
use crate::util;

/// A program on `contention_end` that does nothing.
const EMPTY_SCRIPT: &str = "tracepoint:lock:contention_end { }";
/// A program on `contention_end` that reads the clock and nothing else.
const CLOCK_SCRIPT: &str = "tracepoint:lock:contention_end { $t = nsecs; }";

/// BPF time per run of the two floor programs, in ns.
#[derive(Clone, Copy)]
pub(super) struct Floor {
    pub(super) empty_ns: f64,
    pub(super) clock_ns: f64,
}

/// lockpath's programs in a run of the workload with nothing else attached; run again
/// when the workload barely contended in the window, like the side-by-side run.
pub(super) fn lockpath_alone(bench: &Bench, storm: &Storm) -> Result<ContentionCost> {
    let mut attempt = 1;
    loop {
        let [cost] = measure(
            bench,
            storm,
            &["contention_begin", "contention_end"],
            |pid| {
                let mut cmd = Command::new(&bench.lockpath);
                cmd.args(["record", "--lock", "--top", "1", "-p"])
                    .arg(pid.to_string());
                [("lockpath", cmd)]
            },
        )?;
        if cost.begin.run_cnt >= MIN_WAITS || attempt == ATTEMPTS {
            return Ok(cost);
        }
        util::say(format!(
            "lock part, {}: lockpath alone saw only {} contentions in the window, again",
            storm.mode, cost.begin.run_cnt
        ));
        attempt += 1;
    }
}

/// The floor programs, both attached to one run of the workload.
pub(super) fn floor(bench: &Bench, storm: &Storm) -> Result<Floor> {
    let [empty, clock] = measure(bench, storm, &["contention_end"], |_| {
        [EMPTY_SCRIPT, CLOCK_SCRIPT].map(|script| {
            let mut cmd = Command::new("bpftrace");
            cmd.arg("-e").arg(script);
            ("bpftrace", cmd)
        })
    })?;
    let per_run = |cost: ContentionCost| match cost.end.per_run() {
        Some(ns) => Ok(ns),
        None => bail!("a floor program did not run in the window"),
    };
    Ok(Floor {
        empty_ns: per_run(empty)?,
        clock_ns: per_run(clock)?,
    })
}

/// Starts the workload and the `N` tools `tools(pid)` makes for it, waits until each has
/// a program on every tracepoint of `needed`, and returns each tool's programs' cost over
/// one steady-state window of `bench.seconds`. Every process is stopped on every path.
fn measure<const N: usize>(
    bench: &Bench,
    storm: &Storm,
    needed: &[&str],
    tools: impl FnOnce(u32) -> [(&'static str, Command); N],
) -> Result<[ContentionCost; N]> {
    let _stats = BpfStats::enable()?;
    let mut run = Run::start(bench, storm, ("solo", 1), needed, tools)?;
    Ok(run.window(bench, false)?.costs)
}
