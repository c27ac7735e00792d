//! Root integration test of `lockpath debug blocked-on TID...`: what a thread already
//! asleep in the kernel waits for, read from kernel memory, against the FUSE fixture
//! (tests/src/fuse.rs) whose delayed CREATE keeps a directory's inode lock held.

#[macro_use]
mod common;

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use common::*;

/// `NAME=VALUE` fields of a `blocked-on` line; `name=` takes the rest of the line.
fn fields(line: &str) -> Vec<(String, String)> {
    let (head, name) = match line.split_once(" name=") {
        Some((head, name)) => (head, Some(name)),
        None => (line, None),
    };
    let mut fields: Vec<(String, String)> = head
        .split_whitespace()
        .skip(1)
        .filter_map(|part| {
            let (key, value) = part.split_once('=')?;
            Some((key.to_string(), value.to_string()))
        })
        .collect();
    if let Some(name) = name {
        fields.push(("name".to_string(), name.to_string()));
    }
    fields
}

fn field<'a>(fields: &'a [(String, String)], name: &str, line: &str) -> &'a str {
    fields
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
        .unwrap_or_else(|| panic!("no {name} in {line:?}"))
}

/// `name value` lines of the workload's results file.
fn result(path: &Path, name: &str) -> u32 {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("workload results {}: {err}", path.display()));
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in workload results:\n{text}"))
}

/// The state letter of a thread (`D`, `S`, ...), from `/proc/TID/stat`.
fn state(tid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{tid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// The workload, killed on drop; its FUSE connection is aborted first, so a failed test
/// leaves no thread stuck: B, asleep in D state on the inode lock, keeps the workload's
/// files (its /dev/fuse) open, and A then waits for a reply forever.
struct Workload {
    child: std::process::Child,
    mountpoint: std::path::PathBuf,
}

impl Drop for Workload {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            abort_fuse_connection(&self.mountpoint);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Aborts the FUSE connection mounted at `mountpoint` through fusectl (mounted first
/// where it is not), by the mount's device number in /proc/self/mountinfo. Nothing is
/// asked of the mount itself: with its server stuck, a stat would hang too.
fn abort_fuse_connection(mountpoint: &Path) {
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let Some(minor) = mountinfo.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(4) == Some(&path_str(mountpoint)))
            .then(|| {
                fields
                    .get(2)?
                    .split_once(':')
                    .map(|(_, minor)| minor.to_string())
            })
            .flatten()
    }) else {
        return;
    };
    let connections = Path::new("/sys/fs/fuse/connections");
    if !connections.join(&minor).exists() {
        let _ = Command::new("mount")
            .args(["-t", "fusectl", "none", path_str(connections)])
            .status();
    }
    let _ = std::fs::write(connections.join(&minor).join("abort"), "1");
}

/// The kernel stack of a thread, empty when it cannot be read (the thread is gone).
fn kernel_stack(tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{tid}/stack")).unwrap_or_default()
}

/// The child process of `parent` (process A of the workload).
fn child_of(parent: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.find_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let ppid: u32 = status
            .lines()
            .find_map(|line| line.strip_prefix("PPid:"))?
            .trim()
            .parse()
            .ok()?;
        (ppid == parent).then_some(pid)
    })
}

/// The thread of `pid` named `name` (thread B of the workload).
fn thread_named(pid: u32, name: &str) -> Option<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .find_map(|entry| {
            let tid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).ok()?;
            (comm.trim() == name).then_some(tid)
        })
}

