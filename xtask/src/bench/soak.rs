//! `--soak`: lockpath's memory over a long system-wide recording.

use std::{
    fmt::Write as _,
    fs,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::Result;

use crate::util;

use super::{
    families::{available_families, Family},
    program_cost::{held_objects, start_recording, wait_rusage, wait_usage, Usage},
    table_header, Bench, MIB,
};

/// `--soak`: records system-wide with every family for `minutes` under a lock storm and a
/// ping-pong, sampling lockpath's RSS and its maps' memlock every 10 s.
pub(super) fn soak(bench: &Bench, minutes: f64) -> Result<String> {
    let families = available_families(&bench.lockpath, None)?;
    let profile = bench.scratch.join("soak.json");
    let mut record = Command::new(&bench.lockpath);
    record.arg("record");
    record.args(record_flags(&families));
    let (mut child, _stderr) = start_recording(
        record.args(["-a", "--top", "1", "-o"]).arg(&profile),
        "lockpath",
    )?;
    let pid = child.id();
    // Beside it, the always-on agent as a fleet runs it: its CPU per hour.
    let agent_dir = bench.scratch.join("soak-agent");
    let _ = fs::remove_dir_all(&agent_dir);
    let (agent, _agent_stderr) = start_recording(
        Command::new(&bench.lockpath)
            .args(["record", "--lock", "--offcpu", "-a", "--rotate", "1m"])
            .args(["--metrics", "127.0.0.1:0", "-o"])
            .arg(&agent_dir),
        "the always-on agent",
    )?;
    let agent_pid = agent.id();
    // Steady state: from when it records (kernel symbols and BTF are loaded by then).
    let agent_start = Instant::now();
    let agent_cpu_start = cpu_seconds(agent_pid);
    let total = Duration::from_secs_f64(minutes * 60.0);
    let storm = Command::new(bench.bin_dir.join("lock-storm"))
        .args(["--mode", "both", "--threads", "4", "--seconds"])
        .arg(total.as_secs_f64().to_string())
        .stdout(Stdio::null())
        .spawn();
    let pong = Command::new(bench.bin_dir.join("ping-pong"))
        .args(["--seconds"])
        .arg(total.as_secs_f64().to_string())
        .stdout(Stdio::null())
        .spawn();
    let samples = sample_memory(pid, total);
    for workload in [storm, pong].into_iter().flatten() {
        let _ = workload.wait_with_output();
    }
    let agent_hours = agent_start.elapsed().as_secs_f64() / 3600.0;
    let agent_cpu = cpu_seconds(agent_pid) - agent_cpu_start;
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(agent_pid as i32, libc::SIGTERM) };
    let agent_usage = wait_usage(agent_pid)?;
    let agent_periods = fs::read_dir(&agent_dir).map_or(0, |dir| dir.count());
    drop(agent);
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let max_rss_kib = wait_rusage(pid)?;
    let _ = child.stdout.take();
    let profile_ok = fs::metadata(&profile).is_ok_and(|m| m.len() > 0);
    let mut md = String::new();
    memory_report(&mut md, minutes, total, &samples, max_rss_kib, profile_ok);
    agent_report(&mut md, agent_cpu, agent_hours, &agent_usage, agent_periods);
    Ok(md)
}

/// The command-line flags that turn on all of `families`, in order, each bare flag
/// (one not followed by a value) once: families share some (`--wakers --offcpu` and
/// `--offcpu`).
fn record_flags(families: &[&Family]) -> Vec<&'static str> {
    let mut flags: Vec<&str> = Vec::new();
    for family in families {
        for (index, &flag) in family.flags.iter().enumerate() {
            let bare = family
                .flags
                .get(index + 1)
                .is_none_or(|next| next.starts_with("--"));
            if !(flag.starts_with("--") && bare && flags.contains(&flag)) {
                flags.push(flag);
            }
        }
    }
    flags
}

