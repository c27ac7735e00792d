//! The per-lock table (text for people, JSON for scripts) and the end-of-run summary.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::{
    cli::GroupBy,
    probes::lock::{caller, lock_type_name},
    profile::Profile,
    units::format_ns,
};

/// One row of the lock table: rows of the profile grouped by lock, caller or process.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LockGroup {
    #[serde(rename = "type")]
    pub lock_type: String,
    pub lock: String,
    /// The caller with the most wait time in this group.
    pub caller: String,
    pub contended: u64,
    pub total_wait_ns: u64,
    pub max_wait_ns: u64,
    pub min_wait_ns: u64,
    pub avg_wait_ns: u64,
    /// Every caller, most wait first.
    pub callers: Vec<String>,
    pub pids: Vec<u32>,
    /// Process names, in the order of `pids`.
    pub processes: Vec<String>,
    /// Host of the first process (profiles merged from several hosts differ here).
    pub host: String,
}

/// Groups lock rows and sorts them by total wait, largest first.
pub fn lock_groups(profile: &Profile, by: GroupBy) -> Vec<LockGroup> {
    struct Acc {
        lock_type: String,
        lock: String,
        count: u64,
        total: u64,
        max: u64,
        min: u64,
        callers: BTreeMap<String, u64>,
        pids: BTreeSet<u32>,
    }
    let mut groups: BTreeMap<(String, String), Acc> = BTreeMap::new();
    for row in &profile.locks {
        let lock_type = lock_type_name(row.flags).to_string();
        let frames = profile.stack_frames(row.stack);
        let caller_name = match (row.stack, caller(&frames)) {
            (None, _) => "[stack lost]".to_string(),
            (Some(_), Some(frame)) => frame.display(),
            (Some(_), None) => "[unknown]".to_string(),
        };
        let key = match by {
            GroupBy::Lock => (row.lock_name.clone(), lock_type.clone()),
            GroupBy::Caller => (caller_name.clone(), lock_type.clone()),
            GroupBy::Process => (format!("{}", row.pid), lock_type.clone()),
            GroupBy::Host => (profile.host_of(row.pid), String::new()),
        };
        let acc = groups.entry(key).or_insert_with(|| Acc {
            lock_type: lock_type.clone(),
            lock: row.lock_name.clone(),
            count: 0,
            total: 0,
            max: 0,
            min: u64::MAX,
            callers: BTreeMap::new(),
            pids: BTreeSet::new(),
        });
        if acc.lock != row.lock_name && !acc.lock.starts_with('(') {
            acc.lock = "(several)".into();
        }
        acc.count += row.count;
        acc.total += row.total_ns;
        acc.max = acc.max.max(row.max_ns);
        acc.min = acc.min.min(row.min_ns);
        *acc.callers.entry(caller_name).or_default() += row.total_ns;
        acc.pids.insert(row.pid);
    }
    let mut out: Vec<LockGroup> = groups
        .into_values()
        .map(|acc| {
            let mut callers: Vec<(String, u64)> = acc.callers.into_iter().collect();
            callers.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let pids: Vec<u32> = acc.pids.into_iter().collect();
            LockGroup {
                lock_type: acc.lock_type,
                lock: acc.lock,
                caller: callers.first().map(|c| c.0.clone()).unwrap_or_default(),
                contended: acc.count,
                total_wait_ns: acc.total,
                max_wait_ns: acc.max,
                min_wait_ns: if acc.count == 0 { 0 } else { acc.min },
                avg_wait_ns: acc.total.checked_div(acc.count).unwrap_or(0),
                callers: callers.into_iter().map(|c| c.0).collect(),
                processes: pids.iter().map(|&pid| profile.process_name(pid)).collect(),
                host: pids
                    .first()
                    .map(|&pid| profile.host_of(pid))
                    .unwrap_or_default(),
                pids,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.total_wait_ns
            .cmp(&a.total_wait_ns)
            .then_with(|| b.contended.cmp(&a.contended))
            .then_with(|| a.lock.cmp(&b.lock))
    });
    out
}

/// Cuts `text` to `width` characters, marking the cut with `…`.
pub fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// The lock table as text, within 100 columns.
pub fn lock_table(profile: &Profile, by: GroupBy, top: usize) -> String {
    let groups = lock_groups(profile, by);
    let mut out = String::new();
    if groups.is_empty() {
        out.push_str("no lock contention recorded\n");
        return out;
    }
    let third = match by {
        GroupBy::Process => "process",
        GroupBy::Host => "host",
        _ => "lock",
    };
    out.push_str(&format!(
        "{:>10} {:>10} {:>10} {:>10}  {:<10} {:<20} {}\n",
        "contended", "total wait", "max wait", "avg wait", "type", third, "caller"
    ));
    let shown = if top == 0 {
        groups.len()
    } else {
        top.min(groups.len())
    };
    for group in &groups[..shown] {
        let third_value = match by {
            GroupBy::Process => group.processes.first().cloned().unwrap_or_default(),
            GroupBy::Host => group.host.clone(),
            _ => group.lock.clone(),
        };
        out.push_str(&format!(
            "{:>10} {:>10} {:>10} {:>10}  {:<10} {:<20} {}\n",
            group.contended,
            format_ns(group.total_wait_ns),
            format_ns(group.max_wait_ns),
            format_ns(group.avg_wait_ns),
            group.lock_type,
            fit(&third_value, 20),
            fit(&group.caller, 30),
        ));
    }
    if shown < groups.len() {
        out.push_str(&format!(
            "({} more rows: --top 0 shows all)\n",
            groups.len() - shown
        ));
    }
    out
}

/// Losses, explained; empty when nothing was lost.
pub fn losses(profile: &Profile) -> String {
    if profile.losses.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nlost events (numbers above are lower bounds):\n");
    for (name, count) in &profile.losses {
        let why = profiler_common::loss::LOSS_NAMES
            .iter()
            .find(|(_, known, _)| known == name)
            .map(|(_, _, why)| *why)
            .unwrap_or("");
        out.push_str(&format!("  {count:>10}  {name}: {why}\n"));
    }
    out
}

pub fn summary_header(profile: &Profile) -> String {
    format!(
        "lockpath: {} on {} ({}), {:.1} s\n\n",
        profile.targets.mode, profile.host, profile.kernel, profile.duration_s
    )
}

/// What `record` prints at the end.
pub fn summary(profile: &Profile, top: usize) -> String {
    let mut out = summary_header(profile);
    if profile.probes.iter().any(|probe| probe.family == "lock") {
        out.push_str("lock contention, by lock (total wait):\n");
        out.push_str(&lock_table(profile, GroupBy::Lock, top));
    }
    let sections = family_sections(profile, top);
    // The header ends with a blank line already.
    out.push_str(
        if profile.locks.is_empty() && !out.contains("lock contention") {
            sections.trim_start_matches('\n')
        } else {
            &sections
        },
    );
    out.push_str(&losses(profile));
    out
}

/// The off-CPU and block-IO sections, for the families the profile recorded.
pub fn family_sections(profile: &Profile, top: usize) -> String {
    let mut out = String::new();
    let recorded = |family: &str| profile.probes.iter().any(|probe| probe.family == family);
    if recorded("offcpu") || !profile.offcpu.is_empty() {
        out.push_str("\noff-CPU time by process and wait class:\n");
        out.push_str(&super::offcpu::table(profile, top));
    }
    if recorded("io") || !profile.io.is_empty() {
        out.push_str("\nblock IO by device and operation (issue to completion):\n");
        out.push_str(&super::io::table(profile, top));
    }
    out
}

#[derive(Serialize)]
struct JsonReport<'a> {
    format: &'a str,
    host: &'a str,
    duration_s: f64,
    locks: Vec<LockGroup>,
    offcpu: Vec<super::offcpu::OffcpuProcess>,
    io: Vec<super::io::IoGroup>,
    lost: &'a BTreeMap<String, u64>,
}

