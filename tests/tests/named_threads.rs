//! Thread names that stay true. The lock programs name a thread once, at its first
//! contention on a CPU (`LOCK_NAMED`, a slot per `tid % LOCK_NAMED_ENTRIES` and CPU):
//! - a thread renamed later takes its new name (`task:task_rename`);
//! - a thread moved to another cgroup later is named again, with its new cgroup (after
//!   any `cgroup:cgroup_attach_task`);
//! - a recording that runs for days (`--rotate`) forgets, after each period, the threads
//!   that exited: their names (`TASKS`) and the slots that hold them. Otherwise a new
//!   thread that reuses a forgotten thread id would never be named. Thread ids are not
//!   reused on demand, so this is tested on the kernel maps themselves.

#[macro_use]
mod common;

use aya::maps::{PerCpuArray, PerCpuValues};
use lockpath::probes::shared::MapSet;
use profiler_common::{
    lock::{named_slot, names::LOCK_NAMED, LOCK_NAMED_ENTRIES},
    shared::names::TASKS,
    target::TaskInfo,
};

use common::*;

fn task(tgid: u32) -> TaskInfo {
    TaskInfo {
        tgid,
        _pad: 0,
        comm: *b"named-threads\0\0\0",
        cgroup_id: 0,
    }
}

/// `LOCK_NAMED[slot]`, one value per CPU.
fn named(maps: &mut MapSet, slot: u32) -> Vec<u64> {
    let array: PerCpuArray<_, u64> =
        PerCpuArray::try_from(maps.get_mut(LOCK_NAMED).expect("LOCK_NAMED")).expect("per CPU");
    array.get(&slot, 0).expect("a slot").to_vec()
}

fn set_named(maps: &mut MapSet, slot: u32, values: Vec<u64>) {
    let mut array: PerCpuArray<_, u64> =
        PerCpuArray::try_from(maps.get_mut(LOCK_NAMED).expect("LOCK_NAMED")).expect("per CPU");
    array
        .set(
            slot,
            PerCpuValues::try_from(values).expect("a value per CPU"),
            0,
        )
        .expect("the slot is written");
}

