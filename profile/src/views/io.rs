//! `io`: IO waits, in two faces. Block requests carry no stacks, so the stack views
//! (flamegraph, folded, pprof, JSON tree) weigh the off-CPU time in IO wait classes,
//! while the tables (diff, HTML) list the block-IO requests by device, operation and
//! process.

use anyhow::Result;

use super::{offcpu::waiter_samples, AddCause, AddSample, CausePart, FlameLabels, View, ViewInfo};
use crate::{
    export::{
        diff::{keyed_breakdowns, Breakdown, RowKey},
        escape::html as esc,
        exposition::{header, histogram_lines, labels, metric},
        html::{flamegraph_part, table},
        io::{self as io_tables, groups as io_groups, IoGroup},
    },
    kind::Kind,
    profile::{IoRow, Profile},
    units::format_ns,
    waitclass::IO_CLASSES,
};

const INFO: ViewInfo = ViewInfo {
    kind: Kind::Io,
    name: "io",
    about: "IO waits: in flamegraph, folded, pprof and JSON exports the off-CPU time in IO \
         wait classes (buffer, page, block-io, journal); in diff and HTML the block-IO \
         requests by device, operation and process",
    families: &["io"],
    sample_types: &[("waits", "count"), ("io_wait", "nanoseconds")],
};

pub struct IoView;

impl View for IoView {
    fn info(&self) -> &'static ViewInfo {
        &INFO
    }

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

    fn flame_labels(&self) -> FlameLabels {
        FlameLabels::ms("IO wait time: buffer, page, block-io, journal (width: time off CPU, ms)")
    }

    fn diff_flame_labels(&self) -> FlameLabels {
        FlameLabels::ms_per_s(
            "IO wait time, NEW against BASE (width: NEW IO wait in ms per second of run; red grew, blue shrank)",
        )
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
            add(CausePart {
                key: format!("{} {}", row.device, row.op),
                ns: row.total_ns as f64,
                events: row.count,
                longest_ns: row.max_ns as f64,
                pid: row.pid,
                stack: None,
            });
        }
    }

    fn diff_columns(&self) -> (&'static str, &'static str) {
        ("lat/s", "req/s")
    }

    fn metrics(&self, profile: &Profile, out: &mut String) {
        io_series(profile, out);
    }

    fn html_section(&self, profile: &Profile) -> Result<String> {
        report_section(profile)
    }
}

/// Block-IO latency per device and operation as a Prometheus histogram (the kernel's
/// log2 microsecond buckets, cumulative), and bytes.
fn io_series(profile: &Profile, out: &mut String) {
    let groups = io_groups(profile);
    let device_labels = |group: &IoGroup| labels(&["device", "op"], &[&group.device, &group.op]);
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

/// Block IO per device and operation, latency histograms, and the IO-wait flamegraph.
fn report_section(profile: &Profile) -> Result<String> {
    let mut out = String::new();
    out.push_str("<section id=\"io\">\n<h2>Block IO</h2>\n");
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
    flamegraph_part(
        &mut out,
        profile,
        Kind::Io,
        Some("IO wait flamegraph (off-CPU in buffer, page, block-io, journal)"),
        "IO wait flamegraph",
    )?;
    Ok(out)
}
