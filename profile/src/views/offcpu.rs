//! `offcpu`: time threads spent off the CPU, by wait class.

use std::collections::BTreeMap;

use super::{AddCause, AddSample, CausePart, ReportHeadings, View, ViewInfo};
use crate::{
    export::{
        formats::{
            exposition::{labels, metric, seconds},
            folded::{clean, clean_frames, push_stack},
            html::table,
            report::TextReport,
        },
        operations::diff::{keyed_breakdowns, Breakdown, RowKey},
        tables::offcpu::{self as offcpu_tables, is_scheduler_frame},
    },
    profile::{OffcpuRow, Profile},
    units::format_ns,
};

/// `OffcpuView`'s constants (its `info`, by the `kinds!` table).
pub(super) const INFO: ViewInfo = ViewInfo {
    about: "Off-CPU time by process, wait class and stack",
    families: &["offcpu"],
    sample_types: &[("waits", "count"), ("off_cpu", "nanoseconds")],
    flame_title: "Off-CPU time by process and wait class (width: time off CPU, ms)",
    diff_flame_title: "Off-CPU time, NEW against BASE (width: NEW time off CPU in ms per second of run; red grew, blue shrank)",
    diff_columns: ("off/s", "waits/s"),
    report: ReportHeadings {
        title: "Off-CPU waits",
        flame_heading: Some("Flamegraph (width: time off CPU)"),
        flame_title: "off-CPU flamegraph",
    },
};

pub struct OffcpuView;

impl View for OffcpuView {
    fn has_rows(&self, profile: &Profile) -> bool {
        !profile.offcpu.is_empty()
    }

    fn samples(&self, profile: &Profile, add: &mut AddSample) {
        waiter_samples(profile, |_| true, add);
    }

    /// Off-CPU time by class, process and wait site (host and cgroup when known).
    fn breakdowns(&self, profile: &Profile, out: &mut Vec<Breakdown>) {
        let mut ways: Vec<(&'static str, RowKey<OffcpuRow>)> = vec![
            ("class", Box::new(|row: &OffcpuRow| row.class.clone())),
            (
                "process",
                Box::new(|row: &OffcpuRow| profile.process_name(row.pid)),
            ),
            (
                "function",
                Box::new(|row: &OffcpuRow| {
                    format!("{} {}", row.class, wait_site(profile, row.stack))
                }),
            ),
        ];
        if profile.is_merged() {
            ways.push(("host", Box::new(|row: &OffcpuRow| profile.host_of(row.pid))));
        }
        if profile.knows_cgroups() {
            ways.push((
                "cgroup",
                Box::new(|row: &OffcpuRow| profile.cgroup_of(row.pid)),
            ));
        }
        keyed_breakdowns(out, ways, &profile.offcpu, |row| (row.total_ns, row.count));
    }

