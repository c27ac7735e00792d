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

/// One row of a latency table: profile rows grouped by (what, process).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LatencyGroup {
    /// `fuse CREATE`, `sunrpc rpc_task`, `vfs_read`, `/usr/bin/x:work`.
    pub name: String,
    pub pid: u32,
    pub process: String,
    pub count: u64,
    pub total_ns: u64,
    pub mean_ns: u64,
    pub max_ns: u64,
    pub min_ns: u64,
    /// log2 histogram: `hist[i]` counts latencies in [2^i, 2^(i+1)) ns.
    pub hist: Vec<u64>,
    /// rpc: the function that ran the completion most (leaf of its stack).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_in: Option<String>,
}

fn group_latency<'a>(
    profile: &Profile,
    rows: impl Iterator<Item = (String, u32, &'a crate::profile::Latency, Option<u32>)>,
) -> Vec<LatencyGroup> {
    let mut groups: BTreeMap<(String, u32), (crate::profile::Latency, BTreeMap<String, u64>)> =
        BTreeMap::new();
    for (name, pid, latency, stack) in rows {
        let entry = groups.entry((name, pid)).or_default();
        entry.0.merge(latency);
        if let Some(stack) = stack {
            if let Some(frame) = profile.stack_frames(Some(stack)).first() {
                *entry.1.entry(frame.display()).or_default() += latency.total_ns;
            }
        }
    }
    let mut out: Vec<LatencyGroup> = groups
        .into_iter()
        .map(|((name, pid), (latency, leaves))| LatencyGroup {
            process: profile.process_name(pid),
            name,
            pid,
            count: latency.count,
            total_ns: latency.total_ns,
            mean_ns: latency.mean_ns(),
            max_ns: latency.max_ns,
            min_ns: latency.min_ns,
            hist: latency.hist.clone(),
            completed_in: leaves
                .into_iter()
                .max_by_key(|(_, total)| *total)
                .map(|(leaf, _)| leaf),
        })
        .collect();
    out.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then_with(|| a.name.cmp(&b.name))
    });
    out
}

/// Request latency grouped by provider, operation and process.
pub fn rpc_groups(profile: &Profile) -> Vec<LatencyGroup> {
    group_latency(
        profile,
        profile.rpcs.iter().map(|row| {
            (
                format!("{} {}", row.provider, row.op_name),
                row.pid,
                &row.latency,
                row.end_stack,
            )
        }),
    )
}

/// Function latency grouped by function and process.
pub fn func_groups(profile: &Profile) -> Vec<LatencyGroup> {
    let mut groups = group_latency(
        profile,
        profile
            .funcs
            .iter()
            .map(|row| (short_function_name(row), row.pid, &row.latency, None)),
    );
    for group in &mut groups {
        group.completed_in = None;
    }
    groups
}

/// `vfs_read`, or `binary:symbol` without the binary's directory for user functions.
fn short_function_name(row: &crate::profile::FuncRow) -> String {
    if !row.user {
        return row.function.clone();
    }
    match row.function.rsplit_once(':') {
        Some((binary, symbol)) => {
            let file = binary.rsplit('/').next().unwrap_or(binary);
            format!("{file}:{symbol}")
        }
        None => row.function.clone(),
    }
}

