//! Record-time filters (`record --type`, `--lock-filter`, `--caller`) on real lock-storm
//! runs. Several recordings attach to one storm that starts only once all of them are
//! recording and ends before any of them stops (they follow the storm's process id and
//! stop when it exits), so they see the same contentions: a filtered recording must hold
//! exactly what the unfiltered one holds of the same locks, and nothing else. The type
//! and address filters are exact in the kernel (the drain does not filter them again),
//! so a type or lock missing from the filtered profile was never counted by its
//! programs.

#[macro_use]
mod common;

use std::{
    io::Write,
    process::{Command, Stdio},
};

use common::*;
use serde_json::Value;

const LCB_F_SPIN: u64 = 1;
const LCB_F_READ: u64 = 2;
const LCB_F_WRITE: u64 = 4;
/// The outcome sits above the `LCB_F_*` bits of a row's flags.
const TYPE_BITS: u64 = 0xffff;

/// Starts lock-storm held at a `read` until every recording of `recordings` (extra
/// arguments of `record -p STORM`) is recording, lets it run `seconds`, and returns the
/// profiles and each recording's stderr.
fn record_one_storm(
    dir: &std::path::Path,
    seconds: u32,
    recordings: &[&[&str]],
) -> Vec<(Value, String)> {
    // The shell becomes lock-storm (exec) once a line comes on its input: its pid is the
    // storm's from the start, and nothing contends before the line.
    let script = format!(
        "read go && exec '{}' --seconds {seconds} --threads 4 --mode both",
        workload("lock-storm").display()
    );
    let mut storm = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start lock-storm");
    let storm_pid = storm.id().to_string();
    let mut started = Vec::new();
    for (index, extra) in recordings.iter().enumerate() {
        let path = dir.join(format!("r{index}.json"));
        let mut args = vec!["record", "-p", &storm_pid, "-o", path_str(&path)];
        args.extend_from_slice(extra);
        let (recording, programs) = spawn_recording(&args);
        assert!(!programs.is_empty(), "lockpath {args:?} loaded no program");
        started.push((recording, programs, path));
    }
    storm
        .stdin
        .take()
        .expect("storm stdin")
        .write_all(b"go\n")
        .expect("start the storm");
    let status = storm.wait().expect("wait for lock-storm");
    assert!(status.success(), "lock-storm: {status}");
    started
        .into_iter()
        .map(|(recording, programs, path)| {
            let output = recording.finish(&programs);
            let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
            (load_json(&path), stderr)
        })
        .collect()
}

fn rows(profile: &Value) -> &Vec<Value> {
    profile["locks"].as_array().expect("locks")
}

fn count_of<'a>(rows: impl IntoIterator<Item = &'a Value>) -> u64 {
    rows.into_iter()
        .map(|row| row["count"].as_u64().expect("count"))
        .sum()
}

fn type_of(row: &Value) -> u64 {
    row["flags"].as_u64().expect("flags") & TYPE_BITS
}

