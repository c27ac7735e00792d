//! The eBPF programs' own cost per event, kernel map memory and lockpath's RSS.

use std::{
    collections::BTreeMap,
    ffi::OsStr,
    fmt::Write as _,
    fs,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use crate::util;

use super::{
    families::{Family, Workload},
    overhead::workload_command,
    table_header, Bench, MIB,
};

pub(super) struct ProgramCost {
    pub(super) name: String,
    pub(super) run_cnt: u64,
    pub(super) run_time_ns: u64,
}

pub(super) struct FamilyCost {
    pub(super) family: &'static str,
    pub(super) workload: &'static str,
    pub(super) programs: Vec<ProgramCost>,
    pub(super) map_memlock: u64,
    pub(super) map_count: usize,
    pub(super) max_rss_kib: u64,
}

/// Restores `kernel.bpf_stats_enabled` to its value before the benchmark.
pub(super) struct BpfStats {
    pub(super) before: String,
}

pub(super) const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    pub(super) fn enable() -> Result<BpfStats> {
        let before = fs::read_to_string(BPF_STATS)
            .with_context(|| format!("cannot read {BPF_STATS}"))?
            .trim()
            .to_string();
        fs::write(BPF_STATS, "1").with_context(|| format!("cannot write {BPF_STATS}"))?;
        Ok(BpfStats { before })
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        if let Err(err) = fs::write(BPF_STATS, &self.before) {
            util::say(format!(
                "cannot restore {BPF_STATS} to {}: {err}",
                self.before
            ));
        }
    }
}

/// Records system-wide at default sizes while the workload runs; reads the programs'
/// run counters, the maps' memlock, and lockpath's peak RSS when it exits.
pub(super) fn program_costs(
    bench: &Bench,
    family: &'static Family,
    workload: &Workload,
) -> Result<FamilyCost> {
    let stats = BpfStats::enable()?;
    let profile = bench.scratch.join("cost.json");
    let (child, stderr) = start_recording(
        Command::new(&bench.lockpath)
            .arg("record")
            .args(family.flags)
            .args(["-a", "--top", "1", "-o"])
            .arg(&profile),
        "lockpath",
    )?;
    let pid = child.id();
    let measured = (|| {
        let (programs, maps) = held_objects(pid);
        if programs.is_empty() {
            bail!("lockpath holds no program");
        }
        let map_memlock = maps.values().sum();
        let command = workload_command(bench, workload);
        util::capture(
            Command::new(&command[0]).args(&command[1..]),
            "bench: workload",
            "see the workload's error",
        )?;
        let costs = bpftool_costs(&programs)?;
        Ok((costs, map_memlock, maps.len()))
    })();
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let max_rss_kib = wait_rusage(pid)?;
    let stderr = stderr.finish();
    let _ = fs::remove_file(&profile);
    drop(stats);
    let (programs, map_memlock, map_count) =
        measured.with_context(|| format!("lockpath said: {}", stderr.trim()))?;
    Ok(FamilyCost {
        family: family.name,
        workload: workload.name,
        programs,
        map_memlock,
        map_count,
        max_rss_kib,
    })
}

/// What a `lockpath record` started by the bench said on stderr, read by a thread from
/// the start (so the pipe never fills).
pub(super) struct Stderr {
    text: std::sync::Arc<std::sync::Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
}

impl Stderr {
    /// All of it, once lockpath has exited.
    pub(super) fn finish(self) -> String {
        let _ = self.reader.join();
        let text = self.text.lock().map(|text| text.clone());
        text.unwrap_or_default()
    }
}

/// Starts a `lockpath record` command (stdin and stdout closed, stderr read) and waits
/// until it records.
pub(super) fn start_recording(
    command: &mut Command,
    what: &str,
) -> Result<(std::process::Child, Stderr)> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {what}"))?;
    let stderr = wait_until_recording(&mut child)?;
    Ok((child, stderr))
}

/// Waits until the `lockpath record` child (stderr piped) says it is recording: every
/// probe attached, not just the first program loaded (a loaded machine takes seconds
/// between the two).
fn wait_until_recording(child: &mut std::process::Child) -> Result<Stderr> {
    use std::io::BufRead as _;
    let pipe = child
        .stderr
        .take()
        .context("lockpath's stderr is not piped")?;
    let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let (ready, started) = std::sync::mpsc::channel();
    let sink = text.clone();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
            if line.starts_with("lockpath:") && line.contains(" recording ") {
                let _ = ready.send(());
            }
            if let Ok(mut text) = sink.lock() {
                text.push_str(&line);
                text.push('\n');
            }
        }
    });
    let stderr = Stderr { text, reader };
    match started.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => Ok(stderr),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            let _ = child.kill();
            let _ = child.wait();
            bail!("lockpath did not start recording within 60 s")
        }
        // The reader ended: lockpath exited before recording.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            let _ = child.wait();
            bail!(
                "lockpath exited before recording: {}",
                stderr.finish().trim()
            )
        }
    }
}

/// The numeric fields of each of a process's `/proc/PID/fdinfo` entries (`prog_id`,
/// `run_time_ns`, `map_id`, `memlock`, ...), one map per file descriptor.
pub(crate) fn fdinfo_fields(pid: u32) -> Vec<BTreeMap<String, u64>> {
    let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| fs::read_to_string(entry.path()).ok())
        .map(|info| {
            info.lines()
                .filter_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    Some((name.trim().to_string(), value.trim().parse().ok()?))
                })
                .collect()
        })
        .collect()
}

