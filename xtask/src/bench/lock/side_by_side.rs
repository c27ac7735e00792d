//! Per-event BPF cost: lockpath and the bpftrace stack script attached to one run.

use std::{
    collections::BTreeMap,
    fs,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Result};

use crate::util;

use super::{
    counters::{attached_tracepoints, bpftool_counters, ContentionCost, Counters},
    held_objects,
    reaper::{last_line, output_file, Reaper},
    spawn_storm, Bench, BpfStats, Storm, ATTEMPTS, MIN_WAITS, STACK_SCRIPT,
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

/// How long lockpath and bpftrace may take to attach to the lock tracepoints.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(60);

/// The tracepoint programs (id → tracepoint) attached by lockpath and by bpftrace.
type Attached = BTreeMap<u64, String>;

/// One attempt of [`side_by_side`]: starts the workload, then lockpath and bpftrace on
/// it, waits until both are attached, measures [`WINDOWS`] windows and returns the one
/// with lockpath's median figure, every window's figures in `windows`.
pub(super) fn side_by_side_once(bench: &Bench, storm: &Storm) -> Result<SideBySide> {
    let window = Duration::from_secs_f64(bench.seconds);
    // Long enough for both tools to attach and the window; stopped when done.
    let mut workload = spawn_storm(
        bench,
        storm,
        ATTACH_TIMEOUT.as_secs_f64() + 2.0 * window.as_secs_f64() + 10.0,
    )?;
    let pid = workload.pid();
    let lockpath_err = bench.scratch.join("side-lockpath.err");
    let bpftrace_err = bench.scratch.join("side-bpftrace.err");
    let mut lockpath = spawn_recorder(
        Command::new(&bench.lockpath)
            .args(["record", "--lock", "--top", "1", "-p"])
            .arg(pid.to_string()),
        &bench.scratch.join("side.json"),
        &lockpath_err,
    )?;
    let mut bpftrace = spawn_recorder(
        Command::new("bpftrace")
            .arg("-e")
            .arg(STACK_SCRIPT.replace("TARGET", &pid.to_string())),
        &bench.scratch.join("side.bt"),
        &bpftrace_err,
    )?;
    let (lockpath_tps, bpftrace_tps) = wait_attached(
        &mut workload,
        (&mut lockpath, &lockpath_err),
        (&mut bpftrace, &bpftrace_err),
    )?;
    // Programs the processes hold: the attachments above must be theirs.
    let lockpath_tps = held_by(lockpath.pid(), lockpath_tps);
    let bpftrace_tps = held_by(bpftrace.pid(), bpftrace_tps);
    std::thread::sleep(Duration::from_millis(500));
    let mut windows: Vec<SideBySide> = Vec::new();
    for _ in 0..WINDOWS {
        windows.push(measure_window(
            bench,
            window,
            &mut workload,
            [
                (&mut lockpath, &lockpath_tps),
                (&mut bpftrace, &bpftrace_tps),
            ],
        )?);
    }
    // Tools first (they detach), then the workload.
    drop(bpftrace);
    drop(lockpath);
    drop(workload);
    Ok(median_window(windows))
}

/// Waits until lockpath and bpftrace (each with the file its stderr goes to) both have
/// a program attached to `contention_begin` and one to `contention_end`, and returns
/// the tracepoint programs each has attached. Fails when a tool or the workload exits
/// first, or after [`ATTACH_TIMEOUT`].
fn wait_attached(
    workload: &mut Reaper,
    (lockpath, lockpath_err): (&mut Reaper, &Path),
    (bpftrace, bpftrace_err): (&mut Reaper, &Path),
) -> Result<(Attached, Attached)> {
    let deadline = Instant::now() + ATTACH_TIMEOUT;
    loop {
        if let Some(status) = lockpath.exited()? {
            bail!("lockpath exited ({status}): {}", last_line(lockpath_err));
        }
        if let Some(status) = bpftrace.exited()? {
            bail!("bpftrace exited ({status}): {}", last_line(bpftrace_err));
        }
        if let Some(status) = workload.exited()? {
            bail!("the workload exited early ({status})");
        }
        let both = |attached: &Attached| {
            ["contention_begin", "contention_end"]
                .iter()
                .all(|tp| attached.values().any(|name| name == tp))
        };
        let lockpath_tps = attached_tracepoints(lockpath.pid());
        let bpftrace_tps = attached_tracepoints(bpftrace.pid());
        if both(&lockpath_tps) && both(&bpftrace_tps) {
            return Ok((lockpath_tps, bpftrace_tps));
        }
        if Instant::now() > deadline {
            bail!(
                "lockpath and bpftrace were not both attached to the lock tracepoints within {} s",
                ATTACH_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The attachments in `attached` whose program is held by process `pid`.
pub(super) fn held_by(pid: u32, attached: Attached) -> Attached {
    let (programs, _) = held_objects(pid);
    attached
        .into_iter()
        .filter(|(id, _)| programs.contains(id))
        .collect()
}

/// Measures one window of `window` length: the BPF run counters of lockpath's and
/// bpftrace's programs (`tools`, in that order, each with its attachments) before and
/// after it, and the workload's own contention events during it. Fails when the
/// workload or a tool exits during the window, or a lock program did not run in it.
/// `attempts` is 1 and `windows` empty in the result.
fn measure_window(
    bench: &Bench,
    window: Duration,
    workload: &mut Reaper,
    tools: [(&mut Reaper, &Attached); 2],
) -> Result<SideBySide> {
    let [(lockpath, lockpath_tps), (bpftrace, bpftrace_tps)] = tools;
    let before = bpftool_counters()?;
    let start = Instant::now();
    let workload_events = workload_events(workload.pid(), window, &bench.scratch);
    if let Some(rest) = window.checked_sub(start.elapsed()) {
        std::thread::sleep(rest);
    }
    let after = bpftool_counters()?;
    let window_s = start.elapsed().as_secs_f64();
    if let Some(status) = workload.exited()? {
        bail!("the workload exited during the window ({status})");
    }
    for (tool, reaper) in [("lockpath", lockpath), ("bpftrace", bpftrace)] {
        if let Some(status) = reaper.exited()? {
            bail!("{tool} exited during the window ({status})");
        }
    }
    let delta = |attached: &Attached| {
        let counters: BTreeMap<u64, Counters> = attached
            .keys()
            .filter_map(|id| {
                let after = after.get(id)?;
                let before = before.get(id).copied().unwrap_or_default();
                Some((*id, after.since(before)))
            })
            .collect();
        ContentionCost::of(&counters, attached)
    };
    let (lockpath_cost, bpftrace_cost) = (delta(lockpath_tps), delta(bpftrace_tps));
    if !lockpath_cost.complete() || !bpftrace_cost.complete() {
        bail!("a lock program of lockpath or bpftrace did not run in the window");
    }
    Ok(SideBySide {
        lockpath: lockpath_cost,
        bpftrace: bpftrace_cost,
        window_s,
        workload_events,
        attempts: 1,
        windows: Vec::new(),
    })
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

/// Starts a recorder of the workload: `cmd -o OUTPUT`, its stderr kept in `err`.
pub(super) fn spawn_recorder(cmd: &mut Command, output: &Path, err: &Path) -> Result<Reaper> {
    Reaper::spawn(
        cmd.arg("-o")
            .arg(output)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(output_file(err)?),
        Duration::from_secs(30),
    )
}

/// The workload's `lock:contention_begin` events over about `window` (`perf stat -p PID
/// -- sleep W`): the programs run for every contention on the machine, and this says how
/// many of those were the workload's. None without perf.
pub(super) fn workload_events(pid: u32, window: Duration, scratch: &Path) -> Option<u64> {
    util::find_in_path("perf")?;
    let output = scratch.join("side-perf-stat.csv");
    let counted = util::capture(
        Command::new("perf")
            .args(["stat", "-x", ",", "-e", "lock:contention_begin", "-p"])
            .arg(pid.to_string())
            .arg("-o")
            .arg(&output)
            .args(["--", "sleep"])
            .arg(format!("{:.3}", window.as_secs_f64()))
            .stdin(Stdio::null()),
        "bench: perf stat of the workload",
        "install perf",
    );
    if let Err(err) = counted {
        util::say(format!("workload's own contentions not counted: {err:#}"));
        return None;
    }
    let text = fs::read_to_string(&output).ok()?;
    text.lines()
        .find(|line| line.contains("lock:contention_begin"))
        .and_then(|line| line.split(',').next())
        .and_then(|count| count.trim().parse().ok())
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
