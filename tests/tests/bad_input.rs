//! Bad input: one clear line on stderr, a non-zero exit, no output file. These need no
//! privileges, except where noted.

#[macro_use]
mod common;

use common::*;

fn one_line_error(args: &[&str], expect: &str) {
    fails_with(args, expect);
}

#[test]
fn missing_pid_is_named() {
    let dir = or_skip!(lockpath_test("bad-pid"));
    let out = dir.join("p.json");
    one_line_error(
        &[
            "record",
            "-p",
            "999999999",
            "-o",
            out.to_str().expect("path"),
        ],
        "no process with pid 999999999",
    );
    assert!(!out.exists());
}

#[test]
fn bad_flag_values_are_refused() {
    if !lockpath_built("bad_flag_values_are_refused") {
        return;
    }
    one_line_error(&["record", "-d", "abc"], "not a duration");
    one_line_error(&["record", "-d", "-3"], "");
    one_line_error(
        &["report", "x.json", "--by", "nonsense"],
        "invalid value 'nonsense'",
    );
    one_line_error(&["record", "--map-entries", "0"], "0");
}

#[test]
fn unreadable_and_truncated_profiles() {
    let dir = or_skip!(lockpath_test("bad-profile"));
    one_line_error(
        &["report", dir.join("missing.json").to_str().expect("path")],
        "cannot read profile",
    );
    let truncated = dir.join("truncated.json");
    std::fs::write(&truncated, br#"{"format":"lockpath/1","host":"a","ker"#).expect("write");
    one_line_error(&["report", truncated.to_str().expect("path")], "truncated");
    let foreign = dir.join("foreign.json");
    std::fs::write(&foreign, br#"{"format":"other/9"}"#).expect("write");
    one_line_error(&["report", foreign.to_str().expect("path")], "other/9");
    let svg = dir.join("out.svg");
    one_line_error(
        &[
            "flamegraph",
            truncated.to_str().expect("path"),
            "-o",
            svg.to_str().expect("path"),
        ],
        "truncated",
    );
    assert!(!svg.exists(), "no SVG from a bad profile");
}

#[test]
fn exporters_refuse_bad_input_without_writing() {
    let dir = or_skip!(lockpath_test("bad-export"));
    let cut = dir.join("cut.json");
    std::fs::write(&cut, br#"{"format":"lockpath/1","host":"h","#).expect("write");
    let old = dir.join("old.json");
    std::fs::write(&old, br#"{"format":"lockpath/0"}"#).expect("write");
    let svg = dir.join("d.svg");
    let path = |p: &std::path::Path| p.to_str().expect("path").to_string();
    one_line_error(
        &["diff", &path(&cut), &path(&old), "-o", &path(&svg)],
        "truncated",
    );
    one_line_error(&["diff", &path(&old), &path(&old)], "lockpath/0");
    assert!(!svg.exists(), "no diff SVG from bad input");
    let merged = dir.join("all.json");
    one_line_error(
        &["merge", &path(&old), &path(&cut), "-o", &path(&merged)],
        "lockpath/0",
    );
    one_line_error(&["merge", &path(&cut), "-o", &path(&merged)], "2");
    assert!(!merged.exists(), "no merged profile from bad input");
    let page = dir.join("r.html");
    one_line_error(
        &[
            "report",
            &path(&cut),
            "--format",
            "html",
            "-o",
            &path(&page),
        ],
        "truncated",
    );
    assert!(!page.exists());
    one_line_error(
        &[
            "export",
            &path(&old),
            "--format",
            "pprof",
            "-o",
            &path(&page),
        ],
        "lockpath/0",
    );
    one_line_error(
        &["record", "--metrics", "nowhere", "-d", "1"],
        "not PORT or ADDRESS:PORT",
    );
}

/// An output place that cannot be written fails before anything is loaded (the issue's
/// `-o /proc/x.json -d 3` recorded for 3 s and then lost the run).
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn unwritable_output_fails_before_recording() {
    let _alone = or_skip!(root_test_alone(&[]));
    let before = loaded_programs();
    let started = std::time::Instant::now();
    let stderr = fails_with(
        &["record", "--lock", "-a", "-d", "3", "-o", "/proc/x.json"],
        "cannot write the profile to /proc/x.json",
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "the check must come before the 3 s recording: {stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    let leftover: Vec<u64> = loaded_programs()
        .into_iter()
        .filter(|id| !before.contains(id))
        .collect();
    assert!(leftover.is_empty(), "programs left loaded: {leftover:?}");
}

/// When the final write fails after all (the directory went away during the run), the
/// recording goes to a fallback file that the error names, and that file is a profile.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn failed_final_write_keeps_the_recording() {
    let _alone = alone();
    let dir = or_skip!(root_test("fallback-write"));
    let gone = dir.join("gone");
    std::fs::create_dir_all(&gone).expect("create dir");
    let out = gone.join("p.json");
    let storm = workload("lock-storm");
    let script = format!(
        "rm -rf {}; exec {} --seconds 2 --mode pipe",
        path_str(&gone),
        path_str(&storm)
    );
    let stderr = fails_with(
        &[
            "record",
            "--lock",
            "-o",
            path_str(&out),
            "--",
            "sh",
            "-c",
            &script,
        ],
        "the recording was saved to ",
    );
    let fallback = stderr
        .split("the recording was saved to ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("fallback path in the error");
    let profile = load_json(std::path::Path::new(fallback));
    assert!(
        profile["locks"]
            .as_array()
            .is_some_and(|rows| !rows.is_empty()),
        "the fallback profile {fallback} holds the recording"
    );
    let _ = std::fs::remove_file(fallback);
    assert!(!out.exists());
}
