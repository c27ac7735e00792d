//! Root integration tests of on-CPU sampling, user-space symbols and the targets
//! (`-- CMD` with forks, `-p`, `--cgroup`), against workloads that measure themselves.

#[macro_use]
mod common;

use std::{
    collections::HashMap,
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use common::*;

/// The `seventy_ns=.. thirty_ns=.. rounds=.. pid=..` line of a cpu-burn run.
fn burn_report(text: &str) -> HashMap<String, u64> {
    let line = text
        .lines()
        .find(|line| line.starts_with("seventy_ns="))
        .unwrap_or_else(|| panic!("no cpu-burn report in:\n{text}"));
    line.split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key.to_string(), value.parse().expect("number")))
        .collect()
}

/// Frame names of stack `id` (leaf first), or none.
fn frames(profile: &serde_json::Value, id: &serde_json::Value) -> Vec<String> {
    id.as_u64()
        .map(|id| stack_names(profile, id))
        .unwrap_or_default()
}

/// CPU rows of the profile.
fn cpu_rows(profile: &serde_json::Value) -> Vec<serde_json::Value> {
    profile["cpu"].as_array().expect("cpu rows").clone()
}

/// Samples of `pid` whose user stack holds a frame containing `function`.
fn samples_in(profile: &serde_json::Value, pid: u64, function: &str) -> u64 {
    cpu_rows(profile)
        .iter()
        .filter(|row| row["pid"].as_u64() == Some(pid))
        .filter(|row| {
            frames(profile, &row["user_stack"])
                .iter()
                .any(|name| name.contains(function))
        })
        .map(|row| row["samples"].as_u64().expect("samples"))
        .sum()
}

