//! `io`: IO waits, in two faces. Block requests carry no stacks, so the stack views
//! (flamegraph, folded, pprof, JSON tree) weigh the off-CPU time in IO wait classes,
//! while the tables (diff, HTML) list the block-IO requests by device, operation and
//! process.

use super::{
    offcpu::waiter_samples, AddCause, AddSample, CausePart, ReportHeadings, View, ViewInfo,
};
use crate::{
    export::{
        formats::{
            escape::html as esc,
            exposition::{header, histogram_lines, labels, metric},
            html::table,
            report::TextReport,
        },
        operations::diff::{keyed_breakdowns, Breakdown, RowKey},
        tables::io::{self as io_tables, groups as io_groups, IoGroup},
    },
    profile::{IoRow, Profile},
    units::format_ns,
    waitclass::IO_CLASSES,
};

/// `IoView`'s constants (its `info`, by the `kinds!` table).
pub(super) const INFO: ViewInfo = ViewInfo {
    about: "IO waits: in flamegraph, folded, pprof and JSON exports the off-CPU time in IO \
         wait classes (buffer, page, block-io, journal); in diff and HTML the block-IO \
         requests by device, operation and process",
    families: &["io"],
    sample_types: &[("waits", "count"), ("io_wait", "nanoseconds")],
    flame_title: "IO wait time: buffer, page, block-io, journal (width: time off CPU, ms)",
    diff_flame_title: "IO wait time, NEW against BASE (width: NEW IO wait in ms per second of run; red grew, blue shrank)",
    diff_columns: ("lat/s", "req/s"),
    report: ReportHeadings {
        title: "Block IO",
        flame_heading: Some("IO wait flamegraph (off-CPU in buffer, page, block-io, journal)"),
        flame_title: "IO wait flamegraph",
    },
};

pub struct IoView;

impl View for IoView {
    /// Block-IO rows, or off-CPU waits in an IO class (the IO flamegraph).
    fn has_rows(&self, profile: &Profile) -> bool {
        !profile.io.is_empty()
            || profile
                .offcpu
                .iter()
                .any(|row| IO_CLASSES.contains(&row.class.as_str()))
    }

    /// The off-CPU samples of the IO wait classes only.
    fn samples(&self, profile: &Profile, add: &mut AddSample) {
        waiter_samples(profile, |row| IO_CLASSES.contains(&row.class.as_str()), add);
    }

    /// Block IO by device and operation, and by process (host and cgroup when known).
    fn breakdowns(&self, profile: &Profile, out: &mut Vec<Breakdown>) {
        let mut ways: Vec<(&'static str, RowKey<IoRow>)> = vec![
            (
                "device",
                Box::new(|row: &IoRow| format!("{} {}", row.device, row.op)),
            ),
            (
                "process",
                Box::new(|row: &IoRow| format!("{} {}", row.device, profile.process_name(row.pid))),
            ),
        ];
        if profile.is_merged() {
            ways.push(("host", Box::new(|row: &IoRow| profile.host_of(row.pid))));
        }
        if profile.knows_cgroups() {
            ways.push((
                "cgroup",
                Box::new(|row: &IoRow| format!("{} {}", row.device, profile.cgroup_of(row.pid))),
            ));
        }
        keyed_breakdowns(out, ways, &profile.io, |row| (row.total_ns, row.count));
    }

    /// Request time by device and operation.
    fn causes(&self, profile: &Profile, add: &mut AddCause) {
        for row in &profile.io {
            let key = format!("{} {}", row.device, row.op);
            add(CausePart::timed(
                key,
                row.pid,
                None,
                row.count,
                row.total_ns,
                row.max_ns,
            ));
        }
    }

    /// Block-IO latency per device and operation as a Prometheus histogram (the
    /// kernel's log2 microsecond buckets, cumulative), and bytes.
    fn metrics(&self, profile: &Profile, out: &mut String) {
        let groups = io_groups(profile);
        let device_labels =
            |group: &IoGroup| labels(&["device", "op"], &[&group.device, &group.op]);
        header(
            out,
            "lockpath_io_latency_seconds",
            "histogram",
            "Block-IO request latency, issue to completion, by device and operation.",
        );
        for group in &groups {
            histogram_lines(
                out,
                "lockpath_io_latency_seconds",
                &device_labels(group),
                |slot| group.histogram.get(slot).map_or(0, |bucket| bucket.count),
                group.count,
                group.total_ns,
            );
        }
        metric(
            out,
            "lockpath_io_bytes_total",
            "counter",
            "Bytes of completed block-IO requests, by device and operation.",
            groups
                .iter()
                .map(|group| (device_labels(group), group.bytes)),
        );
    }

    /// Block IO by device and operation, then file calls: shown for block-IO rows or
    /// timed file calls (not for off-CPU waits in IO classes, which the off-CPU section
    /// lists).
    fn text_section(&self, profile: &Profile, text: &TextReport) -> String {
        let has_rows = !profile.io.is_empty() || !profile.file_calls.is_empty();
        text.section(
            text.shows(profile, self.families(), has_rows),
            "block IO by device and operation (issue to completion):\n",
            || io_tables::table(profile, text.top),
        )
    }

    /// The table of block IO per device and operation, and the latency histograms.
    fn html_tables(&self, profile: &Profile, out: &mut String) {
        let groups = io_groups(profile);
        if groups.is_empty() {
            out.push_str("<p>No block-IO requests recorded.</p>\n");
        } else {
            let rows: Vec<Vec<String>> = groups
                .iter()
                .map(|group| {
                    vec![
                        format!("{} ({})", group.device, group.dev),
                        group.op.clone(),
                        group.count.to_string(),
                        io_tables::format_bytes(group.bytes),
                        format_ns(group.avg_ns),
                        format_ns(group.p50_ns),
                        format_ns(group.p99_ns),
                        format_ns(group.max_ns),
                    ]
                })
                .collect();
            out.push_str(&table(
                &[
                    "device", "op", "requests", "bytes", "avg", "p50", "p99", "max",
                ],
                &[false, false, true, true, true, true, true, true],
                &rows,
            ));
            for group in &groups {
                out.push_str(&format!(
                    "<h3>Latency histogram: {} ({}) {}</h3>\n<pre class=\"histogram\">{}</pre>\n",
                    esc(&group.device),
                    esc(&group.dev),
                    esc(&group.op),
                    esc(&io_tables::histogram(&group.histogram))
                ));
            }
        }
    }
}
