//! Reliability under faults and abuse: losses are never silent, signals leave a complete
//! profile (or none) and no program, early-exiting targets, commands that cannot start,
//! two instances at once, and an unprivileged user.

#[macro_use]
mod common;

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::*;

/// A lock-storm running on its own for `seconds` (the target of `-p` runs).
fn background_storm(seconds: &str) -> Child {
    Command::new(workload("lock-storm"))
        .args(["--mode", "both", "--threads", "4", "--seconds", seconds])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start lock-storm")
}

fn signal(child: &Child, signal: i32) {
    // SAFETY: kill(2) on a child this test started.
    let rc = unsafe { kill(child.id() as i32, signal) };
    assert_eq!(rc, 0, "kill failed");
}

unsafe extern "C" {
    fn kill(pid: i32, signal: i32) -> i32;
}

const SIGINT: i32 = 2;
const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;

/// Files in `dir` whose name contains `.tmp` (left-overs of an atomic write).
fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read scratch dir")
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".tmp"))
        .collect()
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn tiny_maps_report_their_losses() {
    let dir = or_skip!(root_test("tiny-maps"));
    let profile_path = dir.join("tiny.json");
    let perf_path = dir.join("perf.txt");
    let storm = workload("lock-storm");
    // Under perf stat, whose count of the contentions is the reference.
    let storm_args = [path_str(&storm), "--mode", "both", "--seconds", "2"];
    let command = under_perf_stat("lock:contention_begin", &perf_path, &storm_args);
    let options = ["--lock", "--map-entries", "2", "--stack-entries", "2"];
    let output = lockpath_ok(&record_args(&options, &profile_path, &command));
    let profile = load_json(&profile_path);
    let losses = profile["losses"].as_object().expect("losses");
    let map_full = losses
        .get("lock_map_full")
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    // Two stack entries cannot hold a lock storm's stacks; the spare stacks take the
    // ones that collide in them, so none is lost.
    let collisions = losses
        .get("stack_collision")
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    assert!(
        map_full > 0,
        "2 map entries cannot hold a lock storm: {losses:?}"
    );
    assert_eq!(collisions, 0, "stacks lost to collisions: {losses:?}");
    let rows = profile["locks"].as_array().expect("locks");
    let (overflow, rows): (Vec<&serde_json::Value>, Vec<&serde_json::Value>) = rows
        .iter()
        .partition(|row| row["lock_name"] == "[stats map full]");
    assert!(rows.len() <= 2, "the map held at most 2 keys");
    // What the map had no room for is in the overflow rows: the total stays right
    // (perf's count of the same tracepoint, the nested contentions included).
    let count = |rows: &[&serde_json::Value]| -> u64 {
        rows.iter()
            .map(|row| row["count"].as_u64().expect("count"))
            .sum()
    };
    let nested = losses
        .get("lock_nested")
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    let ours = count(&rows) + count(&overflow) + nested;
    let theirs = perf_count(&perf_path, "lock:contention_begin");
    eprintln!(
        "{} in the rows, {} in {} overflow rows, {nested} nested; perf {theirs}",
        count(&rows),
        count(&overflow),
        overflow.len()
    );
    assert!(theirs >= 50, "the workload must contend: perf saw {theirs}");
    assert!(
        count(&overflow) >= map_full,
        "each dropped contention is in an overflow row: {} < {map_full}",
        count(&overflow)
    );
    let error = ours.abs_diff(theirs) as f64 / theirs as f64;
    assert!(error < 0.05, "{ours} contentions, perf {theirs}");
    // The holds under contention the full map had no room for are in overflow rows too.
    let hold_map_full = losses
        .get("lock_hold_map_full")
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    // (A storm slowed down by a loaded machine may not fill that map: then it holds at
    // most its 2 rows.)
    let (overflow_holds, holds): (Vec<&serde_json::Value>, Vec<&serde_json::Value>) = profile
        ["contended_holds"]
        .as_array()
        .expect("contended_holds")
        .iter()
        .partition(|row| row["lock_name"] == "[stats map full]");
    let overflow_holds: u64 = overflow_holds
        .iter()
        .map(|row| row["latency"]["count"].as_u64().expect("count"))
        .sum();
    eprintln!(
        "{} hold rows, {overflow_holds} holds in overflow rows, {hold_map_full} lock_hold_map_full",
        holds.len()
    );
    assert!(holds.len() <= 2, "the hold map held at most 2 keys");
    assert!(
        overflow_holds >= hold_map_full,
        "each dropped hold is in an overflow row: {overflow_holds} < {hold_map_full}"
    );
    // The end-of-run summary and the report both say what was dropped, with numbers.
    let summary = String::from_utf8_lossy(&output.stdout);
    let report = lockpath_ok(&["report", path_str(&profile_path)]);
    let report = String::from_utf8_lossy(&report.stdout);
    for text in [summary.as_ref(), report.as_ref()] {
        assert!(
            text.contains("lock_map_full") && text.contains(&map_full.to_string()),
            "the drop count is shown:\n{text}"
        );
    }
    let json = lockpath_ok(&["report", "--format", "json", path_str(&profile_path)]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).expect("report JSON");
    assert!(
        json.to_string().contains("lock_map_full"),
        "JSON report names the loss: {json}"
    );
}