/// The answers of one `lockpath debug blocked-on` run (one load of the programs) for
/// `tids`, in their order.
fn blocked_on(tids: &[u32]) -> Vec<String> {
    let tids: Vec<String> = tids.iter().map(u32::to_string).collect();
    let mut args = vec!["debug", "blocked-on"];
    args.extend(tids.iter().map(String::as_str));
    let output = lockpath_ok(&args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    tids.iter()
        .map(|tid| {
            stdout
                .lines()
                .find_map(|line| line.strip_prefix(&format!("{tid}: ")))
                .unwrap_or_else(|| panic!("no answer for {tid} in:\n{stdout}"))
                .to_string()
        })
        .collect()
}

/// Process A creates a file while the server delays CREATE (A holds the directory's
/// i_rwsem, asleep in `request_wait_answer`); thread B of the workload then waits for
/// that rwsem. Both are found asleep, and `blocked-on` must name what each waits for: B
/// the directory's i_rwsem, owned by A; A its CREATE request.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn blocked_on_names_the_lock_its_owner_and_the_fuse_request() {
    let dir = or_skip!(root_test("blocked-on"));
    let _alone = alone();
    let results_path = dir.join("results");
    let mountpoint = dir.join("mnt");
    // Long enough for the checks below to run while both threads sleep.
    // (one load of the programs, slow beside CPU hogs).
    const CREATE_MS: u64 = 15000;
    let child = Command::new(workload("fuse-workload"))
        .args([
            "lockwait",
            path_str(&results_path),
            path_str(&mountpoint),
            &CREATE_MS.to_string(),
            "100",
        ])
        .spawn()
        .expect("start fuse-workload");
    let mut workload = Workload {
        child,
        mountpoint: mountpoint.clone(),
    };
    let pid = workload.child.id();

    // Wait (at most 5 s) for A asleep on its reply and B asleep on the rwsem (in D
    // state: /proc/TID/stack leaves out the lock's slow path, a `__sched` function).
    let deadline = Instant::now() + Duration::from_secs(5);
    let (a_pid, b_tid) = loop {
        let a = child_of(pid).filter(|&a| kernel_stack(a).contains("request_wait_answer"));
        let b = thread_named(pid, "creator-b")
            .filter(|&b| state(b) == Some('D') && kernel_stack(b).contains("path_openat"));
        if let (Some(a), Some(b)) = (a, b) {
            break (a, b);
        }
        assert!(
            Instant::now() < deadline,
            "A and B of fuse-workload not both asleep within 5 s (A {a:?}, B {b:?})"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let asked = Instant::now();
    let answers = blocked_on(&[b_tid, a_pid]);
    let (b_line, a_line) = (answers[0].as_str(), answers[1].as_str());
    let took = asked.elapsed();
    eprintln!("B {b_tid}: {b_line}\nA {a_pid}: {a_line}\n(both in {took:?})");
    assert!(
        took < Duration::from_millis(CREATE_MS - 1000),
        "the answers took {took:?}: the waits may have ended meanwhile"
    );

    let status = workload.child.wait().expect("wait for fuse-workload");
    assert!(status.success(), "fuse-workload failed: {status}");
    assert_eq!(result(&results_path, "a_pid"), a_pid, "A's pid");
    assert_eq!(result(&results_path, "b_tid"), b_tid, "B's thread id");

    let b = fields(b_line);
    assert!(b_line.starts_with("lock "), "B: {b_line}");
    assert_eq!(field(&b, "kind", b_line), "rwsem-write", "B: {b_line}");
    assert_eq!(
        field(&b, "owner_tid", b_line),
        a_pid.to_string(),
        "B: {b_line}"
    );
    assert_eq!(
        field(&b, "owner_tgid", b_line),
        a_pid.to_string(),
        "B: {b_line}"
    );
    assert!(
        field(&b, "name", b_line).starts_with("i_rwsem of directory inode ")
            && field(&b, "name", b_line).ends_with(" (fuse)"),
        "B: {b_line}"
    );

    let a = fields(a_line);
    assert!(a_line.starts_with("fuse-request "), "A: {a_line}");
    const FUSE_CREATE: &str = "35";
    assert_eq!(field(&a, "opcode", a_line), FUSE_CREATE, "A: {a_line}");
    assert_ne!(field(&a, "unique", a_line), "0", "A: {a_line}");

    // A thread that does not sleep in a known wait gets no answer.
    let own = std::process::id();
    assert_eq!(blocked_on(&[own]), ["none"], "the test's own thread");
}
