//! Root integration tests of the off-CPU family: a known-answer sleep, and bad input.

#[macro_use]
mod common;

use common::*;

/// (name, module) of the frames of stack `id`, leaf first.
fn user_frames(profile: &serde_json::Value, id: u64) -> Vec<(String, String)> {
    profile["stacks"][id as usize]["frames"]
        .as_array()
        .expect("stack frames")
        .iter()
        .map(|frame| {
            let frame = &profile["frames"][frame.as_u64().expect("frame index") as usize];
            (
                frame["name"].as_str().unwrap_or("").to_string(),
                frame["module"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// What the sleeper measured of itself.
struct Slept {
    tid: u64,
    /// All its sleeps' time.
    slept_ns: u64,
    /// The sleeps that left the CPU voluntarily (the S-state waits), and their time.
    waits: u64,
    waits_ns: u64,
}

/// `sleeper tid=N slept_ns=T waits=W waits_ns=U` from the workload's output.
fn parse_sleeper(stdout: &str) -> Slept {
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
    Slept {
        tid: field("tid="),
        slept_ns: field("slept_ns="),
        waits: field("waits="),
        waits_ns: field("waits_ns="),
    }
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn known_sleep_is_reported_as_sleep_with_its_time() {
    let dir = or_skip!(root_test("offcpu-sleep"));
    let profile_path = dir.join("sleep.json");
    let svg_path = dir.join("sleep.svg");
    let sleeper = workload("sleeper");
    let args = record_args_with_flamegraph(
        &["--offcpu-all"],
        &profile_path,
        &svg_path,
        &[path_str(&sleeper), "--count", "20", "--ms", "50"],
    );
    let (child, programs) = spawn_recording(&args);
    assert!(!programs.is_empty(), "the sched_switch program is loaded");
    let output = child.finish(&programs);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let slept = parse_sleeper(&stdout);
    let tid = slept.tid;
    assert!(
        slept.slept_ns >= 1_000_000_000,
        "20 x 50 ms is at least 1 s: {}",
        slept.slept_ns
    );
    // The ground truth is the sleeps the kernel counted as voluntary switches: a sleep
    // spent preempted (runnable) until its timer expired is no wait. Nearly all are.
    assert!(
        slept.waits >= 18,
        "the sleeper should sleep, not wait for a CPU: {} of 20 sleeps were voluntary",
        slept.waits
    );

    let profile = load_json(&profile_path);
    let rows: Vec<&serde_json::Value> = items(&profile["offcpu"], "offcpu rows")
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
    let error = (ours as f64 - slept.waits_ns as f64).abs() / slept.waits_ns as f64;
    eprintln!(
        "thread {tid}: {} of its sleeps were waits, {} ns measured ({} ns all sleeps); \
         lockpath {ours} ns in {waits} waits ({:.2}% apart)",
        slept.waits,
        slept.waits_ns,
        slept.slept_ns,
        error * 100.0
    );
    // On a miss, everything that was recorded of the thread, and what was lost.
    let recorded = || {
        let rows: Vec<String> = rows
            .iter()
            .map(|row| {
                format!(
                    "{} {} x{} {} ns",
                    row["class"], row["state"], row["count"], row["total_ns"]
                )
            })
            .collect();
        format!("rows {rows:?}, losses {}", profile["losses"])
    };
    assert!(
        error < 0.05,
        "lockpath {ours} ns vs measured {} ns: {:.1}% apart; {}",
        slept.waits_ns,
        error * 100.0,
        recorded()
    );
    assert_eq!(
        waits,
        slept.waits,
        "one wait per voluntary sleep; {}",
        recorded()
    );
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
        // The user side of the same wait, named by the user symbolizer (the process was
        // noted while it lived): libc's nanosleep at the leaf, and the sleeper's own
        // code (std::thread::sleep is inlined into it in release builds) by name.
        let ustack = row["ustack"]
            .as_u64()
            .unwrap_or_else(|| panic!("a user stack for the sleep: {row}"));
        let user = user_frames(&profile, ustack);
        assert!(
            user.first()
                .is_some_and(|(name, _)| name.contains("nanosleep")),
            "libc's nanosleep is the user leaf: {user:?}"
        );
        assert!(
            user.iter()
                .any(|(name, module)| module.ends_with("/sleeper")
                    && !name.contains("+0x")
                    && !name.starts_with("0x")),
            "a named frame of the sleeper binary in the user stack: {user:?}"
        );
    }

    // The summary, the JSON report and the flamegraph carry it too.
    assert!(
        stdout.contains("off-CPU time by process and wait class"),
        "{stdout}"
    );
    assert!(stdout.contains("sleep"), "{stdout}");
    let report = report_json(&profile_path, &["--top", "0"]);
    let process = items(&report["offcpu"], "offcpu in the JSON report")
        .find(|process| process["process"] == "sleeper")
        .unwrap_or_else(|| panic!("sleeper in the JSON report: {report}"));
    let sleep_class = items(&process["classes"], "classes")
        .find(|class| class["class"] == "sleep")
        .expect("a sleep class");
    assert!(sleep_class["total_ns"].as_u64().expect("total") >= ours);
    assert!(sleep_class["percent"].as_f64().expect("percent") > 0.0);
    let svg = read_svg(&svg_path);
    assert!(
        svg.contains("do_nanosleep") && svg.contains("sleeper"),
        "stack and process in the SVG"
    );
    // Folded order: process; class; user frames from the root; kernel frames.
    let folded = export_folded(&profile_path, "offcpu");
    let line = folded
        .lines()
        .find(|line| line.starts_with("sleeper;sleep;") && line.contains("do_nanosleep"))
        .unwrap_or_else(|| panic!("a sleeper sleep line:\n{folded}"));
    let frames: Vec<&str> = line.split(' ').next().unwrap_or("").split(';').collect();
    let user_leaf = frames
        .iter()
        .position(|frame| *frame == "clock_nanosleep" || *frame == "__nanosleep")
        .unwrap_or_else(|| panic!("libc's nanosleep in the folded line: {line}"));
    let kernel_at = frames
        .iter()
        .position(|frame| *frame == "do_nanosleep")
        .expect("kernel frame");
    assert!(
        user_leaf > 2 && user_leaf < kernel_at,
        "process; class; user frames; then kernel frames: {line}"
    );
    check_offcpu_exporters(&dir, &profile_path, &profile, ours);
}

/// The exporters on the sleep recording: diff per second, pprof read by go, HTML
/// section, merge of two copies. `sleeper_ns`: the sleeper thread's sleep time.
fn check_offcpu_exporters(
    dir: &std::path::Path,
    path: &std::path::Path,
    profile: &serde_json::Value,
    sleeper_ns: u64,
) {
    let path_str = path.to_str().expect("path");
    let duration_s = profile["duration_s"].as_f64().expect("duration");
    let rows = profile["offcpu"].as_array().expect("offcpu rows");
    let sum = |field: &str, class: Option<&str>| -> u64 {
        rows.iter()
            .filter(|row| class.is_none_or(|class| row["class"] == class))
            .map(|row| row[field].as_u64().expect("number"))
            .sum()
    };

    // diff against itself: per second of run, no change, sleep per class and process.
    let diff = lockpath_ok(&[
        "diff", path_str, path_str, "--kind", "offcpu", "--format", "json",
    ]);
    let diff: serde_json::Value = serde_json::from_slice(&diff.stdout).expect("diff JSON");
    let sleep = diff_rows(&diff, "class")
        .iter()
        .find(|row| row["key"] == "sleep")
        .unwrap_or_else(|| panic!("sleep class in {diff}"));
    let per_s = sum("total_ns", Some("sleep")) as f64 / duration_s;
    let new_per_s = sleep["new_per_s"].as_f64().expect("new_per_s");
    assert!(
        (new_per_s - per_s).abs() <= per_s * 1e-9,
        "{sleep} vs {per_s}"
    );
    assert_eq!(sleep["change_per_s"].as_f64(), Some(0.0));
    let sleeper = diff_rows(&diff, "process")
        .iter()
        .find(|row| row["key"] == "sleeper")
        .unwrap_or_else(|| panic!("sleeper process in {diff}"));
    assert!(
        sleeper["new_per_s"].as_f64().expect("value") * duration_s >= sleeper_ns as f64 * 0.999
    );
    assert!(
        diff_rows(&diff, "function").iter().any(|row| row["key"]
            .as_str()
            .is_some_and(|key| key.starts_with("sleep ") && key.contains("nanosleep"))),
        "the nanosleep wait site in the function table: {diff}"
    );
    let text = lockpath_ok(&["diff", path_str, path_str, "--kind", "offcpu"]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("offcpu by class:"), "{text}");
    assert!(
        text.lines().all(|line| line.chars().count() <= 100),
        "{text}"
    );

    // pprof: go reads it and its totals are the profile's.
    if require_tool("known_sleep_is_reported_as_sleep_with_its_time", "go") {
        let pprof = dir.join("sleep.pb.gz");
        let pprof_str = pprof.to_str().expect("path");
        lockpath_ok(&[
            "export", path_str, "--format", "pprof", "--kind", "offcpu", "-o", pprof_str,
        ]);
        assert_eq!(
            pprof_total(dir, &pprof, "off_cpu", &["-unit", "ns"]),
            sum("total_ns", None),
            "pprof off_cpu total"
        );
        assert_eq!(pprof_total(dir, &pprof, "waits", &[]), sum("count", None));
    }

    // HTML: the per-process wait breakdown and the off-CPU flamegraph.
    let html = dir.join("sleep.html");
    let page = report_html(path, &html);
    assert!(page.contains("<section id=\"offcpu\">"), "offcpu section");
    assert!(
        page.contains("<td>sleeper</td>"),
        "sleeper in the breakdown"
    );
    assert!(
        page.contains("title=\"off-CPU flamegraph\""),
        "flamegraph inline"
    );

    // merge of two copies of one host's profile (as of two periods of it): each row once,
    // with twice its waits and time, the pids kept.
    let merged = dir.join("merged.json");
    lockpath_ok(&[
        "merge",
        path_str,
        path_str,
        "-o",
        merged.to_str().expect("path"),
    ]);
    let merged = load_json(&merged);
    let merged_rows = merged["offcpu"].as_array().expect("merged rows");
    assert_eq!(merged_rows.len(), rows.len());
    let merged_sum = |field: &str| -> u64 {
        merged_rows
            .iter()
            .map(|row| row[field].as_u64().expect("a number"))
            .sum()
    };
    assert_eq!(merged_sum("total_ns"), 2 * sum("total_ns", None));
    assert_eq!(merged_sum("count"), 2 * sum("count", None));
    let pids: std::collections::HashSet<u64> = items(&merged["processes"], "processes")
        .map(|process| process["pid"].as_u64().expect("pid"))
        .collect();
    assert!(
        merged_rows
            .iter()
            .all(|row| pids.contains(&row["pid"].as_u64().expect("pid"))),
        "every merged row refers to a merged process"
    );
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn d_state_only_by_default_and_min_wait_filters() {
    let dir = or_skip!(root_test("offcpu-default"));
    let sleeper = workload("sleeper");
    // Without --offcpu-all, nanosleep (S state) is not recorded.
    let path = dir.join("d.json");
    lockpath_ok(&record_args(
        &["--offcpu"],
        &path,
        &[path_str(&sleeper), "--count", "5", "--ms", "20"],
    ));
    let profile = load_json(&path);
    let sleeps = items(&profile["offcpu"], "rows")
        .filter(|row| row["class"] == "sleep")
        .count();
    assert_eq!(sleeps, 0, "S-state sleeps are left out by default");
    for row in profile["offcpu"].as_array().expect("rows") {
        assert_eq!(row["state"], "D");
    }
    // --min-wait 60ms drops the 20 ms sleeps in the kernel (with room for a late
    // wake-up on a busy machine: a wait runs until the thread is back on a CPU).
    let path = dir.join("min.json");
    lockpath_ok(&record_args(
        &["--offcpu-all", "--min-wait", "60ms"],
        &path,
        &[path_str(&sleeper), "--count", "5", "--ms", "20"],
    ));
    let profile = load_json(&path);
    for row in profile["offcpu"].as_array().expect("rows") {
        assert!(
            row["max_ns"].as_u64().expect("max") >= 60_000_000,
            "a wait under --min-wait: {row}"
        );
        assert_ne!(row["class"], "sleep", "20 ms sleeps are under 60 ms: {row}");
    }
}

#[test]
fn bad_offcpu_flags_are_refused() {
    let dir = or_skip!(lockpath_test("offcpu-bad"));
    let out = dir.join("p.json");
    let out = out.to_str().expect("path");
    for (args, expect) in [
        (
            vec!["record", "--offcpu", "--min-wait", "garbage", "-o", out],
            "not a duration",
        ),
        (
            vec!["record", "--offcpu", "--min-wait", "1mo", "-o", out],
            "use days",
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
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn a_full_wait_map_keeps_every_wait() {
    let dir = or_skip!(root_test("offcpu-full-map"));
    let profile_path = dir.join("p.json");
    // 1 ms sleeps on a new call path every 10 ms: each path's waits are a row of their
    // own (another user stack), and the map has room for two.
    let output = lockpath_ok(&record_args(
        &["--offcpu-all", "--map-entries", "2"],
        &profile_path,
        &[
            path_str(&workload("stack-spread")),
            "--seconds",
            "2",
            "--step-ms",
            "10",
            "--sleep-us",
            "1000",
        ],
    ));
    let truth = report(&String::from_utf8_lossy(&output.stdout), "start_unix_ns");
    let slept_ns = truth["slept_ns"];
    let profile = load_json(&profile_path);
    let pids: Vec<u64> = items(&profile["processes"], "processes")
        .filter(|process| process["comm"] == "stack-spread")
        .filter_map(|process| process["pid"].as_u64())
        .collect();
    let workload_rows: Vec<&serde_json::Value> = items(&profile["offcpu"], "offcpu rows")
        .filter(|row| row["pid"].as_u64().is_some_and(|pid| pids.contains(&pid)))
        .collect();
    // Its sleeps; its other waits (a D-state one at start or exit) can overflow too.
    let rows: Vec<&serde_json::Value> = workload_rows
        .iter()
        .copied()
        .filter(|row| row["state"] == "S")
        .collect();
    let total = |rows: &[&serde_json::Value], field: &str| -> u64 {
        rows.iter()
            .map(|row| row[field].as_u64().expect("number"))
            .sum()
    };
    let without_stacks: Vec<&serde_json::Value> = workload_rows
        .iter()
        .copied()
        .filter(|row| row["stack"].is_null() && row["ustack"].is_null())
        .collect();
    let full = profile["losses"]["offcpu_map_full"].as_u64().unwrap_or(0);
    let ours = total(&rows, "total_ns");
    let error = ours.abs_diff(slept_ns) as f64 / slept_ns as f64;
    eprintln!(
        "{} waits, {ours} ns ({} waits in rows without stacks, {full} over the full map); \
         the workload slept {slept_ns} ns ({:.1}% apart)",
        total(&rows, "count"),
        total(&without_stacks, "count"),
        error * 100.0
    );
    assert!(
        full > 0,
        "2 entries cannot hold the waits: nothing overflowed"
    );
    assert!(
        total(&without_stacks, "count") >= full,
        "every wait over the full map is in a row without stacks"
    );
    assert!(
        error < 0.05,
        "{ours} ns of waits, the workload slept {slept_ns} ns"
    );
}
