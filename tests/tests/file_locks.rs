//! Root integration test of the wait classes on file locks: processes contending on
//! POSIX (fcntl F_SETLKW), OFD and flock locks of one file (the `file-locks` workload,
//! which measures each process's own blocked time).

#[macro_use]
mod common;

use std::collections::BTreeMap;

use common::*;

/// One worker of the workload: its pid, lock kind and measured blocked time.
struct Worker {
    pid: u64,
    kind: String,
    blocked_ns: u64,
}

/// `file-locks pid=P kind=K rounds=R blocked_ns=T` lines of the workload's output.
fn workers(stdout: &str) -> Vec<Worker> {
    stdout
        .lines()
        .filter(|line| line.starts_with("file-locks pid="))
        .map(|line| {
            let field = |name: &str| -> String {
                line.split_whitespace()
                    .find_map(|part| part.strip_prefix(name))
                    .unwrap_or_else(|| panic!("no {name} in {line}"))
                    .to_string()
            };
            Worker {
                pid: field("pid=").parse().expect("pid"),
                kind: field("kind="),
                blocked_ns: field("blocked_ns=").parse().expect("blocked_ns"),
            }
        })
        .collect()
}

/// Records the `file-locks` workload with `args`, locking `lock_file`, off the CPU into
/// `profile_path`; returns lockpath's output (stdout: the summary and the workers'
/// lines) and the profile.
fn record_file_locks(
    profile_path: &std::path::Path,
    lock_file: &std::path::Path,
    args: &[&str],
) -> Recorded {
    let workload = workload("file-locks");
    let command = [
        &[path_str(&workload)],
        args,
        &["--path", path_str(lock_file)],
    ]
    .concat();
    record_profile(&["--offcpu-all"], profile_path, &command)
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn file_lock_waits_are_classed_timed_and_their_holders_named() {
    let _alone = alone();
    let dir = or_skip!(root_test("file-locks"));
    let profile_path = dir.join("locks.json");
    let Recorded {
        stdout, profile, ..
    } = record_file_locks(
        &profile_path,
        &dir.join("the-file"),
        &["--procs", "3", "--rounds", "40", "--hold-us", "2000"],
    );
    let workers = workers(&stdout);
    assert_eq!(workers.len(), 9, "3 workers of each kind:\n{stdout}");
    let rows = profile["offcpu"].as_array().expect("offcpu rows");

    // pid -> class -> off-CPU ns; pid -> holder -> file-lock ns.
    let mut by_pid: BTreeMap<u64, BTreeMap<String, u64>> = BTreeMap::new();
    let mut held: BTreeMap<u64, BTreeMap<u64, u64>> = BTreeMap::new();
    for row in rows {
        let pid = row["pid"].as_u64().expect("pid");
        let class = row["class"].as_str().expect("class").to_string();
        let total_ns = row["total_ns"].as_u64().expect("total_ns");
        if let Some(holder) = row["held_by"].as_u64() {
            assert_eq!(class, "file-lock", "a holder on a {class} wait: {row}");
            *held.entry(pid).or_default().entry(holder).or_default() += total_ns;
        }
        *by_pid.entry(pid).or_default().entry(class).or_default() += total_ns;
    }
    let has_holders = items(&profile["probes"], "probes").any(|probe| {
        probe["method"]
            .as_str()
            .is_some_and(|method| method.contains("file-lock holders"))
    });
    assert!(
        has_holders,
        "this kernel has the filelock tracepoints: {}",
        profile["unavailable"]
    );
    let mut all_ns = 0;
    let mut other_ns = 0;
    for worker in &workers {
        let classes = by_pid
            .get(&worker.pid)
            .unwrap_or_else(|| panic!("no off-CPU rows of worker {}", worker.pid));
        all_ns += classes.values().sum::<u64>();
        other_ns += classes.get("other").copied().unwrap_or(0);
        let file_lock = classes.get("file-lock").copied().unwrap_or(0);
        // Every worker waits: 3 to 6 workers take turns holding the lock 2 ms, 40 times.
        assert!(
            worker.blocked_ns >= 20_000_000,
            "{} worker {} blocked only {} ns",
            worker.kind,
            worker.pid,
            worker.blocked_ns
        );
        // The worker's own clock includes the system-call entry and exit around the
        // wait, lockpath's only the time off the CPU: within 5%.
        let error = file_lock.abs_diff(worker.blocked_ns) as f64 / worker.blocked_ns as f64;
        assert!(
            error <= 0.05,
            "{} worker {}: file-lock off-CPU {file_lock} ns against its own {} ns ({:.1}% apart); classes {classes:?}",
            worker.kind,
            worker.pid,
            worker.blocked_ns,
            error * 100.0
        );
    }
    // Who held the lock: a worker of the same lock space (POSIX and OFD locks conflict
    // with each other, flock locks only with flock locks), never the waiter itself,
    // named for at least 90% of each worker's file-lock time.
    let flock = |pid: u64| {
        workers
            .iter()
            .find(|worker| worker.pid == pid)
            .map(|worker| worker.kind == "flock")
    };
    for worker in &workers {
        let file_lock = by_pid[&worker.pid].get("file-lock").copied().unwrap_or(0);
        let holders = held.get(&worker.pid).cloned().unwrap_or_default();
        for holder in holders.keys() {
            assert_ne!(*holder, worker.pid, "{} holds its own lock", worker.pid);
            assert_eq!(
                flock(*holder),
                Some(worker.kind == "flock"),
                "{} worker {} waited behind {holder}, not a worker of its lock space: {holders:?}",
                worker.kind,
                worker.pid
            );
        }
        let named: u64 = holders.values().sum();
        assert!(
            named * 10 >= file_lock * 9,
            "{} worker {}: holder named for {named} of {file_lock} ns",
            worker.kind,
            worker.pid
        );
    }
    // The summary, the report's JSON and its HTML page say it too.
    assert!(stdout.contains("held by: file-locks["), "{stdout}");
    let report = lockpath_ok(&["report", "--format", "json", path_str(&profile_path)]);
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).expect("report JSON");
    let json_holders: Vec<u64> = items(&report["offcpu"], "offcpu processes")
        .flat_map(|process| process["classes"].as_array().cloned().unwrap_or_default())
        .filter(|class| class["class"] == "file-lock")
        .flat_map(|class| class["held_by"].as_array().cloned().unwrap_or_default())
        .filter_map(|holder| holder["pid"].as_u64())
        .collect();
    assert!(
        workers
            .iter()
            .all(|worker| json_holders.contains(&worker.pid)),
        "every worker held the lock some time: {json_holders:?}"
    );
    let html_path = dir.join("report.html");
    lockpath_ok(&[
        "report",
        "--format",
        "html",
        "-o",
        path_str(&html_path),
        path_str(&profile_path),
    ]);
    let html = std::fs::read_to_string(&html_path).expect("html report");
    assert!(html.contains("<th>held by</th>"), "no held-by column");
    assert!(html.contains(&format!("file-locks[{}]", workers[0].pid)));
    assert!(
        other_ns * 10 <= all_ns,
        "`other` is {other_ns} ns of the workers' {all_ns} ns off the CPU"
    );
    // The parent (the one other process) waits for its workers' start, output and exit:
    // child and pipe waits, not `other`.
    let parents: Vec<_> = by_pid
        .iter()
        .filter(|(pid, _)| !workers.iter().any(|worker| worker.pid == **pid))
        .collect();
    assert_eq!(parents.len(), 1, "one parent: {parents:?}");
    let parent = parents[0].1;
    assert!(
        parent.contains_key("child") && parent.contains_key("pipe"),
        "the parent's waits: {parent:?}"
    );
    let parent_all: u64 = parent.values().sum();
    assert!(
        parent.get("other").copied().unwrap_or(0) * 10 <= parent_all,
        "the parent's waits: {parent:?}"
    );
}

