//! `io`: IO waits, in two faces. Block requests carry no stacks, so the stack views
//! (flamegraph, folded, pprof, JSON tree) weigh the off-CPU time in IO wait classes,
//! while the tables (diff, HTML) list the block-IO requests by device, operation and
//! process.

use anyhow::Result;

use super::{offcpu::waiter_samples, AddSample, FlameLabels, View, ViewInfo};
use crate::{
    export::{
        diff::{keyed_breakdowns, Breakdown, RowKey},
        escape::html as esc,
        exposition::{header, histogram_lines, labels, metric},
        html::{flamegraph_part, table},
        io::{self as io_tables, file_groups, groups as io_groups, IoGroup},
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
            || !profile.file_calls.is_empty()
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
        if profile.io.iter().any(|row| row.file.is_some()) {
            ways.push((
                "file",
                Box::new(|row: &IoRow| match &row.file {
                    Some(file) => format!("{} {}", file.label(), row.op),
                    None => format!("(no file) {}", row.op),
                }),
            ));
        }
        keyed_breakdowns(out, ways, &profile.io, |row| (row.total_ns, row.count));
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

/// Files in the metrics: the most bytes first (a file label per series).
const METRIC_FILES: usize = 20;

/// Block-IO latency per device and operation as a Prometheus histogram (the kernel's
/// log2 microsecond buckets, cumulative), and bytes; bytes of the top files by
/// operation, and by the process that caused them.
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
    let files = file_groups(profile);
    if files.is_empty() {
        return;
    }
    let files = &files[..files.len().min(METRIC_FILES)];
    let mut by_op = Vec::new();
    let mut by_cause = Vec::new();
    for group in files {
        let file = group.file.label();
        for (op, bytes) in [("read", group.read_bytes), ("write", group.write_bytes)] {
            by_op.push((labels(&["file", "op"], &[file.as_str(), op]), bytes));
        }
        for share in &group.caused_by {
            let names = ["file", "process"];
            by_cause.push((
                labels(&names, &[file.as_str(), &share.process]),
                share.bytes,
            ));
        }
    }
    metric(
        out,
        "lockpath_io_file_bytes_total",
        "counter",
        "Bytes of completed block-IO requests by file and operation (the top files).",
        by_op,
    );
    metric(
        out,
        "lockpath_io_file_caused_bytes_total",
        "counter",
        "Block-IO bytes of the top files by the process that caused them (a written \
         file's writers by their share of its dirtied pages; a read's issuer).",
        by_cause,
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
    files_section(profile, &mut out);
    flamegraph_part(
        &mut out,
        profile,
        Kind::Io,
        Some("IO wait flamegraph (off-CPU in buffer, page, block-io, journal)"),
        "IO wait flamegraph",
    )?;
    Ok(out)
}

/// Block IO by file, with who issued it and who caused it; nothing when no request
/// carried a file's pages.
fn files_section(profile: &Profile, out: &mut String) {
    let files = file_groups(profile);
    calls_section(&files, out);
    let files: Vec<&io_tables::FileGroup> =
        files.iter().filter(|group| group.requests > 0).collect();
    if files.is_empty() {
        return;
    }
    let people = |shares: &[io_tables::ByteShare]| {
        shares
            .iter()
            .take(3)
            .map(|share| {
                format!(
                    "{} ({}) {}",
                    share.process,
                    share.pid,
                    io_tables::format_bytes(share.bytes)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let rows: Vec<Vec<String>> = files
        .iter()
        .map(|group| {
            vec![
                group.file.label(),
                io_tables::format_bytes(group.read_bytes),
                io_tables::format_bytes(group.write_bytes),
                group.requests.to_string(),
                format_ns(group.total_ns.checked_div(group.requests).unwrap_or(0)),
                people(&group.caused_by),
                people(&group.issued_by),
            ]
        })
        .collect();
    out.push_str(
        "<h3>By file</h3>\n<p class=\"note\">caused by: who dirtied the pages written (by \
         share), or the reader; issued by: the thread that sent the requests (flusher \
         kworkers, the journal, the process itself).</p>\n",
    );
    out.push_str(&table(
        &[
            "file",
            "read",
            "written",
            "requests",
            "avg",
            "caused by",
            "issued by",
        ],
        &[false, true, true, true, true, false, false],
        &rows,
    ));
}

/// Timed calls per file, call and process (`--file-calls`); nothing without them.
fn calls_section(files: &[io_tables::FileGroup], out: &mut String) {
    let rows: Vec<Vec<String>> = files
        .iter()
        .flat_map(|group| {
            group.calls.iter().map(|calls| {
                vec![
                    group.file.label(),
                    calls.call.clone(),
                    format!("{} ({})", calls.process, calls.pid),
                    calls.count.to_string(),
                    io_tables::format_bytes(calls.bytes),
                    format_ns(calls.avg_ns),
                    format_ns(calls.p99_ns),
                    format_ns(calls.max_ns),
                ]
            })
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    out.push_str("<h3>File calls</h3>\n<p class=\"note\">system call entry to return, per file and process.</p>\n");
    out.push_str(&table(
        &[
            "file", "call", "process", "calls", "bytes", "avg", "p99", "max",
        ],
        &[false, false, false, true, true, true, true, true],
        &rows,
    ));
}
