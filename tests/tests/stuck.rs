//! Root tests of what is stuck right now: waits that have not ended when the recording
//! does, waits that began before it, and whom they wait for. The workload is the hung
//! client of fuse-workload `stuck`: process A creates a file in a FUSE directory whose
//! CREATE the server does not answer for 20 s (A holds the directory's inode lock across
//! it); process B then creates another file there and queues behind A on that lock. The
//! workload notes when each call began (CLOCK_MONOTONIC): the ground truth of the ages.

#[macro_use]
mod common;

use std::{
    path::{Path, PathBuf},
    process::{Child, Command},
    time::{Duration, Instant},
};

use common::*;
use serde_json::Value;

/// How long the server sits on each CREATE.
const CREATE_DELAY_MS: &str = "20000";

/// The hung client, running: its results so far, its process and its mount. Dropped,
/// it ends: the server is killed, which ends its connection (the stuck calls return
/// with an error), and the mount is taken down.
struct HungClient {
    ready: Vec<(String, u64)>,
    workload: Child,
    mountpoint: PathBuf,
}

impl HungClient {
    /// Starts fuse-workload `stuck` in `dir` and waits until A and B are both stuck.
    fn start(dir: &Path) -> HungClient {
        let results = dir.join("results");
        let workload = Command::new(workload("fuse-workload"))
            .arg("stuck")
            .arg(&results)
            .arg(dir.join("mnt"))
            .arg(CREATE_DELAY_MS)
            .spawn()
            .expect("start fuse-workload");
        let ready_file = results.with_extension("ready");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready_file.exists() {
            assert!(Instant::now() < deadline, "the hung client never got stuck");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Written in one go; read again if it was caught half-written.
        std::thread::sleep(Duration::from_millis(50));
        HungClient {
            ready: common::results(&ready_file),
            workload,
            mountpoint: dir.join("mnt"),
        }
    }

    fn get(&self, name: &str) -> u64 {
        result(&self.ready, name)
    }
}

impl Drop for HungClient {
    fn drop(&mut self) {
        let _ = self.workload.kill();
        let _ = self.workload.wait();
        let deadline = Instant::now() + Duration::from_secs(10);
        for name in ["a_pid", "b_pid"] {
            let pid = self.get(name);
            while !is_zombie(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.mountpoint)
            .status();
    }
}

/// Gone, or a zombie.
fn is_zombie(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// The waiting rows of `pid` of `kind`.
fn waits<'a>(profile: &'a Value, pid: u64, kind: &str) -> Vec<&'a Value> {
    profile["waiting"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter(|row| row["pid"].as_u64() == Some(pid) && row["kind"] == kind)
                .collect()
        })
        .unwrap_or_default()
}

/// The one waiting row of `pid` of `kind`, with the whole list when it is missing.
fn wait<'a>(profile: &'a Value, pid: u64, kind: &str) -> &'a Value {
    let rows = waits(profile, pid, kind);
    assert_eq!(
        rows.len(),
        1,
        "one {kind} wait of pid {pid} expected in {}",
        serde_json::to_string_pretty(&profile["waiting"]).unwrap_or_default()
    );
    rows[0]
}

/// [`assert_since`] of the `kind` wait of the hung client's process `who` (`a` or `b`).
fn assert_wait_since(profile: &Value, client: &HungClient, who: &str, kind: &str, what: &str) {
    let pid = client.get(&format!("{who}_pid"));
    let since_ns = client.get(&format!("{who}_since_ns"));
    assert_since(wait(profile, pid, kind), since_ns, what);
}

/// A row's start against the workload's own clock: within 5% of the wait's true age at
/// the drain (the row's start plus its age).
fn assert_since(row: &Value, true_since_ns: u64, what: &str) {
    let since = row["since_ns"].as_u64().expect("since_ns");
    let age = row["age_ns"].as_u64().expect("age_ns");
    let drained = since + age;
    let true_age = drained.saturating_sub(true_since_ns) as f64;
    let error = since.abs_diff(true_since_ns) as f64;
    eprintln!(
        "{what}: age {:.3} s, true {:.3} s, start off by {:.1} ms",
        age as f64 / 1e9,
        true_age / 1e9,
        error / 1e6
    );
    assert!(
        error <= 0.05 * true_age,
        "{what}: began at {since}, the workload says {true_since_ns} (age {age} ns)"
    );
}

