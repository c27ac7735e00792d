//! Root integration tests of function latency: `--ufunc` against a workload that times
//! its own calls, `--func` (recorded where the kernel allows fentry or kprobes, one
//! clear line where it allows neither), and unknown symbols.

#[macro_use]
mod common;

use std::path::Path;

use common::*;

fn results(path: &Path, name: &str) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("workload results {}: {err}", path.display()))
        .lines()
        .filter_map(|line| line.split_once(' '))
        .filter(|(key, _)| *key == name)
        .filter_map(|(_, value)| value.parse().ok())
        .collect()
}

fn record(args: &[&str]) -> String {
    record_ok(args).1
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn ufunc_count_and_mean_match_the_workload() {
    let dir = or_skip!(root_test("ufunc"));
    let profile_path = dir.join("p.json");
    let results_path = dir.join("results");
    let calls = workload("timed-calls");
    let spec = format!("{}:lockpath_timed_work", calls.display());
    const CALLS: u64 = 12;
    let calls_arg = CALLS.to_string();
    let command = [
        path_str(&calls),
        "calls",
        path_str(&results_path),
        &calls_arg,
        "15",
    ];
    let profile = record_profile(&["--ufunc", &spec], &profile_path, &command).profile;
    let own = results(&results_path, "call_ns");
    assert_eq!(own.len() as u64, CALLS);
    let own_mean = own.iter().sum::<u64>() as f64 / own.len() as f64;
    let pid = results(&results_path, "pid")[0];
    let rows = rows_of(&profile, "funcs", pid);
    assert!(rows.iter().all(|row| row["user"] == true));
    let (count, total) = (sum_of(&rows, "count"), sum_of(&rows, "total_ns"));
    assert_eq!(count, CALLS, "one row count per call");
    let mean = total as f64 / count as f64;
    eprintln!(
        "ufunc: lockpath mean {:.3} ms, workload's own {:.3} ms",
        mean / 1e6,
        own_mean / 1e6
    );
    assert!(
        (mean - own_mean).abs() <= own_mean * 0.05,
        "mean {mean} ns vs the workload's own {own_mean} ns (5%)"
    );
    let hist_total: u64 = rows
        .iter()
        .flat_map(|row| row["hist"].as_array().expect("hist").iter())
        .map(|bucket| bucket.as_u64().expect("bucket"))
        .sum();
    assert_eq!(hist_total, CALLS, "the histogram counts every call");
    // The user stack at entry is symbolized (the cpu family's blazesym symbolizer): the
    // traced function is the leaf and the workload's main is one of its callers.
    let frame_names = |row: &serde_json::Value| -> Vec<String> {
        let Some(stack) = row["stack"].as_u64() else {
            return Vec::new();
        };
        profile["stacks"][stack as usize]["frames"]
            .as_array()
            .expect("frames")
            .iter()
            .map(|frame| {
                let index = frame.as_u64().expect("frame index") as usize;
                profile["frames"][index]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    };
    assert!(
        rows.iter().any(|row| {
            let names = frame_names(row);
            names.first().map(String::as_str) == Some("lockpath_timed_work")
                && names.iter().any(|name| name == "timed_calls::main")
        }),
        "no user stack named lockpath_timed_work <- timed_calls::main: {:?}",
        rows.iter().map(|row| frame_names(row)).collect::<Vec<_>>()
    );
    assert!(
        items(&profile["probes"], "probes").any(|probe| probe["family"] == "ufunc"
            && probe["method"].as_str().unwrap_or("").contains("uprobe"))
    );
}

/// With `--map-entries 2`, four processes calling the traced function cannot each have
/// their row: the calls the full map has no room for go to their (function, process)
/// rows without stack, so every process keeps its count and mean, checked against the
/// times each process measured itself.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn a_full_call_map_keeps_every_call() {
    let dir = or_skip!(root_test("ufunc-full"));
    let profile_path = dir.join("p.json");
    let calls = workload("timed-calls");
    let spec = format!("{}:lockpath_timed_work", calls.display());
    const CALLS: u64 = 12;
    const PROCESSES: usize = 4;
    let results_of = |i: usize| dir.join(format!("results-{i}"));
    let script = (0..PROCESSES)
        .map(|i| {
            format!(
                "{} calls {} {CALLS} 10 &",
                path_str(&calls),
                path_str(&results_of(i))
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
        + " wait";
    let options = ["--ufunc", &spec, "--map-entries", "2"];
    let profile = record_profile(&options, &profile_path, &["sh", "-c", &script]).profile;
    let map_full = profile["losses"]["func_map_full"].as_u64().unwrap_or(0);
    assert!(
        map_full > 0,
        "2 map entries cannot hold {PROCESSES} processes: {}",
        profile["losses"]
    );
    for i in 0..PROCESSES {
        let own = results(&results_of(i), "call_ns");
        assert_eq!(own.len() as u64, CALLS);
        let own_mean = own.iter().sum::<u64>() as f64 / own.len() as f64;
        let pid = results(&results_of(i), "pid")[0];
        let rows = rows_of(&profile, "funcs", pid);
        let count = sum_of(&rows, "count");
        let mean = sum_of(&rows, "total_ns") as f64 / count as f64;
        eprintln!(
            "process {pid}: {count} calls in {} rows, mean {:.3} ms, its own {:.3} ms",
            rows.len(),
            mean / 1e6,
            own_mean / 1e6
        );
        assert_eq!(count, CALLS, "every call of process {pid}");
        assert!(
            (mean - own_mean).abs() <= own_mean * 0.05,
            "process {pid}: mean {mean} ns vs its own {own_mean} ns (5%)"
        );
    }
}

/// Where the kernel offers fentry or kprobes, `vfs_read` is timed (at least one call per
/// read of the workload) and the profile says which method was used; where it offers
/// neither (this development machine), one line says why and the run goes on.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn a_call_in_progress_at_the_end_is_reported() {
    let dir = or_skip!(root_test("ufunc-in-progress"));
    let profile_path = dir.join("p.json");
    let results_path = dir.join("results");
    let calls = workload("timed-calls");
    let spec = format!("{}:lockpath_timed_work", calls.display());
    let (recording, programs) = spawn_recording(&[
        "record",
        "--ufunc",
        &spec,
        "-a",
        "-d",
        "3",
        "-o",
        path_str(&profile_path),
    ]);
    // One call of 6 s: still running when the recording ends.
    let status = std::process::Command::new(&calls)
        .args(["calls", path_str(&results_path), "1", "6000"])
        .status()
        .expect("run timed-calls");
    assert!(status.success());
    recording.finish(&programs);
    let pid = results(&results_path, "pid")[0];
    let since = results(&results_path, "call_since_ns")[0];
    let profile = load_json(&profile_path);
    let row = profile["waiting"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|row| row["kind"] == "func" && row["pid"].as_u64() == Some(pid))
        .unwrap_or_else(|| panic!("no call in progress of {pid}: {}", profile["waiting"]));
    assert_eq!(row["class"].as_str(), Some(spec.as_str()));
    let (row_since, age) = (
        row["since_ns"].as_u64().unwrap(),
        row["age_ns"].as_u64().unwrap(),
    );
    let true_age = (row_since + age).saturating_sub(since) as f64;
    eprintln!(
        "call in progress: age {:.3} s, true {:.3} s",
        age as f64 / 1e9,
        true_age / 1e9
    );
    assert!(
        row_since.abs_diff(since) as f64 <= 0.05 * true_age,
        "began at {row_since}, the workload says {since}"
    );
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn func_records_or_says_why_not() {
    let dir = or_skip!(root_test("func"));
    let profile_path = dir.join("p.json");
    let results_path = dir.join("results");
    let calls = workload("timed-calls");
    const READS: u64 = 200;
    let stderr = record(&[
        "record",
        "--func",
        "vfs_read",
        "--ufunc",
        &format!("{}:lockpath_timed_work", calls.display()),
        "-o",
        profile_path.to_str().expect("path"),
        "--",
        calls.to_str().expect("path"),
        "reads",
        results_path.to_str().expect("path"),
        &READS.to_string(),
    ]);
    let pid = results(&results_path, "pid")[0];
    let profile = load_json(&profile_path);
    let unavailable = profile["unavailable"].as_array().expect("unavailable");
    if let Some(missing) = unavailable.iter().find(|entry| entry["what"] == "vfs_read") {
        let reason = missing["reason"].as_str().expect("reason");
        assert!(
            reason.contains("fentry") && reason.contains("kprobe"),
            "{reason}"
        );
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|line| line.contains("--func vfs_read"))
            .collect();
        assert_eq!(lines.len(), 1, "one line:\n{stderr}");
        assert!(
            lines[0].contains("the rest of the run goes on"),
            "{}",
            lines[0]
        );
        assert!(profile["funcs"].as_array().expect("funcs").is_empty());
    } else {
        let method = items(&profile["probes"], "probes")
            .filter_map(|probe| probe["method"].as_str())
            .find(|method| method.starts_with("vfs_read:"))
            .expect("the method used for vfs_read");
        assert!(
            method.contains("fentry") || method.contains("kprobe"),
            "{method}"
        );
        let count: u64 = items(&profile["funcs"], "funcs")
            .filter(|row| row["function"] == "vfs_read" && row["pid"].as_u64() == Some(pid))
            .map(|row| row["count"].as_u64().expect("count"))
            .sum();
        assert!(
            count >= READS,
            "vfs_read calls {count} < the workload's {READS} reads"
        );
    }
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn unknown_kernel_function_lists_close_matches() {
    let dir = or_skip!(root_test("func-unknown"));
    let out = dir.join("p.json");
    let output = lockpath(&record_args(&["--func", "vfs_reed"], &out, &["true"]));
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("close matches") && stderr.contains("vfs_read"),
        "{stderr}"
    );
    assert!(!out.exists(), "no profile written");
    let output = lockpath(&record_args(
        &["--ufunc", "/no/such/binary:main"],
        &out,
        &["true"],
    ));
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("no binary"));
}
