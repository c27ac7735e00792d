//! Root test of the stack maps: a stack whose hash bucket another stack holds keeps
//! its frames (the spare stacks), so a call path does not lose its stack for the run.

mod common;

use common::*;
use lockpath_tests::lock_paths;

/// `record --lock --stack-entries 1` of lock-paths: the stack map has one bucket, so
/// every call path but the first collides in it. Both of the workload's paths to its
/// file's `f_pos_lock` (`read` and `readv`, each counted by the workload) must still be
/// named by their stacks, no wait may be without a stack, and the profile reports no
/// stack lost to a collision.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn colliding_stacks_keep_their_frames() {
    let Some(dir) = root_test("colliding_stacks_keep_their_frames", "spare-stacks") else {
        return;
    };
    let _alone = alone();
    let profile_path = dir.join("lock.json");
    let results_path = dir.join("results.txt");
    let lock_paths = workload("lock-paths");
    let workload_args = [
        path_str(&lock_paths),
        "--seconds",
        "3",
        "--threads",
        "4",
        "--short",
        "4096",
        "--long",
        "98304",
        "--long-percent",
        "20",
        "--results",
        path_str(&results_path),
    ];
    let options = ["--lock", "--lock-stacks", "exact", "--stack-entries", "1"];
    lockpath_ok(&record_args(&options, &profile_path, &workload_args));
    let results = results(&results_path);
    let profile = load_json(&profile_path);
    let pid = items(&profile["processes"], "processes")
        .find(|process| process["comm"].as_str() == Some("lock-paths"))
        .and_then(|process| process["pid"].as_u64())
        .expect("lock-paths among the profile's processes");
    let by_call = lock_paths::waits_by_call(&profile, pid);
    let report = format!(
        "workload: {results:?}\nwaits by call: {by_call:?}\nlosses: {}",
        profile["losses"]
    );
    eprintln!("{report}");
    // The workload's own count: both calls ran, many times.
    for call in ["read", "readv"] {
        let calls = result(&results, &format!("{call}_calls"));
        assert!(calls >= 100, "{calls} {call} calls\n{report}");
    }
    // Both paths waited, and their waits are named by their stacks: one of them at
    // least walked its stack into the spare stacks.
    for call in ["read", "readv"] {
        let waits = by_call.get(call).map_or(0, |(count, _)| *count);
        assert!(waits >= 1, "no {call} wait with its stack\n{report}");
    }
    let stackless: u64 = items(&profile["locks"], "locks")
        .filter(|row| row["pid"].as_u64() == Some(pid) && row["stack"].is_null())
        .map(|row| row["count"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(stackless, 0, "waits without a stack\n{report}");
    let collisions = profile["losses"]["stack_collision"].as_u64().unwrap_or(0);
    assert_eq!(collisions, 0, "stacks lost to collisions\n{report}");
}
