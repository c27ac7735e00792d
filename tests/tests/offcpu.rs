//! Root integration tests of the off-CPU family: a known-answer sleep, and bad input.

mod common;

use common::*;

/// `sleeper tid=N slept_ns=T` from the workload's output.
fn parse_sleeper(stdout: &str) -> (u64, u64) {
    let line = stdout
        .lines()
        .find(|line| line.starts_with("sleeper "))
        .unwrap_or_else(|| panic!("no sleeper line in:\n{stdout}"));
    let field = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|part| part.strip_prefix(name))
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    (field("tid="), field("slept_ns="))
}

#[test]
fn known_sleep_is_reported_as_sleep_with_its_time() {
    if !can_load_programs("known_sleep_is_reported_as_sleep_with_its_time") {
        return;
    }
    let dir = scratch("offcpu-sleep");
    let profile_path = dir.join("sleep.json");
    let svg_path = dir.join("sleep.svg");
    let sleeper = workload("sleeper");
    let args = [
        "record",
        "--offcpu-all",
        "-o",
        profile_path.to_str().expect("path"),
        "--flamegraph",
        svg_path.to_str().expect("path"),
        "--",
        sleeper.to_str().expect("path"),
        "--count",
        "20",
        "--ms",
        "50",
    ];
    let (child, programs) = spawn_recording(&args);
    assert!(!programs.is_empty(), "the sched_switch program is loaded");
    let output = child.wait_with_output().expect("wait for lockpath");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "lockpath failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_programs_gone(&programs);
    let (tid, slept_ns) = parse_sleeper(&stdout);
    assert!(
        slept_ns >= 1_000_000_000,
        "20 x 50 ms is at least 1 s: {slept_ns}"
    );

    let profile = load_json(&profile_path);
    let rows: Vec<&serde_json::Value> = profile["offcpu"]
        .as_array()
        .expect("offcpu rows")
        .iter()
        .filter(|row| row["tid"].as_u64() == Some(tid))
        .collect();
    assert!(
        !rows.is_empty(),
        "no off-CPU row for the sleeping thread {tid}"
    );
    let sleep_rows: Vec<&&serde_json::Value> =
        rows.iter().filter(|row| row["class"] == "sleep").collect();
    let ours: u64 = sleep_rows
        .iter()
        .map(|row| row["total_ns"].as_u64().expect("total"))
        .sum();
    let waits: u64 = sleep_rows
        .iter()
        .map(|row| row["count"].as_u64().expect("count"))
        .sum();
    let error = (ours as f64 - slept_ns as f64).abs() / slept_ns as f64;
    eprintln!(
        "thread {tid}: measured its sleep at {slept_ns} ns, lockpath {ours} ns in {waits} waits ({:.2}% apart)",
        error * 100.0
    );
    assert!(
        error < 0.05,
        "lockpath {ours} ns vs measured {slept_ns} ns: {:.1}% apart",
        error * 100.0
    );
    assert_eq!(waits, 20, "one wait per sleep");
    for row in &sleep_rows {
        assert_eq!(row["state"], "S", "nanosleep is an interruptible sleep");
        let max = row["max_ns"].as_u64().expect("max");
        assert!(
            (50_000_000..1_000_000_000).contains(&max),
            "one sleep is 50 ms or a bit more: {max}"
        );
        let frames = stack_names(&profile, row["stack"].as_u64().expect("kernel stack"));
        assert!(
            frames.iter().any(|name| name.contains("nanosleep")),
            "the nanosleep path is in the stack: {frames:?}"
        );
    }

    // The summary, the JSON report and the flamegraph carry it too.
    assert!(
        stdout.contains("off-CPU time by process and wait class"),
        "{stdout}"
    );
    assert!(stdout.contains("sleep"), "{stdout}");
    let report = lockpath_ok(&[
        "report",
        profile_path.to_str().expect("path"),
        "--format",
        "json",
        "--top",
        "0",
    ]);
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).expect("report JSON");
    let process = report["offcpu"]
        .as_array()
        .expect("offcpu in the JSON report")
        .iter()
        .find(|process| process["process"] == "sleeper")
        .unwrap_or_else(|| panic!("sleeper in the JSON report: {report}"));
    let sleep_class = process["classes"]
        .as_array()
        .expect("classes")
        .iter()
        .find(|class| class["class"] == "sleep")
        .expect("a sleep class");
    assert!(sleep_class["total_ns"].as_u64().expect("total") >= ours);
    assert!(sleep_class["percent"].as_f64().expect("percent") > 0.0);
    let svg = std::fs::read_to_string(&svg_path).expect("svg written");
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    roxmltree::Document::parse_with_options(&svg, options).expect("the SVG is well-formed XML");
    assert!(
        svg.contains("do_nanosleep") && svg.contains("sleeper"),
        "stack and process in the SVG"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn d_state_only_by_default_and_min_wait_filters() {
    if !can_load_programs("d_state_only_by_default_and_min_wait_filters") {
        return;
    }
    let dir = scratch("offcpu-default");
    let sleeper = workload("sleeper");
    // Without --offcpu-all, nanosleep (S state) is not recorded.
    let path = dir.join("d.json");
    lockpath_ok(&[
        "record",
        "--offcpu",
        "-o",
        path.to_str().expect("path"),
        "--",
        sleeper.to_str().expect("path"),
        "--count",
        "5",
        "--ms",
        "20",
    ]);
    let profile = load_json(&path);
    let sleeps = profile["offcpu"]
        .as_array()
        .expect("rows")
        .iter()
        .filter(|row| row["class"] == "sleep")
        .count();
    assert_eq!(sleeps, 0, "S-state sleeps are left out by default");
    for row in profile["offcpu"].as_array().expect("rows") {
        assert_eq!(row["state"], "D");
    }
    // --min-wait 30ms drops the 20 ms sleeps in the kernel.
    let path = dir.join("min.json");
    lockpath_ok(&[
        "record",
        "--offcpu-all",
        "--min-wait",
        "30ms",
        "-o",
        path.to_str().expect("path"),
        "--",
        sleeper.to_str().expect("path"),
        "--count",
        "5",
        "--ms",
        "20",
    ]);
    let profile = load_json(&path);
    for row in profile["offcpu"].as_array().expect("rows") {
        assert!(
            row["max_ns"].as_u64().expect("max") >= 30_000_000,
            "a wait under --min-wait: {row}"
        );
        assert_ne!(row["class"], "sleep", "20 ms sleeps are under 30 ms: {row}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_offcpu_flags_are_refused() {
    if !lockpath_bin().exists() {
        eprintln!("SKIP bad_offcpu_flags_are_refused: lockpath not built");
        return;
    }
    let dir = scratch("offcpu-bad");
    let out = dir.join("p.json");
    let out = out.to_str().expect("path");
    for (args, expect) in [
        (
            vec!["record", "--offcpu", "--min-wait", "garbage", "-o", out],
            "not a duration",
        ),
        (
            vec!["record", "--offcpu", "--min-wait", "10", "-o", out],
            "unknown unit",
        ),
        (
            vec!["record", "--offcpu", "--wait-class", "ldiskfs", "-o", out],
            "NAME=FRAME_PATTERN",
        ),
        (
            vec!["record", "--offcpu", "--wait-class", "x=", "-o", out],
            "non-empty",
        ),
        (
            vec!["record", "--min-wait", "1ms", "-o", out],
            "add --offcpu",
        ),
        (
            vec!["report", out, "--format", "json"],
            "cannot read profile",
        ),
    ] {
        let output = lockpath(&args);
        assert!(!output.status.success(), "lockpath {args:?} must fail");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(expect),
            "lockpath {args:?}: expected {expect:?} in:\n{stderr}"
        );
        assert!(!stderr.contains("panicked"), "no panic: {stderr}");
        assert!(
            !std::path::Path::new(out).exists(),
            "no profile for bad input"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
