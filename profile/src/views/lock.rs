//! `lock`: time threads waited for contended kernel locks.

use std::collections::{BTreeMap, HashMap};

use rustc_hash::FxBuildHasher;

use super::{AddCause, AddSample, CausePart, ReportHeadings, View, ViewInfo};
use crate::{
    export::{
        formats::{
            escape::html as esc,
            exposition::{labels, metric, seconds},
            folded::clean,
            html::table_named_by,
            report::TextReport,
        },
        operations::diff::{add, Breakdown, Measure},
        tables::{
            lock::{
                contended_holds_table, holders_table, lock_groups, lock_table, Classes, STACK_LOST,
                UNKNOWN,
            },
            lock_lines,
        },
    },
    kind::GroupBy,
    lock::{caller, is_lock_internal, lock_type_name, lock_type_name_both_sides},
    profile::Profile,
    units::format_ns,
};

/// `LockView`'s constants (its `info`, by the `kinds!` table).
pub(super) const INFO: ViewInfo = ViewInfo {
    about: "Lock wait time by process, lock type and waiter stack",
    families: &["lock"],
    sample_types: &[("contentions", "count"), ("delay", "nanoseconds")],
    flame_title: "Lock wait time (width: time waiting, ms)",
    diff_flame_title: "Lock wait, NEW against BASE (width: NEW wait in ms per second of run; red grew, blue shrank)",
    diff_columns: ("wait/s", "cont/s"),
    report: ReportHeadings {
        title: "Lock contention",
        flame_heading: Some("Flamegraph (width: wait time)"),
        flame_title: "lock wait flamegraph",
    },
};

pub struct LockView;

impl View for LockView {
    fn has_rows(&self, profile: &Profile) -> bool {
        !profile.locks.is_empty()
    }

    /// Process; lock type; the lock, when it has a name (`mmap_lock`, `rq_lock:cpu1`, a
    /// static symbol; an address is left out); stack from the outermost frame to the
    /// caller (the locking code itself is left out, so the caller is on top).
    fn samples(&self, profile: &Profile, add: &mut AddSample) {
        // Sum by (process, type, named lock, stack) with integer keys first, then build
        // the frames of each distinct key once: rows (one per lock address) far
        // outnumber paths, and a million rows must not cost a million frame lists.
        let sums = lock_lines::lock_sums(profile);
        let mut stack_parts: HashMap<Option<u32>, Vec<String>, FxBuildHasher> = HashMap::default();
        let mut process_parts: HashMap<u32, String, FxBuildHasher> = HashMap::default();
        for ((pid, flags, name, stack), values) in sums {
            let process = process_parts
                .entry(pid)
                .or_insert_with(|| clean(&profile.process_name(pid)));
            let stack_frames = stack_parts
                .entry(stack)
                .or_insert_with(|| lock_stack_frames(profile, stack));
            let mut frames = Vec::with_capacity(stack_frames.len() + 3);
            frames.push(process.clone());
            frames.push(clean(lock_type_name(flags)));
            if let Some(name) = name {
                frames.push(clean(name));
            }
            frames.extend(stack_frames.iter().cloned());
            add(frames, &values);
        }
    }

    /// The same lines as from `samples`, without a frame list per path (a million rows,
    /// export/tables/lock_lines.rs).
    fn folded_lines(&self, profile: &Profile) -> Option<Vec<(String, u64)>> {
        Some(lock_lines::lock_lines(profile))
    }

    /// Lock wait by lock, caller and process (host and cgroup when known).
    fn breakdowns(&self, profile: &Profile, out: &mut Vec<Breakdown>) {
        let mut ways = vec![
            ("lock", GroupBy::Lock),
            ("caller", GroupBy::Caller),
            ("process", GroupBy::Process),
        ];
        if profile.is_merged() {
            ways.push(("host", GroupBy::Host));
        }
        if profile.knows_cgroups() {
            ways.push(("cgroup", GroupBy::Cgroup));
        }
        for (by, group_by) in ways {
            let mut entries: BTreeMap<String, Measure> = BTreeMap::new();
            let mut name_sources: BTreeMap<String, String> = BTreeMap::new();
            for group in lock_groups(profile, group_by) {
                let key = match group_by {
                    GroupBy::Lock | GroupBy::Instance => {
                        format!("{} {}", group.lock_type, group.lock)
                    }
                    GroupBy::Caller => format!("{} {}", group.lock_type, group.caller),
                    GroupBy::Process => format!(
                        "{} {}",
                        group.lock_type,
                        group.processes.first().cloned().unwrap_or_default()
                    ),
                    GroupBy::Host => group.host.clone(),
                    GroupBy::Cgroup => format!("{} {}", group.lock_type, group.cgroup),
                };
                if group_by == GroupBy::Lock && !group.lock_name_source.is_empty() {
                    name_sources.insert(key.clone(), group.lock_name_source.clone());
                }
                add(&mut entries, key, group.total_wait_ns, group.contended);
            }
            out.push(Breakdown {
                by,
                entries,
                name_sources,
            });
        }
    }