fn pids_sampled(profile: &serde_json::Value) -> Vec<u64> {
    let mut pids: Vec<u64> = cpu_rows(profile)
        .iter()
        .filter_map(|row| row["pid"].as_u64())
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn hot_functions_get_their_share_by_name() {
    // The file's other tests burn CPU (4 to 6 busy threads on a 2-CPU machine); a share
    // within 4 points of the workload's own clock is measured without them (CI saw
    // 0.759 against 0.701 once beside them; 0.700-0.704 here in three runs beside them).
    let _alone = alone();
    let dir = or_skip!(root_test("cpu-share"));
    let profile_path = dir.join("cpu.json");
    let svg_path = dir.join("cpu.svg");
    let burn = workload("cpu-burn");
    let args = record_args_with_flamegraph(
        &["--cpu", "--freq", "999"],
        &profile_path,
        &svg_path,
        &[path_str(&burn), "--cpu-seconds", "2"],
    );
    let (child, programs) = spawn_recording(&args);
    assert!(!programs.is_empty(), "the sampling program is loaded");
    let output = child.finish(&programs);
    let stdout = String::from_utf8_lossy(&output.stdout);

    let truth = burn_report(&stdout);
    let pid = truth["pid"];
    let expected = truth["seventy_ns"] as f64 / (truth["seventy_ns"] + truth["thirty_ns"]) as f64;
    let profile = load_json(&profile_path);
    let seventy = samples_in(&profile, pid, "burn_seventy");
    let thirty = samples_in(&profile, pid, "burn_thirty");
    let samples = seventy + thirty;
    assert!(
        samples > 1000,
        "2 s of CPU at 999 Hz: {seventy} + {thirty} samples"
    );
    let measured = seventy as f64 / samples as f64;
    // Sampling error: 3 standard deviations of a binomial share (about 3 points at 2000
    // samples), and one point for the workload's own clock reads.
    let tolerance = 0.01 + 3.0 * (expected * (1.0 - expected) / samples as f64).sqrt();
    eprintln!(
        "burn_seventy share: profile {measured:.3} of {samples} samples, workload's own clock {expected:.3} (tolerance {tolerance:.3})"
    );
    assert!(
        (measured - expected).abs() < tolerance,
        "share {measured:.3} vs {expected:.3}"
    );
    // The names are the real, demangled symbols of the workload.
    let names: Vec<String> = cpu_rows(&profile)
        .iter()
        .flat_map(|row| frames(&profile, &row["user_stack"]))
        .collect();
    assert!(
        names.iter().any(|name| name == "cpu_burn::burn_seventy"),
        "demangled Rust name: {names:?}"
    );
    assert!(
        names.iter().any(|name| name == "cpu_burn::main"),
        "the caller too: {names:?}"
    );
    // The summary names them, the SVG is well-formed and marks kernel frames.
    assert!(
        stdout.contains("cpu_burn::burn_seventy"),
        "summary:\n{stdout}"
    );
    let svg = read_svg(&svg_path);
    assert!(
        svg.contains("burn_seventy") && svg.contains("cpu-burn"),
        "frames in the SVG"
    );
    let folded = export_folded(&profile_path, "cpu");
    let total: u64 = folded
        .lines()
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    let rows: u64 = cpu_rows(&profile)
        .iter()
        .map(|row| row["samples"].as_u64().expect("samples"))
        .sum();
    assert_eq!(total, rows, "the folded export carries every sample");
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn forked_child_is_followed() {
    let _alone = alone();
    let dir = or_skip!(root_test("cpu-fork"));
    let profile_path = dir.join("p.json");
    let burn = workload("cpu-burn");
    let output = lockpath_ok(&record_args(
        &["--cpu", "--freq", "499"],
        &profile_path,
        &[path_str(&burn), "--fork", "--cpu-seconds", "1"],
    ));
    let truth = burn_report(&String::from_utf8_lossy(&output.stdout));
    let child = truth["pid"];
    let profile = load_json(&profile_path);
    let samples = samples_in(&profile, child, "burn_");
    let expected = (truth["seventy_ns"] + truth["thirty_ns"]) as f64 * 499.0 / 1e9;
    assert!(
        samples as f64 > expected * 0.8,
        "the forked child {child} is sampled: {samples} samples, {expected:.0} expected, pids {:?}",
        pids_sampled(&profile)
    );
}

/// Starts cpu-burn in the background (its stdout piped).
fn start_burn(seconds: &str) -> std::process::Child {
    Command::new(workload("cpu-burn"))
        .args(["--seconds", seconds, "--seventy", "1", "--thirty", "1"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start cpu-burn")
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn pid_target_is_sampled_and_late_strangers_are_not() {
    let _alone = alone();
    let dir = or_skip!(root_test("cpu-pid"));
    let profile_path = dir.join("p.json");
    // Burns longer than any startup and the 2 s recording: killed after it.
    let mut target = start_burn("30");
    std::thread::sleep(Duration::from_millis(300));
    let pid = target.id().to_string();
    let (recording, programs) = spawn_recording(&[
        "record",
        "--cpu",
        "--freq",
        "499",
        "-p",
        &pid,
        "-d",
        "2",
        "-o",
        path_str(&profile_path),
    ]);
    // A process that starts after recording began and is not a target.
    let mut stranger = start_burn("1.5");
    recording.finish(&programs);
    let _ = stranger.wait();
    let _ = target.kill();
    let _ = target.wait();
    let profile = load_json(&profile_path);
    let pids = pids_sampled(&profile);
    assert_eq!(pids, vec![target.id() as u64], "only the target is sampled");
    let samples = samples_in(&profile, target.id() as u64, "burn_");
    assert!(
        samples > 50,
        "the running target's functions: {samples} samples"
    );
    let _ = stranger.id();
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn pid_target_follows_threads_created_later() {
    let _alone = alone();
    let dir = or_skip!(root_test("cpu-late-thread"));
    let profile_path = dir.join("p.json");
    // The thread starts 3 s after the process, and works 2 s: the recording (6 s from
    // its start) has begun before it and ends after it, however slow lockpath starts.
    let started = std::time::Instant::now();
    let target = Command::new(workload("cpu-burn"))
        .args(["--late-thread", "3000", "--seconds", "2"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start cpu-burn");
    let pid = target.id().to_string();
    let (recording, programs) = spawn_recording(&[
        "record",
        "--cpu",
        "--freq",
        "499",
        "-p",
        &pid,
        "-d",
        "6",
        "-o",
        path_str(&profile_path),
    ]);
    let attached = started.elapsed();
    assert!(
        attached < Duration::from_millis(2900),
        "lockpath took {attached:?} to start: the thread was not created after it"
    );
    recording.finish(&programs);
    let output = target.wait_with_output().expect("wait for cpu-burn");
    let text = String::from_utf8_lossy(&output.stdout);
    let tid: u64 = text
        .lines()
        .find_map(|line| line.strip_prefix("tid="))
        .and_then(|tid| tid.trim().parse().ok())
        .unwrap_or_else(|| panic!("no tid in {text}"));
    let profile = load_json(&profile_path);
    let samples: u64 = cpu_rows(&profile)
        .iter()
        .filter(|row| row["tid"].as_u64() == Some(tid))
        .filter(|row| {
            frames(&profile, &row["user_stack"])
                .iter()
                .any(|name| name.contains("burn_"))
        })
        .map(|row| row["samples"].as_u64().expect("samples"))
        .sum();
    assert!(
        samples > 20,
        "the thread {tid} started after recording began is sampled: {samples}"
    );
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn cgroup_target_includes_only_its_processes() {
    let _alone = alone();
    let (cgroup, dir) = or_skip!(root_test_in_cgroup("cpu-cgroup"));
    let profile_path = dir.join("p.json");
    // Burns longer than any startup and the 2 s recording: killed after it.
    let mut inside = start_burn("30");
    cgroup.adopt(inside.id());
    let mut outside = start_burn("30");
    let output = lockpath_ok(&[
        "record",
        "--cpu",
        "--freq",
        "499",
        "--cgroup",
        path_str(&cgroup.path),
        "-d",
        "2",
        "-o",
        path_str(&profile_path),
    ]);
    for burn in [&mut inside, &mut outside] {
        let _ = burn.kill();
        let _ = burn.wait();
    }
    let profile = load_json(&profile_path);
    let pids = pids_sampled(&profile);
    assert_eq!(
        pids,
        vec![inside.id() as u64],
        "only the cgroup's process: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(
        samples_in(&profile, inside.id() as u64, "burn_thirty") > 20,
        "the cgroup's process is sampled"
    );
    drop(cgroup);
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn exited_process_keeps_its_symbols() {
    let _alone = alone();
    let dir = or_skip!(root_test("cpu-exited"));
    let profile_path = dir.join("p.json");
    // A copy of the workload, deleted once it exited: the symbols must come from what
    // was kept while it lived.
    let copy = dir.join("burn-copy");
    std::fs::copy(workload("cpu-burn"), &copy).expect("copy the workload");
    let script = format!(
        "'{0}' --cpu-seconds 0.5; rm -f '{0}'; sleep 1.5",
        path_str(&copy)
    );
    let output = lockpath_ok(&record_args(
        &["--cpu", "--freq", "499"],
        &profile_path,
        &["sh", "-c", &script],
    ));
    assert!(!copy.exists());
    let truth = burn_report(&String::from_utf8_lossy(&output.stdout));
    let profile = load_json(&profile_path);
    let samples = samples_in(&profile, truth["pid"], "burn_seventy");
    let expected = truth["seventy_ns"] as f64 * 499.0 / 1e9;
    assert!(
        samples as f64 > expected * 0.8,
        "the exited, deleted process is symbolized: {samples} samples of burn_seventy, {expected:.0} expected"
    );
}

fn one_line_error(args: &[&str], expect: &str) {
    let stderr = fails_with(args, expect);
    // clap adds a "For more information, try '--help'." line after its one-line error.
    let lines: Vec<&str> = stderr
        .trim()
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    assert!(
        lines.len() == 1 || (lines.len() == 2 && lines[1].contains("--help")),
        "one line: {stderr}"
    );
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn bad_targets_and_frequencies_are_refused() {
    let dir = or_skip!(root_test("cpu-bad"));
    let out = dir.join("p.json");
    let out = path_str(&out);
    one_line_error(
        &["record", "--cpu", "--freq", "0", "-o", out],
        "at least 1 Hz",
    );
    one_line_error(
        &["record", "--cpu", "--freq", "10000000", "-o", out],
        "perf_event_max_sample_rate",
    );
    one_line_error(
        &["record", "--cpu", "-p", "999999999", "-o", out],
        "no process with pid 999999999",
    );
    // A process that has exited (a zombie not yet reaped) is not a target.
    let mut quick = Command::new("true").spawn().expect("start true");
    let pid = quick.id().to_string();
    let zombie = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z'))
        })
    };
    for _ in 0..500 {
        if zombie() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(zombie(), "true exited within 5 s");
    one_line_error(&["record", "--cpu", "-p", &pid, "-o", out], "exited");
    let _ = quick.wait();
    one_line_error(
        &["record", "--cpu", "--cgroup", path_str(&dir), "-o", out],
        "not a cgroup",
    );
    // A cgroup v1 directory has a cgroup.procs too, but its id is not what eBPF sees.
    if let Some(v1) = ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/pids"]
        .iter()
        .find(|p| Path::new(p).join("cgroup.procs").exists())
    {
        one_line_error(
            &["record", "--cpu", "--cgroup", v1, "-o", out],
            "not a cgroup v2",
        );
    }
    one_line_error(
        &["record", "--cpu", "--cgroup", "/nonexistent/cg", "-o", out],
        "not a cgroup",
    );
    assert!(!dir.join("p.json").exists(), "no profile from bad input");
}

/// Spin-lock code at the leaf of a CPU stack (the part the lock table also times).
fn is_spin_code(name: &str) -> bool {
    name.starts_with("_raw_spin_lock")
        || name.starts_with("_raw_read_lock")
        || name.starts_with("_raw_write_lock")
        || name.contains("queued_spin_lock_slowpath")
        || name.starts_with("queued_read_lock_slowpath")
        || name.starts_with("queued_write_lock_slowpath")
        || name.starts_with("do_raw_spin_lock")
}

/// Scheduler and RCU code takes its spinlocks with interrupts off, where a CPU-clock
/// sample (a timer interrupt) cannot land: such waits are in the lock table but not in
/// the CPU profile, for lockpath as for perf's cpu-clock.
fn takes_lock_with_irqs_off(caller: &str) -> bool {
    [
        "__schedule",
        "schedule",
        "try_to_wake_up",
        "sched_",
        "ttwu",
        "rcu_",
        "raw_spin_rq_lock",
    ]
    .iter()
    .any(|prefix| caller.starts_with(prefix))
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn cpu_flamegraph_and_lock_table_agree() {
    let _alone = alone();
    let dir = or_skip!(root_test("cpu-lock"));
    let profile_path = dir.join("both.json");
    let storm = workload("lock-storm");
    let output = lockpath_ok(&record_args(
        &["--cpu", "--lock", "--freq", "999"],
        &profile_path,
        &[path_str(&storm), "--seconds", "3", "--mode", "pipe"],
    ));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("contended") && stdout.contains("on-CPU samples"),
        "both tables:\n{stdout}"
    );
    let profile = load_json(&profile_path);

    // CPU samples spinning in lock code, by the function that took the lock.
    let mut spin_callers: HashMap<String, u64> = HashMap::new();
    let mut user_named = 0u64;
    let mut spinning = 0u64;
    for row in cpu_rows(&profile) {
        let kernel = frames(&profile, &row["kernel_stack"]);
        let Some(first) = kernel.iter().position(|name| is_spin_code(name)) else {
            continue;
        };
        let samples = row["samples"].as_u64().expect("samples");
        spinning += samples;
        if let Some(caller) = kernel[first..].iter().find(|name| !is_spin_code(name)) {
            *spin_callers.entry(caller.clone()).or_default() += samples;
        }
        let user = frames(&profile, &row["user_stack"]);
        if user.iter().any(|name| name == "pipe" || name == "__close")
            && user.iter().any(|name| {
                name.contains("rust_begin_short_backtrace") || name.contains("lock_storm")
            })
        {
            user_named += samples;
        }
    }
    assert!(
        spinning > 20,
        "the storm spins on CPU: {spinning} samples in spin-lock code"
    );
    assert!(
        user_named * 2 > spinning,
        "user frames named (libc pipe/close under the Rust thread): {user_named} of {spinning}"
    );

    // The lock table's spinlock callers are where the CPU spins.
    let report = report_json(&profile_path, &["--by", "lock", "--top", "0"]);
    let spin_rows: Vec<&serde_json::Value> = items(&report["locks"], "locks")
        .filter(|lock| lock["type"] == "spinlock")
        .filter(|lock| !takes_lock_with_irqs_off(lock["caller"].as_str().unwrap_or("")))
        .collect();
    // The locks with the most wait (outside the scheduler) are the workload's: one of
    // the top three rows' callers spins on CPU among the top three callers there (near
    // equal shares change places from run to run; the others spin on uncontended locks).
    let on_cpu_rank = |caller: &str| {
        let on_cpu = spin_callers.get(caller).copied().unwrap_or(0);
        let ahead = spin_callers
            .values()
            .filter(|&&samples| samples > on_cpu)
            .count();
        (on_cpu > 0).then_some(ahead)
    };
    let top_callers: Vec<&str> = spin_rows
        .iter()
        .take(3)
        .map(|lock| lock["caller"].as_str().expect("caller"))
        .collect();
    assert!(!top_callers.is_empty(), "a spinlock row: {report}");
    assert!(
        top_callers
            .iter()
            .any(|caller| on_cpu_rank(caller).is_some_and(|ahead| ahead < 3)),
        "one of {top_callers:?}, the top locks' callers, spins on CPU among the top \
         three: {spin_callers:?}"
    );
    assert!(
        report["cpu"]["samples"].as_u64().unwrap_or(0) > 0,
        "report --format json has the cpu section"
    );
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn a_full_sample_map_keeps_every_sample() {
    let _alone = alone();
    let dir = or_skip!(root_test("cpu-full-map"));
    let profile_path = dir.join("p.json");
    // Two entries for rows of distinct stacks (every sampled instruction is one): the map
    // is full after two; frame-pointer stacks only, so every sample goes through it.
    let output = lockpath_ok(&record_args(
        &[
            "--cpu",
            "--freq",
            "499",
            "--user-stack-bytes",
            "0",
            "--map-entries",
            "2",
        ],
        &profile_path,
        &[path_str(&workload("cpu-burn")), "--cpu-seconds", "1"],
    ));
    let truth = burn_report(&String::from_utf8_lossy(&output.stdout));
    let profile = load_json(&profile_path);
    let rows: Vec<serde_json::Value> = cpu_rows(&profile)
        .into_iter()
        .filter(|row| row["pid"].as_u64() == Some(truth["pid"]))
        .collect();
    let samples: u64 = rows
        .iter()
        .map(|row| row["samples"].as_u64().expect("samples"))
        .sum();
    let without_stacks: u64 = rows
        .iter()
        .filter(|row| row["user_stack"].is_null() && row["kernel_stack"].is_null())
        .map(|row| row["samples"].as_u64().expect("samples"))
        .sum();
    let full = profile["losses"]["cpu_map_full"].as_u64().unwrap_or(0);
    // The workload's own clock: CPU time of its two functions, at 499 samples a second.
    let expected = (truth["seventy_ns"] + truth["thirty_ns"]) as f64 * 499.0 / 1e9;
    eprintln!(
        "{samples} samples ({without_stacks} in rows without stacks, {full} over the full \
         map), {expected:.0} expected from the workload's CPU time"
    );
    assert!(
        full > 0,
        "2 entries cannot hold the samples: nothing overflowed"
    );
    assert!(
        without_stacks >= full,
        "every sample over the full map is in a row without stacks: {without_stacks} < {full}"
    );
    assert!(
        samples as f64 > expected * 0.8 && (samples as f64) < expected * 1.2,
        "{samples} samples of the workload, {expected:.0} expected"
    );
}
