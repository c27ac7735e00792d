//! The text report (every view's section, `View::text_section`, in the order of the
//! views), the JSON report (for scripts) and the end-of-run summary of `record`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::export::tables::{
    cpu::{cpu_functions, cpu_processes, CpuFunction, CpuProcess},
    latency::{func_groups, hold_groups, rpc_groups, HoldGroup, LatencyGroup},
    lock::{top_lock_groups, LockGroup},
};
use crate::{kind::GroupBy, profile::Profile, views::VIEWS};

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

/// Losses, explained; empty when no counter counted. The counters that lose nothing
/// (a slower path taken) follow, under a heading of their own.
pub fn losses(profile: &Profile) -> String {
    let line = |(name, count): (&String, &u64)| {
        let why = profiler_common::loss::loss_meaning(name);
        format!("  {count:>10}  {name}: {why}\n")
    };
    let (lost, kept) = crate::profile::lost_and_kept(&profile.losses);
    let mut out = String::new();
    if !lost.is_empty() {
        out.push_str(
            "\nlost events (the numbers above miss those dropped; those a full map counted in a \
             row without its detail are in them):\n",
        );
        out.extend(lost.into_iter().map(line));
    }
    if !kept.is_empty() {
        out.push_str(
            "\nnothing lost (a slower path the programs took; these events are in the numbers \
             above):\n",
        );
        out.extend(kept.into_iter().map(line));
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
    text_of(
        profile,
        &TextReport {
            by,
            top,
            summary: false,
        },
    )
}

/// What `record` prints at the end.
pub fn summary(profile: &Profile, top: usize) -> String {
    text_of(
        profile,
        &TextReport {
            by: GroupBy::Lock,
            top,
            summary: true,
        },
    )
}

/// The header, what is still waiting, every view's section, what could not be recorded
/// and the losses.
fn text_of(profile: &Profile, text: &TextReport) -> String {
    let mut out = summary_header(profile);
    out.push_str(&crate::waiting::text(profile, text.top));
    let mut sections = sections(profile, text);
    sections.push_str(&unavailable(profile));
    // The header ends with a blank line already.
    out.push_str(if out.ends_with("\n\n") {
        sections.trim_start_matches('\n')
    } else {
        &sections
    });
    out.push_str(&losses(profile));
    out
}

/// Every view's section of the text report, in the order of the views.
fn sections(profile: &Profile, text: &TextReport) -> String {
    VIEWS
        .iter()
        .map(|view| view.text_section(profile, text))
        .collect()
}

/// Which text report a view writes its section for (`View::text_section`): that of
/// `lockpath report` (lock tables grouped `by`) or the end-of-record summary, each table
/// at most `top` rows (0: all).
#[derive(Debug, Clone, Copy)]
pub struct TextReport {
    pub by: GroupBy,
    pub top: usize,
    /// The end-of-record summary, rather than `lockpath report`.
    pub summary: bool,
}

impl TextReport {
    /// Whether the report has a section for data of `families` (`has_rows`: the profile
    /// has rows of it). The summary reads what `record` made, which lists every family it
    /// recorded; `lockpath report` also shows rows of families a profile does not list
    /// (profiles of older versions list none).
    pub fn shows(&self, profile: &Profile, families: &[&str], has_rows: bool) -> bool {
        families.iter().any(|family| profile.recorded(family)) || (!self.summary && has_rows)
    }

    /// A section: a blank line, its heading and its table, when `shown`; empty otherwise.
    pub fn section(&self, shown: bool, heading: &str, table: impl FnOnce() -> String) -> String {
        if !shown {
            return String::new();
        }
        format!("\n{heading}{}", table())
    }
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
    offcpu: Vec<crate::export::tables::offcpu::OffcpuProcess>,
    io: Vec<crate::export::tables::io::IoGroup>,
    /// Block IO by file, with who issued and who caused it (`record --io`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    io_files: Vec<crate::export::tables::io::FileGroup>,
    rpcs: Vec<LatencyGroup>,
    funcs: Vec<LatencyGroup>,
    holds: Vec<HoldGroup>,
    unavailable: &'a [crate::profile::Unavailable],
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu: Option<JsonCpu>,
    lost: &'a BTreeMap<String, u64>,
    /// Wait chains (`record --wakers`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    chains: Vec<crate::export::tables::chains::Chain>,
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
        offcpu: crate::export::tables::offcpu::processes(profile),
        io: crate::export::tables::io::groups(profile),
        io_files: crate::export::tables::io::file_groups(profile),
        rpcs: rpc_groups(profile),
        funcs: func_groups(profile),
        holds: hold_groups(profile),
        unavailable: &profile.unavailable,
        cpu: json_cpu(profile, top),
        lost: &profile.losses,
        chains: crate::export::tables::chains::chains(profile),
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
    use crate::export::tables::{
        cpu::cpu_tables,
        lock::{holders_table, lock_table},
    };
    use crate::{
        export::tables::lock::lock_groups,
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
        crate::export::tables::table::assert_fits_100_columns(&table);
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
        let text = text(&profile, GroupBy::Lock, 20);
        crate::export::tables::table::assert_table_shows(
            &text,
            &["fuse CREATE", "binary:a_rather_long"],
        );
    }

    /// A counter of a slower path is not listed among the lost events, whose heading
    /// says the numbers miss them.
    #[test]
    fn counters_that_lose_nothing_are_apart_from_the_losses() {
        let mut profile = Profile::new();
        profile.losses = [
            ("lock_map_full", 3),
            ("lock_stack_fingerprint_short", 7),
            ("prog_recursion_miss:lock_contention_end", 2),
        ]
        .into_iter()
        .map(|(name, count)| (name.to_string(), count))
        .collect();
        let text = losses(&profile);
        let (lost, kept) = text
            .split_once("nothing lost (a slower path")
            .expect("a section of counters that lose nothing");
        assert!(lost.contains("lost events"), "{text}");
        assert!(lost.contains("3  lock_map_full"), "{text}");
        assert!(lost.contains("2  prog_recursion_miss:"), "{text}");
        assert!(kept.contains("7  lock_stack_fingerprint_short"), "{text}");
        assert!(!kept.contains("lock_map_full"), "{text}");
        // Only such counters: no "lost events" heading at all.
        profile
            .losses
            .retain(|name, _| name == "lock_stack_fingerprint_short");
        let text = losses(&profile);
        assert!(!text.contains("lost events"), "{text}");
        assert!(text.contains("7  lock_stack_fingerprint_short"), "{text}");
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
        // A recorded run: the same sections, one blank line after the header.
        assert!(!report.contains("\n\n\n"), "{report}");
        assert_eq!(summary(&profile, 20), report);
        // A profile that names no family reads as a lock profile in the report (the
        // summary, of a run, which names its families, shows no section)...
        profile.probes.clear();
        let report = text(&profile, GroupBy::Lock, 20);
        assert!(report.contains("no lock contention recorded"), "{report}");
        assert!(!summary(&profile, 20).contains("lock contention"));
        // ...unless it has rows of another view's family.
        profile.funcs.push(crate::profile::FuncRow {
            function: "vfs_read".into(),
            ..Default::default()
        });
        let report = text(&profile, GroupBy::Lock, 20);
        assert!(report.contains("function latency"), "{report}");
        assert!(!report.contains("lock contention"), "{report}");
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
        crate::export::tables::table::assert_table_shows(&cpu_tables(&profile, 20), &["70.0%"]);
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
