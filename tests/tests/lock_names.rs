//! Root integration test of lock names: on lock-storm (pipes and mmap, and an open/close
//! storm) most of the wait must be on named locks, named from the kernel's structures
//! (this machine's kallsyms has no data symbols), and the JSON says how each was named.

mod common;

use std::collections::BTreeMap;

use common::*;

/// Records lock-storm in `mode`; returns (lock name -> (wait ns, source), total wait ns).
fn record_storm(mode: &str) -> (BTreeMap<String, (u64, String)>, u64) {
    let dir = scratch(&format!("lock-names-{mode}"));
    let profile_path = dir.join("lock.json");
    let storm = workload("lock-storm");
    let (stdout, _) = record_ok(&[
        "record",
        "--lock",
        "-o",
        path_str(&profile_path),
        "--",
        path_str(&storm),
        "--seconds",
        "3",
        "--threads",
        "4",
        "--mode",
        mode,
    ]);
    // The summary says how the locks were named.
    let named_by = stdout
        .lines()
        .find(|line| line.starts_with("named by "))
        .unwrap_or_else(|| panic!("no `named by` line in:\n{stdout}"));
    assert!(
        named_by.contains("task: ") && named_by.contains("file_lock"),
        "{named_by}"
    );
    let profile = load_json(&profile_path);
    let mut by_name: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut total = 0;
    for row in profile["locks"].as_array().expect("lock rows") {
        let name = row["lock_name"].as_str().expect("lock_name").to_string();
        let source = row["lock_name_source"]
            .as_str()
            .unwrap_or_else(|| panic!("no lock_name_source in {row}"))
            .to_string();
        let wait = row["total_ns"].as_u64().expect("total_ns");
        total += wait;
        // An address is never called named, and a name never an address.
        assert_eq!(
            source == "address",
            name.starts_with("0x"),
            "{name} named by {source}"
        );
        let entry = by_name.entry(name).or_insert((0, source));
        entry.0 += wait;
    }
    (by_name, total)
}

fn named_share(by_name: &BTreeMap<String, (u64, String)>, total: u64) -> f64 {
    let named: u64 = by_name
        .values()
        .filter(|(_, source)| source != "address")
        .map(|(wait, _)| wait)
        .sum();
    named as f64 / total.max(1) as f64
}

#[test]
fn most_lock_wait_is_on_named_locks() {
    if !can_load_programs("most_lock_wait_is_on_named_locks") {
        return;
    }
    // Pipes and mmap: mmap_lock (rwsem), the fd table's file_lock (pipe close), the
    // runqueue locks (wake-ups).
    let (both, both_total) = record_storm("both");
    assert!(both_total > 0, "lock-storm contended: {both:?}");
    let share = named_share(&both, both_total);
    eprintln!("both: {:.1}% named: {both:?}", share * 100.0);
    assert!(
        share >= 0.8,
        "only {:.1}% of the wait on named locks: {both:?}",
        share * 100.0
    );
    let has = |names: &BTreeMap<String, (u64, String)>, prefix: &str, source: &str| {
        names
            .iter()
            .any(|(name, (_, how))| name.starts_with(prefix) && how == source)
    };
    assert!(has(&both, "mmap_lock", "task"), "{both:?}");
    assert!(has(&both, "file_lock", "task"), "{both:?}");
    assert!(has(&both, "rq_lock:cpu", "runqueue"), "{both:?}");

    // An open/close storm: the fd table's lock above all.
    let (open, open_total) = record_storm("open");
    assert!(open_total > 0, "lock-storm contended: {open:?}");
    let share = named_share(&open, open_total);
    eprintln!("open: {:.1}% named: {open:?}", share * 100.0);
    assert!(
        share >= 0.8,
        "only {:.1}% of the wait on named locks: {open:?}",
        share * 100.0
    );
    assert!(has(&open, "file_lock", "task"), "{open:?}");
}
