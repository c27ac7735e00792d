//! The lock probe beside its peers on lock-storm (4 threads; `--mode pipe`, and `--mode
//! open` when the workload offers it), in one table:
//!
//! - **Per-event BPF cost.** One run of the workload with `lockpath record --lock -p PID`
//!   and a bpftrace script that sums waits by kernel stack attached at the same time;
//!   with `kernel.bpf_stats_enabled=1`, two samples of `bpftool prog show -j` in steady
//!   state, and per tool `run_time_ns / run_cnt` of its `contention_begin` program plus
//!   that of its `contention_end` program (program names stop at 15 characters: programs
//!   are told apart by the process that holds them and the tracepoint they are attached to).
//! - **Spin-wait accuracy.** Interleaved runs: lockpath's average spinlock wait of the
//!   workload (rows of its pid with `flags & 0x21 == 1`, outcome 0: sum total_ns / sum
//!   count) against a stackless bpftrace reference that only timestamps begin and end;
//!   medians, their ratio, and the reference's own per-event cost.
//! - **Elapsed overhead.** The workload's ops/s alone, under lockpath, under the bpftrace
//!   stack script, under the reference and under `perf lock record -a`, in the same
//!   interleaved rounds; medians, as slowdowns against the run alone.
//!
//! A lockpath or reference run in which the workload barely contended (a loaded machine can
//! starve it) is repeated. Every tool is stopped and reaped on every path, so no program
//! stays loaded.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    fs,
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context as _, Result};

use super::{
    format_count, median,
    program_cost::{fdinfo_fields, held_objects, BpfStats},
    readme::run_context,
    Bench,
};
use crate::util;

pub(super) const README_START: &str =
    "<!-- bench-lock:start (cargo xtask bench --lock-cost --readme) -->";
pub(super) const README_END: &str = "<!-- bench-lock:end -->";

/// Fewer spinning waits of the workload than this in a lockpath or reference run (or fewer
/// contentions in the steady-state window of the side-by-side run): the workload barely
/// contended, and the run is repeated, at most `ATTEMPTS` times in all.
const MIN_WAITS: u64 = 500;
const ATTEMPTS: usize = 3;

/// Targets of issue 12: BPF time per contention, spin-wait accuracy, elapsed slowdown.
const TARGET_COST_NS: f64 = 800.0;
const TARGET_ACCURACY: f64 = 0.10;
const TARGET_SLOWDOWN: f64 = 1.05;

/// bpftrace, waits summed by kernel stack; `TARGET` becomes the pid test's right side.
const STACK_SCRIPT: &str = "\
tracepoint:lock:contention_begin /pid == TARGET/ { @start[tid] = nsecs; }
tracepoint:lock:contention_end /@start[tid]/ { @[kstack] = sum(nsecs - @start[tid]); delete(@start[tid]); }
";

/// bpftrace, the stackless reference: spinning waits of the command only, timestamps and
/// nothing else (a spinning waiter cannot sleep or migrate, so the CPU is its key).
const REFERENCE_SCRIPT: &str = "\
tracepoint:lock:contention_begin /pid == cpid && (args->flags & 33) == 1/ { @lock[cpu] = args->lock_addr; @start[cpu] = nsecs; }
tracepoint:lock:contention_end /@lock[cpu] == args->lock_addr/ { @total = sum(nsecs - @start[cpu]); @n = count(); delete(@start[cpu]); delete(@lock[cpu]); }
";

/// `LCB_F_SPIN | LCB_F_MUTEX`: a row is a spinning type when this masks to `LCB_F_SPIN`.
const SPIN_MASK: u64 = 0x21;
/// The outcome of a wait sits above bit 16 of a profile row's flags (0: acquired).
const OUTCOME_SHIFT: u64 = 16;

struct Storm {
    mode: &'static str,
    what: &'static str,
}

const STORMS: &[Storm] = &[
    Storm {
        mode: "pipe",
        what: "4 threads create+close pipes",
    },
    Storm {
        mode: "open",
        what: "4 threads open+close /dev/null",
    },
];

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Tool {
    Alone,
    Lockpath,
    Reference,
    BpftraceStack,
    PerfLock,
}