/// The id of a thread that has exited (gone from /proc), of another slot than `living`'s.
fn exited_thread(living: u32) -> u32 {
    for _ in 0..10 {
        // SAFETY: gettid has no preconditions.
        let tid = std::thread::spawn(|| unsafe { libc::gettid() as u32 })
            .join()
            .expect("the thread ran");
        if tid % LOCK_NAMED_ENTRIES == living % LOCK_NAMED_ENTRIES {
            continue;
        }
        // The joiner is woken before the kernel has released the thread.
        let gone = std::time::Instant::now();
        while std::path::Path::new(&format!("/proc/{tid}")).exists() {
            assert!(gone.elapsed().as_secs() < 5, "thread {tid} is still listed");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        return tid;
    }
    panic!("no thread id outside the slot of {living}");
}

/// A thread that exited is forgotten by the names and by every CPU's slot that holds
/// it; a CPU whose slot holds another thread of the same slot keeps it, and so does a
/// living thread.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: makes eBPF maps")]
fn exited_threads_are_forgotten_where_the_lock_programs_named_them() {
    let Some(mut maps) = object_maps(
        "exited_threads_are_forgotten_where_the_lock_programs_named_them",
        &[],
        0,
    ) else {
        return;
    };
    let cpus = aya::util::nr_cpus().expect("the number of CPUs");
    assert!(cpus >= 2, "the test needs two CPUs (a slot per CPU)");
    // SAFETY: gettid and getpid have no preconditions.
    let (living, pid) = unsafe { (libc::gettid() as u32, libc::getpid() as u32) };
    let exited = exited_thread(living);
    let (slot, living_slot) = (exited % LOCK_NAMED_ENTRIES, living % LOCK_NAMED_ENTRIES);
    // Another (living or not) thread of the same slot, named on the second CPU.
    let neighbour = exited + LOCK_NAMED_ENTRIES;
    insert(&mut maps, TASKS, exited, task(pid));
    insert(&mut maps, TASKS, living, task(pid));
    // Named after some cgroup moves (the slot's high half), which do not matter here.
    let moves = 3;
    let mut values = vec![named_slot(exited, moves); cpus];
    values[1] = named_slot(neighbour, moves);
    set_named(&mut maps, slot, values);
    set_named(
        &mut maps,
        living_slot,
        vec![named_slot(living, moves); cpus],
    );

    lockpath::rotate::forget_exited(&mut maps);

    let names: Vec<(u32, TaskInfo)> = maps.entries(TASKS).expect("TASKS");
    let tids: Vec<u32> = names.iter().map(|(tid, _)| *tid).collect();
    assert_eq!(tids, vec![living], "only the living thread keeps its name");
    let mut expected = vec![0; cpus];
    expected[1] = named_slot(neighbour, moves);
    assert_eq!(
        named(&mut maps, slot),
        expected,
        "the exited thread is forgotten on every CPU, the other thread of its slot kept"
    );
    assert_eq!(
        named(&mut maps, living_slot),
        vec![named_slot(living, moves); cpus],
        "the living thread stays named"
    );
}

/// Every thread of the lock storm contends under its first name, then renames itself
/// halfway through the run (`prctl(PR_SET_NAME)`, the main thread too) and contends
/// again: a lock-only recording names the process and its threads by their new name.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn a_thread_renamed_while_recorded_takes_its_new_name() {
    let dir = or_skip!(root_test("renamed-threads"));
    let path = dir.join("renamed.json");
    let storm = workload("lock-storm");
    let profile = record_profile(
        &["--lock"],
        &path,
        &[
            path_str(&storm),
            "--mode",
            "pipe",
            "--threads",
            "2",
            "--seconds",
            "2",
            "--rename",
            "renamed-storm",
        ],
    )
    .profile;
    let pids: std::collections::BTreeSet<u64> = items(&profile["locks"], "lock rows")
        .filter_map(|row| row["pid"].as_u64())
        .collect();
    assert_eq!(pids.len(), 1, "only the storm is recorded: {pids:?}");
    let process = items(&profile["processes"], "processes")
        .find(|process| pids.contains(&process["pid"].as_u64().unwrap_or(0)))
        .expect("the storm's process");
    let threads: Vec<&str> = items(&process["threads"], "threads")
        .filter_map(|thread| thread["comm"].as_str())
        .collect();
    eprintln!("process {}, threads {threads:?}", process["comm"]);
    assert_eq!(process["comm"], "renamed-storm", "the process's new name");
    assert!(
        threads.len() >= 2 && threads.iter().all(|comm| *comm == "renamed-storm"),
        "each contending thread by its new name: {threads:?}"
    );
}

/// The lock storm starts in one cgroup and contends while recorded; halfway through, the
/// test moves the whole process (every thread) to another cgroup, where it contends
/// again: the profile puts the process in the cgroup it ended in, the one
/// `/proc/PID/cgroup` says after the move.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn a_process_moved_to_another_cgroup_while_recorded_takes_its_new_cgroup() {
    let (mut cgroup, dir) = or_skip!(root_test_in_cgroup("moved-threads"));
    let first = cgroup.child("first");
    let second = cgroup.child("second");
    let path = dir.join("moved.json");
    let (recording, programs) = spawn_recording(&["record", "--lock", "-a", "-o", path_str(&path)]);
    let storm = storm_in_cgroup(&first, "--mode pipe --threads 2 --seconds 3");
    let pid = storm.id();
    std::thread::sleep(std::time::Duration::from_millis(1200));
    std::fs::write(second.join("cgroup.procs"), pid.to_string()).expect("move the storm");
    let now_in = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("its cgroup");
    let second_name = format!("{}/second", cgroup.name);
    assert!(
        now_in.trim_end().ends_with(&format!(":{second_name}")),
        "the storm moved to {second_name}: /proc/{pid}/cgroup says {now_in:?}"
    );
    wait_success(storm, "lock-storm");
    recording.stop(&programs);

    let profile = load_json(&path);
    let process = process_of(&profile, u64::from(pid));
    let contentions = contentions_of(&profile, u64::from(pid));
    eprintln!(
        "process {pid} in {}, {contentions} contentions",
        process["cgroup"]
    );
    assert!(contentions > 100, "the storm contended: {contentions}");
    assert_eq!(
        process["cgroup"].as_str(),
        Some(second_name.as_str()),
        "the cgroup the storm was moved to, not {}/first where its threads were first named",
        cgroup.name
    );
}
