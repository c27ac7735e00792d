//! The text report (every family's tables, assembled here), the JSON report (for
//! scripts) and the end-of-run summary of `record`. The tables are in lock.rs,
//! latency.rs, cpu.rs, offcpu.rs and io.rs beside this file.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{
    cpu::{cpu_functions, cpu_processes, cpu_tables, CpuFunction, CpuProcess},
    latency::{
        func_groups, hold_groups, hold_table, latency_table, rpc_groups, HoldGroup, LatencyGroup,
    },
    lock::{contended_holds_table, holders_table, lock_table, top_lock_groups, LockGroup},
};
use crate::{kind::GroupBy, profile::Profile};

/// Probes asked for but not available on this kernel, one line each.
pub fn unavailable(profile: &Profile) -> String {
    let mut out = String::new();
    if profile.unavailable.is_empty() {
        return out;
    }
    out.push_str(
        "\nnot recorded (asked for, but this kernel or the arguments did not allow it):\n",
    );
    for missing in &profile.unavailable {
        out.push_str(&format!(
            "  {} {}: {}\n",
            missing.family, missing.what, missing.reason
        ));
    }
    out
}

/// Losses, explained; empty when nothing was lost.
pub fn losses(profile: &Profile) -> String {
    if profile.losses.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\nlost events (the numbers above miss those dropped; those a full map counted in a row \
         without its detail are in them):\n",
    );
    for (name, count) in &profile.losses {
        let why = profiler_common::loss::loss_meaning(name);
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

/// What `lockpath report` prints (format text).
pub fn text(profile: &Profile, by: GroupBy, top: usize) -> String {
    let mut text = summary_header(profile);
    text.push_str(&crate::waiting::text(profile, top));
    if shows(profile, "lock") {
        text.push_str(&lock_section(profile, by, top));
    }
    for family in ["offcpu", "io", "cpu", "rpc", "func", "hold"] {
        text.push_str(&section(profile, family, top, shows));
    }
    text.push_str(&unavailable(profile));
    text.push_str(&losses(profile));
    text
}

/// What `record` prints at the end.
pub fn summary(profile: &Profile, top: usize) -> String {
    let mut out = summary_header(profile);
    out.push_str(&crate::waiting::text(profile, top));
    if summary_shows(profile, "lock") {
        out.push_str("lock contention, by lock (total wait):\n");
        out.push_str(&lock_table(profile, GroupBy::Lock, top));
        out.push_str(&holders_table(profile, top.min(10)));
        out.push_str(&contended_holds_table(profile, top.min(10)));
    }
    let mut sections = String::new();
    for family in ["cpu", "offcpu", "io", "rpc", "func", "hold"] {
        sections.push_str(&section(profile, family, top, summary_shows));
    }
    sections.push_str(&unavailable(profile));
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

/// Whether `lockpath report` has a section for `family`: the profile recorded it
/// (`Profile::recorded`) or has rows of it (profiles of older versions do not list their
/// families; one that names no family and has no rows of another family is read as a
/// lock profile). The one test of every section of the report.
pub fn shows(profile: &Profile, family: &str) -> bool {
    recorded_or_has_rows(profile, family)
        || (family == "lock"
            && profile.probes.is_empty()
            && ["cpu", "offcpu", "io", "rpc", "func", "hold"]
                .iter()
                .all(|other| !has_rows(profile, other)))
}

/// Whether the end-of-run summary has a section for `family`: the run recorded it
/// (the summary reads what `record` made, which lists every family it recorded).
fn summary_shows(profile: &Profile, family: &str) -> bool {
    profile.recorded(family) || (family == "func" && profile.recorded("ufunc"))
}

fn recorded_or_has_rows(profile: &Profile, family: &str) -> bool {
    // `--ufunc` is the function family's user-space face.
    profile.recorded(family)
        || has_rows(profile, family)
        || (family == "func" && profile.recorded("ufunc"))
}

/// Whether the profile has rows of `family`.
fn has_rows(profile: &Profile, family: &str) -> bool {
    match family {
        "lock" => !profile.locks.is_empty(),
        "cpu" => !profile.cpu.is_empty(),
        "offcpu" => !profile.offcpu.is_empty(),
        "io" => !profile.io.is_empty() || !profile.file_calls.is_empty(),
        "rpc" => !profile.rpcs.is_empty(),
        "func" => !profile.funcs.is_empty(),
        "hold" => !profile.holds.is_empty(),
        _ => false,
    }
}

/// The lock family's section of `lockpath report`: the lock table grouped `by`, the
/// holders, the holds under contention and, for merged profiles, the table by host.
fn lock_section(profile: &Profile, by: GroupBy, top: usize) -> String {
    let mut out = lock_table(profile, by, top);
    out.push_str(&holders_table(profile, 10));
    out.push_str(&contended_holds_table(profile, 10));
    if profile.is_merged() && by != GroupBy::Host {
        out.push_str("\nby host:\n");
        out.push_str(&lock_table(profile, GroupBy::Host, top));
    }
    out
}

/// The section of every family but the lock family (the same in the report and the
/// summary); empty when `shown` says the profile does not show the family. The off-CPU
/// section ends with the wait chains (`--wakers`), which say themselves whether there
/// are any.
fn section(
    profile: &Profile,
    family: &str,
    top: usize,
    shown: fn(&Profile, &str) -> bool,
) -> String {
    let mut out = String::new();
    if shown(profile, family) {
        let (heading, table) = match family {
            "cpu" => (String::new(), cpu_tables(profile, top)),
            "offcpu" => (
                "off-CPU time by process and wait class:\n".to_string(),
                super::offcpu::table(profile, top),
            ),
            "io" => (
                "block IO by device and operation (issue to completion):\n".to_string(),
                super::io::table(profile, top),
            ),
            "rpc" => (
                "request latency, by operation and process (total time):\n".to_string(),
                latency_table(&rpc_groups(profile), "request", top),
            ),
            "func" => (
                "function latency, by function and process (total time):\n".to_string(),
                latency_table(&func_groups(profile), "function", top),
            ),
            "hold" => {
                let lock = profile
                    .holds
                    .first()
                    .map(|row| row.lock_name.as_str())
                    .unwrap_or("the --hold lock");
                (
                    format!(
                        "hold times of {lock}, by holder (acquisition to release, total time):\n"
                    ),
                    hold_table(profile, top),
                )
            }
            _ => (String::new(), String::new()),
        };
        out.push('\n');
        out.push_str(&heading);
        out.push_str(&table);
    }
    if family == "offcpu" {
        out.push_str(&super::chains::text(profile, top.min(10)));
    }
    out
}

#[derive(Serialize)]
struct JsonReport<'a> {
    format: &'a str,
    host: &'a str,
    duration_s: f64,
    /// Still waiting at the end, one per thread, longest first, with its chain.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    waiting: Vec<crate::waiting::JsonWait>,
    locks: Vec<LockGroup>,
    offcpu: Vec<super::offcpu::OffcpuProcess>,
    io: Vec<super::io::IoGroup>,
    /// Block IO by file, with who issued and who caused it (`record --io`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    io_files: Vec<super::io::FileGroup>,
    rpcs: Vec<LatencyGroup>,
    funcs: Vec<LatencyGroup>,
    holds: Vec<HoldGroup>,
    unavailable: &'a [crate::profile::Unavailable],
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu: Option<JsonCpu>,
    lost: &'a BTreeMap<String, u64>,
    /// Wait chains (`record --wakers`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    chains: Vec<super::chains::Chain>,
    /// Wait time per interval (`record --interval`).
    #[serde(skip_serializing_if = "Option::is_none")]
    timeline: Option<&'a crate::timeline::Timeline>,
}

#[derive(Serialize)]
struct JsonCpu {
    freq_hz: u64,
    samples: u64,
    processes: Vec<CpuProcess>,
    functions: Vec<CpuFunction>,
}

pub fn json(profile: &Profile, by: GroupBy, top: usize) -> serde_json::Result<String> {
    let (locks, _) = top_lock_groups(profile, by, top, false);
    serde_json::to_string_pretty(&JsonReport {
        format: &profile.format,
        host: &profile.host,
        duration_s: profile.duration_s,
        waiting: crate::waiting::json(profile, top),
        locks,
        offcpu: super::offcpu::processes(profile),
        io: super::io::groups(profile),
        io_files: super::io::file_groups(profile),
        rpcs: rpc_groups(profile),
        funcs: func_groups(profile),
        holds: hold_groups(profile),
        unavailable: &profile.unavailable,
        cpu: json_cpu(profile, top),
        lost: &profile.losses,
        chains: super::chains::chains(profile),
        timeline: profile.timeline.as_ref(),
    })
}

fn json_cpu(profile: &Profile, top: usize) -> Option<JsonCpu> {
    if !profile.recorded("cpu") && profile.cpu.is_empty() {
        return None;
    }
    let processes = cpu_processes(profile);
    let mut functions = cpu_functions(profile);
    if top != 0 {
        functions.truncate(top);
    }
    Some(JsonCpu {
        freq_hz: profile.cpu_freq_hz,
        samples: processes.iter().map(|process| process.samples).sum(),
        processes,
        functions,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{
        export::lock::lock_groups,
        profile::{LockRow, Process},
    };

    pub(crate) fn profile_with_two_locks() -> Profile {
        let (mut profile, [spin, rwsem]) = crate::fixtures::with_kernel_stacks([
            &["queued_spin_lock_slowpath", "_raw_spin_lock", "do_pipe2"],
            &["rwsem_down_write_slowpath", "down_write", "vm_mmap_pgoff"],
        ]);
        let row = |pid, name: &str, flags, stack, count, total| LockRow {
            pid,
            lock_addr: 1,
            lock_name: name.into(),
            lock_name_source: Default::default(),
            flags,
            stack: Some(stack),
            count,
            total_ns: total,
            max_ns: total / count,
            min_ns: 1,
            owner_pid: None,
            owner_stack: None,
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

    /// `profile_with_two_locks` as the BASE and NEW of a diff, runs of `base_s` and
    /// `new_s` seconds.
    pub(crate) fn two_runs(base_s: f64, new_s: f64) -> (Profile, Profile) {
        let mut base = profile_with_two_locks();
        base.duration_s = base_s;
        let mut new = profile_with_two_locks();
        new.duration_s = new_s;
        (base, new)
    }

    /// `profile_with_two_locks` saying how each lock was named: `mmap_lock` from the
    /// waiting task, the spinlock by its address.
    pub(crate) fn profile_with_named_locks() -> Profile {
        let mut profile = profile_with_two_locks();
        for row in &mut profile.locks {
            row.lock_name_source = if row.lock_name == "mmap_lock" {
                "task".into()
            } else {
                "address".into()
            };
        }
        profile
    }

    /// The same run with the spinlock named another way (kallsyms, same name).
    pub(crate) fn spinlock_renamed(profile: &Profile) -> Profile {
        let mut renamed = profile.clone();
        for row in &mut renamed.locks {
            if row.lock_name == "0xffff1" {
                row.lock_name_source = "kallsyms".into();
            }
        }
        renamed
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
    fn holders_name_who_held_the_lock() {
        let mut profile = profile_with_two_locks();
        profile.locks[2].owner_pid = Some(11);
        let groups = lock_groups(&profile, GroupBy::Lock);
        let mmap = groups
            .iter()
            .find(|g| g.lock == "mmap_lock")
            .expect("mmap_lock group");
        assert_eq!(mmap.holders.len(), 1);
        assert_eq!(mmap.holders[0].pid, 11);
        assert_eq!(mmap.holders[0].wait_ns, 6_000_000);
        let text = holders_table(&profile, 10);
        assert!(
            text.contains("mmap_lock") && text.contains("ior[11] 6.00 ms"),
            "{text}"
        );
        assert!(!text.contains("sleeping in"), "no owner stack yet: {text}");
        // The owner was off-CPU: where it slept is named, scheduler frames left out.
        profile.locks[2].owner_stack = profile.locks[0].stack;
        let text = holders_table(&profile, 10);
        assert!(
            text.contains("sleeping in queued_spin_lock_slowpath < _raw_spin_lock < do_pipe2"),
            "{text}"
        );
        let groups = lock_groups(&profile, GroupBy::Lock);
        let mmap = groups.iter().find(|g| g.lock == "mmap_lock").expect("mmap");
        assert_eq!(mmap.holders[0].sleeping_in.len(), 3);
        let spin = groups
            .iter()
            .find(|g| g.lock_type == "spinlock")
            .expect("spin");
        assert!(spin.holders.is_empty());
        profile.locks[2].owner_pid = None;
        assert_eq!(
            holders_table(&profile, 10),
            "",
            "nothing when no owner is known"
        );
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
        crate::export::table::assert_fits_100_columns(&table);
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
        assert_eq!(rpcs[0].latency.count, 3);
        assert_eq!(rpcs[0].latency.mean_ns, 100_000_000);
        assert_eq!(rpcs[0].latency.hist, vec![0, 3]);
        // The leaf of the completion stack that carried the most latency.
        assert_eq!(
            rpcs[0].completed_in.as_deref(),
            Some("rwsem_down_write_slowpath")
        );
        let text = section(&profile, "rpc", 20, shows) + &section(&profile, "func", 20, shows);
        crate::export::table::assert_table_shows(&text, &["fuse CREATE", "binary:a_rather_long"]);
    }

    #[test]
    fn sections_follow_what_was_recorded() {
        let probe = |family: &str| crate::profile::ProbeUse {
            family: family.into(),
            method: "test".into(),
        };
        let mut profile = Profile::new();
        profile.probes = vec![probe("cpu"), probe("ufunc")];
        let report = text(&profile, GroupBy::Lock, 20);
        assert!(report.contains("no on-CPU samples recorded"), "{report}");
        assert!(report.contains("function latency"), "{report}");
        assert!(!report.contains("lock contention"), "{report}");
        assert!(!report.contains("off-CPU time"), "{report}");
        // A recorded run: the same sections (the summary has no second blank line after
        // its header).
        assert_eq!(summary(&profile, 20), report.replacen("\n\n\n", "\n\n", 1));
        // An old profile names no family: read as a lock profile by the report; the
        // summary (of a run, which names its families) shows no section.
        profile.probes.clear();
        let report = text(&profile, GroupBy::Lock, 20);
        assert!(report.contains("no lock contention recorded"), "{report}");
        assert!(!summary(&profile, 20).contains("lock contention"));
    }

    #[test]
    fn cpu_functions_count_self_and_total() {
        use crate::{
            fixtures::{set_stacks, user},
            profile::{CpuRow, ProbeUse},
        };
        let mut profile = Profile::new();
        // A recursive caller is counted once per sample in total.
        let [hot, cold] = set_stacks(
            &mut profile,
            [
                (user(None, &["hot", "walk", "walk", "main"]), false),
                (user(None, &["cold", "main"]), false),
            ],
        );
        profile.probes.push(ProbeUse {
            family: "cpu".into(),
            method: "test".into(),
        });
        profile.cpu_freq_hz = 99;
        profile.cpu = vec![
            CpuRow {
                pid: 1,
                tid: 1,
                kernel_stack: None,
                user_stack: Some(hot),
                samples: 7,
            },
            CpuRow {
                pid: 2,
                tid: 2,
                kernel_stack: None,
                user_stack: Some(cold),
                samples: 3,
            },
        ];
        let functions = cpu_functions(&profile);
        let get = |name: &str| functions.iter().find(|f| f.function == name).expect(name);
        assert_eq!((get("hot").self_samples, get("hot").total_samples), (7, 7));
        assert_eq!(
            (get("walk").self_samples, get("walk").total_samples),
            (0, 7)
        );
        assert_eq!(
            (get("main").self_samples, get("main").total_samples),
            (0, 10)
        );
        assert_eq!(functions[0].function, "hot");
        let processes = cpu_processes(&profile);
        assert_eq!((processes[0].pid, processes[0].samples), (1, 7));
        crate::export::table::assert_table_shows(&cpu_tables(&profile, 20), &["70.0%"]);
        let json: serde_json::Value =
            serde_json::from_str(&json(&profile, GroupBy::Lock, 0).expect("json")).expect("parse");
        assert_eq!(json["cpu"]["samples"], 10);
        assert_eq!(json["cpu"]["functions"][0]["function"], "hot");
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
