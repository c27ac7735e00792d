//! The floor under a `contention_end` program's cost on this machine: what
//! `kernel.bpf_stats_enabled` charges a program on that tracepoint that does nothing, and
//! one that only reads the clock (two bpftrace programs, each in its own process, on the
//! same workload). An end program that measures a wait reads the clock, so it cannot cost
//! less than the second figure; lockpath's end program is judged against both.

use std::{
    collections::BTreeMap,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{bail, Result};

use super::{
    counters::{attached_tracepoints, bpftool_counters, Counters},
    reaper::last_line,
    side_by_side::{held_by, spawn_recorder},
    spawn_storm, Bench, BpfStats, Storm,
};

/// A program on `contention_end` that does nothing.
const EMPTY_SCRIPT: &str = "tracepoint:lock:contention_end { }";
/// A program on `contention_end` that reads the clock and nothing else.
const CLOCK_SCRIPT: &str = "tracepoint:lock:contention_end { $t = nsecs; }";

/// How long the two bpftrace processes may take to attach.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(60);

/// BPF time per run of the two floor programs, in ns.
#[derive(Clone, Copy)]
pub(super) struct Floor {
    pub(super) empty_ns: f64,
    pub(super) clock_ns: f64,
}

/// One run of the workload with the two floor programs attached; their time per run over
/// one steady-state window of `bench.seconds`.
pub(super) fn floor(bench: &Bench, storm: &Storm) -> Result<Floor> {
    let _stats = BpfStats::enable()?;
    let window = Duration::from_secs_f64(bench.seconds);
    let mut workload = spawn_storm(
        bench,
        storm,
        ATTACH_TIMEOUT.as_secs_f64() + window.as_secs_f64() + 10.0,
    )?;
    let mut tools = Vec::new();
    for (name, script) in [("empty", EMPTY_SCRIPT), ("clock", CLOCK_SCRIPT)] {
        let err = bench.scratch.join(format!("floor-{name}.err"));
        let reaper = spawn_recorder(
            Command::new("bpftrace").arg("-e").arg(script),
            &bench.scratch.join(format!("floor-{name}.bt")),
            &err,
        )?;
        tools.push((reaper, err));
    }
    let deadline = Instant::now() + ATTACH_TIMEOUT;
    let programs = loop {
        let mut programs = Vec::new();
        for (reaper, err) in &mut tools {
            if let Some(status) = reaper.exited()? {
                bail!("bpftrace exited ({status}): {}", last_line(err));
            }
            let attached = held_by(reaper.pid(), attached_tracepoints(reaper.pid()));
            programs.extend(
                attached
                    .into_iter()
                    .find(|(_, tracepoint)| tracepoint == "contention_end")
                    .map(|(id, _)| id),
            );
        }
        if programs.len() == tools.len() {
            break programs;
        }
        if let Some(status) = workload.exited()? {
            bail!("the workload exited early ({status})");
        }
        if Instant::now() > deadline {
            bail!(
                "bpftrace was not attached to lock:contention_end within {} s",
                ATTACH_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    std::thread::sleep(Duration::from_millis(500));
    let before = bpftool_counters()?;
    std::thread::sleep(window);
    let after = bpftool_counters()?;
    if let Some(status) = workload.exited()? {
        bail!("the workload exited during the window ({status})");
    }
    let per_run = |id: u64| per_run(&before, &after, id);
    let floor = match programs[..] {
        [empty, clock] => Floor {
            empty_ns: per_run(empty)?,
            clock_ns: per_run(clock)?,
        },
        _ => bail!("not every floor program was found"),
    };
    // The programs first (they detach), then the workload.
    drop(tools);
    drop(workload);
    Ok(floor)
}

/// BPF time per run of program `id` between two counter samples.
fn per_run(
    before: &BTreeMap<u64, Counters>,
    after: &BTreeMap<u64, Counters>,
    id: u64,
) -> Result<f64> {
    let Some(after) = after.get(&id) else {
        bail!("floor program {id} is gone");
    };
    match after
        .since(before.get(&id).copied().unwrap_or_default())
        .per_run()
    {
        Some(ns) => Ok(ns),
        None => bail!("floor program {id} did not run in the window"),
    }
}