/// The chain B -> A -> the FUSE server, as the JSON and the text say it.
fn assert_chain(profile: &Value, text: &str, client: &HungClient) {
    let (a, b, server) = (
        client.get("a_pid"),
        client.get("b_pid"),
        client.get("server_pid"),
    );
    let lock = wait(profile, b, "lock");
    assert_eq!(lock["class"], "rwsem:W", "{lock}");
    assert_eq!(
        lock["owner_pid"].as_u64(),
        Some(a),
        "B's lock is held by A: {lock}"
    );
    let request = wait(profile, a, "rpc");
    assert_eq!(request["class"], "FUSE CREATE", "{request}");
    assert_eq!(
        request["owner_pid"].as_u64(),
        Some(server),
        "served by: {request}"
    );
    let b_line = text
        .lines()
        .position(|line| line.contains(&format!("[{b}]")) && line.contains("rwsem:W"))
        .unwrap_or_else(|| panic!("no line for B's lock wait in\n{text}"));
    let chain: Vec<&str> = text.lines().skip(b_line + 1).take(2).collect();
    assert!(
        chain[0].contains("held by")
            && chain[0].contains(&format!("[{a}]"))
            && chain[0].contains("FUSE CREATE"),
        "B's chain: {chain:?}\n{text}"
    );
    assert!(
        chain[1].contains("served by") && chain[1].contains(&format!("[{server}]")),
        "B's chain: {chain:?}\n{text}"
    );
}