pub fn json(profile: &Profile, by: GroupBy, top: usize) -> serde_json::Result<String> {
    let mut locks = lock_groups(profile, by);
    if top != 0 {
        locks.truncate(top);
    }
    serde_json::to_string_pretty(&JsonReport {
        format: &profile.format,
        host: &profile.host,
        duration_s: profile.duration_s,
        locks,
        offcpu: super::offcpu::processes(profile),
        io: super::io::groups(profile),
        lost: &profile.losses,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::profile::{Frame, LockRow, Process, StackInterner};

    pub(crate) fn profile_with_two_locks() -> Profile {
        let mut profile = Profile::new();
        let mut interner = StackInterner::default();
        let frame = |name: &str| Frame {
            name: name.into(),
            module: None,
            kernel: true,
        };
        let spin = interner.stack(
            vec![
                frame("queued_spin_lock_slowpath"),
                frame("_raw_spin_lock"),
                frame("do_pipe2"),
            ],
            false,
        );
        let rwsem = interner.stack(
            vec![
                frame("rwsem_down_write_slowpath"),
                frame("down_write"),
                frame("vm_mmap_pgoff"),
            ],
            false,
        );
        interner.finish(&mut profile);
        let row = |pid, name: &str, flags, stack, count, total| LockRow {
            pid,
            lock_addr: 1,
            lock_name: name.into(),
            flags,
            stack: Some(stack),
            count,
            total_ns: total,
            max_ns: total / count,
            min_ns: 1,
        };
        profile.locks = vec![
            row(10, "0xffff1", 1, spin, 100, 5_000_000),
            row(11, "0xffff1", 1, spin, 50, 2_000_000),
            row(10, "mmap_lock", 4, rwsem, 10, 6_000_000),
        ];
        profile.processes = vec![
            Process {
                pid: 10,
                comm: "ior".into(),
                ..Default::default()
            },
            Process {
                pid: 11,
                comm: "ior".into(),
                ..Default::default()
            },
        ];
        profile
    }

    #[test]
    fn groups_by_lock_sorted_by_total_wait() {
        let groups = lock_groups(&profile_with_two_locks(), GroupBy::Lock);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].lock, "0xffff1");
        assert_eq!(groups[0].total_wait_ns, 7_000_000);
        assert_eq!(groups[0].contended, 150);
        assert_eq!(groups[0].lock_type, "spinlock");
        assert_eq!(groups[0].caller, "do_pipe2");
        assert_eq!(groups[0].pids, vec![10, 11]);
        assert_eq!(groups[1].lock_type, "rwsem:W");
        assert_eq!(groups[1].caller, "vm_mmap_pgoff");
        assert_eq!(groups[1].avg_wait_ns, 600_000);
    }

    #[test]
    fn groups_by_process() {
        let groups = lock_groups(&profile_with_two_locks(), GroupBy::Process);
        assert_eq!(groups.len(), 3);
        assert_eq!(groups[0].pids, vec![10]);
        assert_eq!(groups[0].lock_type, "rwsem:W");
        assert_eq!(groups[0].total_wait_ns, 6_000_000);
    }

    #[test]
    fn table_fits_100_columns() {
        let table = lock_table(&profile_with_two_locks(), GroupBy::Lock, 20);
        for line in table.lines() {
            assert!(line.chars().count() <= 100, "too wide: {line}");
        }
        assert!(table.contains("7.00 ms"), "{table}");
    }

    #[test]
    fn json_has_documented_fields() {
        let text = json(&profile_with_two_locks(), GroupBy::Lock, 0).expect("json");
        let value: serde_json::Value = serde_json::from_str(&text).expect("parse");
        let first = &value["locks"][0];
        for field in [
            "type",
            "lock",
            "contended",
            "total_wait_ns",
            "max_wait_ns",
            "avg_wait_ns",
            "callers",
            "pids",
        ] {
            assert!(!first[field].is_null(), "missing {field}");
        }
        assert!(value["lost"].is_object());
    }
}
