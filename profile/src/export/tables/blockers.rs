//! Who blocks whom (`report --blockers`): the waits whose holder is known, summed per
//! (waiter group, holder group). A lock wait knows its holder when the lock's owner was
//! read at the wait's start (mutexes, rwsems held for writing: `LockRow::owner_pid`), an
//! off-CPU wait on a file lock when the kernel named the lock's holder
//! (`OffcpuRow::held_by`). Groups are processes, cgroups, jobs or hosts.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::{jobs::Jobs, lock::lock_type_name_both_sides, profile::Profile, units::format_ns};

/// What a group of waiters or holders is.
#[derive(Debug, Clone)]
pub enum Group {
    Process,
    Cgroup,
    Job(Jobs),
    Host,
}

impl Group {
    pub fn name(&self) -> &'static str {
        match self {
            Group::Process => "process",
            Group::Cgroup => "cgroup",
            Group::Job(_) => "job",
            Group::Host => "host",
        }
    }
}

/// The group of a job-less process.
pub const NO_JOB: &str = "(no job)";

/// Waits of one waiter group on one holder group.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Blocking {
    pub waiter: String,
    pub holder: String,
    pub wait_ns: u64,
    pub waits: u64,
    /// What was waited for, most wait first: (lock or wait class, ns).
    pub on: Vec<(String, u64)>,
}

/// Names each process of a profile by its group once.
struct Names<'p> {
    profile: &'p Profile,
    group: &'p Group,
    known: HashMap<u32, String>,
}

impl Names<'_> {
    fn of(&mut self, pid: u32) -> String {
        if let Some(name) = self.known.get(&pid) {
            return name.clone();
        }
        let profile = self.profile;
        let name = match self.group {
            Group::Process => format!("{}[{pid}]", profile.process_name(pid)),
            Group::Cgroup => profile.cgroup_of(pid),
            Group::Host => profile.host_of(pid),
            Group::Job(jobs) => profile
                .process(pid)
                .and_then(|process| process.cgroup.as_deref())
                .and_then(|cgroup| jobs.of(cgroup))
                .unwrap_or_else(|| NO_JOB.to_string()),
        };
        self.known.insert(pid, name.clone());
        name
    }
}