/// A latency table as text, within 100 columns.
pub fn latency_table(groups: &[LatencyGroup], what: &str, top: usize) -> String {
    let mut out = String::new();
    if groups.is_empty() {
        out.push_str(&format!("no {what} recorded\n"));
        return out;
    }
    out.push_str(&format!(
        "{:>7} {:>9} {:>9} {:>9}  {:<28} {:<14} {}\n",
        "count", "total", "mean", "max", what, "process", "completed in"
    ));
    let shown = if top == 0 {
        groups.len()
    } else {
        top.min(groups.len())
    };
    for group in &groups[..shown] {
        out.push_str(&format!(
            "{:>7} {:>9} {:>9} {:>9}  {:<28} {:<14} {}\n",
            group.count,
            format_ns(group.total_ns),
            format_ns(group.mean_ns),
            format_ns(group.max_ns),
            fit(&group.name, 28),
            fit(&group.process, 14),
            fit(group.completed_in.as_deref().unwrap_or(""), 17),
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

/// Probes asked for but not available on this kernel, one line each.
pub fn unavailable(profile: &Profile) -> String {
    let mut out = String::new();
    if profile.unavailable.is_empty() {
        return out;
    }
    out.push_str("\nnot recorded (this kernel lacks the hooks):\n");
    for missing in &profile.unavailable {
        out.push_str(&format!(
            "  {} {}: {}\n",
            missing.family, missing.what, missing.reason
        ));
    }
    out
}

/// Every table the profile has data or probes for (summary and `report`).
pub fn latency_sections(profile: &Profile, top: usize) -> String {
    let mut out = String::new();
    let has = |family: &str| profile.probes.iter().any(|probe| probe.family == family);
    if has("rpc") || !profile.rpcs.is_empty() {
        out.push_str("\nrequest latency, by operation and process (total time):\n");
        out.push_str(&latency_table(&rpc_groups(profile), "request", top));
    }
    if has("func") || has("ufunc") || !profile.funcs.is_empty() {
        out.push_str("\nfunction latency, by function and process (total time):\n");
        out.push_str(&latency_table(&func_groups(profile), "function", top));
    }
    out.push_str(&unavailable(profile));
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
    out.push_str(&latency_sections(profile, top));
    out.push_str(&losses(profile));
    out
}

#[derive(Serialize)]
struct JsonReport<'a> {
    format: &'a str,
    host: &'a str,
    duration_s: f64,
    locks: Vec<LockGroup>,
    rpcs: Vec<LatencyGroup>,
    funcs: Vec<LatencyGroup>,
    unavailable: &'a [crate::profile::Unavailable],
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
        rpcs: rpc_groups(profile),
        funcs: func_groups(profile),
        unavailable: &profile.unavailable,
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
    fn latency_tables_group_and_fit() {
        use crate::profile::{FuncRow, Latency, RpcRow};
        let mut profile = profile_with_two_locks();
        let latency = |count, total| Latency {
            count,
            total_ns: total,
            max_ns: total / count,
            min_ns: 1,
            hist: vec![0, count],
        };
        profile.rpcs = vec![
            RpcRow {
                provider: "fuse".into(),
                op: 35,
                op_name: "CREATE".into(),
                pid: 10,
                start_stack: Some(0),
                end_stack: Some(1),
                latency: latency(2, 200_000_000),
            },
            RpcRow {
                provider: "fuse".into(),
                op: 35,
                op_name: "CREATE".into(),
                pid: 10,
                start_stack: Some(1),
                end_stack: Some(1),
                latency: latency(1, 100_000_000),
            },
        ];
        profile.funcs = vec![FuncRow {
            function: "/very/long/directory/name/of/a/binary:a_rather_long_function_name".into(),
            user: true,
            pid: 11,
            stack: None,
            latency: latency(4, 4_000),
        }];
        let rpcs = rpc_groups(&profile);
        assert_eq!(rpcs.len(), 1);
        assert_eq!(rpcs[0].count, 3);
        assert_eq!(rpcs[0].mean_ns, 100_000_000);
        assert_eq!(rpcs[0].hist, vec![0, 3]);
        // The leaf of the completion stack that carried the most latency.
        assert_eq!(
            rpcs[0].completed_in.as_deref(),
            Some("rwsem_down_write_slowpath")
        );
        let text = latency_sections(&profile, 20);
        assert!(text.contains("fuse CREATE"), "{text}");
        assert!(text.contains("binary:a_rather_long"), "{text}");
        for line in text.lines() {
            assert!(line.chars().count() <= 100, "too wide: {line}");
        }
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