/// Samples process `pid` every 10 s for `total`: seconds since the start, RSS in KiB
/// and the memlock of the BPF maps it holds, in bytes; reports each sample as it goes.
fn sample_memory(pid: u32, total: Duration) -> Vec<(f64, u64, u64)> {
    let start = Instant::now();
    let mut samples: Vec<(f64, u64, u64)> = Vec::new();
    while start.elapsed() < total {
        let rss = vm_kib(pid, "VmRSS:");
        let memlock = held_objects(pid).1.values().sum::<u64>();
        samples.push((start.elapsed().as_secs_f64(), rss, memlock));
        util::say(format!(
            "soak {:.0}/{:.0} s: RSS {rss} KiB, maps {:.1} MiB",
            start.elapsed().as_secs_f64(),
            total.as_secs_f64(),
            memlock as f64 / MIB
        ));
        std::thread::sleep(Duration::from_secs(10).min(total.saturating_sub(start.elapsed())));
    }
    samples
}

/// The soak section's heading, its table of memory `samples` (as from
/// [`sample_memory`] over `total`), and a line on RSS growth once settled, the peak
/// RSS `max_rss_kib` and whether the profile was written.
fn memory_report(
    md: &mut String,
    minutes: f64,
    total: Duration,
    samples: &[(f64, u64, u64)],
    max_rss_kib: u64,
    profile_ok: bool,
) {
    let _ = writeln!(
        md,
        "## Soak: {minutes} min system-wide, all families, under load\n"
    );
    table_header(md, "t (s) | lockpath RSS | map memory", "rrr");
    for (t, rss, memlock) in samples {
        let _ = writeln!(
            md,
            "| {t:.0} | {:.1} MiB | {:.1} MiB |",
            *rss as f64 / 1024.0,
            *memlock as f64 / MIB
        );
    }
    // Flat: once settled (maps fill, symbol tables load: the first minute, or the first
    // sixth of a short run), RSS grows < 10%.
    let settle_s = (total.as_secs_f64() / 6.0).min(60.0);
    let settled: Vec<u64> = samples
        .iter()
        .filter(|s| s.0 >= settle_s)
        .map(|s| s.1)
        .collect();
    let growth = match (settled.first(), settled.last()) {
        (Some(&first), Some(&last)) if first > 0 => (last as f64 - first as f64) / first as f64,
        _ => 0.0,
    };
    let _ = writeln!(
        md,
        "\nRSS growth after the first {settle_s:.0} s: {:+.1}% ({}); peak RSS {:.1} MiB (includes the final drain); profile written: {}\n",
        growth * 100.0,
        if growth < 0.10 { "flat" } else { "**growing**" },
        max_rss_kib as f64 / 1024.0,
        if profile_ok { "yes" } else { "**no**" }
    );
}

/// The line on the always-on agent: `agent_cpu` CPU seconds over `agent_hours` of
/// steady recording, per hour and as a share of one CPU, the rest of its CPU time from
/// `usage` (start-up and the last drain), the `periods` it wrote, its exit and peak RSS.
fn agent_report(md: &mut String, agent_cpu: f64, agent_hours: f64, usage: &Usage, periods: usize) {
    let _ = writeln!(
        md,
        "Always-on agent beside it (`record --lock --offcpu -a --rotate 1m --metrics`), \
         once recording: {:.1} CPU s per hour ({:.3}% of one CPU; user space: drains, \
         files, metrics; start-up and the last drain: {:.1} s more), {periods} \
         periods written, exit {}; peak RSS {:.1} MiB\n",
        agent_cpu / agent_hours,
        agent_cpu / (agent_hours * 3600.0) * 100.0,
        usage.cpu_s - agent_cpu,
        if usage.success { "clean" } else { "**failed**" },
        usage.max_rss_kib as f64 / 1024.0
    );
}

/// User + system CPU seconds of a live process so far (/proc/PID/stat).
pub(super) fn cpu_seconds(pid: u32) -> f64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name (in parentheses, may hold spaces): state is field 3,
    // utime and stime are fields 14 and 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |index: usize| {
        fields
            .get(index)
            .and_then(|value| value.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(11) + ticks(12)) / per_second
}

pub(super) fn vm_kib(pid: u32, field: &str) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}
