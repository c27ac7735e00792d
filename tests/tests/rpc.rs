//! Root integration tests of `--rpc` against the FUSE fixture (tests/src/fuse.rs), whose
//! replies are delayed by known times: request latency per opcode, the lock the kernel
//! holds across a delayed CREATE, and providers this kernel lacks.

#[macro_use]
mod common;

use std::{collections::HashMap, path::Path};

use common::*;

fn within(measured: f64, expected: f64, fraction: f64) -> bool {
    (measured - expected).abs() <= expected * fraction
}

const FILES: u64 = 6;
const CREATE_MS: f64 = 100.0;
// Long enough that scheduling noise (a few ms on a busy 2-core machine) stays well
// inside 5%.
const WRITE_MS: f64 = 80.0;

/// A recording of `--rpc fuse --offcpu-all` (with `extra` arguments) around the FUSE
/// fixture's latency run in `dir`: its output, the profile, the workload's own
/// results, its pid.
fn fuse_latency_run(
    dir: &Path,
    extra: &[&str],
) -> (String, serde_json::Value, Vec<(String, u64)>, u64) {
    let profile_path = dir.join("p.json");
    let fuse = FuseWorkload::in_dir(dir, "results");
    // Off-CPU too (all states: the caller waits for the reply interruptibly, in S), so
    // the same run checks that its waits are classed `rpc`.
    let options = [&["--rpc", "fuse", "--offcpu-all"], extra].concat();
    let (files, create_ms, write_ms) = (
        FILES.to_string(),
        (CREATE_MS as u64).to_string(),
        (WRITE_MS as u64).to_string(),
    );
    let command = fuse.command("latency", &[&files, &create_ms, &write_ms]);
    let recorded = record_profile(&options, &profile_path, &command);
    let measured = fuse.results();
    let pid = result(&measured, "pid");
    (recorded.stdout, recorded.profile, measured, pid)
}