/// Rounds of the relay of `tiny_maps_keep_every_chain_and_dirtied_page`, and the pages
/// (4 KiB writes) of the file each round's dd writes.
const RELAY_ROUNDS: u64 = 40;
const RELAY_PAGES: u64 = 64;

/// With `--map-entries 1`, a relay of three shells cannot have a row per wait chain, nor
/// its dd processes a row per file they dirty. Each round the first shell runs a dd that
/// writes a file of its own (4 KiB writes: a folio each) and a 20 ms sleep, then passes a
/// line down a pipe to the second shell, which passes it on to the third: the second
/// waits on the first, which waits on that round's sleep (a new process each round, so a
/// new chain each round), the third on the second. What the full maps have no room for
/// is in overflow rows (chains without the waits' stacks, dirtied pages without file):
/// each downstream shell's chains still explain its time off the CPU, and every page dd
/// wrote is counted.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn tiny_maps_keep_every_chain_and_dirtied_page() {
    let test = test_name!();
    let dir = or_skip!(root_test("tiny-chains"));
    let files = dir.join("files");
    std::fs::create_dir_all(&files).expect("files dir");
    // The pages of tmpfs and ramfs are never written back, so never counted as dirtied.
    let fs_type = run_ok("stat", &["-f", "-c", "%T", path_str(&files)]);
    let writes_back = !matches!(fs_type.trim(), "tmpfs" | "ramfs");
    if !writes_back {
        let reason = format!(
            "{} is on {}: no page is dirtied",
            files.display(),
            fs_type.trim()
        );
        assert!(!is_ci(), "{test}: {reason}");
        eprintln!("{test}: {reason}; the dirtied-page checks are left out");
    }
    let stage = |n: u32| dir.join(format!("stage{n}"));
    let script = format!(
        "sh -c 'echo $$ > {first}; for i in $(seq {RELAY_ROUNDS}); do \
           dd if=/dev/zero of={files}/f$i bs=4k count={RELAY_PAGES} status=none || exit 1; \
           sleep 0.02; echo x; done' \
         | sh -c 'echo $$ > {second}; while read line; do echo $line; done' \
         | sh -c 'echo $$ > {third}; while read line; do :; done'",
        first = path_str(&stage(0)),
        files = path_str(&files),
        second = path_str(&stage(1)),
        third = path_str(&stage(2)),
    );
    let profile_path = dir.join("relay.json");
    let options = ["--offcpu-all", "--wakers", "--io", "--map-entries", "1"];
    let Recorded {
        stdout, profile, ..
    } = record_profile(&options, &profile_path, &["sh", "-c", &script]);
    let pid_of = |n: u32| -> u64 {
        let text = std::fs::read_to_string(stage(n)).expect("a stage's pid");
        text.trim().parse().expect("pid")
    };
    let (first, second, third) = (pid_of(0), pid_of(1), pid_of(2));
    let losses = &profile["losses"];
    let loss = |name: &str| losses[name].as_u64().unwrap_or(0);
    eprintln!("losses: {losses}");
    let chain_map_full = loss("chain_map_full");
    assert!(
        chain_map_full > 0,
        "one map entry cannot hold the relay's chains: {losses}"
    );
    assert_eq!(loss("chain_overflow_full"), 0, "{losses}");

    // Each downstream shell waits once a round, woken by the shell before it, which was
    // itself waiting: one chain a round, and maybe one more at the end of its input (when
    // the shell before it was still waiting as it exited).
    let report = report_json(&profile_path, &[]);
    let chains: Vec<&serde_json::Value> = items(&profile["chains"], "chains").collect();
    for (waiter, waker) in [(second, first), (third, second)] {
        let rows: Vec<&serde_json::Value> = chains
            .iter()
            .copied()
            .filter(|chain| chain["tid"].as_u64() == Some(waiter))
            .collect();
        let (count, wait_ns) = (sum_of(&rows, "count"), sum_of(&rows, "wait_ns"));
        let offcpu_ns = sum_of(&rows_of(&profile, "offcpu", waiter), "total_ns");
        // A pipe read sleeps interruptibly; the shells may also meet briefly on a kernel
        // lock as they exit (an uninterruptible wait whose waker is whoever held it).
        let (pipe, other): (Vec<&serde_json::Value>, Vec<&serde_json::Value>) =
            rows.iter().copied().partition(|row| row["state"] == "S");
        let pipe_count = sum_of(&pipe, "count");
        eprintln!(
            "shell {waiter}: {count} chains in {} rows ({pipe_count} on the pipe), {wait_ns} ns \
             of its {offcpu_ns} ns off the CPU; other waits: {other:?}",
            rows.len()
        );
        assert!(
            pipe.len() > 1,
            "the map held one chain, the others are in overflow rows: {rows:?}"
        );
        assert!(
            pipe.iter()
                .all(|row| row["links"][0]["tid"].as_u64() == Some(waker)),
            "shell {waiter} is woken by shell {waker}, itself waiting: {pipe:?}"
        );
        assert!(
            (RELAY_ROUNDS - 1..=RELAY_ROUNDS + 1).contains(&pipe_count),
            "shell {waiter}: {pipe_count} chains on the pipe in {RELAY_ROUNDS} rounds"
        );
        assert!(
            wait_ns <= offcpu_ns && wait_ns as f64 >= 0.95 * offcpu_ns as f64,
            "shell {waiter}: its chains explain {wait_ns} ns of its {offcpu_ns} ns off the CPU"
        );
        // The report has every one of them.
        let reported: u64 = items(&report["chains"], "report chains")
            .filter(|chain| chain["waits"][0]["tid"].as_u64() == Some(waiter))
            .map(|chain| chain["count"].as_u64().expect("count"))
            .sum();
        assert_eq!(
            reported, count,
            "the JSON report's chains of shell {waiter}"
        );
    }

    let mut shown = vec!["chain_map_full"];
    if writes_back {
        shown.push("io_dirtied_map_full");
        // Every page dd wrote, each dd process's pages in a row of its own; those the map
        // had no room for in rows without file, as many as the loss says.
        let written: u64 = std::fs::read_dir(&files)
            .expect("files")
            .map(|entry| entry.expect("entry").metadata().expect("size").len() / 4096)
            .sum();
        assert_eq!(
            written,
            RELAY_ROUNDS * RELAY_PAGES,
            "the relay wrote its files"
        );
        let dd: std::collections::BTreeSet<u64> = items(&profile["processes"], "processes")
            .filter(|process| process["comm"] == "dd")
            .filter_map(|process| process["pid"].as_u64())
            .collect();
        let (overflow, rows): (Vec<&serde_json::Value>, Vec<&serde_json::Value>) =
            items(&profile["io_dirtied"], "io_dirtied")
                .partition(|row| row["file"]["path"] == "[dirtied map full]");
        let of_dd =
            |row: &&serde_json::Value| row["pid"].as_u64().is_some_and(|pid| dd.contains(&pid));
        let dd_overflow: Vec<&serde_json::Value> = overflow.iter().copied().filter(of_dd).collect();
        let dd_rows: Vec<&serde_json::Value> = rows.iter().copied().filter(of_dd).collect();
        let folios = sum_of(&dd_overflow, "folios") + sum_of(&dd_rows, "folios");
        let map_full = loss("io_dirtied_map_full");
        eprintln!(
            "{written} pages written by {} dd processes; {folios} folios dirtied by them, in \
             {} rows and {} overflow rows; {} folios in all {} overflow rows, \
             io_dirtied_map_full {map_full}",
            dd.len(),
            dd_rows.len(),
            dd_overflow.len(),
            sum_of(&overflow, "folios"),
            overflow.len()
        );
        assert_eq!(dd.len() as u64, RELAY_ROUNDS, "a dd process a round");
        assert!(rows.len() <= 1, "the map held one key: {rows:?}");
        assert!(
            dd_overflow.len() as u64 >= RELAY_ROUNDS - 1,
            "the dd processes the map had no room for each have an overflow row"
        );
        assert_eq!(
            sum_of(&overflow, "folios"),
            map_full,
            "each folio the full map had no room for is in an overflow row"
        );
        assert_eq!(loss("io_dirtied_overflow_full"), 0, "{losses}");
        // A dd may dirty a page of file system metadata besides its file's.
        assert!(
            folios >= written && folios as f64 <= 1.05 * written as f64,
            "{folios} folios dirtied by dd for {written} pages written"
        );
    }
    // The end-of-run summary and the report say what went to the overflow rows.
    let text = lockpath_ok(&["report", path_str(&profile_path)]);
    let text = String::from_utf8_lossy(&text.stdout);
    for output in [stdout.as_str(), text.as_ref()] {
        for name in &shown {
            assert!(
                output.contains(&format!(" {}  {name}: ", loss(name))),
                "{name} and its count are shown:\n{output}"
            );
        }
    }
}