/// Two recordings of one storm see the same contentions: their counts agree within a
/// few per cent (map inserts racing between CPUs, and the cached stacks that each
/// recording keeps on its own, are the only differences).
fn assert_same_count(filtered: u64, reference: u64, what: &str) {
    let slack = reference / 50 + 5;
    assert!(
        filtered.abs_diff(reference) <= slack,
        "{what}: the filtered recording counted {filtered}, the unfiltered one {reference} \
         of the same storm"
    );
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn record_type_filter_counts_only_spinlocks_in_the_kernel() {
    let test = test_name!();
    let dir = or_skip!(root_test("record-type"));
    let profiles = record_one_storm(&dir, 3, &[&[], &["--type", "spinlock"]]);
    let (all, _) = &profiles[0];
    let (spin, spin_stderr) = &profiles[1];
    assert!(
        spin_stderr.contains("lock filters in the kernel: types"),
        "{spin_stderr}"
    );

    let all_spin = count_of(rows(all).iter().filter(|row| type_of(row) == LCB_F_SPIN));
    let all_rwsem = count_of(
        rows(all)
            .iter()
            .filter(|row| matches!(type_of(row), LCB_F_READ | LCB_F_WRITE)),
    );
    assert!(all_spin > 20, "the storm made {all_spin} spinlock waits");
    assert!(
        all_rwsem > 10,
        "the storm's mmap side made {all_rwsem} rwsem waits"
    );

    // Only spinlocks, and (the drain does not filter types the kernel decides) the
    // kernel never counted the rest: no rwsem row at all.
    let others: Vec<&Value> = rows(spin)
        .iter()
        .filter(|row| type_of(row) != LCB_F_SPIN)
        .collect();
    assert!(others.is_empty(), "not spinlocks: {others:?}");
    let spin_total = count_of(rows(spin));
    assert_same_count(spin_total, all_spin, "spinlock waits");
    eprintln!(
        "{test}: unfiltered {} waits ({all_spin} spinlock, {all_rwsem} rwsem); \
         --type spinlock {spin_total}",
        count_of(rows(all))
    );
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn record_lock_and_caller_filters() {
    let test = test_name!();
    let dir = or_skip!(root_test("record-lock"));
    // A first storm names a lock whose address stays the same from run to run: a
    // runqueue lock or a static lock (per-process locks such as mmap_lock move).
    let first = record_one_storm(&dir, 2, &[&[]]);
    let stable = rows(&first[0].0)
        .iter()
        .filter(|row| {
            let source = row["lock_name_source"].as_str().unwrap_or("");
            matches!(source, "runqueue" | "kallsyms" | "caller")
        })
        .max_by_key(|row| row["count"].as_u64().unwrap_or(0))
        .unwrap_or_else(|| {
            panic!(
                "no runqueue or static lock contended: {:?}",
                rows(&first[0].0)
            )
        });
    let addr = stable["lock_addr"].as_u64().expect("lock_addr");
    let name = stable["lock_name"].as_str().expect("lock_name").to_string();
    let addr_arg = format!("0x{addr:x}");

    let dir = scratch("record-lock-2");
    let profiles = record_one_storm(
        &dir,
        3,
        &[
            &[],
            &["--lock-filter", &addr_arg],
            &["--lock-filter", "mmap_lock"],
            &["--caller", "*munmap"],
        ],
    );
    let (all, _) = &profiles[0];

    // --lock-filter ADDR: in the kernel, only that lock.
    let (by_addr, by_addr_stderr) = &profiles[1];
    assert!(
        by_addr_stderr.contains("in the kernel: lock addresses"),
        "{by_addr_stderr}"
    );
    let others: Vec<&Value> = rows(by_addr)
        .iter()
        .filter(|row| row["lock_addr"].as_u64() != Some(addr))
        .collect();
    assert!(others.is_empty(), "not {addr_arg}: {others:?}");
    let reference = count_of(
        rows(all)
            .iter()
            .filter(|row| row["lock_addr"].as_u64() == Some(addr)),
    );
    let addr_reference = reference;
    assert!(
        addr_reference > 0,
        "{name} ({addr_arg}) was not contended again"
    );
    assert_same_count(count_of(rows(by_addr)), addr_reference, &name);

    // --lock-filter mmap_lock: a name known after the fact, kept at the drain.
    let (by_name, by_name_stderr) = &profiles[2];
    assert!(
        by_name_stderr.contains("when the maps are drained: --lock-filter mmap_lock"),
        "{by_name_stderr}"
    );
    assert!(
        rows(by_name)
            .iter()
            .all(|row| row["lock_name"] == "mmap_lock"),
        "{:?}",
        rows(by_name)
    );
    let mmap = count_of(
        rows(all)
            .iter()
            .filter(|row| row["lock_name"] == "mmap_lock"),
    );
    assert!(mmap > 10, "the storm made {mmap} mmap_lock waits");
    assert_same_count(count_of(rows(by_name)), mmap, "mmap_lock waits");

    // --caller *munmap: only rows whose stack has a matching frame.
    let (by_caller, _) = &profiles[3];
    let matches = |profile: &Value, row: &Value| {
        row["stack"].as_u64().is_some_and(|id| {
            stack_names(profile, id)
                .iter()
                .any(|frame| frame.contains("munmap"))
        })
    };
    let kept = rows(by_caller);
    assert!(!kept.is_empty(), "--caller *munmap kept nothing");
    let strays: Vec<&Value> = kept.iter().filter(|row| !matches(by_caller, row)).collect();
    assert!(strays.is_empty(), "no munmap frame: {strays:?}");
    let reference = count_of(rows(all).iter().filter(|row| matches(all, row)));
    assert!(
        reference < count_of(rows(all)),
        "every wait of the storm has a munmap frame: the test proves nothing"
    );
    // Each recording caches stacks on its own: allow a few more per cent here.
    let caller = count_of(kept);
    assert!(
        caller.abs_diff(reference) <= reference / 10 + 5,
        "--caller: {caller} waits, the unfiltered recording's matching rows {reference}"
    );
    eprintln!(
        "{test}: --lock-filter {addr_arg} ({name}) {} waits, unfiltered {addr_reference}; \
         --lock-filter mmap_lock {} of {mmap}; --caller *munmap {caller} of {reference} \
         matching (all: {})",
        count_of(rows(by_addr)),
        count_of(rows(by_name)),
        count_of(rows(all))
    );
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn record_filters_refuse_bad_input_before_loading() {
    for (args, expect) in [
        (&["record", "--type", "spinlok"][..], "is not a lock type"),
        (
            &["record", "--lock-filter", "0xzz"],
            "not a hexadecimal address",
        ),
        (
            &["record", "--lock-filter", "0x1000"],
            "not a kernel address",
        ),
        (&["record", "--caller", ""], "--caller takes a pattern"),
    ] {
        let stderr = fails_with(args, expect);
        assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    }
    // A name needs the kernel's symbols: root only.
    let test = test_name!();
    if !can_load_programs(test) {
        return;
    }
    let stderr = fails_with(
        &["record", "--lock-filter", "no_such_lock_xyz", "-d", "1"],
        "no kernel data symbol no_such_lock_xyz",
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    let stderr = fails_with(
        &["record", "--offcpu", "--type", "spinlock", "-d", "1"],
        "add --lock",
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    let stderr = fails_with(
        &["record", "--lock-filter", "schedule", "-d", "1"],
        "is a function, not a lock",
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
}
