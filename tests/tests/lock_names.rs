//! Root integration test of lock names: on lock-storm (pipes and mmap, and an open/close
//! storm) most of the wait must be on named locks, named from the kernel's structures
//! (this machine's kallsyms has no data symbols), and the JSON says how each was named.

mod common;

use std::collections::BTreeMap;

use common::*;

/// Records lock-storm in `mode`; returns (lock name -> (wait ns, source), total wait
/// ns), and checks the summary's `named by` line against the profile.
fn record_storm(mode: &str) -> (BTreeMap<String, (u64, String)>, u64) {
    let (by_name, total, stdout) = record_storm_with_summary(mode);
    check_named_by(named_by_line(&stdout), &by_name);
    (by_name, total)
}

/// The summary's `named by METHOD: NAME, NAME; ...` line (100 columns, cut with `…`)
/// lists the shown locks by method: every name it lists whole must be one the profile
/// names the same way, and it lists some.
fn check_named_by(line: &str, by_name: &BTreeMap<String, (u64, String)>) {
    let mut checked = 0;
    for part in line.trim_start_matches("named by ").split("; ") {
        let Some((method, names)) = part.split_once(": ") else {
            continue; // a method cut short
        };
        if method == "not named" {
            continue; // "not named: N addresses"
        }
        for name in names.split(", ") {
            if name.ends_with('…') {
                break;
            }
            assert_eq!(
                by_name.get(name).map(|(_, source)| source.as_str()),
                Some(method),
                "{name} listed as named by {method}: {line}"
            );
            checked += 1;
        }
    }
    assert!(checked > 0, "no lock named in: {line}");
}

fn named_by_line(stdout: &str) -> &str {
    stdout
        .lines()
        .find(|line| line.starts_with("named by "))
        .unwrap_or_else(|| panic!("no `named by` line in:\n{stdout}"))
}

/// Records lock-storm in `mode`: (lock name -> (wait ns, source), total wait ns, the
/// summary).
fn record_storm_with_summary(mode: &str) -> (BTreeMap<String, (u64, String)>, u64, String) {
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
    (by_name, total, stdout)
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
    let _alone = alone();
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

    // An open/close storm: the fd table's lock above all, and `cdev_lock`, the static
    // spinlock chrdev_open takes (the storm opens /dev/null). A static lock is named by
    // its kallsyms symbol; on a kernel without data symbols in kallsyms
    // (CONFIG_KALLSYMS_ALL off, like this machine's 6.18) by the function that takes it.
    let (open, open_total) = record_storm("open");
    assert!(open_total > 0, "lock-storm contended: {open:?}");
    let share = named_share(&open, open_total);
    eprintln!("open: {:.1}% named: {open:?}", share * 100.0);
    assert!(
        share >= 0.8,
        "only {:.1}% of the wait on named locks: {open:?}",
        share * 100.0
    );
    let cdev_lock = match kallsyms_has_data_symbols() {
        true => has(&open, "cdev_lock", "kallsyms"),
        false => has(&open, "static@chrdev_open", "caller"),
    };
    assert!(cdev_lock, "chrdev_open's static lock named: {open:?}");
    assert!(has(&open, "file_lock", "task"), "{open:?}");
}

/// Whether /proc/kallsyms lists the kernel's data symbols (CONFIG_KALLSYMS_ALL): a
/// kernel without them lists a few dozen (section markers), one with them tens of
/// thousands.
fn kallsyms_has_data_symbols() -> bool {
    let text = std::fs::read_to_string("/proc/kallsyms").expect("read /proc/kallsyms");
    let data = text
        .lines()
        .filter(|line| matches!(line.split_whitespace().nth(1), Some("d" | "D" | "b" | "B")))
        .count();
    data > 1000
}

/// Byte offset of `member` in `struct name` from the kernel's BTF, as bpftool prints it
/// (ground truth independent of lockpath's own BTF reader).
fn btf_member_offset(name: &str, member: &str) -> Option<u64> {
    let text = bpftool_btf()?;
    let mut lines = text.lines();
    lines.find(|line| line.contains(&format!("STRUCT '{name}' ")))?;
    lines
        .take_while(|line| line.starts_with('\t'))
        .find(|line| line.trim_start().starts_with(&format!("'{member}' ")))
        .and_then(|line| line.split("bits_offset=").nth(1))
        .and_then(|bits| bits.split_whitespace().next()?.parse::<u64>().ok())
        .map(|bits| bits / 8)
}

