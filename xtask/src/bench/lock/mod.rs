//! The lock probe beside its peers on lock-storm (4 threads; `--mode pipe`, and `--mode
//! open` when the workload offers it), in one table:
//!
//! - **Per-event BPF cost.** One run of the workload with `lockpath record --lock -p PID`
//!   and a bpftrace script that sums waits by kernel stack attached at the same time;
//!   with `kernel.bpf_stats_enabled=1`, two samples of `bpftool prog show -j` in steady
//!   state, and per tool `run_time_ns / run_cnt` of its `contention_begin` program plus
//!   that of its `contention_end` program (program names stop at 15 characters: programs
//!   are told apart by the process that holds them and the tracepoint they are attached to).
//!   The `contention_end` program apart too: it runs with the lock held.
//! - **Alone, and the floor.** The same figures for lockpath alone in another run (the
//!   targets are judged on these: beside bpftrace the workload contends far more), and,
//!   in a third run, for two bpftrace programs on `contention_end`, one that does nothing
//!   and one that only reads the clock: what any end program costs here before it does
//!   any work.
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
    fmt::Write as _,
    fs,
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{bail, Context as _, Result};

use super::{
    format_count, median,
    program_cost::{fdinfo_fields, held_objects, BpfStats},
    readme::run_context,
    table_header, Bench,
};
use crate::util;

mod attach;
mod counters;
mod reaper;
mod rounds;
mod side_by_side;
mod solo;
mod table;

use reaper::Reaper;
use rounds::interleaved;
use side_by_side::side_by_side;
use solo::{floor, lockpath_alone};
use table::storm_rows;

pub(super) const README_START: &str =
    "<!-- bench-lock:start (cargo xtask bench --lock-cost --readme) -->";
pub(super) const README_END: &str = "<!-- bench-lock:end -->";

/// Fewer spinning waits of the workload than this in a lockpath or reference run (or fewer
/// contentions in the steady-state window of the side-by-side run): the workload barely
/// contended, and the run is repeated, at most `ATTEMPTS` times in all.
const MIN_WAITS: u64 = 500;
const ATTEMPTS: usize = 3;

/// Targets: BPF time per contention, that of the end program (it runs with the lock held),
/// spin-wait accuracy, elapsed slowdown.
const TARGET_COST_NS: f64 = 200.0;
const TARGET_END_NS: f64 = 60.0;
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
        let side = logged(
            storm,
            "per-event cost, lockpath and bpftrace attached together",
            || side_by_side(bench, storm),
        );
        let alone = logged(storm, "per-event cost, lockpath alone", || {
            lockpath_alone(bench, storm)
        });
        let floor = logged(
            storm,
            "the floor, programs on contention_end that do nothing or only read the clock",
            || floor(bench, storm),
        );
        let rounds = interleaved(bench, storm, runs);
        rows.push(storm_rows(
            &name,
            (&side, &alone, &floor),
            &rounds,
            runs,
            &mut notes,
        ));
    }
    table_header(
        &mut md,
        "workload | measure | lockpath `--lock` | bpftrace, waits by kstack | stackless reference \
         | `perf lock record -a` | target",
        "llrrrrl",
    );
    for row in rows {
        md.push_str(&row);
    }
    md.push('\n');
    let _ = writeln!(
        md,
        "BPF time per contention: `run_time_ns / run_cnt` (`kernel.bpf_stats_enabled=1`) of \
         the tool's `contention_begin` program plus that of its `contention_end` program \
         (counts are of every contention on the machine: the programs run for all and \
         filter inside), for lockpath alone in one run, and for lockpath and bpftrace \
         attached to the same run in another. The end program is shown apart because it \
         runs with the lock held, beside the floor: the same figure for a program on \
         `contention_end` that does nothing and one that only reads the clock (bpftrace, a \
         third run of the workload). Spinlock wait: sum of \
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

/// Runs one measurement of `storm`, saying what it measures and, when it fails, why.
fn logged<T>(storm: &Storm, what: &str, run: impl FnOnce() -> Result<T>) -> Result<T> {
    util::say(format!("lock part, {}: {what}", storm.mode));
    let result = run();
    if let Err(err) = &result {
        util::say(format!("lock part, {}: failed: {err:#}", storm.mode));
    }
    result
}

/// Starts the workload for `seconds`, its output discarded.
fn spawn_storm(bench: &Bench, storm: &Storm, seconds: f64) -> Result<Reaper> {
    let command = storm_command(bench, storm, seconds);
    Reaper::spawn(
        Command::new(&command[0])
            .args(&command[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        Duration::from_secs(2),
    )
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

/// For `--lock-cost`: no other part, the table alone.
pub(super) fn check_tools() -> Result<()> {
    for tool in ["bpftrace", "bpftool"] {
        if util::find_in_path(tool).is_none() {
            bail!("bench --lock-cost: {tool} is not installed (apt install {tool})");
        }
    }
    Ok(())
}
