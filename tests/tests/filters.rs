//! Filters and CSV like perf lock contention's, on a real lock-storm recording:
//! `--type spinlock` leaves only spinlock rows, `--caller` keeps only stacks with a
//! matching frame, and the CSV parses (Python's csv module) into the JSON's numbers.

#[macro_use]
mod common;

use std::process::Command;

use common::*;
use serde_json::Value;

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn filters_and_csv_on_lock_storm() {
    let dir = or_skip!(root_test_needing(&["python3"], "filters"));
    let profile_path = dir.join("storm.json");
    let storm = workload("lock-storm");
    lockpath_ok(&record_args(
        &["--lock"],
        &profile_path,
        &[path_str(&storm), "--seconds", "4", "--threads", "4"],
    ));
    let profile = path_str(&profile_path);
    let all = report_json(&profile_path, &["--top", "0"]);
    let all_locks = all["locks"].as_array().expect("locks");
    let types: Vec<&str> = all_locks
        .iter()
        .map(|group| group["type"].as_str().expect("type"))
        .collect();
    assert!(types.contains(&"spinlock"), "no spinlock in {types:?}");
    assert!(
        types.iter().any(|kind| kind.starts_with("rwsem")),
        "lock-storm's mmap side made no rwsem wait: {types:?}"
    );

    // --type spinlock: only spinlock rows, and every spinlock row of the full report.
    let spin = report_json(&profile_path, &["--top", "0", "--type", "spinlock"]);
    let spin_locks = spin["locks"].as_array().expect("locks");
    assert!(!spin_locks.is_empty());
    assert!(
        spin_locks.iter().all(|group| group["type"] == "spinlock"),
        "{spin_locks:?}"
    );
    let spin_total = |groups: &[Value]| -> u64 {
        groups
            .iter()
            .filter(|group| group["type"] == "spinlock")
            .map(|group| group["total_wait_ns"].as_u64().expect("ns"))
            .sum()
    };
    assert_eq!(spin_total(spin_locks), spin_total(all_locks));

    // --caller: only waits whose stack has the frame. The mmap side's callers come
    // through vm_mmap_pgoff or __vm_munmap; take the pattern from the data.
    let raw = load_json(&profile_path);
    let pattern = "mmap";
    let matching: u64 = items(&raw["locks"], "rows")
        .filter(|row| {
            row["stack"].as_u64().is_some_and(|id| {
                stack_names(&raw, id)
                    .iter()
                    .any(|name| name.contains(pattern))
            })
        })
        .map(|row| row["total_ns"].as_u64().expect("ns"))
        .sum();
    let total: u64 = items(&raw["locks"], "rows")
        .map(|row| row["total_ns"].as_u64().expect("ns"))
        .sum();
    assert!(
        matching > 0 && matching < total,
        "{matching} of {total} ns match {pattern}"
    );
    let by_caller = report_json(&profile_path, &["--top", "0", "--caller", pattern]);
    let caller_total: u64 = items(&by_caller["locks"], "locks")
        .map(|group| group["total_wait_ns"].as_u64().expect("ns"))
        .sum();
    assert_eq!(
        caller_total, matching,
        "--caller {pattern} kept other stacks"
    );

    // CSV: Python's csv module reads the same numbers as the JSON report.
    let csv = lockpath_ok(&["report", profile, "--format", "csv", "--top", "0"]);
    let csv_path = dir.join("storm.csv");
    std::fs::write(&csv_path, &csv.stdout).expect("write csv");
    let parsed = Command::new("python3")
        .arg("-c")
        .arg(
            "import csv, json, sys\n\
             rows = list(csv.DictReader(open(sys.argv[1], newline='')))\n\
             print(json.dumps([{k: (int(v) if k.endswith('_ns') or k == 'contended' else v) \
             for k, v in row.items()} for row in rows]))",
        )
        .arg(&csv_path)
        .output()
        .expect("python3");
    assert!(
        parsed.status.success(),
        "python csv: {}",
        String::from_utf8_lossy(&parsed.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&parsed.stdout).expect("python output");
    assert_eq!(rows.len(), all_locks.len());
    for (row, group) in rows.iter().zip(all_locks) {
        for key in [
            "contended",
            "total_wait_ns",
            "max_wait_ns",
            "min_wait_ns",
            "avg_wait_ns",
        ] {
            assert_eq!(row[key], group[key], "{key} of {row} vs {group}");
        }
        for key in ["type", "lock", "caller", "host"] {
            assert_eq!(row[key], group[key], "{key} of {row} vs {group}");
        }
    }

    // Bad input: one clear line.
    let wrong = lockpath(&["report", profile, "--type", "spinlok"]);
    assert!(!wrong.status.success());
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(stderr.contains("is not a lock type"), "{stderr}");
}
