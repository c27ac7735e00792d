//! Groups of processes, root tests. `outliers`: real recordings of one workload on
//! "hosts" named with `record --host`, some with a second storm on another lock; the
//! outliers must be the hosts with the injected storm, by the injected lock, and the
//! others must not be. `report --by job`, `outliers --by job` and `report --blockers`:
//! Slurm-shaped jobs in a cgroup tree made for the test, contending on one file's lock
//! and on one FUSE directory's lock (each waiter measures its own blocked time).

#[macro_use]
mod common;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use common::*;
use serde_json::Value;

/// Records `storms` (lock-storm argument lists, run side by side in one shell) as host
/// `host`; returns the profile.
fn record_host(dir: &Path, host: &str, storms: &[Vec<String>]) -> PathBuf {
    let storm = workload("lock-storm");
    let script: Vec<String> = storms
        .iter()
        .map(|args| format!("'{}' {} &", storm.display(), args.join(" ")))
        .collect();
    let script = format!("{} wait", script.join(" "));
    let output = dir.join(format!("{host}.json"));
    record_profile(&["--lock", "--host", host], &output, &["sh", "-c", &script]);
    output
}

fn args(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

/// `outliers --format json` of `inputs`: (exit code, report).
fn outliers(inputs: &[&Path], extra: &[&str]) -> (i32, Value) {
    let mut command: Vec<&str> = vec!["outliers", "--format", "json"];
    command.extend(extra);
    command.extend(inputs.iter().map(|path| path_str(path)));
    let output = lockpath(&command);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let code = output.status.code().expect("an exit code");
    assert!(code == 0 || code == 1, "outliers failed ({code}): {stderr}");
    let report = serde_json::from_slice(&output.stdout).expect("the JSON report");
    (code, report)
}

/// The names of the units that stand out, in rank order.
fn standing_out(report: &Value) -> Vec<String> {
    items(&report["ranking"], "ranking")
        .filter(|unit| unit["outlier"] == true)
        .map(|unit| unit["name"].as_str().expect("name").to_string())
        .collect()
}

/// The first cause of unit `name` and its share of the gap.
fn first_cause(report: &Value, name: &str) -> (String, f64) {
    let unit = items(&report["ranking"], "ranking")
        .find(|unit| unit["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not ranked"));
    let cause = &unit["causes"][0];
    (
        cause["cause"].as_str().expect("cause").to_string(),
        cause["share"].as_f64().expect("share"),
    )
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn outliers_name_the_hosts_with_an_injected_storm_by_its_lock() {
    let _alone = alone();
    let dir = or_skip!(root_test("outliers-hosts"));
    // Every host: threads reading one shared file (its f_pos_lock mutex: a steady
    // wait, within a fifth between runs here). Host n7 also creates files in one
    // directory (its i_rwsem); host n8 also maps memory (its mmap_lock).
    let base = args("--mode file --seconds 1 --threads 4");
    let plain: Vec<PathBuf> = (0..7)
        .map(|i| record_host(&dir, &format!("n{i}"), std::slice::from_ref(&base)))
        .collect();
    // In tmpfs when there is one: its directory lock is taken longer than ext4's.
    let shm = Path::new("/dev/shm");
    let storm_dir = match shm.is_dir() {
        true => shm.join(format!("lockpath-outliers-{}", std::process::id())),
        false => dir.join("dir"),
    };
    let creates = args(&format!(
        "--mode dir --dir {} --seconds 1 --threads 6",
        storm_dir.display()
    ));
    let n7 = record_host(&dir, "n7", &[base.clone(), creates]);
    let maps = args("--mode mmap --seconds 1 --threads 4");
    let n8 = record_host(&dir, "n8", &[base.clone(), maps]);
    let _ = std::fs::remove_dir_all(&storm_dir);

    // One injected host among eight: it alone, by the directory's lock.
    let mut one: Vec<&Path> = plain.iter().map(PathBuf::as_path).collect();
    one.push(&n7);
    let (code, report) = outliers(&one, &[]);
    assert_eq!(code, 1, "an outlier exits 1");
    assert_eq!(standing_out(&report), ["n7"], "{report:#}");
    let (cause, share) = first_cause(&report, "n7");
    assert!(cause.contains("i_rwsem"), "n7's first cause: {cause}");
    assert!(share >= 0.5, "i_rwsem's share of n7's gap: {share}");

    // The same eight hosts merged into one profile: the same answer.
    let merged = dir.join("merged.json");
    let mut merge: Vec<&str> = vec!["merge", "-o", path_str(&merged)];
    merge.extend(one.iter().map(|path| path_str(path)));
    lockpath_ok(&merge);
    let (code, report) = outliers(&[&merged], &[]);
    assert_eq!((code, standing_out(&report)), (1, vec!["n7".to_string()]));

    // Two injected hosts with different locks: both, each by its own lock.
    let mut two: Vec<&Path> = plain[..6].iter().map(PathBuf::as_path).collect();
    two.extend([n7.as_path(), n8.as_path()]);
    let (code, report) = outliers(&two, &[]);
    assert_eq!(code, 1);
    let mut found = standing_out(&report);
    found.sort();
    assert_eq!(found, ["n7", "n8"], "{report:#}");
    let (cause, share) = first_cause(&report, "n8");
    assert!(cause.contains("mmap_lock"), "n8's first cause: {cause}");
    assert!(share >= 0.5, "mmap_lock's share of n8's gap: {share}");
    assert!(first_cause(&report, "n7").0.contains("i_rwsem"));

    // Only the usual hosts: none stands out, exit 0.
    let usual: Vec<&Path> = plain.iter().map(PathBuf::as_path).collect();
    let (code, report) = outliers(&usual, &[]);
    assert_eq!((code, standing_out(&report)), (0, Vec::new()), "{report:#}");

    // The text names the host, the lock and a frame of its stacks; the page has the
    // heat map and the differential flamegraph.
    let mut text_args: Vec<&str> = vec!["outliers"];
    text_args.extend(one.iter().map(|path| path_str(path)));
    let output = lockpath(&text_args);
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1));
    for expected in ["n7 (", "i_rwsem"] {
        assert!(text.contains(expected), "{expected} missing from:\n{text}");
    }
    // A stack of the directory's lock: a create or an unlink.
    assert!(
        text.contains("path_openat") || text.contains("do_unlinkat"),
        "no stack of i_rwsem in:\n{text}"
    );
    let page = dir.join("outliers.html");
    let mut html_args: Vec<&str> = vec!["outliers", "--format", "html", "-o", path_str(&page)];
    html_args.extend(one.iter().map(|path| path_str(path)));
    assert_eq!(lockpath(&html_args).status.code(), Some(1));
    let html = std::fs::read_to_string(&page).expect("the page");
    assert!(html.contains("class=\"heat\"") && html.contains("<iframe class=\"flamegraph\""));

    // Bad input: one line, exit 2, nothing written.
    let missing = dir.join("missing.json");
    let output = lockpath(&["outliers", path_str(&missing)]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot read") && stderr.lines().count() == 1,
        "{stderr}"
    );
    let output = lockpath(&["outliers", path_str(&plain[0]), path_str(&plain[1])]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("at least 3"));
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn slurm_shaped_jobs_are_units_of_report_and_outliers() {
    let _alone = alone();
    let (mut cgroup, dir) = or_skip!(root_test_in_cgroup("outliers-jobs"));
    let storm = workload("lock-storm");
    // Four jobs as Slurm's cgroup v2 plugin lays them out; each runs a storm on a
    // shared file's f_pos_lock, job 4704 also one on its process's mmap_lock. Job 4704
    // starts after the recording, as jobs do on a node recorded by its Slurm cgroup.
    let mut jobs: Vec<(u32, PathBuf)> = (4701..=4703)
        .map(|job| {
            let path = cgroup.child(&format!("system.slice/slurmstepd.scope/job_{job}/step_0"));
            (job, path)
        })
        .collect();
    let profile = dir.join("jobs.json");
    let (recording, programs) = spawn_recording(&[
        "record",
        "--lock",
        "--cgroup",
        path_str(&cgroup.path),
        "-d",
        "4",
        "-o",
        path_str(&profile),
    ]);
    let late = cgroup.child("system.slice/slurmstepd.scope/job_4704/step_0");
    jobs.push((4704, late));
    // The recording sees a new cgroup within half a second of its making.
    std::thread::sleep(std::time::Duration::from_millis(700));
    let children: Vec<std::process::Child> = jobs
        .iter()
        .map(|(job, path)| {
            let extra = match job {
                4704 => format!("'{}' --mode mmap --seconds 1.5 --threads 4 &", storm.display()),
                _ => String::new(),
            };
            let script = format!(
                "echo $$ > '{}/cgroup.procs' || exit 1; {extra} '{}' --mode file --seconds 1.5 --threads 4; wait",
                path.display(),
                storm.display()
            );
            Command::new("sh").args(["-c", &script]).spawn().expect("start a job")
        })
        .collect();
    for mut child in children {
        assert!(
            child.wait().expect("wait for a job").success(),
            "a job failed"
        );
    }
    let output = recording.finish(&programs);
    assert_succeeded(&output, "the recording of the jobs");

    // report --by job: every job, each with its own storm's lock first.
    let output = lockpath_ok(&[
        "report",
        path_str(&profile),
        "--by",
        "job",
        "--format",
        "json",
    ]);
    let units: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let units = units.as_array().expect("units");
    let names: Vec<&str> = units
        .iter()
        .map(|u| u["name"].as_str().expect("name"))
        .collect();
    for job in 4701..=4704 {
        let name = format!("job {job}");
        assert!(names.contains(&name.as_str()), "{name} missing: {names:?}");
    }
    // A job's causes, largest first: (cause, ns per second).
    let causes_of = |name: &str| -> Vec<(String, f64)> {
        units
            .iter()
            .find(|u| u["name"] == name)
            .map(|u| {
                items(&u["causes"], "causes")
                    .map(|c| {
                        let cause = c[0].as_str().expect("cause").to_string();
                        (cause, c[1].as_f64().expect("rate"))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let mmap_lock = |name: &str| -> f64 {
        causes_of(name)
            .iter()
            .filter(|(cause, _)| cause.contains("mmap_lock"))
            .map(|(_, rate)| rate)
            .sum()
    };
    for job in 4701..=4703 {
        let name = format!("job {job}");
        assert!(causes_of(&name)[0].0.contains("f_pos_lock"), "{name}");
        // Every storm's threads wait on their mmap_lock a little as they start; job
        // 4704's storm on it is many times that.
        assert!(
            mmap_lock("job 4704") > 5.0 * mmap_lock(&name),
            "mmap_lock: job 4704 {} ns/s, {name} {} ns/s",
            mmap_lock("job 4704"),
            mmap_lock(&name)
        );
    }

    // outliers --by job: job 4704, by its mmap_lock.
    let (code, report) = outliers(&[&profile], &["--by", "job"]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(standing_out(&report), ["job 4704"], "{report:#}");
    assert!(first_cause(&report, "job 4704").0.contains("mmap_lock"));
}

/// `file-locks ... kind=K rounds=R blocked_ns=T ...` lines: the blocked times.
fn blocked_ns(stdout: &str) -> Vec<u64> {
    stdout
        .lines()
        .filter(|line| line.starts_with("file-locks pid="))
        .map(|line| {
            line.split_whitespace()
                .find_map(|part| part.strip_prefix("blocked_ns="))
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| panic!("no blocked_ns in {line}"))
        })
        .collect()
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn blockers_say_which_job_waited_on_which_and_how_long() {
    let _alone = alone();
    let (mut cgroup, dir) = or_skip!(root_test_in_cgroup("groups-blockers"));
    let lock_file = dir.join("the-file");
    let (fuse, locks) = (workload("fuse-workload"), workload("file-locks"));
    let profile = dir.join("blockers.json");
    let paths: Vec<PathBuf> = [4801, 4802]
        .iter()
        .map(|job| cgroup.child(&format!("system.slice/slurmstepd.scope/job_{job}/step_0")))
        .collect();
    // A FUSE file system (outside the jobs) whose CREATE answers after CREATE_MS: the
    // kernel holds the directory's inode lock across a create.
    const CREATE_MS: u64 = 300;
    let (stop, mountpoint) = (dir.join("stop"), dir.join("mnt"));
    let mut server = Command::new(&fuse)
        .args([
            "serve",
            path_str(&stop),
            path_str(&mountpoint),
            &CREATE_MS.to_string(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the FUSE server");
    let mut serving = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().expect("its output")),
        &mut serving,
    )
    .expect("the server's first line");
    assert!(serving.starts_with("serving"), "the FUSE server: {serving}");
    let (recording, programs) = spawn_recording(&[
        "record",
        "--lock",
        "--offcpu-all",
        "--cgroup",
        path_str(&cgroup.path),
        "-d",
        "4",
        "-o",
        path_str(&profile),
    ]);
    // In each job, one process takes and drops an exclusive flock of one file (each
    // waits only on the other job's) and measures its own blocked time.
    let jobs: Vec<std::process::Child> = paths
        .iter()
        .map(|path| {
            let script = format!(
                "echo $$ > '{}/cgroup.procs' || exit 1; \
                 exec '{}' --kinds flock --procs 1 --rounds 150 --hold-us 2000 --path '{}'",
                path.display(),
                locks.display(),
                lock_file.display()
            );
            Command::new("sh")
                .args(["-c", &script])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("start a job")
        })
        .collect();
    // And one directory's lock: job 4801's process A creates a file in the FUSE
    // directory (holding its inode lock for CREATE_MS); 50 ms later job 4802's thread B
    // creates another there and waits for that lock, then for its own CREATE.
    let lockwait = dir.join("lockwait");
    let client = Command::new("sh")
        .args([
            "-c",
            &format!(
                "echo $$ > '{}/cgroup.procs' || exit 1; exec '{}' lockwait-client '{}' '{}' 50 j",
                paths[1].display(),
                fuse.display(),
                lockwait.display(),
                mountpoint.display()
            ),
        ])
        .env("LOCKWAIT_A_CGROUP", &paths[0])
        .status()
        .expect("run the lock-wait client");
    assert!(client.success(), "the lock-wait client failed");
    let blocked: Vec<u64> = jobs
        .into_iter()
        .map(|job| {
            let output = job.wait_with_output().expect("wait for a job");
            assert!(output.status.success(), "a job failed");
            let blocked = blocked_ns(&String::from_utf8_lossy(&output.stdout));
            assert_eq!(blocked.len(), 1, "one flock worker per job");
            blocked[0]
        })
        .collect();
    let output = recording.finish(&programs);
    assert_succeeded(&output, "the recording of the jobs");
    std::fs::write(&stop, "").expect("stop the FUSE server");
    assert!(server.wait().expect("wait for the server").success());

    let output = lockpath_ok(&[
        "report",
        path_str(&profile),
        "--blockers",
        "--by",
        "job",
        "--format",
        "json",
    ]);
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["by"], "job");
    let pairs = report["blockers"].as_array().expect("blockers");
    // Wait of `waiter` on `holder` on what `on` names (a wait class or a lock).
    let waited = |waiter: &str, holder: &str, on: &str| -> u64 {
        pairs
            .iter()
            .filter(|pair| pair["waiter"] == waiter && pair["holder"] == holder)
            .flat_map(|pair| pair["on"].as_array().cloned().unwrap_or_default())
            .filter(|entry| entry[0].as_str().is_some_and(|what| what.contains(on)))
            .map(|entry| entry[1].as_u64().expect("ns"))
            .sum()
    };
    // Within 10% of a clock the workload kept itself.
    let check = |what: &str, measured: u64, own: u64| {
        let error = measured.abs_diff(own) as f64 / own as f64;
        eprintln!(
            "{what}: {measured} ns against its own {own} ns ({:.1}% apart)",
            error * 100.0
        );
        assert!(
            error <= 0.10,
            "{what}: {measured} ns against its own {own} ns ({:.1}% apart): {report:#}",
            error * 100.0
        );
    };
    for (index, (waiter, holder)) in [("job 4801", "job 4802"), ("job 4802", "job 4801")]
        .into_iter()
        .enumerate()
    {
        // Each job's flock worker waited only on the other's.
        let own = blocked[index];
        assert!(own >= 50_000_000, "{waiter} blocked only {own} ns");
        check(
            &format!("{waiter} on {holder}'s flock"),
            waited(waiter, holder, "file-lock"),
            own,
        );
        assert_eq!(
            waited(waiter, waiter, "file-lock"),
            0,
            "a job's flock on itself"
        );
    }
    // The directory's lock: B (job 4802) waited on A (job 4801) for its own create time
    // less its own CREATE; A never waited on B.
    let b_ns = result(&results(&lockwait), "b_create_ns");
    let own = b_ns.saturating_sub(CREATE_MS * 1_000_000);
    assert!(
        own > 100_000_000,
        "B should have waited for A's create (B took {b_ns} ns)"
    );
    // The FUSE directory's lock by its name: the jobs may also wait on each other
    // briefly elsewhere (both map the same binaries, under the file's `i_mmap_rwsem`).
    const DIRECTORY_LOCK: &str = "fuse_inode->inode.i_rwsem";
    check(
        "job 4802 on job 4801's directory lock",
        waited("job 4802", "job 4801", DIRECTORY_LOCK),
        own,
    );
    assert_eq!(
        waited("job 4801", "job 4802", DIRECTORY_LOCK),
        0,
        "A waited on B for the directory"
    );
    // The text says the same, one line per pair.
    let output = lockpath_ok(&["report", path_str(&profile), "--blockers", "--by", "job"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("job 4801") && text.contains("job 4802"),
        "{text}"
    );
}
