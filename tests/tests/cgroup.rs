//! `report --by cgroup`, root test: lock-storm runs in a cgroup made for the test while
//! lockpath records the whole system; the profile must name the storm's cgroup (the id
//! the kernel recorded for its threads, named through the cgroup2 tree), and the cgroup's
//! rows must hold exactly the storm's contentions.

#[macro_use]
mod common;

use common::*;
use serde_json::Value;

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn report_by_cgroup_names_the_workloads_cgroup() {
    let (cgroup, dir) = or_skip!(root_test_in_cgroup("cgroup-by"));
    let profile_path = dir.join("p.json");
    let (recording, programs) =
        spawn_recording(&["record", "--lock", "-a", "-o", path_str(&profile_path)]);
    let storm = storm_in_cgroup(&cgroup.path, "--seconds 2 --threads 4");
    let storm_pid = u64::from(storm.id());
    wait_success(storm, "lock-storm");
    recording.stop(&programs);

    // The profile: the storm's process carries the cgroup's path.
    let profile = load_json(&profile_path);
    let process = process_of(&profile, storm_pid);
    // Its threads' names (the main thread's may be the shell's, when the shell contended
    // before its exec: a known defect of names, not of cgroups).
    assert!(
        items(&process["threads"], "threads").any(|thread| thread["comm"] == "lock-storm"),
        "no lock-storm thread in {process}"
    );
    assert_eq!(
        process["cgroup"].as_str(),
        Some(cgroup.name.as_str()),
        "the storm's cgroup"
    );
    let per_process = contentions_of(&profile, storm_pid);
    assert!(
        per_process > 100,
        "lock-storm made {per_process} contentions"
    );
    // Some other process of the system-wide recording is named by its own cgroup.
    let others_named = items(&profile["processes"], "processes")
        .filter(|process| process["pid"].as_u64() != Some(storm_pid))
        .filter(|process| {
            process["cgroup"]
                .as_str()
                .is_some_and(|c| c.starts_with('/'))
        })
        .count();
    assert!(others_named > 0, "no other process has a cgroup");

    // report --by cgroup: the cgroup's rows hold the storm's contentions, and only its.
    // Every row, whatever else the machine contended.
    let by_cgroup = [
        "report",
        path_str(&profile_path),
        "--by",
        "cgroup",
        "--top",
        "0",
    ];
    let json = lockpath_ok(&[&by_cgroup[..], &["--format", "json"]].concat());
    let report: Value = serde_json::from_slice(&json.stdout).expect("report JSON");
    let rows: Vec<&Value> = items(&report["locks"], "locks")
        .filter(|group| group["cgroup"].as_str() == Some(cgroup.name.as_str()))
        .collect();
    assert!(!rows.is_empty(), "no row of {} in {report}", cgroup.name);
    let in_cgroup: u64 = rows
        .iter()
        .map(|group| group["contended"].as_u64().expect("contended"))
        .sum();
    for group in &rows {
        assert_eq!(
            group["pids"],
            serde_json::json!([storm_pid]),
            "only the storm is in the cgroup"
        );
    }
    eprintln!(
        "cgroup {}: {in_cgroup} contentions in {} rows, lock-storm[{storm_pid}]: {per_process}",
        cgroup.name,
        rows.len()
    );
    assert_eq!(in_cgroup, per_process, "cgroup rows vs the storm's process");
    // The same through the per-process grouping of the report.
    let json = lockpath_ok(&[
        "report",
        path_str(&profile_path),
        "--by",
        "process",
        "--top",
        "0",
        "--format",
        "json",
    ]);
    let by_process: Value = serde_json::from_slice(&json.stdout).expect("report JSON");
    let storm_rows: u64 = items(&by_process["locks"], "locks")
        .filter(|group| group["pids"] == serde_json::json!([storm_pid]))
        .map(|group| group["contended"].as_u64().expect("contended"))
        .sum();
    assert_eq!(storm_rows, per_process, "report --by process");

    // The text table: a cgroup column with the path (its end kept when long).
    let text = lockpath_ok(&by_cgroup);
    let text = String::from_utf8_lossy(&text.stdout);
    let tail: String = {
        let chars: Vec<char> = cgroup.name.chars().collect();
        chars[chars.len().saturating_sub(19)..].iter().collect()
    };
    assert!(
        text.lines()
            .any(|line| line.contains("contended") && line.contains(" cgroup ")),
        "no cgroup column:\n{text}"
    );
    assert!(text.contains(&tail), "{tail} not in:\n{text}");
    drop(cgroup);
}
