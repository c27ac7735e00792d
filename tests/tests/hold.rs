//! `--hold` on this machine. Its kernel has neither kprobes nor fentry, so the hold
//! times themselves are checked in the kernel lab (tests/vm/checks/hold-*.sh, part of
//! `cargo xtask test`); here: the clear errors, and that the rest of a run goes on.

#[macro_use]
mod common;

use common::*;

/// An address no lock has.
const NO_LOCK: &str = "mutex:0xffff888000000000";

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn hold_alone_says_why_it_cannot_run_here() {
    let dir = or_skip!(root_test("hold-alone"));
    let profile = dir.join("p.json");
    let output = lockpath(&record_args(
        &["--hold", NO_LOCK],
        &profile,
        &["sleep", "0.2"],
    ));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    if output.status.success() {
        // A kernel with fentry or kprobes: the hold was attached, and the address was
        // never taken, which the run says.
        assert!(stderr.contains("was not taken"), "{stderr}");
        assert!(load_json(&profile)["probes"]
            .as_array()
            .expect("probes")
            .iter()
            .any(|probe| probe["family"] == "hold"));
        return;
    }
    // This machine: one line, naming what the kernel lacks; no profile written.
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line:\n{stderr}");
    for expected in [
        &format!("--hold {NO_LOCK}: cannot be recorded on this kernel"),
        "fentry/fexit",
        "kprobe",
    ] {
        assert!(lines[0].contains(expected), "{expected:?} in {}", lines[0]);
    }
    let kprobes = std::path::Path::new("/sys/bus/event_source/devices/kprobe/type").exists();
    if !kprobes {
        assert!(lines[0].contains("CONFIG_KPROBES"), "{}", lines[0]);
    }
    assert!(!profile.exists(), "no profile after an error");
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn hold_on_a_function_is_one_line_and_the_run_goes_on() {
    let dir = or_skip!(root_test("hold-function"));
    let profile = dir.join("p.json");
    let storm = workload("lock-storm");
    let options = ["--hold", "vfs_read", "--lock"];
    let Recorded {
        stderr, profile, ..
    } = record_profile(&options, &profile, &[path_str(&storm), "--seconds", "1"]);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("--hold")).collect();
    assert_eq!(lines.len(), 1, "one line about --hold:\n{stderr}");
    assert!(
        lines[0].contains("vfs_read is a function, not a lock")
            && lines[0].contains("the rest of the run goes on"),
        "{}",
        lines[0]
    );
    let contended: u64 = items(&profile["locks"], "locks")
        .map(|row| row["count"].as_u64().unwrap_or(0))
        .sum();
    assert!(contended > 0, "the lock family still recorded lock-storm");
    let unavailable = profile["unavailable"].as_array().expect("unavailable");
    assert!(
        unavailable
            .iter()
            .any(|entry| entry["family"] == "hold" && entry["what"] == "vfs_read"),
        "{unavailable:?}"
    );
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn hold_alone_on_bad_locks_fails_with_one_line() {
    let dir = or_skip!(root_test("hold-bad"));
    let profile = dir.join("p.json");
    for (lock, expected) in [
        ("vfs_read", "vfs_read is a function, not a lock"),
        (
            "mutex:no_such_lock_anywhere",
            "no kernel symbol no_such_lock_anywhere",
        ),
        ("mutex:0x1234", "0x1234 is not a kernel address"),
        (
            "semaphore:0xffff888000000000",
            "unknown lock type \"semaphore\"",
        ),
        ("rwsem:", "no lock given"),
    ] {
        let stderr = fails_with(
            &[
                "record",
                "--hold",
                lock,
                "-o",
                path_str(&profile),
                "--",
                "true",
            ],
            expected,
        );
        assert_eq!(stderr.lines().count(), 1, "one line for {lock}:\n{stderr}");
        assert!(!profile.exists(), "no profile for {lock}");
    }
}