/// Every (waiter group, holder group) pair with waits, most wait first.
pub fn blockers(profile: &Profile, group: &Group) -> Vec<Blocking> {
    let mut names = Names {
        profile,
        group,
        known: HashMap::new(),
    };
    type Pair = (String, String);
    let mut pairs: BTreeMap<Pair, (u64, u64, BTreeMap<String, u64>)> = BTreeMap::new();
    let mut add = |waiter: u32, holder: u32, on: String, ns: u64, count: u64| {
        let key = (names.of(waiter), names.of(holder));
        let entry = pairs.entry(key).or_default();
        entry.0 = entry.0.saturating_add(ns);
        entry.1 = entry.1.saturating_add(count);
        *entry.2.entry(on).or_default() += ns;
    };
    for row in &profile.locks {
        if let Some(owner) = row.owner_pid {
            let on = format!("{} {}", lock_type_name_both_sides(row.flags), row.lock_name);
            add(row.pid, owner, on, row.total_ns, row.count);
        }
    }
    for row in &profile.offcpu {
        if let Some(holder) = row.held_by {
            add(row.pid, holder, row.class.clone(), row.total_ns, row.count);
        }
    }
    let mut out: Vec<Blocking> = pairs
        .into_iter()
        .map(|((waiter, holder), (wait_ns, waits, on))| {
            let mut on: Vec<(String, u64)> = on.into_iter().collect();
            on.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            Blocking {
                waiter,
                holder,
                wait_ns,
                waits,
                on,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.wait_ns
            .cmp(&a.wait_ns)
            .then_with(|| (&a.waiter, &a.holder).cmp(&(&b.waiter, &b.holder)))
    });
    out
}

/// The text table: one line per pair, `top` lines (0: all).
pub fn text(profile: &Profile, group: &Group, top: usize) -> String {
    let pairs = blockers(profile, group);
    let by = group.name();
    if pairs.is_empty() {
        return format!(
            "who waited on whom, by {by}: no wait with a known holder (lock owners are \
             read for mutexes and rwsems held for writing, record --lock; file-lock \
             holders with --offcpu)\n"
        );
    }
    let mut out = format!(
        "who waited on whom, by {by} (waits whose holder is known), {:.1} s recorded:\n\
         {:>10} {:>8}  {:<28} {:<28} on\n",
        profile.duration_s, "wait", "waits", "waiter", "holder"
    );
    let shown = if top == 0 { usize::MAX } else { top };
    for pair in pairs.iter().take(shown) {
        let on: Vec<String> = pair
            .on
            .iter()
            .take(3)
            .map(|(what, ns)| format!("{what} {}", format_ns(*ns)))
            .collect();
        out.push_str(&format!(
            "{:>10} {:>8}  {:<28} {:<28} {}\n",
            format_ns(pair.wait_ns),
            pair.waits,
            pair.waiter,
            pair.holder,
            on.join(", ")
        ));
    }
    if pairs.len() > shown {
        out.push_str(&format!(
            "  ... {} more (--top 0: all)\n",
            pairs.len() - shown
        ));
    }
    out
}

/// One self-contained page: the table of [`blockers`], sortable.
pub fn html(profile: &Profile, group: &Group) -> String {
    let by = group.name();
    let mut out = crate::export::formats::html::page_head(&format!(
        "lockpath — who waited on whom, by {by} — {}",
        profile.host
    ));
    out.push_str(&format!(
        "<p>Waits whose holder is known (lock owners read when a wait began, file-lock \
         holders named by the kernel), summed per waiting and holding {by}; {:.1} s \
         recorded.</p>\n",
        profile.duration_s
    ));
    let rows: Vec<Vec<String>> = blockers(profile, group)
        .into_iter()
        .map(|pair| {
            let on: Vec<String> = pair
                .on
                .iter()
                .map(|(what, ns)| format!("{what} {}", format_ns(*ns)))
                .collect();
            vec![
                pair.waiter,
                pair.holder,
                format_ns(pair.wait_ns),
                pair.waits.to_string(),
                on.join(", "),
            ]
        })
        .collect();
    out.push_str(&crate::export::formats::html::table(
        &["waiter", "holder", "wait", "waits", "on"],
        &[false, false, true, true, false],
        &rows,
    ));
    out.push_str(&crate::export::formats::html::page_end());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{LockRow, OffcpuRow, Process};

    #[test]
    fn waits_are_summed_per_waiter_and_holder_job() {
        let mut profile = Profile::new();
        profile.duration_s = 1.0;
        for (pid, job) in [(10, 4711), (20, 4702), (30, 4702)] {
            profile.processes.push(Process {
                pid,
                comm: "ior".into(),
                cgroup: Some(format!("/system.slice/slurmstepd.scope/job_{job}/step_0")),
                ..Default::default()
            });
        }
        let lock = |pid, owner, ns| LockRow {
            pid,
            lock_name: "i_rwsem".into(),
            flags: profiler_common::lock::LCB_F_WRITE,
            count: 2,
            total_ns: ns,
            owner_pid: Some(owner),
            ..Default::default()
        };
        profile.locks.push(lock(10, 20, 5_000));
        profile.locks.push(lock(10, 30, 7_000));
        profile.locks.push(lock(20, 10, 1_000));
        profile.locks.push(LockRow {
            owner_pid: None,
            ..lock(20, 10, 99_000)
        });
        profile.offcpu.push(OffcpuRow {
            pid: 30,
            class: "file-lock".into(),
            count: 1,
            total_ns: 3_000,
            held_by: Some(20),
            ..Default::default()
        });
        let jobs = Group::Job(Jobs::new(&[]).expect("jobs"));
        let pairs = blockers(&profile, &jobs);
        let summary: Vec<(&str, &str, u64, u64)> = pairs
            .iter()
            .map(|p| (p.waiter.as_str(), p.holder.as_str(), p.wait_ns, p.waits))
            .collect();
        assert_eq!(
            summary,
            [
                ("job 4711", "job 4702", 12_000, 4),
                ("job 4702", "job 4702", 3_000, 1),
                ("job 4702", "job 4711", 1_000, 2)
            ]
        );
        assert_eq!(pairs[0].on, [("rwsem i_rwsem".to_string(), 12_000)]);
        let table = text(&profile, &jobs, 20);
        assert!(
            table.contains("job 4711") && table.contains("rwsem i_rwsem"),
            "{table}"
        );
        let page = html(&profile, &jobs);
        assert!(
            page.contains("<td>job 4711</td>") && page.contains("12.0 us"),
            "{page}"
        );
        let by_process = blockers(&profile, &Group::Process);
        assert_eq!(by_process[0].waiter, "ior[10]");
    }
}