/// Each CREATE and WRITE of the workload has its request, and their mean latency lies
/// between the injected delay and the caller's own measurement.
fn check_op_latency(profile: &serde_json::Value, measured: &[(String, u64)], pid: u64) {
    let mut by_op: HashMap<String, (u64, u64)> = HashMap::new();
    for row in profile["rpcs"].as_array().expect("rpcs") {
        assert_eq!(row["provider"], "fuse");
        if row["pid"].as_u64() != Some(pid) {
            continue;
        }
        let entry = by_op
            .entry(row["op_name"].as_str().expect("op_name").to_string())
            .or_default();
        entry.0 += row["count"].as_u64().expect("count");
        entry.1 += row["total_ns"].as_u64().expect("total");
    }
    for (op, delay_ms) in [("CREATE", CREATE_MS), ("WRITE", WRITE_MS)] {
        let (count, total) = by_op
            .get(op)
            .copied()
            .unwrap_or_else(|| panic!("no {op} row: {by_op:?}"));
        assert_eq!(count, FILES, "{op}: one request per file");
        let mean_ms = total as f64 / count as f64 / 1e6;
        // The workload times each call itself: on a loaded machine the server's wake-up
        // adds milliseconds to every reply, so the request lasts between the injected
        // delay and the caller's own measurement of the whole system call.
        let key = format!("{}_ns", op.to_lowercase());
        let own: Vec<u64> = measured
            .iter()
            .filter(|(name, _)| *name == key)
            .map(|(_, value)| *value)
            .collect();
        assert_eq!(own.len() as u64, FILES, "{key} lines in {measured:?}");
        let own_ms = own.iter().sum::<u64>() as f64 / FILES as f64 / 1e6;
        eprintln!(
            "fuse {op}: lockpath mean {mean_ms:.3} ms, injected {delay_ms} ms, caller measured {own_ms:.3} ms"
        );
        assert!(
            mean_ms >= delay_ms * 0.99 && mean_ms <= own_ms * 1.01,
            "{op}: mean {mean_ms:.3} ms is not between the injected {delay_ms} ms and the caller's {own_ms:.3} ms"
        );
        assert!(
            within(mean_ms, delay_ms, 0.10),
            "{op}: mean {mean_ms:.3} ms is far from the injected {delay_ms} ms"
        );
    }
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn fuse_latency_per_opcode_matches_injected_delay() {
    let dir = or_skip!(root_test("rpc-fuse-latency"));
    let profile_path = dir.join("p.json");
    let mountpoint = dir.join("mnt");
    let svg_path = dir.join("rpc.svg");
    let (stdout, profile, measured, pid) = fuse_latency_run(&dir, &[]);
    assert!(
        items(&profile["probes"], "probes")
            .filter(|probe| probe["family"] == "rpc")
            .any(|probe| {
                let method = probe["method"].as_str().unwrap_or("");
                // Raw tracepoints keyed by the request's address: `unique` is not read
                // (it is still 0 at fuse_request_send on some kernels).
                method.contains("fuse:fuse_request_send")
                    && method.contains("raw_tracepoint")
                    && method.contains("struct fuse_req pointer")
            }),
        "{}",
        profile["probes"]
    );
    check_op_latency(&profile, &measured, pid);
    // The issuer's stack at the start, the server's reply path at the completion.
    let create = items(&profile["rpcs"], "rpcs")
        .find(|row| row["op_name"] == "CREATE")
        .expect("CREATE row");
    let start = stack_names(
        &profile,
        create["start_stack"].as_u64().expect("start stack"),
    );
    assert!(
        start.iter().any(|frame| frame == "fuse_create_open"),
        "{start:?}"
    );
    let end = stack_names(&profile, create["end_stack"].as_u64().expect("end stack"));
    assert!(
        end.iter().any(|frame| frame == "fuse_dev_do_write"),
        "{end:?}"
    );
    assert!(
        stdout.contains("fuse CREATE"),
        "summary has the latency table:\n{stdout}"
    );

    // Off-CPU: the caller's waits for the replies are classed `rpc`, in
    // request_wait_answer, and last at least the injected delays.
    let rpc_waits: Vec<&serde_json::Value> = items(&profile["offcpu"], "offcpu rows")
        .filter(|row| row["pid"].as_u64() == Some(pid) && row["class"] == "rpc")
        .collect();
    assert!(
        !rpc_waits.is_empty(),
        "no rpc-class off-CPU row for the FUSE caller {pid}: {}",
        profile["offcpu"]
    );
    for row in &rpc_waits {
        let frames = stack_names(&profile, row["stack"].as_u64().expect("kernel stack"));
        assert!(
            frames.iter().any(|frame| frame == "request_wait_answer"),
            "{frames:?}"
        );
    }
    let rpc_wait_ns: u64 = rpc_waits
        .iter()
        .map(|row| row["total_ns"].as_u64().expect("total"))
        .sum();
    let injected_ns = FILES as f64 * (CREATE_MS + WRITE_MS) * 1e6;
    eprintln!("fuse caller off-CPU in rpc: {rpc_wait_ns} ns, injected {injected_ns} ns");
    let mut by_class: HashMap<String, (u64, u64)> = HashMap::new();
    for row in profile["offcpu"].as_array().expect("offcpu rows") {
        if row["pid"].as_u64() == Some(pid) {
            let entry = by_class
                .entry(format!("{} {}", row["class"], row["state"]))
                .or_default();
            entry.0 += row["count"].as_u64().unwrap_or(0);
            entry.1 += row["total_ns"].as_u64().unwrap_or(0);
        }
    }
    assert!(
        rpc_wait_ns as f64 >= injected_ns * 0.95,
        "rpc off-CPU {rpc_wait_ns} ns is below the injected {injected_ns} ns; the caller's \
         off-CPU (count, ns) by class and state: {by_class:?}; losses: {}",
        profile["losses"]
    );

    // Report and flamegraph of the completion stacks.
    let report = lockpath_ok(&["report", profile_path.to_str().expect("path")]);
    assert!(String::from_utf8_lossy(&report.stdout).contains("fuse WRITE"));
    let json = lockpath_ok(&[
        "report",
        "--format",
        "json",
        profile_path.to_str().expect("path"),
    ]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).expect("report JSON");
    assert!(json["rpcs"].as_array().is_some_and(|rows| !rows.is_empty()));
    lockpath_ok(&[
        "flamegraph",
        "--kind",
        "rpc",
        profile_path.to_str().expect("path"),
        "-o",
        svg_path.to_str().expect("path"),
    ]);
    let svg = std::fs::read_to_string(&svg_path).expect("svg");
    assert!(svg.contains("fuse_dev_do_write") && svg.contains("fuse CREATE"));
    assert!(!mountpoint.exists(), "the fixture removed its mount point");
}

/// With `--map-entries 2`, the requests of the latency run's opcodes cannot each have
/// their row: those the full map has no room for go to their (provider, op, process)
/// rows without stacks, and every CREATE and WRITE keeps its latency.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn fuse_latency_holds_with_a_full_map() {
    let dir = or_skip!(root_test("rpc-fuse-full"));
    let (_, profile, measured, pid) = fuse_latency_run(&dir, &["--map-entries", "2"]);
    let map_full = profile["losses"]["rpc_map_full"].as_u64().unwrap_or(0);
    assert!(
        map_full > 0,
        "2 map entries cannot hold the run's opcodes: {}",
        profile["losses"]
    );
    check_op_latency(&profile, &measured, pid);
}

