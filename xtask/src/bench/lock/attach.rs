//! One run of the workload with tools attached to it (lockpath, bpftrace): started,
//! waited for until each tool has its programs on the lock tracepoints, measured over
//! windows of BPF run counters, and stopped (the tools first, then the workload) on
//! every path.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Result};

use crate::util;

use super::{
    counters::{attached_tracepoints, bpftool_counters, ContentionCost, Counters},
    held_objects,
    reaper::{last_line, output_file, Reaper},
    spawn_storm, Bench, Storm,
};

/// How long the tools may take to attach.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(60);

/// The tracepoint programs (id → tracepoint) a tool has attached.
pub(super) type Attached = BTreeMap<u64, String>;

/// A tool of the run: its name (for messages), its process, the file its stderr goes
/// to, and its programs on the tracepoints.
struct Tool {
    name: &'static str,
    reaper: Reaper,
    err: PathBuf,
    programs: Attached,
}

/// The workload and `N` tools attached to it. Dropped: the tools are stopped first (they
/// detach), then the workload (fields drop in order).
pub(super) struct Run<const N: usize> {
    tools: Vec<Tool>,
    workload: Reaper,
}

/// One window of a run: each tool's programs' cost, in the order of the tools.
pub(super) struct Window<const N: usize> {
    pub(super) costs: [ContentionCost; N],
    pub(super) window_s: f64,
    /// The workload's own `contention_begin` events in the window (`perf stat -p`), when
    /// counted.
    pub(super) workload_events: Option<u64>,
}

impl<const N: usize> Run<N> {
    /// Starts the workload for `windows` windows of `bench.seconds`, and the tools
    /// `tools(pid)` makes for it (each `-o` to a file of `bench.scratch` named after
    /// `label` and the tool); returns once each tool has a program on every tracepoint of
    /// `needed`, held by its own process. Fails when a tool or the workload exits first,
    /// or after [`ATTACH_TIMEOUT`].
    pub(super) fn start(
        bench: &Bench,
        storm: &Storm,
        (label, windows): (&str, usize),
        needed: &[&str],
        tools: impl FnOnce(u32) -> [(&'static str, Command); N],
    ) -> Result<Run<N>> {
        let seconds = ATTACH_TIMEOUT.as_secs_f64() + windows as f64 * bench.seconds + 10.0;
        let workload = spawn_storm(bench, storm, seconds)?;
        let mut run = Run {
            tools: Vec::new(),
            workload,
        };
        for (index, (name, mut cmd)) in tools(run.workload.pid()).into_iter().enumerate() {
            let stem = bench.scratch.join(format!("{label}-{index}-{name}"));
            let err = stem.with_extension("err");
            let reaper = spawn_recorder(&mut cmd, &stem.with_extension("out"), &err)?;
            run.tools.push(Tool {
                name,
                reaper,
                err,
                programs: Attached::new(),
            });
        }
        run.wait_attached(needed)?;
        // Past the attachment's own burst of work.
        std::thread::sleep(Duration::from_millis(500));
        Ok(run)
    }

    fn wait_attached(&mut self, needed: &[&str]) -> Result<()> {
        let deadline = Instant::now() + ATTACH_TIMEOUT;
        loop {
            let mut complete = true;
            for tool in &mut self.tools {
                if let Some(status) = tool.reaper.exited()? {
                    bail!("{} exited ({status}): {}", tool.name, last_line(&tool.err));
                }
                // Programs the process holds: the attachments must be its own.
                let pid = tool.reaper.pid();
                tool.programs = held_by(pid, attached_tracepoints(pid));
                complete &= needed
                    .iter()
                    .all(|tracepoint| tool.programs.values().any(|name| name == tracepoint));
            }
            if complete {
                return Ok(());
            }
            if let Some(status) = self.workload.exited()? {
                bail!("the workload exited early ({status})");
            }
            if Instant::now() > deadline {
                bail!(
                    "not attached to {} within {} s",
                    needed.join(" and "),
                    ATTACH_TIMEOUT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Measures one window of `bench.seconds`: the BPF run counters of each tool's
    /// programs before and after it, and (`count_events`) the workload's own contention
    /// events during it. Fails when the workload or a tool exits during the window.
    pub(super) fn window(&mut self, bench: &Bench, count_events: bool) -> Result<Window<N>> {
        let window = Duration::from_secs_f64(bench.seconds);
        let before = bpftool_counters()?;
        let start = Instant::now();
        let workload_events = count_events
            .then(|| workload_events(self.workload.pid(), window, &bench.scratch))
            .flatten();
        if let Some(rest) = window.checked_sub(start.elapsed()) {
            std::thread::sleep(rest);
        }
        let after = bpftool_counters()?;
        let window_s = start.elapsed().as_secs_f64();
        if let Some(status) = self.workload.exited()? {
            bail!("the workload exited during the window ({status})");
        }
        let mut costs = Vec::with_capacity(N);
        for tool in &mut self.tools {
            if let Some(status) = tool.reaper.exited()? {
                bail!("{} exited during the window ({status})", tool.name);
            }
            let counters: BTreeMap<u64, Counters> = tool
                .programs
                .keys()
                .filter_map(|id| {
                    let after = after.get(id)?;
                    let before = before.get(id).copied().unwrap_or_default();
                    Some((*id, after.since(before)))
                })
                .collect();
            costs.push(ContentionCost::of(&counters, &tool.programs));
        }
        let Ok(costs) = <[ContentionCost; N]>::try_from(costs) else {
            bail!("not every tool was measured");
        };
        Ok(Window {
            costs,
            window_s,
            workload_events,
        })
    }
}

/// The attachments in `attached` whose program is held by process `pid`.
fn held_by(pid: u32, attached: Attached) -> Attached {
    let (programs, _) = held_objects(pid);
    attached
        .into_iter()
        .filter(|(id, _)| programs.contains(id))
        .collect()
}

/// Starts a recorder of the workload: `cmd -o OUTPUT`, its stderr kept in `err`.
fn spawn_recorder(cmd: &mut Command, output: &Path, err: &Path) -> Result<Reaper> {
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
fn workload_events(pid: u32, window: Duration, scratch: &Path) -> Option<u64> {
    util::find_in_path("perf")?;
    let output = scratch.join("workload-perf-stat.csv");
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