/// Runs `lockpath ARGS` (see `spawn_recording`) for 1.5 s beside the running `storm`,
/// stops it with `sig`, then ends the storm; returns lockpath's output and the programs
/// it held.
fn record_until_signal(
    args: &[&str],
    sig: i32,
    storm: &mut Child,
) -> (std::process::Output, Vec<u64>) {
    let (recorder, programs) = spawn_recording(args);
    std::thread::sleep(Duration::from_millis(1500));
    signal(&recorder, sig);
    let output = recorder.wait_with_output().expect("wait for lockpath");
    let _ = storm.kill();
    let _ = storm.wait();
    (output, programs)
}

/// Records `-p` of a running storm, stops lockpath with `sig`, checks the profile.
fn stop_with_signal_writes_profile(name: &str, sig: i32) {
    let Some(dir) = root_test(name, name) else {
        return;
    };
    let profile_path = dir.join("signal.json");
    let mut storm = background_storm("30");
    let pid = storm.id().to_string();
    let args = ["record", "-p", &pid, "-o", path_str(&profile_path)];
    let (output, programs) = record_until_signal(&args, sig, &mut storm);
    assert!(
        output.status.success(),
        "lockpath stopped by signal {sig} must exit 0: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert_programs_gone(&programs);
    let profile = load_json(&profile_path);
    assert_eq!(profile["format"], "lockpath/1");
    assert!(profile["duration_s"].as_f64().expect("duration") > 1.0);
    assert!(
        contentions_of(&profile, storm.id() as u64) > 0,
        "the storm's contention is in the profile"
    );
    // The file loads through lockpath's own validating loader.
    lockpath_ok(&["report", path_str(&profile_path)]);
    assert_eq!(temporaries(&dir), Vec::<String>::new());
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn sigint_writes_a_complete_profile() {
    stop_with_signal_writes_profile("sigint", SIGINT);
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn sigterm_writes_a_complete_profile() {
    stop_with_signal_writes_profile("sigterm", SIGTERM);
}

/// Ctrl-C while the probes are still loading: lockpath (one recording, and the agent
/// with `--rotate`) finishes attaching, stops at once, writes a valid (short) profile
/// and detaches; it is not killed by the signal.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn sigint_while_the_probes_load_stops_cleanly() {
    let dir = or_skip!(root_test("sigint-startup"));
    let profile_path = dir.join("startup.json");
    let rotate_dir = dir.join("periods");
    for args in [
        vec!["record", "-a", "-o", path_str(&profile_path)],
        vec![
            "record",
            "-a",
            "--rotate",
            "1m",
            "-o",
            path_str(&rotate_dir),
        ],
    ] {
        let recorder = Command::new(lockpath_bin())
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start lockpath");
        // The first program loaded: the rest of the start-up (more loads, attaches, the
        // process table) is still ahead.
        let deadline = Instant::now() + Duration::from_secs(30);
        let programs = loop {
            let held = programs_held_by(recorder.id());
            if !held.is_empty() {
                break held;
            }
            assert!(
                Instant::now() < deadline,
                "lockpath loaded no program in 30 s"
            );
            std::thread::sleep(Duration::from_millis(2));
        };
        signal(&recorder, SIGINT);
        let output = recorder.wait_with_output().expect("wait for lockpath");
        assert!(
            output.status.success(),
            "{args:?}: a signal during start-up must end the run cleanly: {}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        assert_programs_gone(&programs);
    }
    let mut written = vec![profile_path];
    written.extend(
        std::fs::read_dir(&rotate_dir)
            .expect("the agent's directory")
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "json")),
    );
    assert_eq!(written.len(), 2, "one profile each: {written:?}");
    for path in &written {
        assert_eq!(load_json(path)["format"], "lockpath/1");
        lockpath_ok(&["report", path_str(path)]);
    }
    assert_eq!(temporaries(&dir), Vec::<String>::new());
    assert_eq!(temporaries(&rotate_dir), Vec::<String>::new());
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn sigint_during_a_system_run_writes_a_profile() {
    let dir = or_skip!(root_test("sigint-system"));
    let profile_path = dir.join("system.json");
    let mut storm = background_storm("20");
    let args = ["record", "-a", "-o", path_str(&profile_path)];
    let (output, programs) = record_until_signal(&args, SIGINT, &mut storm);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_programs_gone(&programs);
    let profile = load_json(&profile_path);
    assert_eq!(profile["targets"]["mode"], "system");
    assert!(
        contentions_of(&profile, storm.id() as u64) > 0,
        "system-wide sees the storm"
    );
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn sigkill_leaves_no_program_and_no_file() {
    let dir = or_skip!(root_test("sigkill"));
    let profile_path = dir.join("killed.json");
    let mut storm = background_storm("20");
    let pid = storm.id().to_string();
    let (mut recorder, programs) =
        spawn_recording(&["record", "-p", &pid, "-o", path_str(&profile_path)]);
    assert!(!programs.is_empty());
    std::thread::sleep(Duration::from_millis(800));
    signal(&recorder, SIGKILL);
    let status = recorder.wait().expect("wait for lockpath");
    let _ = storm.kill();
    let _ = storm.wait();
    assert!(!status.success());
    // Programs and links are owned by lockpath's descriptors: gone with the process.
    assert_programs_gone(&programs);
    assert!(!profile_path.exists(), "no partial profile after SIGKILL");
    assert_eq!(temporaries(&dir), Vec::<String>::new(), "no temporary left");
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn target_that_exits_early_ends_the_recording() {
    let dir = or_skip!(root_test("early-exit"));
    let profile_path = dir.join("early.json");
    // A storm that outlives any startup, ended a second into the recording.
    let mut storm = background_storm("120");
    let storm_pid = storm.id();
    let pid = storm_pid.to_string();
    // No duration: lockpath must notice that its only target is gone and finish.
    let (recorder, programs) =
        spawn_recording(&["record", "-p", &pid, "-o", path_str(&profile_path)]);
    std::thread::sleep(Duration::from_secs(1));
    signal(&storm, SIGKILL);
    // Reap the storm so that it does not linger as a zombie.
    storm.wait().expect("wait for lock-storm");
    let started = Instant::now();
    let recorder_pid = recorder.id();
    let waiter = std::thread::spawn(move || recorder.wait_with_output());
    while !waiter.is_finished() {
        if started.elapsed() > Duration::from_secs(30) {
            // SAFETY: kill(2) on the lockpath this test started.
            unsafe { kill(recorder_pid as i32, SIGKILL) };
            panic!("lockpath kept recording 30 s after its only target exited");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = waiter.join().expect("waiter").expect("wait for lockpath");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("exited"),
        "lockpath says why it stopped: {stderr}"
    );
    assert_programs_gone(&programs);
    let profile = load_json(&profile_path);
    assert!(
        contentions_of(&profile, storm_pid as u64) > 0,
        "the target's contention is kept"
    );
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn command_that_cannot_start_is_one_clear_error() {
    let dir = or_skip!(root_test("no-command"));
    let profile_path = dir.join("none.json");
    let before = loaded_programs();
    for (command, expect) in [
        (dir.join("does-not-exist"), "no such file"),
        (dir.clone(), "not an executable"),
    ] {
        let output = lockpath(&record_args(&[], &profile_path, &[path_str(&command)]));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(expect), "{stderr}");
        assert!(
            !profile_path.exists(),
            "no profile for a run that never started"
        );
    }
    // A file that exists and is executable but that exec refuses (a script without an
    // interpreter line gives ENOEXEC): the error comes after the programs were loaded.
    let script = dir.join("bad-script");
    std::fs::write(&script, [0x7f, b'E', b'L', b'F', 0, 0, 0, 0]).expect("write");
    let mut perms = std::fs::metadata(&script).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).expect("chmod");
    let output = lockpath(&record_args(&[], &profile_path, &[path_str(&script)]));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot start"), "{stderr}");
    assert!(!profile_path.exists());
    // Nothing this run loaded stays loaded (other tests may load programs meanwhile, so
    // only programs that are new and still there after the wait are counted).
    std::thread::sleep(Duration::from_millis(500));
    let ours: Vec<u64> = loaded_programs()
        .into_iter()
        .filter(|id| !before.contains(id) && is_lockpath_program(*id))
        .filter(|id| !held_by_any_lockpath(*id))
        .collect();
    assert_programs_gone(&ours);
}

/// True when program `id` is one of lockpath's (by its name).
fn is_lockpath_program(id: u64) -> bool {
    let output = Command::new("bpftool")
        .args(["-j", "prog", "show", "id", &id.to_string()])
        .output()
        .expect("bpftool");
    let info: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    let name = info["name"].as_str().unwrap_or("");
    name.starts_with("lock_") || name.starts_with("target_")
}

/// True when a running lockpath (another test) holds program `id`.
fn held_by_any_lockpath(id: u64) -> bool {
    std::fs::read_dir("/proc")
        .expect("read /proc")
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "lockpath")
        })
        .any(|pid| programs_held_by(pid).contains(&id))
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn two_instances_at_once_each_see_their_own_command() {
    let dir = or_skip!(root_test("two-instances"));
    let storm = workload("lock-storm");
    let start = |name: &str| {
        let path = dir.join(name);
        let child = Command::new(lockpath_bin())
            .args(["record", "--lock", "-o", path_str(&path), "--"])
            .arg(&storm)
            .args(["--mode", "both", "--threads", "4", "--seconds", "3"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start lockpath");
        (child, path)
    };
    let run_both = || {
        let (first, first_path) = start("first.json");
        let (second, second_path) = start("second.json");
        for (child, path) in [(first, &first_path), (second, &second_path)] {
            let output = child.wait_with_output().expect("wait");
            assert!(
                output.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        (first_path, second_path)
    };
    let has_storm = |profile: &serde_json::Value| {
        profile["processes"]
            .as_array()
            .is_some_and(|processes| processes.iter().any(|p| p["comm"] == "lock-storm"))
    };
    let (mut first_path, mut second_path) = run_both();
    if !has_storm(&load_json(&first_path)) || !has_storm(&load_json(&second_path)) {
        // A storm that met no contention in 3 s (it happened once under CI load): the
        // isolation cannot be judged from empty profiles; run both again, once.
        eprintln!("a storm recorded no contention; running both instances again");
        (first_path, second_path) = run_both();
    }
    let storm_pid = |profile: &serde_json::Value| -> u64 {
        items(&profile["processes"], "processes")
            .find(|process| process["comm"] == "lock-storm")
            .and_then(|process| process["pid"].as_u64())
            .unwrap_or_else(|| {
                panic!(
                    "the storm is in the profile: {} lock rows, processes {}",
                    profile["locks"].as_array().map_or(0, Vec::len),
                    profile["processes"]
                )
            })
    };
    let first = load_json(&first_path);
    let second = load_json(&second_path);
    let (first_pid, second_pid) = (storm_pid(&first), storm_pid(&second));
    assert_ne!(first_pid, second_pid, "each recorded its own command");
    for (profile, own, other) in [
        (&first, first_pid, second_pid),
        (&second, second_pid, first_pid),
    ] {
        assert!(
            contentions_of(profile, own) > 0,
            "own command's contention recorded"
        );
        assert_eq!(
            contentions_of(profile, other),
            0,
            "the other instance's command is filtered out"
        );
        let pids: Vec<u64> = items(&profile["locks"], "locks")
            .filter_map(|row| row["pid"].as_u64())
            .collect();
        assert!(
            pids.iter().all(|&pid| pid == own),
            "only the own command: {pids:?}"
        );
    }
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn unprivileged_user_gets_one_line_naming_the_capabilities() {
    if !can_load_programs("unprivileged") {
        return;
    }
    // A copy of the binary that user 65534 can reach and run (the build tree may not be).
    let dir = scratch("unprivileged");
    let mut perms = std::fs::metadata(&dir).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o777);
    std::fs::set_permissions(&dir, perms).expect("chmod dir");
    let copy = dir.join("lockpath");
    std::fs::copy(lockpath_bin(), &copy).expect("copy lockpath");
    let profile_path = dir.join("denied.json");
    for target in [vec!["-a"], vec!["--", "/bin/true"]] {
        let output = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
            ])
            .arg(&copy)
            .args(["record", "-o", path_str(&profile_path)])
            .args(&target)
            .output()
            .expect("run setpriv (util-linux)");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "exit 1: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        for needed in ["CAP_BPF", "CAP_PERFMON", "root"] {
            assert!(stderr.contains(needed), "names {needed}: {stderr}");
        }
        assert!(!profile_path.exists());
    }
}