    /// Wait by lock type (both sides of a lock in one) and lock: its name, its class (`lockclass`), or for a lock
    /// known only by its address (which differs between hosts) the function that took
    /// it.
    fn causes(&self, profile: &Profile, add: &mut AddCause) {
        let mut classes = Classes::new(profile, GroupBy::Lock);
        let mut callers: HashMap<Option<u32>, String> = HashMap::new();
        for row in &profile.locks {
            let lock = match classes.of(row) {
                Some(class) => class,
                None if row.lock_name.starts_with("0x") || row.lock_name.is_empty() => {
                    let caller = callers.entry(row.stack).or_insert_with(|| {
                        caller(&profile.stack_frames(row.stack))
                            .map(|frame| frame.display())
                            .unwrap_or_else(|| UNKNOWN.to_string())
                    });
                    format!("taken in {caller}")
                }
                None => row.lock_name.to_string(),
            };
            // Both sides of a lock are one cause: their split is noise between runs.
            let key = format!("{} {lock}", lock_type_name_both_sides(row.flags));
            add(CausePart::timed(
                key,
                row.pid,
                row.stack,
                row.count,
                row.total_ns,
                row.max_ns,
            ));
        }
    }

    /// Lock wait and contentions per (type, caller, name source).
    fn metrics(&self, profile: &Profile, out: &mut String) {
        let sums = series_sums(profile);
        let lock_labels = |(lock_type, caller, source): &LockSeries| {
            labels(
                &["type", "caller", "name_source"],
                &[lock_type, caller.as_str(), source],
            )
        };
        metric(
            out,
            "lockpath_lock_wait_seconds_total",
            "counter",
            "Time threads waited for contended kernel locks, by lock type, calling function and how the lock was named.",
            sums.iter()
                .map(|(series, (total_ns, _))| (lock_labels(series), seconds(*total_ns))),
        );
        metric(
            out,
            "lockpath_lock_contentions_total",
            "counter",
            "Contended kernel lock acquisitions, by lock type, calling function and how the lock was named.",
            sums.iter()
                .map(|(series, (_, count))| (lock_labels(series), count)),
        );
    }

    /// The lock table grouped as asked (by lock in the summary), the holders of the top
    /// sleeping locks, the holds under contention and, for merged profiles, the table by
    /// host (not in the summary).
    fn text_section(&self, profile: &Profile, text: &TextReport) -> String {
        let shown = text.shows(profile, self.families(), self.has_rows(profile))
            || (!text.summary && reads_as_lock_profile(profile));
        if !shown {
            return String::new();
        }
        let holders = if text.summary { text.top.min(10) } else { 10 };
        let mut out = if text.summary {
            text.section(true, "lock contention, by lock (total wait):\n", || {
                lock_table(profile, GroupBy::Lock, text.top)
            })
        } else {
            lock_table(profile, text.by, text.top)
        };
        out.push_str(&holders_table(profile, holders));
        out.push_str(&contended_holds_table(profile, holders));
        if !text.summary && profile.is_merged() && text.by != GroupBy::Host {
            out.push_str("\nby host:\n");
            out.push_str(&lock_table(profile, GroupBy::Host, text.top));
        }
        out
    }