/// One round, in this order.
const TOOLS: [Tool; 5] = [
    Tool::Alone,
    Tool::Lockpath,
    Tool::Reference,
    Tool::BpftraceStack,
    Tool::PerfLock,
];

impl Tool {
    fn label(self) -> &'static str {
        match self {
            Tool::Alone => "alone",
            Tool::Lockpath => "lockpath record --lock",
            Tool::Reference => "stackless reference (bpftrace)",
            Tool::BpftraceStack => "bpftrace, waits by kstack",
            Tool::PerfLock => "perf lock record -a",
        }
    }

    fn program(self) -> Option<&'static str> {
        match self {
            Tool::Alone | Tool::Lockpath => None,
            Tool::Reference | Tool::BpftraceStack => Some("bpftrace"),
            Tool::PerfLock => Some("perf"),
        }
    }
}

/// The lock part of the benchmark, as Markdown; failures are shown in the table.
pub(super) fn section(bench: &Bench, runs: usize) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "### Lock probe beside bpftrace and `perf lock` (`cargo xtask bench --lock-cost`)\n"
    );
    let _ = writeln!(md, "{}\n", run_context(runs, bench.seconds));
    if let Err(err) = ensure_tracefs() {
        util::say(format!("lock part: {err:#}"));
    }
    let offered = offered_modes();
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for storm in STORMS {
        let name = format!("`lock-storm --mode {}` ({})", storm.mode, storm.what);
        if !offered.iter().any(|mode| mode == storm.mode) {
            notes.push(format!(
                "{name}: not measured, this lock-storm has no `--mode {}`.",
                storm.mode
            ));
            continue;
        }
        util::say(format!(
            "lock part, {}: per-event cost, lockpath and bpftrace attached together",
            storm.mode
        ));
        let side = side_by_side(bench, storm);
        if let Err(err) = &side {
            util::say(format!(
                "lock part, {}: side-by-side run failed: {err:#}",
                storm.mode
            ));
        }
        let rounds = interleaved(bench, storm, runs);
        rows.push(storm_rows(&name, &side, &rounds, runs, &mut notes));
    }
    let _ = writeln!(
        md,
        "| workload | measure | lockpath `--lock` | bpftrace, waits by kstack | stackless reference | `perf lock record -a` | target |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---|");
    for row in rows {
        md.push_str(&row);
    }
    md.push('\n');
    let _ = writeln!(
        md,
        "BPF time per contention: `run_time_ns / run_cnt` (`kernel.bpf_stats_enabled=1`) of \
         the tool's `contention_begin` program plus that of its `contention_end` program, \
         both tools attached to the same run (counts are of every contention on the \
         machine: the programs run for all and filter inside). Spinlock wait: sum of \
         waits / number of waits of the workload's spinning locks (lockpath: rows with \
         `flags & 0x21 == 1`, outcome 0). Slowdown: median ops/s alone / median ops/s \
         under the tool. The reference pays a hash update between its two timestamps, so \
         lockpath may read below it by up to the reference's own cost.\n"
    );
    for note in notes {
        let _ = writeln!(md, "- {note}");
    }
    md.push('\n');
    md
}

/// Modes that the workload in this tree offers: `pipe` always; `open` since it was added
/// (an unknown mode is not refused by older lock-storms, they run `both`, so the source says).
fn offered_modes() -> Vec<String> {
    let source = util::workspace_root().join("tests/src/bin/lock-storm.rs");
    let text = fs::read_to_string(&source).unwrap_or_default();
    let mut modes = vec!["pipe".to_string()];
    if text.contains("\"open\"") {
        modes.push("open".into());
    }
    modes
}

fn ensure_tracefs() -> Result<()> {
    let mounts = fs::read_to_string("/proc/mounts").context("cannot read /proc/mounts")?;
    if mounts
        .lines()
        .any(|line| line.split_whitespace().nth(1) == Some("/sys/kernel/tracing"))
    {
        return Ok(());
    }
    util::capture(
        Command::new("mount").args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"]),
        "bench: mounting tracefs",
        "bpftrace needs tracefs at /sys/kernel/tracing",
    )
    .map(|_| ())
}

fn storm_command(bench: &Bench, storm: &Storm, seconds: f64) -> Vec<String> {
    vec![
        bench.bin_dir.join("lock-storm").display().to_string(),
        "--mode".into(),
        storm.mode.into(),
        "--threads".into(),
        "4".into(),
        "--seconds".into(),
        seconds.to_string(),
    ]
}

