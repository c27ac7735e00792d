//! `file`: block IO and timed calls by file. Each file's bytes read and written at the
//! block layer with the processes that caused them (a writer's writeback, whoever
//! issued it, is the writer's) and the device time of its requests; and, with
//! `record --io --file-calls`, the time of its read, write, fsync and open calls per
//! process. The flamegraph is rooted at the file: file; what (`block write` device
//! time, or a call); process.

use super::{AddSample, ReportHeadings, View, ViewInfo};
use crate::{
    export::{
        formats::{
            exposition::{labels, metric},
            folded::clean,
            html::table,
        },
        operations::diff::{keyed_breakdowns, Breakdown, RowKey},
        tables::io::{self as io_tables, file_groups, Causes},
    },
    profile::{FileCallRow, IoRow, Profile},
    units::format_ns,
};

/// `FileView`'s constants (its `info`, by the `kinds!` table).
pub(super) const INFO: ViewInfo = ViewInfo {
    about: "Time by file: the device time of its block IO, charged to the processes that \
         caused it (a writer's writeback included), and the time of its read, write, fsync \
         and open calls (record --io --file-calls), per process",
    // Shown where a profile has files: recorded with --io by a version that reads them.
    families: &[],
    sample_types: &[("events", "count"), ("time", "nanoseconds")],
    flame_title: "Time by file: block-IO device time by cause, and file call time (width: ms)",
    diff_flame_title:
        "Time by file, NEW against BASE (width: NEW ms per second of run; red grew, blue shrank)",
    diff_columns: ("time/s", "events/s"),
    report: ReportHeadings {
        title: "By file",
        flame_heading: Some("Time by file (block-IO device time by cause, file call time)"),
        flame_title: "Time by file",
    },
};

/// Files in the metrics: the most bytes (then call time) first, a file label per series.
const METRIC_FILES: usize = 20;

pub struct FileView;

impl View for FileView {
    fn has_rows(&self, profile: &Profile) -> bool {
        !profile.file_calls.is_empty() || profile.io.iter().any(|row| row.file.is_some())
    }

    /// File; `block read`/`block write` (device time, shared among the causes) or the
    /// call; process.
    fn samples(&self, profile: &Profile, add: &mut AddSample) {
        let causes = Causes::new(profile);
        for row in &profile.io {
            let Some(file) = &row.file else {
                continue;
            };
            for (pid, share) in causes.of(row) {
                let part = |value: u64| (value as f64 * share).round() as u64;
                let frames = vec![
                    clean(&file.label()),
                    format!("block {}", clean(&row.op)),
                    clean(&profile.process_name(pid)),
                ];
                add(frames, &[part(row.count), part(row.total_ns)]);
            }
        }
        for row in &profile.file_calls {
            let frames = vec![
                clean(&row.file.label()),
                clean(&row.call),
                clean(&profile.process_name(row.pid)),
            ];
            add(frames, &[row.count, row.total_ns]);
        }
    }

    /// Block IO by file and operation, and calls by file and call.
    fn breakdowns(&self, profile: &Profile, out: &mut Vec<Breakdown>) {
        let blocks: Vec<&IoRow> = profile.io.iter().filter(|row| row.file.is_some()).collect();
        let by_block: Vec<(&'static str, RowKey<&IoRow>)> = vec![(
            "file",
            Box::new(|row: &&IoRow| match &row.file {
                Some(file) => format!("{} block {}", file.label(), row.op),
                None => String::new(),
            }),
        )];
        keyed_breakdowns(out, by_block, &blocks, |row| (row.total_ns, row.count));
        let by_call: Vec<(&'static str, RowKey<FileCallRow>)> = vec![(
            "call",
            Box::new(|row: &FileCallRow| format!("{} {}", row.file.label(), row.call)),
        )];
        keyed_breakdowns(out, by_call, &profile.file_calls, |row| {
            (row.total_ns, row.count)
        });
    }

    fn metrics(&self, profile: &Profile, out: &mut String) {
        file_series(profile, out);
    }

    fn html_tables(&self, profile: &Profile, out: &mut String) {
        files_section(profile, out);
    }
}

/// Bytes of the top files by operation and by the process that caused them, and the
/// time of their calls.
fn file_series(profile: &Profile, out: &mut String) {
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
    let mut by_call = Vec::new();
    for group in files {
        let file = group.file.label();
        for calls in &group.calls {
            let names = ["file", "call", "process"];
            let values = [file.as_str(), calls.call.as_str(), calls.process.as_str()];
            by_call.push((labels(&names, &values), calls.total_ns as f64 / 1e9));
        }
    }
    metric(
        out,
        "lockpath_file_call_seconds_total",
        "counter",
        "Time in read, write, fsync and open calls of the top files, by call and process \
         (system call entry to return).",
        by_call,
    );
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
                format_ns(group.p99_ns),
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
            "p99",
            "caused by",
            "issued by",
        ],
        &[false, true, true, true, true, true, false, false],
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