fn record_to<'a>(output: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["record", "-o", path_str(output)];
    args.extend_from_slice(extra);
    args
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn waits_stuck_before_the_recording_are_reported_with_their_chain() {
    let _alone = alone();
    let dir = or_skip!(root_test("stuck-before"));
    let client = HungClient::start(&dir);
    // Both were waiting for a while before lockpath starts.
    std::thread::sleep(Duration::from_secs(1));
    let output_path = dir.join("stuck.json");
    let (recording, programs) = spawn_recording(&record_to(
        &output_path,
        &["-a", "-d", "4", "--lock", "--offcpu", "--rpc", "fuse"],
    ));
    let output = recording.finish(&programs);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let profile = load_json(&output_path);
    let b = client.get("b_pid");
    let off_cpu = wait(&profile, b, "offcpu");
    assert_eq!(off_cpu["state"], "D", "{off_cpu}");
    assert_eq!(off_cpu["before_start"], true, "{off_cpu}");
    assert_since(off_cpu, client.get("b_since_ns"), "B off the CPU");
    let stack = stack_names(&profile, off_cpu["stack"].as_u64().expect("B's stack"));
    assert!(
        stack
            .iter()
            .any(|frame| frame == "path_openat" || frame == "do_filp_open"),
        "{stack:?}"
    );
    assert_wait_since(&profile, &client, "b", "lock", "B on the lock");
    assert_wait_since(&profile, &client, "a", "rpc", "A on the request");
    assert!(text.starts_with("lockpath:"), "{text}");
    assert!(text.contains("still waiting at the end"), "{text}");
    assert_chain(&profile, &text, &client);
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn waits_begun_during_the_recording_and_open_at_its_end_are_reported() {
    let _alone = alone();
    let dir = or_skip!(root_test("stuck-during"));
    let output_path = dir.join("stuck.json");
    let (recording, programs) = spawn_recording(&record_to(
        &output_path,
        &["-a", "-d", "4", "--lock", "--offcpu", "--rpc", "fuse"],
    ));
    let client = HungClient::start(&dir);
    let output = recording.finish(&programs);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let profile = load_json(&output_path);
    let b = client.get("b_pid");
    let lock = wait(&profile, b, "lock");
    assert_ne!(lock["before_start"], true, "{lock}");
    assert_since(lock, client.get("b_since_ns"), "B on the lock");
    assert_wait_since(&profile, &client, "a", "rpc", "A on the request");
    assert_wait_since(&profile, &client, "b", "offcpu", "B off the CPU");
    assert_chain(&profile, &text, &client);
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn a_stuck_target_shows_its_wait_and_a_bystander_does_not() {
    let _alone = alone();
    let dir = or_skip!(root_test("stuck-target"));
    let client = HungClient::start(&dir);
    let mut bystander = KillOnDrop(
        Command::new("sleep")
            .arg("600")
            .spawn()
            .expect("start a sleeping bystander"),
    );
    let bystander_pid = u64::from(bystander.0.id());
    std::thread::sleep(Duration::from_millis(500));
    let output_path = dir.join("target.json");
    let b = client.get("b_pid").to_string();
    let (recording, programs) = spawn_recording(&record_to(
        &output_path,
        &["-p", &b, "-d", "2", "--offcpu-all"],
    ));
    recording.finish(&programs);
    let profile = load_json(&output_path);
    let row = wait(&profile, client.get("b_pid"), "offcpu");
    assert_eq!(row["before_start"], true, "{row}");
    assert_since(row, client.get("b_since_ns"), "the target off the CPU");
    assert!(
        waits(&profile, bystander_pid, "offcpu").is_empty(),
        "the bystander is not a target: {}",
        profile["waiting"]
    );
    let _ = bystander.0.kill();
    drop(client);
}

/// The periods of a `--rotate` agent in `dir`, oldest first.
fn periods(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// The rows of A's long FUSE request wait in `profile`: A's off-CPU rows in
/// `request_wait_answer` whose longest wait is 0.5 s or more (the kernel may also wake A
/// for a few microseconds around the request: other rows, other stacks).
fn long_request_wait(profile: &Value, a: u64) -> Vec<&Value> {
    profile["offcpu"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|row| {
            row["pid"].as_u64() == Some(a)
                && row["max_ns"].as_u64().is_some_and(|max| max >= 500_000_000)
                && row["stack"].as_u64().is_some_and(|id| {
                    stack_names(profile, id)
                        .iter()
                        .any(|f| f == "request_wait_answer")
                })
        })
        .collect()
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn a_wait_across_rotated_periods_is_counted_once() {
    let _alone = alone();
    let dir = or_skip!(root_test("stuck-rotate"));
    let out = dir.join("periods");
    let (mut agent, programs) = spawn_agent(&["-a", "--offcpu-all"], "1s", &out);
    // A waits 5 s on its CREATE, then B its own 5 s (not looked at).
    let results = dir.join("results");
    let status = Command::new(workload("fuse-workload"))
        .arg("stuck")
        .arg(&results)
        .arg(dir.join("mnt"))
        .arg("5000")
        .status()
        .expect("run fuse-workload");
    assert!(status.success(), "fuse-workload failed");
    // The period in progress ends with the agent.
    std::thread::sleep(Duration::from_millis(1200));
    signal(agent.0.id(), libc::SIGTERM);
    let _ = agent.0.wait();
    assert_programs_gone(&programs);
    let own = common::results(&results);
    let a = result(&own, "a_pid");
    let a_create_ns = result(&own, "a_create_ns");
    let files = periods(&out);
    // Each period's part of the wait, how many times it ended, and its longest.
    let (mut parts, mut ended, mut longest) = (Vec::new(), 0, 0);
    for file in &files {
        let profile = load_json(file);
        for row in long_request_wait(&profile, a) {
            parts.push(row["total_ns"].as_u64().expect("total_ns"));
            ended += row["count"].as_u64().expect("count");
            longest = longest.max(row["max_ns"].as_u64().expect("max_ns"));
        }
    }
    let sum: u64 = parts.iter().sum();
    eprintln!(
        "A's 5 s wait in {} periods: parts {parts:?} ns, sum {:.4} s, its own clock {:.4} s",
        parts.len(),
        sum as f64 / 1e9,
        a_create_ns as f64 / 1e9
    );
    assert!(
        parts.len() >= 4,
        "a 5 s wait spans at least 4 periods of 1 s: {parts:?}"
    );
    assert_eq!(ended, 1, "the wait ended once");
    for (what, value) in [
        ("the parts add up to", sum),
        ("the whole wait lasted", longest),
    ] {
        assert!(
            value.abs_diff(a_create_ns) as f64 <= 0.02 * a_create_ns as f64,
            "{what} {value} ns, the call took {a_create_ns} ns"
        );
    }
    // Merged, the periods hold the wait as one row: ended once, the parts, the whole.
    let merged = dir.join("merged.json");
    let mut args = vec!["merge".to_string()];
    args.extend(files.iter().map(|file| path_str(file).to_string()));
    args.extend(["-o".to_string(), path_str(&merged).to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    lockpath_ok(&args);
    let merged = load_json(&merged);
    let rows = long_request_wait(&merged, a);
    assert_eq!(rows.len(), 1, "one row for the wait in the merge: {rows:?}");
    assert_eq!(rows[0]["count"].as_u64(), Some(1));
    assert_eq!(rows[0]["total_ns"].as_u64(), Some(sum));
    assert_eq!(rows[0]["max_ns"].as_u64(), Some(longest));
}