/// A child that is stopped (SIGINT, then SIGKILL after `grace`) and reaped when dropped,
/// so that no tool, and none of the programs its descriptors hold, outlives an error.
struct Reaper {
    child: Child,
    grace: Duration,
}

impl Reaper {
    fn spawn(cmd: &mut Command, grace: Duration) -> Result<Reaper> {
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", util::describe(cmd)))?;
        Ok(Reaper { child, grace })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status once the child has exited (the status is kept after reaping, so
    /// the pid is never signalled once it may have been reused).
    fn exited(&mut self) -> Result<Option<ExitStatus>> {
        self.child.try_wait().context("cannot wait for a child")
    }

    fn stop(&mut self) -> Option<ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        // SAFETY: kill(2) on our own child, which has not been reaped yet.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + self.grace;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        self.child.wait().ok()
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last non-empty line of a file, for error messages.
fn last_line(path: &Path) -> String {
    fs::read_to_string(path)
        .ok()
        .and_then(|text| {
            text.lines()
                .rev()
                .map(str::trim)
                .find(|line| !line.is_empty())
                .map(str::to_string)
        })
        .unwrap_or_else(|| "no error output".into())
}

fn output_file(path: &Path) -> Result<fs::File> {
    fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))
}

/// Run counters of one program.
#[derive(Clone, Copy, Default)]
struct Counters {
    run_time_ns: u64,
    run_cnt: u64,
    recursion_misses: u64,
}

impl Counters {
    fn since(self, before: Counters) -> Counters {
        Counters {
            run_time_ns: self.run_time_ns.saturating_sub(before.run_time_ns),
            run_cnt: self.run_cnt.saturating_sub(before.run_cnt),
            recursion_misses: self
                .recursion_misses
                .saturating_sub(before.recursion_misses),
        }
    }