#[test]
fn wait_lock_of_mmap_lock_is_named_after_it() {
    let _alone = alone();
    let test = "wait_lock_of_mmap_lock_is_named_after_it";
    if !can_load_programs(test) || !require_tool(test, "bpftool") {
        return;
    }
    let offset = btf_member_offset("rw_semaphore", "wait_lock")
        .expect("rw_semaphore.wait_lock in the kernel's BTF");
    // An mmap/munmap storm: writers queue on mmap_lock, and the rwsem's wait_lock (a
    // raw spinlock) is contended by the threads queueing and waking.
    let dir = scratch("lock-names-wait-lock");
    let profile_path = dir.join("lock.json");
    let storm = workload("lock-storm");
    record_ok(&[
        "record",
        "--lock",
        "-o",
        path_str(&profile_path),
        "--",
        path_str(&storm),
        "--seconds",
        "5",
        "--threads",
        "4",
        "--mode",
        "mmap",
    ]);
    let profile = load_json(&profile_path);
    let rows = profile["locks"].as_array().expect("lock rows");
    let field = |row: &serde_json::Value, name: &str| row[name].as_str().unwrap_or("").to_string();
    let mmap_locks: std::collections::BTreeSet<u64> = rows
        .iter()
        .filter(|row| field(row, "lock_name") == "mmap_lock")
        .map(|row| row["lock_addr"].as_u64().expect("lock_addr"))
        .collect();
    assert!(!mmap_locks.is_empty(), "mmap_lock contended: {rows:?}");
    let (mut count, mut wait) = (0u64, 0u64);
    let (mut in_rwsem_code, mut with_stack) = (0u64, 0u64);
    for row in rows {
        let addr = row["lock_addr"].as_u64().expect("lock_addr");
        let at_wait_lock = mmap_locks.iter().any(|base| base + offset == addr);
        let named = field(row, "lock_name") == "mmap_lock.wait_lock";
        // Named exactly when it is at mmap_lock's address plus the member's offset.
        assert_eq!(
            at_wait_lock,
            named,
            "{} at {addr:#x} (mmap_lock at {mmap_locks:x?} + {offset})",
            field(row, "lock_name")
        );
        if !named {
            continue;
        }
        assert_eq!(field(row, "lock_name_source"), "member", "{row}");
        assert_eq!(row["flags"], 1, "a spinlock: {row}");
        count += row["count"].as_u64().expect("count");
        wait += row["total_ns"].as_u64().expect("total_ns");
        // Taken inside the rwsem code (its slow paths, wake-up and downgrade).
        if let Some(stack) = row["stack"].as_u64() {
            let rows_count = row["count"].as_u64().expect("count");
            with_stack += rows_count;
            if stack_names(&profile, stack).iter().any(|frame| {
                frame.starts_with("rwsem_") || frame.starts_with("up_") || frame.starts_with("down")
            }) {
                in_rwsem_code += rows_count;
            }
        }
    }
    eprintln!(
        "mmap_lock.wait_lock: {count} contentions, {wait} ns; {in_rwsem_code} of {with_stack} \
         with a stack in the rwsem code"
    );
    assert!(count > 0 && wait > 0, "mmap_lock.wait_lock contended");
    assert!(
        in_rwsem_code * 100 >= with_stack * 95 && with_stack > 0,
        "{in_rwsem_code} of {with_stack} contentions in the rwsem code"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether the running kernel's BTF has the function `name`, as bpftool reads it
/// (independent of lockpath's own BTF reader).
fn kernel_has_function(name: &str) -> bool {
    bpftool_btf()
        .expect("run bpftool")
        .contains(&format!("FUNC '{name}' "))
}

/// The running kernel's BTF as `bpftool btf dump ... format raw` prints it.
fn bpftool_btf() -> Option<String> {
    let output = std::process::Command::new("bpftool")
        .args([
            "btf",
            "dump",
            "file",
            "/sys/kernel/btf/vmlinux",
            "format",
            "raw",
        ])
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// A lock inside a slab object is named after its slab cache, and its struct member
/// where the cache holds one type, where the kernel has `bpf_get_kmem_cache` (6.13):
/// lock-storm's file mode contends the `f_pos_lock` mutex of one shared `struct file`,
/// an object of the `filp` cache. Elsewhere it stays an address.
#[test]
fn locks_in_slab_objects_are_named_after_their_cache() {
    let _alone = alone();
    if !can_load_programs("locks_in_slab_objects_are_named_after_their_cache") {
        return;
    }
    let (by_name, total, stdout) = record_storm_with_summary("file");
    assert!(total > 0, "lock-storm contended: {by_name:?}");
    if !kernel_has_function("bpf_get_kmem_cache") {
        assert!(
            by_name.values().all(|(_, source)| source != "slab"),
            "no slab names without the kfunc: {by_name:?}"
        );
        return;
    }
    // The cache `filp` holds `struct file`s; the lock is its `f_pos_lock` member.
    let name = "&file->f_pos_lock";
    let (wait, source) = by_name
        .get(name)
        .unwrap_or_else(|| panic!("the shared file's lock is not named {name}: {by_name:?}"));
    assert_eq!(source, "slab");
    // The f_pos_lock mutex (its waits and its optimistic spins) is most of the wait.
    assert!(
        *wait * 2 >= total,
        "{name} has {wait} of {total} ns: {by_name:?}"
    );
    check_named_by(named_by_line(&stdout), &by_name);
}