/// Program ids and map ids (with their memlock bytes) that a process holds.
pub(super) fn held_objects(pid: u32) -> (Vec<u64>, BTreeMap<u64, u64>) {
    let mut programs = Vec::new();
    let mut maps = BTreeMap::new();
    for fields in fdinfo_fields(pid) {
        if let Some(&id) = fields.get("prog_id") {
            if !programs.contains(&id) {
                programs.push(id);
            }
        }
        if let (Some(&id), Some(&memlock)) = (fields.get("map_id"), fields.get("memlock")) {
            maps.insert(id, memlock);
        }
    }
    (programs, maps)
}

/// `bpftool -j prog show`, parsed: every loaded program with its bpf_stats counters.
pub(super) fn bpftool_programs() -> Result<serde_json::Value> {
    let json = util::capture(
        Command::new("bpftool").args(["-j", "prog", "show"]),
        "bench: bpftool prog show",
        "install bpftool",
    )?;
    serde_json::from_str(&json).context("bpftool printed invalid JSON")
}

pub(super) fn bpftool_costs(ids: &[u64]) -> Result<Vec<ProgramCost>> {
    let programs = bpftool_programs()?;
    // Program names stop at 15 characters; the raw tracepoint a link attaches to says more.
    let links = util::capture(
        Command::new("bpftool").args(["-j", "link", "show"]),
        "bench: bpftool link show",
        "install bpftool",
    )
    .ok()
    .and_then(|json| serde_json::from_str::<serde_json::Value>(&json).ok())
    .unwrap_or_default();
    let attached_to = |id: u64| {
        links
            .as_array()
            .into_iter()
            .flatten()
            .find(|link| link["prog_id"].as_u64() == Some(id))
            .and_then(|link| link["tp_name"].as_str().map(str::to_string))
    };
    let mut costs = Vec::new();
    for program in programs.as_array().into_iter().flatten() {
        let Some(id) = program["id"].as_u64() else {
            continue;
        };
        if !ids.contains(&id) {
            continue;
        }
        let name = program["name"].as_str().unwrap_or("?");
        costs.push(ProgramCost {
            name: match attached_to(id) {
                Some(tracepoint) => format!("{name} ({tracepoint})"),
                None => name.to_string(),
            },
            run_cnt: program["run_cnt"].as_u64().unwrap_or(0),
            run_time_ns: program["run_time_ns"].as_u64().unwrap_or(0),
        });
    }
    costs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(costs)
}

/// Waits for a child and returns its peak RSS (KiB) from the kernel's rusage.
pub(super) fn wait_rusage(pid: u32) -> Result<u64> {
    Ok(wait_usage(pid)?.max_rss_kib)
}

pub(super) struct Usage {
    pub(super) max_rss_kib: u64,
    pub(super) cpu_s: f64,
    pub(super) success: bool,
    /// The exit status, when the child exited (not killed by a signal).
    pub(super) exit_code: Option<i32>,
}

/// Waits for a child; its peak RSS and CPU time (user + system) from wait4.
pub(super) fn wait_usage(pid: u32) -> Result<Usage> {
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid out-parameter for wait4.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child with valid out-pointers.
    let rc = unsafe { libc::wait4(pid as i32, &mut status, 0, &mut usage) };
    if rc < 0 {
        bail!("wait4 failed: {}", std::io::Error::last_os_error());
    }
    let seconds = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    Ok(Usage {
        max_rss_kib: usage.ru_maxrss as u64,
        cpu_s: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        success: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        exit_code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
    })
}

/// Runs lockpath with `args`, its output discarded, and waits for it: its usage and its
/// wall time in seconds, or why it could not be run.
pub(super) fn lockpath_usage<S: AsRef<OsStr>>(
    bench: &Bench,
    args: impl IntoIterator<Item = S>,
) -> Result<(Usage, f64), String> {
    let start = Instant::now();
    let child = Command::new(&bench.lockpath)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|err| err.to_string())?;
    let usage = wait_usage(child.id()).map_err(|err| format!("{err:#}"))?;
    Ok((usage, start.elapsed().as_secs_f64()))
}

pub(super) fn cost_tables(costs: &[FamilyCost]) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "### eBPF programs' own cost (kernel.bpf_stats_enabled=1)\n"
    );
    table_header(
        &mut md,
        "family | workload | program | runs | total | per event",
        "lllrrr",
    );
    for cost in costs {
        for program in &cost.programs {
            let per_event = if program.run_cnt > 0 {
                format!(
                    "{:.0} ns",
                    program.run_time_ns as f64 / program.run_cnt as f64
                )
            } else {
                "-".into()
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {:.1} ms | {per_event} |",
                cost.family,
                cost.workload,
                program.name,
                program.run_cnt,
                program.run_time_ns as f64 / 1e6
            );
        }
    }
    let _ = writeln!(md, "\n### Memory (system-wide recording, default sizes)\n");
    table_header(
        &mut md,
        "family | kernel maps | map memory (memlock) | lockpath max RSS",
        "lrrr",
    );
    for cost in costs {
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} MiB | {:.1} MiB |",
            cost.family,
            cost.map_count,
            cost.map_memlock as f64 / MIB,
            cost.max_rss_kib as f64 / 1024.0
        );
    }
    md.push('\n');
    md
}