/// Thread A creates a file while the server delays CREATE: the kernel holds the
/// directory's inode rwsem across the request. Thread B creates another file in the
/// same directory and waits for that rwsem, then sends its own (delayed) CREATE. B's
/// `rwsem:W` wait must equal B's own time minus the injected delay.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn fuse_create_lock_wait_matches_ground_truth() {
    let dir = or_skip!(root_test("rpc-fuse-lockwait"));
    let profile_path = dir.join("p.json");
    const CREATE_MS: u64 = 300;
    let fuse = FuseWorkload::in_dir(&dir, "results");
    // --offcpu-all too: the owner (process A, asleep in its delayed CREATE) gets its
    // stack; FUSE waits for a reply interruptibly (S state) first.
    let options = ["--lock", "--offcpu-all", "--rpc", "fuse"];
    let create_ms = CREATE_MS.to_string();
    let command = fuse.command("lockwait", &[&create_ms, "50"]);
    let profile = record_profile(&options, &profile_path, &command).profile;
    let measured = fuse.results();
    let pid = result(&measured, "pid");
    let a_pid = result(&measured, "a_pid");
    let b_ns = result(&measured, "b_create_ns");
    let expected_wait = b_ns.saturating_sub(CREATE_MS * 1_000_000);
    assert!(
        expected_wait > 100_000_000,
        "B should have waited for A's create (B took {b_ns} ns)"
    );
    const LCB_F_WRITE: u64 = 4;
    let mut wait_ns = 0;
    let mut held_by_a_ns = 0;
    for row in profile["locks"].as_array().expect("locks") {
        if row["pid"].as_u64() != Some(pid) || row["flags"].as_u64() != Some(LCB_F_WRITE) {
            continue;
        }
        let Some(stack) = row["stack"].as_u64() else {
            continue;
        };
        let frames = stack_names(&profile, stack);
        let down_write = frames.iter().position(|frame| frame == "down_write");
        let caller = frames
            .iter()
            .position(|frame| frame == "open_last_lookups" || frame == "path_openat");
        if let (Some(down_write), Some(caller)) = (down_write, caller) {
            if caller > down_write {
                wait_ns += row["total_ns"].as_u64().expect("total");
                if row["owner_pid"].as_u64() == Some(a_pid) {
                    held_by_a_ns += row["total_ns"].as_u64().expect("total");
                }
            }
        }
    }
    eprintln!(
        "lock wait: lockpath {:.1} ms, ground truth (B {:.1} ms - {CREATE_MS} ms) {:.1} ms",
        wait_ns as f64 / 1e6,
        b_ns as f64 / 1e6,
        expected_wait as f64 / 1e6
    );
    assert!(
        within(wait_ns as f64, expected_wait as f64, 0.10),
        "rwsem:W wait in open_last_lookups/path_openat <- down_write: {wait_ns} ns, expected {expected_wait} ns (within 10%)\n{}",
        profile["locks"]
    );
    // The waiter's table names the holder: process A, asleep in its FUSE request.
    assert!(
        within(held_by_a_ns as f64, wait_ns as f64, 0.01),
        "B's wait should be held by A (pid {a_pid}): {held_by_a_ns} of {wait_ns} ns\n{}",
        profile["locks"]
    );
    let report = report_json(&profile_path, &[]);
    let holder = items(&report["locks"], "locks")
        // A's lock, with writers' waits (beside readers' it is `rwsem:R+W`).
        .filter(|group| group["type"] == "rwsem:W" || group["type"] == "rwsem:R+W")
        .flat_map(|group| group["holders"].as_array().expect("holders").iter())
        .find(|holder| holder["pid"].as_u64() == Some(a_pid))
        .unwrap_or_else(|| panic!("no rwsem:W group held by A ({a_pid}):\n{report:#}"));
    assert_eq!(holder["process"], "fuse-workload");
    let sleeping_in: Vec<&str> = holder["sleeping_in"]
        .as_array()
        .unwrap_or_else(|| panic!("A's stack is known (it was off-CPU): {holder}"))
        .iter()
        .filter_map(|frame| frame.as_str())
        .collect();
    assert!(
        sleeping_in
            .iter()
            .any(|frame| frame.starts_with("fuse_") || frame.starts_with("request_wait_answer")),
        "A sleeps in its FUSE request: {sleeping_in:?}"
    );
    let text = lockpath_ok(&["report", profile_path.to_str().expect("path")]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!("fuse-workload[{a_pid}]")) && text.contains("sleeping in"),
        "the text report names the holder and where it sleeps:\n{text}"
    );
    // The delayed CREATEs themselves: two of them (A's and B's), each the injected delay.
    let creates: Vec<&serde_json::Value> = items(&profile["rpcs"], "rpcs")
        .filter(|row| {
            row["op_name"] == "CREATE"
                && (row["pid"].as_u64() == Some(pid) || row["pid"].as_u64() == Some(a_pid))
        })
        .collect();
    let count: u64 = creates
        .iter()
        .map(|row| row["count"].as_u64().expect("count"))
        .sum();
    assert_eq!(count, 2, "A's and B's CREATE");
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn missing_providers_are_one_line_each_and_the_run_goes_on() {
    if !can_load_programs("missing_providers_are_one_line_each_and_the_run_goes_on") {
        return;
    }
    let sunrpc_here = Path::new("/sys/kernel/tracing/events/sunrpc/rpc_task_begin").exists();
    let lustre_here = std::fs::read_to_string("/proc/kallsyms")
        .map(|text| text.contains(" ptl_send_rpc"))
        .unwrap_or(false);
    if sunrpc_here || lustre_here {
        eprintln!("SKIP: this kernel has sunrpc or lustre hooks");
        return;
    }
    let dir = scratch("rpc-missing");
    let profile_path = dir.join("p.json");
    let fuse = FuseWorkload::in_dir(&dir, "results");
    let options = ["--rpc", "sunrpc", "--rpc", "lustre", "--rpc", "fuse"];
    let command = fuse.command("latency", &["2", "10", "10"]);
    let Recorded {
        stderr, profile, ..
    } = record_profile(&options, &profile_path, &command);
    for provider in ["sunrpc", "lustre"] {
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|line| line.contains(&format!("--rpc {provider}")))
            .collect();
        assert_eq!(lines.len(), 1, "one line for {provider}:\n{stderr}");
        assert!(lines[0].contains("not recorded"), "{}", lines[0]);
    }
    let missing: Vec<&str> = items(&profile["unavailable"], "unavailable")
        .filter_map(|entry| entry["what"].as_str())
        .collect();
    assert_eq!(missing, vec!["sunrpc", "lustre"]);
    // The run went on: fuse was recorded.
    let creates: u64 = items(&profile["rpcs"], "rpcs")
        .filter(|row| row["op_name"] == "CREATE")
        .map(|row| row["count"].as_u64().expect("count"))
        .sum();
    assert_eq!(creates, 2);
}