/// Records the workload with only `kind` locks; returns the profile path.
fn record_kind(dir: &std::path::Path, kind: &str) -> std::path::PathBuf {
    let profile_path = dir.join(format!("{kind}.json"));
    let lock_file = dir.join(format!("{kind}-file"));
    let args = ["--kinds", kind, "--procs", "3", "--rounds", "30"];
    record_file_locks(&profile_path, &lock_file, &args);
    profile_path
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn diff_of_posix_against_flock_shows_the_class_and_the_lock_calls() {
    let _alone = alone();
    let dir = or_skip!(root_test("file-locks-diff"));
    let posix = record_kind(&dir, "posix");
    let flock = record_kind(&dir, "flock");
    let output = lockpath_ok(&[
        "diff",
        "--kind",
        "offcpu",
        "--format",
        "json",
        path_str(&posix),
        path_str(&flock),
    ]);
    let diff: serde_json::Value = serde_json::from_slice(&output.stdout).expect("diff JSON");
    // Both runs wait on file locks: the class is in both, per second of run.
    let classes = diff_rows(&diff, "class");
    let file_lock = classes
        .iter()
        .find(|row| row["key"] == "file-lock")
        .unwrap_or_else(|| panic!("no file-lock class in {classes:?}"));
    for side in ["base_per_s", "new_per_s"] {
        let per_s = file_lock[side].as_f64().expect("per second");
        // 3 workers, two of them waiting 2 ms of each 3 ms round: well over 100 ms/s.
        assert!(per_s > 1e8, "{side} {per_s} ns/s: {file_lock}");
    }
    // The lock calls changed: fcntl's POSIX wait is gone, flock's is new.
    let functions = diff_rows(&diff, "function");
    let row_of = |prefix: &str| {
        functions
            .iter()
            .find(|row| {
                row["key"]
                    .as_str()
                    .is_some_and(|key| key.starts_with(prefix))
            })
            .unwrap_or_else(|| panic!("no {prefix} row in {functions:?}"))
    };
    let fcntl = row_of("file-lock fcntl_setlk");
    assert!(fcntl["base_per_s"].as_f64() > Some(1e8), "{fcntl}");
    assert_eq!(fcntl["new_per_s"].as_f64(), Some(0.0), "{fcntl}");
    let flock_wait = functions
        .iter()
        .find(|row| {
            row["key"]
                .as_str()
                .is_some_and(|key| key.starts_with("file-lock") && key.contains("flock"))
        })
        .unwrap_or_else(|| panic!("no flock wait in {functions:?}"));
    assert_eq!(flock_wait["base_per_s"].as_f64(), Some(0.0), "{flock_wait}");
    assert!(flock_wait["new_per_s"].as_f64() > Some(1e8), "{flock_wait}");
}

/// Opens that must wait for a read lease to be given up (`filelock:break_lease_block`):
/// class `file-lock`, timed like the breaker's own clock, and held by a lease holder.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn lease_breaks_are_file_lock_waits_held_by_the_lease_holder() {
    let _alone = alone();
    let dir = or_skip!(root_test("file-leases"));
    let profile_path = dir.join("leases.json");
    let Recorded {
        stdout, profile, ..
    } = record_file_locks(
        &profile_path,
        &dir.join("the-file"),
        &[
            "--kinds",
            "lease",
            "--procs",
            "2",
            "--rounds",
            "20",
            "--hold-us",
            "5000",
        ],
    );
    let workers = workers(&stdout);
    let breakers: Vec<&Worker> = workers.iter().filter(|w| w.kind == "lease").collect();
    let holders: Vec<u64> = workers
        .iter()
        .filter(|w| w.kind == "lease-holder")
        .map(|w| w.pid)
        .collect();
    assert_eq!((breakers.len(), holders.len()), (2, 2), "{stdout}");
    for breaker in breakers {
        let rows: Vec<&serde_json::Value> = items(&profile["offcpu"], "offcpu rows")
            .filter(|row| row["pid"].as_u64() == Some(breaker.pid))
            .collect();
        let total = |filter: &dyn Fn(&serde_json::Value) -> bool| -> u64 {
            rows.iter()
                .filter(|row| filter(row))
                .map(|row| row["total_ns"].as_u64().expect("total_ns"))
                .sum()
        };
        let file_lock = total(&|row| row["class"] == "file-lock");
        let other = total(&|row| row["class"] == "other");
        let all = total(&|_| true);
        // 20 leases held 5 ms each: at least 100 ms of waiting.
        assert!(breaker.blocked_ns >= 90_000_000, "{stdout}");
        let error = file_lock.abs_diff(breaker.blocked_ns) as f64 / breaker.blocked_ns as f64;
        assert!(
            error <= 0.05,
            "breaker {}: file-lock {file_lock} ns against its own {} ns ({:.1}% apart)",
            breaker.pid,
            breaker.blocked_ns,
            error * 100.0
        );
        assert!(
            other * 10 <= all,
            "breaker {}: `other` {other} of {all} ns",
            breaker.pid
        );
        let mut named = 0;
        for row in rows.iter().filter(|row| row["class"] == "file-lock") {
            if let Some(holder) = row["held_by"].as_u64() {
                assert!(
                    holders.contains(&holder),
                    "breaker {} held by {holder}, not a lease holder {holders:?}",
                    breaker.pid
                );
                named += row["total_ns"].as_u64().expect("total_ns");
            }
        }
        assert!(
            named * 10 >= file_lock * 9,
            "breaker {}: holder named for {named} of {file_lock} ns",
            breaker.pid
        );
    }
}
