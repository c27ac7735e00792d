//! Root integration tests of `record --wakers`: who woke each off-CPU wait, against
//! workloads that know the answer (a pipe ping-pong, a pthread mutex held by a named
//! thread for a known time).

#[macro_use]
mod common;

use std::path::{Path, PathBuf};

use common::*;

/// `NAME=VALUE` of the workload's output line starting with `prefix`.
fn field(stdout: &str, prefix: &str, name: &str) -> u64 {
    let line = stdout
        .lines()
        .find(|line| line.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} line in:\n{stdout}"));
    line.split_whitespace()
        .find_map(|part| part.strip_prefix(&format!("{name}=")))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {line}"))
}

fn rows(profile: &serde_json::Value) -> &Vec<serde_json::Value> {
    profile["offcpu"].as_array().expect("offcpu rows")
}

fn wakers(row: &serde_json::Value) -> Vec<&serde_json::Value> {
    row["wakers"]
        .as_array()
        .map(|wakers| wakers.iter().collect())
        .unwrap_or_default()
}

fn stack_of(profile: &serde_json::Value, value: &serde_json::Value, key: &str) -> Vec<String> {
    value[key]
        .as_u64()
        .map(|id| stack_names(profile, id))
        .unwrap_or_default()
}

/// Records `--offcpu-all --wakers` (and `extra`) around 2 s of `pairs` ping-pong pairs
/// in `dir`, checks that they bounced, and returns the profile's path and the profile.
fn ping_pong(dir: &Path, extra: &[&str], pairs: u32) -> (PathBuf, serde_json::Value) {
    let profile_path = dir.join("pp.json");
    let ping_pong = workload("ping-pong");
    let pairs = pairs.to_string();
    let options = [&["--offcpu-all", "--wakers"], extra].concat();
    let command = [path_str(&ping_pong), "--seconds", "2", "--pairs", &pairs];
    let Recorded {
        stdout, profile, ..
    } = record_profile(&options, &profile_path, &command);
    let ops = field(&stdout, "ops=", "ops");
    assert!(ops > 100, "the pairs bounced: {stdout}");
    (profile_path, profile)
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn ping_pong_sides_wake_each_other_through_pipe_write() {
    let dir = or_skip!(root_test("wakers-ping-pong"));
    let (profile_path, profile) = ping_pong(&dir, &[], 1);
    assert!(
        items(&profile["probes"], "probes").any(|probe| probe["family"] == "wakers"),
        "the wakers family is recorded"
    );
    // The two sides: the threads waiting in the pipe read path.
    let mut sides: std::collections::BTreeMap<u64, (u64, u64, u64)> = Default::default();
    for row in rows(&profile) {
        let frames = stack_of(&profile, row, "stack");
        if !frames.iter().any(|name| name.ends_with("pipe_read")) {
            continue;
        }
        let tid = row["tid"].as_u64().expect("tid");
        let side = sides.entry(tid).or_default();
        side.0 += row["total_ns"].as_u64().expect("total");
        for waker in wakers(row) {
            let waker_frames = stack_of(&profile, waker, "stack");
            let wait = waker["wait_ns"].as_u64().expect("wait_ns");
            side.1 += wait;
            if waker["tid"].as_u64() != Some(tid)
                && waker_frames.iter().any(|name| name.ends_with("pipe_write"))
            {
                side.2 += wait;
            }
        }
    }
    assert_eq!(sides.len(), 2, "two threads wait in pipe_read: {sides:?}");
    let tids: Vec<u64> = sides.keys().copied().collect();
    for (tid, (total, seen, by_other)) in &sides {
        eprintln!(
            "thread {tid}: {total} ns in pipe_read, wakers seen for {seen} ns, {by_other} ns by the other side through pipe_write"
        );
        assert!(
            *by_other as f64 >= 0.9 * *total as f64,
            "thread {tid}: at least 90% of its pipe waits woken by the other side through pipe_write ({by_other} of {total} ns)"
        );
        assert!(
            seen <= total,
            "wakers never exceed the row: {seen} > {total}"
        );
    }
    // The waker of each side is the other side.
    for row in rows(&profile) {
        let tid = row["tid"].as_u64().expect("tid");
        if !tids.contains(&tid)
            || !stack_of(&profile, row, "stack")
                .iter()
                .any(|n| n.ends_with("pipe_read"))
        {
            continue;
        }
        let top = wakers(row)
            .into_iter()
            .max_by_key(|waker| waker["wait_ns"].as_u64().unwrap_or(0))
            .expect("a waker");
        let other = tids
            .iter()
            .find(|&&other| other != tid)
            .expect("other side");
        assert_eq!(
            top["tid"].as_u64(),
            Some(*other),
            "thread {tid} is woken by {other}"
        );
    }

    // The report says it, and the offwake views draw it.
    let report = lockpath_ok(&["report", path_str(&profile_path), "--top", "0"]);
    let text = String::from_utf8_lossy(&report.stdout).into_owned();
    assert!(text.contains("woken by ping-pong["), "{text}");
    assert!(text.contains("pipe_write"), "{text}");
    let json = report_json(&profile_path, &["--top", "0"]);
    let shares: Vec<&serde_json::Value> = items(&json["offcpu"], "offcpu")
        .flat_map(|process| process["classes"].as_array().expect("classes").iter())
        .flat_map(|class| class["stacks"].as_array().expect("stacks").iter())
        .flat_map(|stack| stack["wakers"].as_array().into_iter().flatten())
        .collect();
    assert!(
        shares.iter().any(|share| share["process"] == "ping-pong"
            && share["frames"].as_array().is_some_and(|frames| frames
                .iter()
                .any(|f| f.as_str().is_some_and(|f| f.ends_with("pipe_write"))))
            && share["wait_ns"].as_u64().unwrap_or(0) > 0
            && share["count"].as_u64().unwrap_or(0) > 0
            && share["pid"].as_u64().is_some()
            && share["tid"].as_u64().is_some()),
        "a ping-pong waker with pipe_write in the JSON report"
    );
    let folded = export_folded(&profile_path, "offwake");
    let line = folded
        .lines()
        .find(|line| {
            line.contains("pipe_read;") && line.contains(";--;") && line.contains("pipe_write")
        })
        .unwrap_or_else(|| panic!("an offwake line from pipe_read to pipe_write:\n{folded}"));
    let frames: Vec<&str> = line.rsplit_once(' ').expect("value").0.split(';').collect();
    let separator = frames.iter().position(|f| *f == "--").expect("separator");
    let read_at = frames
        .iter()
        .position(|f| f.ends_with("pipe_read"))
        .expect("pipe_read");
    let write_at = frames
        .iter()
        .position(|f| f.ends_with("pipe_write"))
        .expect("pipe_write");
    assert!(
        read_at < separator && separator < write_at,
        "waiter below, waker above: {line}"
    );
    assert!(
        frames
            .last()
            .is_some_and(|top| top.starts_with("ping-pong[")),
        "the waker's thread on top: {line}"
    );
    // The offwake total is the off-CPU total (unseen wakers included).
    let total_of = |kind: &str| -> u64 {
        let out = lockpath_ok(&[
            "export",
            path_str(&profile_path),
            "--format",
            "folded",
            "--kind",
            kind,
        ]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| {
                line.rsplit_once(' ')
                    .and_then(|(_, v)| v.parse::<u64>().ok())
            })
            .sum()
    };
    let (offcpu, offwake) = (total_of("offcpu"), total_of("offwake"));
    assert!(
        offcpu.abs_diff(offwake) * 1000 <= offcpu.max(1) * 2,
        "offwake total {offwake} us vs off-CPU {offcpu} us (rounding only)"
    );
    let svg = dir.join("offwake.svg");
    lockpath_ok(&[
        "flamegraph",
        path_str(&profile_path),
        "--kind",
        "offwake",
        "-o",
        path_str(&svg),
    ]);
    let svg = std::fs::read_to_string(&svg).expect("svg");
    assert!(
        svg.contains("pipe_write") && svg.contains("--"),
        "offwake SVG"
    );
    let pprof = dir.join("offwake.pb.gz");
    lockpath_ok(&[
        "export",
        path_str(&profile_path),
        "--format",
        "pprof",
        "--kind",
        "offwake",
        "-o",
        path_str(&pprof),
    ]);
    assert!(std::fs::metadata(&pprof).expect("pprof written").len() > 100);
    let html = dir.join("pp.html");
    let html = report_html(&profile_path, &html);
    assert!(
        html.contains("id=\"offwake\"") && html.contains("Who woke the waits"),
        "HTML section"
    );
}

/// With `--map-entries 2`, three ping-pong pairs cannot each have their waker rows: the
/// wakers the full map has no room for go to rows of the waker's thread without its
/// stacks, still under the waiter's row. Each side's sleeps stay woken by another
/// ping-pong thread (at least 90% of their time), as without the limit.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn a_full_waker_map_keeps_every_waker() {
    let dir = or_skip!(root_test("wakers-full"));
    let (_, profile) = ping_pong(&dir, &["--map-entries", "2"], 3);
    let losses = &profile["losses"];
    assert!(
        losses["waker_map_full"].as_u64().unwrap_or(0) > 0,
        "2 map entries cannot hold 3 pairs' wakers: {losses}"
    );
    // Per side (a thread of the workload other than its main thread): its sleeps, and
    // the part of them woken by another thread of the workload.
    let pid = items(&profile["processes"], "processes")
        .find(|process| process["comm"] == "ping-pong")
        .and_then(|process| process["pid"].as_u64());
    let mut sides: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    for row in rows(&profile) {
        let tid = row["tid"].as_u64().expect("tid");
        if row["pid"].as_u64() != pid || pid == Some(tid) || row["state"] != "S" {
            continue;
        }
        let side = sides.entry(tid).or_default();
        side.0 += row["total_ns"].as_u64().expect("total");
        side.1 += wakers(row)
            .iter()
            .filter(|waker| waker["pid"].as_u64() == pid && waker["tid"].as_u64() != Some(tid))
            .map(|waker| waker["wait_ns"].as_u64().expect("wait_ns"))
            .sum::<u64>();
    }
    assert_eq!(sides.len(), 6, "six threads sleep: {sides:?}");
    for (tid, (slept, by_other)) in &sides {
        eprintln!("thread {tid}: {slept} ns asleep, {by_other} ns woken by the workload");
        assert!(
            *by_other as f64 >= 0.9 * *slept as f64,
            "thread {tid}: {by_other} of {slept} ns woken by another ping-pong thread"
        );
    }
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn pthread_mutex_waits_are_woken_by_the_holder_with_its_time() {
    let dir = or_skip!(root_test("wakers-mutex"));
    let profile_path = dir.join("mutex.json");
    let mutex_hold = workload("mutex-hold");
    let command = [path_str(&mutex_hold), "--rounds", "20", "--hold-ms", "50"];
    let Recorded {
        stdout, profile, ..
    } = record_profile(&["--offcpu-all", "--wakers"], &profile_path, &command);
    let waiter = field(&stdout, "mutex-hold ", "waiter_tid");
    let holder = field(&stdout, "mutex-hold ", "holder_tid");
    let waited_ns = field(&stdout, "mutex-hold ", "waited_ns");
    assert!(
        waited_ns >= 20 * 50_000_000,
        "20 holds of 50 ms: {waited_ns}"
    );
    // The waiter's futex waits (it sleeps nowhere else; a wait whose stack was lost to a
    // stack-map collision, counted in the losses, is still its futex wait).
    let futex_rows: Vec<&serde_json::Value> = rows(&profile)
        .iter()
        .filter(|row| row["tid"].as_u64() == Some(waiter))
        .filter(|row| {
            row["stack"].is_null()
                || stack_of(&profile, row, "stack")
                    .iter()
                    .any(|n| n.contains("futex_wait"))
        })
        .collect();
    eprintln!("losses: {}", profile["losses"]);
    for row in rows(&profile)
        .iter()
        .filter(|row| row["tid"].as_u64() == Some(waiter))
    {
        eprintln!(
            "waiter row: {} waits, {} ns, {:?}; wakers {}",
            row["count"],
            row["total_ns"],
            stack_of(&profile, row, "stack"),
            row["wakers"]
        );
    }
    assert!(!futex_rows.is_empty(), "the waiter waited on its futex");
    let mut by_holder = 0u64;
    let mut unlock_paths = 0u64;
    let mut count = 0u64;
    let mut row_total = 0u64;
    for row in &futex_rows {
        row_total += row["total_ns"].as_u64().expect("total");
        for waker in wakers(row) {
            if waker["tid"].as_u64() != Some(holder) {
                continue;
            }
            let frames = stack_of(&profile, waker, "stack");
            let user = stack_of(&profile, waker, "ustack");
            eprintln!("holder's stacks at the wake-up: {frames:?} {user:?}");
            if !waker["stack"].is_null() {
                assert!(
                    frames.iter().any(|name| name == "futex_wake"),
                    "the holder's unlock path (futex_wake) in its stack: {frames:?}"
                );
            }
            if !waker["ustack"].is_null() {
                assert!(
                    user.iter().any(|name| name.contains("release_lock")),
                    "the holder's unlock path in its user stack: {user:?}"
                );
            }
            unlock_paths += u64::from(!waker["stack"].is_null() && !waker["ustack"].is_null());
            by_holder += waker["wait_ns"].as_u64().expect("wait_ns");
            count += waker["count"].as_u64().expect("count");
        }
    }
    let error = (by_holder as f64 - waited_ns as f64).abs() / waited_ns as f64;
    eprintln!(
        "waiter {waiter}: measured {waited_ns} ns in pthread_mutex_lock; lockpath: {by_holder} ns in {count} waits woken by the holder {holder} (of {row_total} ns in futex waits), {:.2}% apart",
        error * 100.0
    );
    assert_eq!(count, 20, "one wake-up by the holder per round");
    assert!(
        unlock_paths > 0,
        "the holder's unlock path was seen in both its stacks"
    );
    assert!(
        error < 0.05,
        "within 5% of the waiter's own measurement: {:.2}%",
        error * 100.0
    );
    // The holder is named in the report.
    let report = lockpath_ok(&["report", path_str(&profile_path), "--top", "0"]);
    let text = String::from_utf8_lossy(&report.stdout).into_owned();
    assert!(
        text.contains(&format!("woken by lp-holder[{holder}]"))
            || text.contains(&format!("lp-holder[{holder}]")),
        "{text}"
    );
}

#[test]
fn wakers_need_offcpu() {
    fails_with(&["record", "--wakers", "-d", "1"], "add --offcpu");
}

/// The FUSE fixture's hold chain: three threads create files in one directory whose
/// CREATE reply is delayed 200 ms (at 0, +40 and +80 ms). The third waits on the
/// directory's inode lock (rwsem) held by the second, which waits in the FUSE request
/// for the fixture's reply thread, which sleeps the injected delay.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn fuse_hold_chain_follows_the_holder_to_the_daemon() {
    let dir = or_skip!(root_test("wakers-chain"));
    let profile_path = dir.join("chain.json");
    let fuse = FuseWorkload::in_dir_with_mountpoint(&dir, "results.txt");
    let command = fuse.command("holdchain", &["200"]);
    let Recorded {
        stdout, profile, ..
    } = record_profile(&["--offcpu-all", "--wakers"], &profile_path, &command);
    let measured = fuse.results();
    let value = |name: &str| result(&measured, name);
    let (second, third) = (value("t2_tid"), value("t3_tid"));
    // The second creator's FUSE wait: from the first's return (it then took the lock and
    // sent its CREATE) to its own return.
    let second_rpc_ns = value("t2_end_ns") - value("t1_end_ns");
    let injected_ns = 200_000_000u64;
    let chains = profile["chains"].as_array().expect("chains in the profile");
    let chain = chains
        .iter()
        .find(|chain| {
            chain["tid"].as_u64() == Some(third)
                && stack_of(&profile, chain, "stack")
                    .iter()
                    .any(|name| name.starts_with("rwsem_down_write"))
        })
        .unwrap_or_else(|| panic!("a chain from the third creator's rwsem wait: {chains:?}"));
    let links = chain["links"].as_array().expect("links");
    eprintln!("third creator's chain: {chain}");
    assert_eq!(
        links.len(),
        2,
        "rwsem -> holder in FUSE -> daemon thread: {chain}"
    );
    // Link 1: the holder (second creator) in the FUSE request.
    assert_eq!(
        links[0]["tid"].as_u64(),
        Some(second),
        "held by the second creator"
    );
    assert_eq!(
        links[0]["class"], "rpc",
        "the holder waited on its FUSE request"
    );
    let frames = stack_of(&profile, &links[0], "stack");
    assert!(
        frames.iter().any(
            |name| name.contains("request_wait_answer") || name.contains("fuse_simple_request")
        ),
        "the FUSE request wait: {frames:?}"
    );
    let link1 = links[0]["wait_ns"].as_u64().expect("link 1 time");
    // Link 2: the fixture's reply thread, asleep for the injected delay.
    let daemon = links[1]["tid"].as_u64().expect("daemon tid");
    assert!(
        daemon != second && daemon != third,
        "a thread of the FUSE server"
    );
    assert_eq!(
        links[1]["class"], "sleep",
        "the daemon thread slept the delay"
    );
    let link2 = links[1]["wait_ns"].as_u64().expect("link 2 time");
    eprintln!(
        "link 1 {:.1} ms (workload: {:.1} ms in FUSE), link 2 {:.1} ms (injected {:.1} ms)",
        link1 as f64 / 1e6,
        second_rpc_ns as f64 / 1e6,
        link2 as f64 / 1e6,
        injected_ns as f64 / 1e6
    );
    for (what, got, want) in [
        ("holder in FUSE", link1, second_rpc_ns),
        ("holder in FUSE vs the injected delay", link1, injected_ns),
        ("daemon's sleep", link2, injected_ns),
    ] {
        let error = (got as f64 - want as f64).abs() / want as f64;
        assert!(
            error <= 0.10,
            "{what}: {got} ns vs {want} ns ({:.1}%)",
            error * 100.0
        );
    }
    // The summary shows it.
    assert!(stdout.contains("wait chains"), "{stdout}");
    assert!(
        stdout.contains(&format!("creator-3[{third}] waited"))
            && stdout.contains(&format!("woken by creator-2[{second}]")),
        "{stdout}"
    );
    let json = lockpath_ok(&["report", path_str(&profile_path), "--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON report");
    assert!(
        json["chains"]
            .as_array()
            .is_some_and(|chains| chains.iter().any(|chain| {
                chain["waits"][0]["tid"].as_u64() == Some(third)
                    && chain["waits"][1]["class"] == "rpc"
            })),
        "the chain in the JSON report"
    );
}
