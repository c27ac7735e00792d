//! Root test of the stack maps: a stack whose hash bucket another stack holds keeps
//! its frames (the spare stacks), so a call path does not lose its stack for the run.

#[macro_use]
mod common;

use common::*;
use lockpath_tests::lock_paths;

/// `record --lock --stack-entries 1` of lock-paths, every stack walked (`--lock-stacks
/// exact`): the stack map has one bucket, so every call path but the first collides in
/// it. Both of the workload's paths to its file's `f_pos_lock` (`read` and `readv`,
/// each counted by the workload) keep their stacks (see `check_spare_stacks`).
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn colliding_stacks_keep_their_frames() {
    let dir = or_skip!(root_test("spare-stacks"));
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
    let pid = lock_paths::pid_of(&profile).expect("lock-paths among the profile's processes");
    eprintln!("workload: {results:?}");
    // The workload's own count: both calls ran, many times.
    for call in ["read", "readv"] {
        let calls = result(&results, &format!("{call}_calls"));
        assert!(calls >= 100, "{calls} {call} calls: {results:?}");
    }
    match lock_paths::check_spare_stacks(&profile, pid) {
        Ok(seen) => eprintln!("{seen}"),
        Err(why) => panic!("{why}\nworkload: {results:?}"),
    }
}