    /// The lock tables: by lock, caller, process (host, cgroup when known).
    fn html_tables(&self, profile: &Profile, out: &mut String) {
        let numeric = [true, true, true, true, false, false, false, false];
        let mut ways = vec![
            ("By lock", GroupBy::Lock, "lock"),
            ("By caller", GroupBy::Caller, "lock"),
            (
                "Per process (wait by process and lock type)",
                GroupBy::Process,
                "process",
            ),
        ];
        if profile.is_merged() {
            ways.push(("Per host", GroupBy::Host, "host"));
        }
        if profile.knows_cgroups() {
            ways.push((
                "Per cgroup (wait by cgroup and lock type)",
                GroupBy::Cgroup,
                "cgroup",
            ));
        }
        // Profiles of older versions do not say how locks were named: no column.
        let says_names = profile
            .locks
            .iter()
            .any(|row| !row.lock_name_source.is_empty());
        for (title, by, third) in ways {
            out.push_str(&format!("<h3>{}</h3>\n", esc(title)));
            let named = says_names && by == GroupBy::Lock;
            let rows = lock_rows(profile, by, 50, named);
            if rows.is_empty() {
                out.push_str("<p>No lock contention recorded.</p>\n");
                break;
            }
            let headers = vec![
                "contended",
                "total wait",
                "max wait",
                "avg wait",
                "type",
                third,
                "callers",
                "pids",
            ];
            out.push_str(&table_named_by(headers, numeric.to_vec(), 6, named, &rows));
        }
    }
}

/// Frames of a lock stack from the outermost to the caller (the locking code itself
/// is left out, so the caller is on top), or `[stack lost]`.
pub(crate) fn lock_stack_frames(profile: &Profile, stack: Option<u32>) -> Vec<String> {
    if stack.is_none() {
        return vec!["[stack lost]".to_string()];
    }
    let frames = profile.stack_frames(stack);
    let outside_lock = frames
        .iter()
        .position(|frame| !is_lock_internal(&frame.name))
        .unwrap_or(frames.len());
    frames[outside_lock..]
        .iter()
        .rev()
        .map(|frame| clean(&frame.display()))
        .collect()
}

/// (lock type, caller, name source) of one lock series.
type LockSeries<'a> = (&'static str, String, &'a str);

/// Lock wait and contentions per (type, caller, name source), most wait first. The name
/// source (`task`, `runqueue`, `kallsyms`, `address`, ...) splits a caller's series by
/// how its locks were named: a handful of values, so the series stay few; the lock
/// names themselves are in the fleet counters, which bound their label sets.
fn series_sums(profile: &Profile) -> Vec<(LockSeries<'_>, (u64, u64))> {
    let mut callers: HashMap<Option<u32>, String> = HashMap::new();
    let mut sums: BTreeMap<LockSeries, (u64, u64)> = BTreeMap::new();
    for row in &profile.locks {
        let caller = callers
            .entry(row.stack)
            .or_insert_with(|| match row.stack {
                None => STACK_LOST.to_string(),
                Some(_) => caller(&profile.stack_frames(row.stack))
                    .map(|frame| frame.display())
                    .unwrap_or_else(|| UNKNOWN.to_string()),
            })
            .clone();
        let key = (
            lock_type_name(row.flags),
            caller,
            row.lock_name_source.as_str(),
        );
        let sum = sums.entry(key).or_default();
        sum.0 = sum.0.saturating_add(row.total_ns);
        sum.1 = sum.1.saturating_add(row.count);
    }
    let mut sums: Vec<_> = sums.into_iter().collect();
    sums.sort_by(|a, b| (b.1).0.cmp(&(a.1).0).then_with(|| a.0.cmp(&b.0)));
    sums
}

/// Rows of a lock table; with `named`, a column after the lock says how it was named.
fn lock_rows(profile: &Profile, by: GroupBy, top: usize, named: bool) -> Vec<Vec<String>> {
    lock_groups(profile, by)
        .into_iter()
        .take(top)
        .map(|group| {
            let third = match by {
                GroupBy::Process => group.processes.join(", "),
                GroupBy::Host => group.host.clone(),
                GroupBy::Cgroup => group.cgroup.clone(),
                _ => group.lock.clone(),
            };
            let named = named.then(|| group.lock_name_source.clone());
            let mut row = vec![
                group.contended.to_string(),
                format_ns(group.total_wait_ns),
                format_ns(group.max_wait_ns),
                format_ns(group.avg_wait_ns),
                group.lock_type,
                third,
                group
                    .callers
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
                group
                    .pids
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(" "),
            ];
            if let Some(named) = named {
                row.insert(6, named);
            }
            row
        })
        .collect()
}

/// Whether a profile reads as a lock profile though it names no family (`record` names
/// every family it ran; a profile made otherwise may name none): one without `--hold`
/// rows and without rows of any view but those of the lock family.
fn reads_as_lock_profile(profile: &Profile) -> bool {
    profile.probes.is_empty()
        && profile.holds.is_empty()
        && super::VIEWS
            .iter()
            .filter(|view| !view.families().contains(&"lock"))
            .all(|view| !view.has_rows(profile))
}