    /// Off-CPU time by wait class, but for the waits for work rather than causes of
    /// slowness (sleeping on purpose, polling, a parent waiting for its children): an
    /// idle host would stand out by them.
    fn causes(&self, profile: &Profile, add: &mut AddCause) {
        use crate::waitclass::{CHILD, POLL, SLEEP};
        for row in &profile.offcpu {
            if [SLEEP, POLL, CHILD].contains(&row.class.as_str()) {
                continue;
            }
            let key = row.class.clone();
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

    /// Off-CPU seconds and waits per wait class and process name (names, not pids: the
    /// series stay few and survive restarts).
    fn metrics(&self, profile: &Profile, out: &mut String) {
        let mut totals: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
        for row in &profile.offcpu {
            let total = totals
                .entry((row.class.clone(), profile.process_name(row.pid)))
                .or_default();
            total.0 += row.total_ns;
            total.1 += row.count;
        }
        let class_labels =
            |(class, process): &(String, String)| labels(&["class", "process"], &[class, process]);
        metric(
            out,
            "lockpath_offcpu_seconds_total",
            "counter",
            "Time threads spent off the CPU, by wait class and process.",
            totals
                .iter()
                .map(|(key, (total_ns, _))| (class_labels(key), seconds(*total_ns))),
        );
        metric(
            out,
            "lockpath_offcpu_waits_total",
            "counter",
            "Times threads left the CPU to wait, by wait class and process.",
            totals
                .iter()
                .map(|(key, (_, count))| (class_labels(key), count)),
        );
    }

    fn text_section(&self, profile: &Profile, text: &TextReport) -> String {
        text.section(
            text.shows(profile, self.families(), self.has_rows(profile)),
            "off-CPU time by process and wait class:\n",
            || offcpu_tables::table(profile, text.top),
        )
    }

    /// The table of off-CPU waits per process and class.
    fn html_tables(&self, profile: &Profile, out: &mut String) {
        out.push_str("<h3>Per process (wait breakdown by class)</h3>\n");
        let rows = offcpu_rows(profile, 50);
        if rows.is_empty() {
            out.push_str("<p>No off-CPU waits recorded.</p>\n");
        } else {
            let mut headers = vec![
                "process",
                "pid",
                "off-CPU",
                "class",
                "time",
                "%",
                "waits",
                "max",
                "top stack",
            ];
            let mut numeric = vec![false, true, true, false, true, true, true, true, false];
            // File-lock holders: a column only when the profile names some.
            if rows.iter().any(|row| row.len() > headers.len()) {
                headers.push("held by");
                numeric.push(false);
            }
            let rows: Vec<Vec<String>> = rows
                .into_iter()
                .map(|mut row| {
                    row.resize(headers.len(), String::new());
                    row
                })
                .collect();
            out.push_str(&table(&headers, &numeric, &rows));
        }
    }
}

/// One sample (waits, time) per off-CPU row that `keep` keeps, on its waiter frames.
pub(crate) fn waiter_samples(
    profile: &Profile,
    keep: impl Fn(&OffcpuRow) -> bool,
    add: &mut AddSample,
) {
    for row in profile.offcpu.iter().filter(|row| keep(row)) {
        add(waiter_frames(profile, row), &[row.count, row.total_ns]);
    }
}

/// An off-CPU wait's frames from the root: process; wait class; user stack from main
/// inward; kernel stack from the system call down to the scheduler.
pub(crate) fn waiter_frames(profile: &Profile, row: &OffcpuRow) -> Vec<String> {
    let mut frames = vec![clean(&profile.process_name(row.pid)), clean(&row.class)];
    if row.ustack.is_some() && profile.stack_truncated(row.ustack) {
        frames.push("[truncated]".into());
    }
    frames.extend(clean_frames(profile, row.ustack).rev());
    push_stack(&mut frames, profile, row.stack);
    frames
}

/// Where a thread waited: the first two kernel frames from the leaf below the scheduler
/// (`__wait_on_buffer < ext4_read_bh`), comparable across runs (names, no addresses).
fn wait_site(profile: &Profile, stack: Option<u32>) -> String {
    if stack.is_none() {
        return "[stack lost]".into();
    }
    let site: Vec<String> = profile
        .stack_frames(stack)
        .iter()
        .filter(|frame| !is_scheduler_frame(&frame.name))
        .take(2)
        .map(|frame| frame.display())
        .collect();
    if site.is_empty() {
        "[scheduler only]".into()
    } else {
        site.join(" < ")
    }
}

/// One row per (process, class), most off-CPU time first; the process columns on its
/// first row only.
fn offcpu_rows(profile: &Profile, top: usize) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for process in offcpu_tables::processes(profile).into_iter().take(top) {
        for (index, class) in process.classes.iter().enumerate() {
            let first = index == 0;
            let top_stack = class
                .stacks
                .first()
                .map(|stack| offcpu_tables::short_stack(&stack.kernel, 120))
                .unwrap_or_default();
            rows.push(vec![
                if first {
                    process.process.clone()
                } else {
                    String::new()
                },
                if first {
                    process.pid.to_string()
                } else {
                    String::new()
                },
                if first {
                    format_ns(process.total_ns)
                } else {
                    String::new()
                },
                class.class.clone(),
                format_ns(class.total_ns),
                format!("{:.1}", class.percent),
                class.count.to_string(),
                format_ns(class.max_ns),
                top_stack,
            ]);
            if !class.held_by.is_empty() {
                if let Some(row) = rows.last_mut() {
                    row.push(offcpu_tables::holders_text(&class.held_by, 5));
                }
            }
        }
    }
    rows
}