    fn per_run(self) -> Option<f64> {
        (self.run_cnt > 0).then(|| self.run_time_ns as f64 / self.run_cnt as f64)
    }
}

/// `bpftool prog show -j`: counters of every loaded program by id.
fn bpftool_counters() -> Result<BTreeMap<u64, Counters>> {
    let json = util::capture(
        Command::new("bpftool").args(["-j", "prog", "show"]),
        "bench: bpftool prog show",
        "install bpftool",
    )?;
    let programs: serde_json::Value =
        serde_json::from_str(&json).context("bpftool printed invalid JSON")?;
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
fn fdinfo_counters(pid: u32) -> BTreeMap<u64, Counters> {
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
fn attached_tracepoints(pid: u32) -> BTreeMap<u64, String> {
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

/// A tool's BPF time per contention: its `contention_begin` and `contention_end` programs.
#[derive(Clone, Copy, Default)]
struct ContentionCost {
    begin: Counters,
    end: Counters,
}

impl ContentionCost {
    /// From counters by program id and the tracepoint of each program. Several programs on
    /// one tracepoint all run per event: their times add up.
    fn of(counters: &BTreeMap<u64, Counters>, attached: &BTreeMap<u64, String>) -> Self {
        let mut cost = ContentionCost::default();
        for (id, tracepoint) in attached {
            let Some(counters) = counters.get(id) else {
                continue;
            };
            let slot = match tracepoint.as_str() {
                "contention_begin" => &mut cost.begin,
                "contention_end" => &mut cost.end,
                _ => continue,
            };
            slot.run_time_ns += counters.run_time_ns;
            slot.run_cnt = slot.run_cnt.max(counters.run_cnt);
            slot.recursion_misses += counters.recursion_misses;
        }
        cost
    }

    fn complete(&self) -> bool {
        self.begin.run_cnt > 0 && self.end.run_cnt > 0
    }

    fn per_contention(&self) -> Option<f64> {
        Some(self.begin.per_run()? + self.end.per_run()?)
    }

    fn show(&self) -> String {
        match (self.begin.per_run(), self.end.per_run()) {
            (Some(begin), Some(end)) => {
                format!("{begin:.0} + {end:.0} = **{:.0} ns**", begin + end)
            }
            _ => "no runs".into(),
        }
    }
}

struct SideBySide {
    lockpath: ContentionCost,
    bpftrace: ContentionCost,
    window_s: f64,
    /// The workload's own `contention_begin` events in the window (`perf stat -p`).
    workload_events: Option<u64>,
    attempts: usize,
}

/// One run of the workload with lockpath (`-p PID`) and the bpftrace stack script attached
/// at the same time; counters over a steady-state window (two samples, delta). Repeated
/// when the workload barely contended in the window.
fn side_by_side(bench: &Bench, storm: &Storm) -> Result<SideBySide> {
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

fn side_by_side_once(bench: &Bench, storm: &Storm) -> Result<SideBySide> {
    const ATTACH_TIMEOUT: Duration = Duration::from_secs(60);
    let window = Duration::from_secs_f64(bench.seconds);
    // Long enough for both tools to attach and the window; stopped when done.
    let command = storm_command(
        bench,
        storm,
        ATTACH_TIMEOUT.as_secs_f64() + 2.0 * window.as_secs_f64() + 10.0,
    );
    let mut workload = Reaper::spawn(
        Command::new(&command[0])
            .args(&command[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        Duration::from_secs(2),
    )?;
    let pid = workload.pid();
    let lockpath_err = bench.scratch.join("side-lockpath.err");
    let bpftrace_err = bench.scratch.join("side-bpftrace.err");
    let mut lockpath = Reaper::spawn(
        Command::new(&bench.lockpath)
            .args(["record", "--lock", "--top", "1", "-p"])
            .arg(pid.to_string())
            .arg("-o")
            .arg(bench.scratch.join("side.json"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(output_file(&lockpath_err)?),
        Duration::from_secs(30),
    )?;
    let mut bpftrace = Reaper::spawn(
        Command::new("bpftrace")
            .arg("-e")
            .arg(STACK_SCRIPT.replace("TARGET", &pid.to_string()))
            .arg("-o")
            .arg(bench.scratch.join("side.bt"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(output_file(&bpftrace_err)?),
        Duration::from_secs(30),
    )?;
    // Both attached: each holds a program on contention_begin and one on contention_end.
    let deadline = Instant::now() + ATTACH_TIMEOUT;
    let (lockpath_tps, bpftrace_tps) = loop {
        if let Some(status) = lockpath.exited()? {
            bail!("lockpath exited ({status}): {}", last_line(&lockpath_err));
        }
        if let Some(status) = bpftrace.exited()? {
            bail!("bpftrace exited ({status}): {}", last_line(&bpftrace_err));
        }
        if let Some(status) = workload.exited()? {
            bail!("the workload exited early ({status})");
        }
        let both = |attached: &BTreeMap<u64, String>| {
            ["contention_begin", "contention_end"]
                .iter()
                .all(|tp| attached.values().any(|name| name == tp))
        };
        let lockpath_tps = attached_tracepoints(lockpath.pid());
        let bpftrace_tps = attached_tracepoints(bpftrace.pid());
        if both(&lockpath_tps) && both(&bpftrace_tps) {
            break (lockpath_tps, bpftrace_tps);
        }
        if Instant::now() > deadline {
            bail!(
                "lockpath and bpftrace were not both attached to the lock tracepoints within {} s",
                ATTACH_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    // Programs the processes hold: the attachments above must be theirs.
    let held = |pid: u32, attached: BTreeMap<u64, String>| {
        let (programs, _) = held_objects(pid);
        attached
            .into_iter()
            .filter(|(id, _)| programs.contains(id))
            .collect::<BTreeMap<_, _>>()
    };
    let lockpath_tps = held(lockpath.pid(), lockpath_tps);
    let bpftrace_tps = held(bpftrace.pid(), bpftrace_tps);
    std::thread::sleep(Duration::from_millis(500));
    let before = bpftool_counters()?;
    let start = Instant::now();
    let workload_events = workload_events(pid, window, &bench.scratch);
    if let Some(rest) = window.checked_sub(start.elapsed()) {
        std::thread::sleep(rest);
    }
    let after = bpftool_counters()?;
    let window_s = start.elapsed().as_secs_f64();
    if let Some(status) = workload.exited()? {
        bail!("the workload exited during the window ({status})");
    }
    for (tool, reaper) in [("lockpath", &mut lockpath), ("bpftrace", &mut bpftrace)] {
        if let Some(status) = reaper.exited()? {
            bail!("{tool} exited during the window ({status})");
        }
    }
    let delta = |attached: &BTreeMap<u64, String>| {
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
    let lockpath_cost = delta(&lockpath_tps);
    let bpftrace_cost = delta(&bpftrace_tps);
    // Tools first (they detach), then the workload.
    drop(bpftrace);
    drop(lockpath);
    drop(workload);
    if !lockpath_cost.complete() || !bpftrace_cost.complete() {
        bail!("a lock program of lockpath or bpftrace did not run in the window");
    }
    Ok(SideBySide {
        lockpath: lockpath_cost,
        bpftrace: bpftrace_cost,
        window_s,
        workload_events,
        attempts: 1,
    })
}

/// The workload's `lock:contention_begin` events over about `window` (`perf stat -p PID
/// -- sleep W`): the programs run for every contention on the machine, and this says how
/// many of those were the workload's. None without perf.
fn workload_events(pid: u32, window: Duration, scratch: &Path) -> Option<u64> {
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

/// What one run gave.
#[derive(Default)]
struct Run {
    ops_per_s: f64,
    /// Spinning waits of the workload (count, total ns): lockpath and the reference.
    spin: Option<(u64, u64)>,
    /// The reference's BPF time per contention, from the last sample before it exited.
    cost: Option<ContentionCost>,
}

#[derive(Default)]
struct ToolRuns {
    runs: Vec<Run>,
    error: Option<String>,
    /// Runs repeated because the workload barely contended.
    repeated: usize,
}

impl ToolRuns {
    fn median_ops(&self) -> Option<f64> {
        median(&self.runs.iter().map(|r| r.ops_per_s).collect::<Vec<_>>())
    }

    fn median_spin_ns(&self) -> Option<f64> {
        let averages: Vec<f64> = self
            .runs
            .iter()
            .filter_map(|run| run.spin)
            .filter(|(count, _)| *count > 0)
            .map(|(count, total)| total as f64 / count as f64)
            .collect();
        median(&averages)
    }

    fn median_waits(&self) -> Option<f64> {
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
fn interleaved(bench: &Bench, storm: &Storm, runs: usize) -> BTreeMap<Tool, ToolRuns> {
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
fn run_tool(bench: &Bench, storm: &Storm, tool: Tool) -> Result<Run> {
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
    let mut lookups = 0;
    let status = loop {
        if let Some(status) = child.exited()? {
            break status;
        }
        if Instant::now() > deadline {
            bail!("did not finish within {:.0} s", bench.seconds + 120.0);
        }
        if tool == Tool::Reference {
            // Poll the counters while it runs and keep the last sample: they go with the
            // programs when bpftrace exits.
            let sample = fdinfo_counters(child.pid());
            if !sample.is_empty() {
                if sample.keys().any(|id| !attached.contains_key(id)) && lookups < 10 {
                    lookups += 1;
                    attached = attached_tracepoints(child.pid());
                }
                last_sample = sample;
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
fn lockpath_spin(path: &Path) -> Result<(u64, u64)> {
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
fn reference_spin(path: &Path) -> Result<(u64, u64)> {
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

/// The table rows of one workload.
fn storm_rows(
    name: &str,
    side: &Result<SideBySide>,
    rounds: &BTreeMap<Tool, ToolRuns>,
    runs: usize,
    notes: &mut Vec<String>,
) -> String {
    let mut md = String::new();
    let get = |tool: Tool| rounds.get(&tool);
    let failed = |tool: Tool| {
        get(tool)
            .and_then(|r| r.error.as_deref())
            .map(|e| format!("failed: {}", cell(e, 60)))
    };
    let verdict = |ok: bool| if ok { "yes" } else { "**no**" };
    // The reference's own cost: its run with the median BPF time per contention.
    let mut reference_runs: Vec<(f64, ContentionCost)> = get(Tool::Reference)
        .map(|r| {
            r.runs
                .iter()
                .filter_map(|run| Some((run.cost?.per_contention()?, run.cost?)))
                .collect()
        })
        .unwrap_or_default();
    reference_runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let reference_mid = reference_runs
        .get(reference_runs.len().saturating_sub(1) / 2)
        .map(|(_, cost)| *cost);
    let reference_cost = reference_mid.and_then(|cost| cost.per_contention());
    // The workload is named in its first row only.
    let mut workload = name.to_string();

    // (a) BPF time per contention.
    match side {
        Ok(side) => {
            let ours = side.lockpath.per_contention();
            let _ = writeln!(
                md,
                "| {} | BPF time per contention, begin + end (one run, both attached, {:.1} s window) | {} | {} | {} | | {} |",
                std::mem::take(&mut workload),
                side.window_s,
                side.lockpath.show(),
                side.bpftrace.show(),
                reference_mid.map_or("-".into(), |cost| format!(
                    "{} (its own runs, median)",
                    cost.show().replace("**", "")
                )),
                ours.map_or("-".into(), |ns| format!(
                    "<= {TARGET_COST_NS:.0} ns: {}",
                    verdict(ns <= TARGET_COST_NS)
                ))
            );
            notes.push(format!(
                "{name}, side-by-side run: {} contention_begin / {} contention_end runs of lockpath's programs and {} / {} of bpftrace's in the window{}; recursion misses lockpath {} / {}, bpftrace {} / {}{}.",
                side.lockpath.begin.run_cnt,
                side.lockpath.end.run_cnt,
                side.bpftrace.begin.run_cnt,
                side.bpftrace.end.run_cnt,
                workload_share(side),
                side.lockpath.begin.recursion_misses,
                side.lockpath.end.recursion_misses,
                side.bpftrace.begin.recursion_misses,
                side.bpftrace.end.recursion_misses,
                if side.attempts > 1 {
                    format!("; attempt {} (earlier ones barely contended or failed)", side.attempts)
                } else {
                    String::new()
                }
            ));
        }
        Err(err) => {
            let short = cell(&format!("{err:#}"), 100);
            let _ = writeln!(
                md,
                "| {} | BPF time per contention, begin + end | failed: {short} | | | | |",
                std::mem::take(&mut workload)
            );
        }
    }

    // (b) Spin-wait accuracy.
    let ours = get(Tool::Lockpath).and_then(ToolRuns::median_spin_ns);
    let reference = get(Tool::Reference).and_then(ToolRuns::median_spin_ns);
    let show_wait = |ns: Option<f64>, tool: Tool| match (ns, failed(tool)) {
        (_, Some(failed)) => failed,
        (Some(ns), None) => format!("{:.3} us", ns / 1000.0),
        (None, None) => "-".into(),
    };
    let (ratio, target) = match (ours, reference) {
        (Some(ours), Some(reference)) if reference > 0.0 => {
            let ratio = ours / reference;
            let below_by = reference - ours;
            let ok = (ratio - 1.0).abs() <= TARGET_ACCURACY
                || (below_by > 0.0 && reference_cost.is_some_and(|cost| below_by <= cost));
            (
                format!(" (x{ratio:.2} of the reference)"),
                format!(
                    "within {:.0}% of the reference, or below by <= its own cost: {}",
                    TARGET_ACCURACY * 100.0,
                    verdict(ok)
                ),
            )
        }
        _ => (String::new(), String::new()),
    };
    let _ = writeln!(
        md,
        "| {} | average spinlock wait of the workload (median of {runs}) | {}{ratio} | | {} | | {target} |",
                std::mem::take(&mut workload),
        show_wait(ours, Tool::Lockpath),
        show_wait(reference, Tool::Reference),
    );

    // (c) Elapsed overhead.
    let alone = get(Tool::Alone).and_then(ToolRuns::median_ops);
    let slowdown = |tool: Tool| -> String {
        if let Some(failed) = failed(tool) {
            return failed;
        }
        match (alone, get(tool).and_then(ToolRuns::median_ops)) {
            (Some(alone), Some(ops)) if ops > 0.0 => format!("x{:.2}", alone / ops),
            _ => "-".into(),
        }
    };
    let lockpath_slowdown = match (alone, get(Tool::Lockpath).and_then(ToolRuns::median_ops)) {
        (Some(alone), Some(ops)) if ops > 0.0 => Some(alone / ops),
        _ => None,
    };
    let _ = writeln!(
        md,
        "| {} | slowdown: ops/s alone / ops/s under the tool (median of {runs}; alone {}) | {} | {} | {} | {} | {} |",
                std::mem::take(&mut workload),
        match (alone, failed(Tool::Alone)) {
            (_, Some(failed)) => failed,
            (Some(ops), None) => format!("{} ops/s", format_count(ops)),
            (None, None) => "-".into(),
        },
        slowdown(Tool::Lockpath),
        slowdown(Tool::BpftraceStack),
        slowdown(Tool::Reference),
        slowdown(Tool::PerfLock),
        lockpath_slowdown.map_or(String::new(), |s| format!(
            "<= x{TARGET_SLOWDOWN:.2}: {}",
            verdict(s <= TARGET_SLOWDOWN)
        ))
    );

    let waits = |tool: Tool| {
        get(tool)
            .and_then(ToolRuns::median_waits)
            .map_or("-".into(), |n| format!("{n:.0}"))
    };
    let repeated: Vec<String> = rounds
        .iter()
        .filter(|(_, r)| r.repeated > 0)
        .map(|(tool, r)| format!("{} {}", tool.label(), r.repeated))
        .collect();
    notes.push(format!(
        "{name}: spinning waits per run (median) lockpath {}, reference {}{}.",
        waits(Tool::Lockpath),
        waits(Tool::Reference),
        if repeated.is_empty() {
            String::new()
        } else {
            format!(
                "; runs repeated because the workload barely contended (< {MIN_WAITS} waits): {}",
                repeated.join(", ")
            )
        }
    ));
    if let (Some(ours), Some(reference)) = (ours, reference) {
        if ours < reference {
            notes.push(format!(
                "{name}: lockpath reads {:.0} ns below the reference; the reference's own BPF time per contention is {}.",
                reference - ours,
                reference_cost.map_or("unknown".into(), |c| format!("{c:.0} ns"))
            ));
        }
    }
    md
}

/// How many of the window's contentions were the workload's, and what the tools' BPF time
/// comes to per contention of the workload (an upper bound: it includes the filtering of
/// every other process's contentions).
fn workload_share(side: &SideBySide) -> String {
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

/// An error message as a table cell: one line, no column separators, at most `max` chars.
fn cell(text: &str, max: usize) -> String {
    text.chars()
        .map(|c| match c {
            '|' => '/',
            '\n' | '\r' => ' ',
            c => c,
        })
        .take(max)
        .collect()
}

/// For `--lock-cost`: no other part, the table alone.
pub(super) fn check_tools() -> Result<()> {
    for tool in ["bpftrace", "bpftool"] {
        if util::find_in_path(tool).is_none() {
            bail!("bench --lock-cost: {tool} is not installed (apt install {tool})");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_output_is_read_from_bpftrace_json() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("xtask-lock-test-{}", std::process::id()));
        fs::create_dir_all(&dir)?;
        let path = dir.join("ref.json");
        fs::write(
            &path,
            "{\"type\": \"attached_probes\", \"data\": {\"probes\": 2}}\n\
             {\"type\": \"map\", \"data\": {\"@n\": 1958}}\n\
             {\"type\": \"map\", \"data\": {\"@total\": 13855862}}\n",
        )?;
        let spin = reference_spin(&path);
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(spin?, (1958, 13855862));
        Ok(())
    }

    #[test]
    fn lockpath_spin_keeps_spinning_acquired_rows_of_the_workload() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("xtask-lock-test2-{}", std::process::id()));
        fs::create_dir_all(&dir)?;
        let path = dir.join("profile.json");
        // spinlock (1), rwlock:W (5), mutex:spin (33), mutex (32), spinlock !ETIMEDOUT,
        // and a spinlock of another process.
        fs::write(
            &path,
            r#"{"processes":[{"pid":7,"comm":"lock-storm"},{"pid":8,"comm":"other"}],"locks":[
              {"pid":7,"flags":1,"count":10,"total_ns":1000},
              {"pid":7,"flags":5,"count":2,"total_ns":400},
              {"pid":7,"flags":33,"count":50,"total_ns":50000},
              {"pid":7,"flags":32,"count":50,"total_ns":50000},
              {"pid":7,"flags":131073,"count":3,"total_ns":9000},
              {"pid":8,"flags":1,"count":9,"total_ns":9000}]}"#,
        )?;
        let spin = lockpath_spin(&path);
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(spin?, (12, 1400));
        Ok(())
    }

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
