//! Block-IO reports: per device and operation, count, bytes, latency and the log2
//! histogram printed the way biolatency prints it, with p50/p99 from the buckets.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{
    histogram::{add_into, bucket_us, percentile_ns},
    profile::{FileRef, IoRow, Profile},
    units::format_ns,
};

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IoGroup {
    pub device: String,
    /// `major:minor`.
    pub dev: String,
    pub op: String,
    pub count: u64,
    pub bytes: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    pub avg_ns: u64,
    /// Estimated from the log2 buckets (linear inside a bucket): within a factor of 2.
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub queued: u64,
    pub queue_ns: u64,
    pub histogram: Vec<IoBucket>,
    /// Issuing processes, most requests first.
    pub processes: Vec<IoProcess>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IoBucket {
    pub low_us: u64,
    pub high_us: u64,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IoProcess {
    pub pid: u32,
    pub process: String,
    pub count: u64,
    pub bytes: u64,
    pub total_ns: u64,
}

pub fn groups(profile: &Profile) -> Vec<IoGroup> {
    let mut by_key: BTreeMap<(u32, u32, String), IoGroup> = BTreeMap::new();
    let mut hists: BTreeMap<(u32, u32, String), Vec<u64>> = BTreeMap::new();
    for row in &profile.io {
        let key = (row.major, row.minor, row.op.clone());
        let group = by_key.entry(key.clone()).or_insert_with(|| IoGroup {
            device: row.device.clone(),
            dev: format!("{}:{}", row.major, row.minor),
            op: row.op.clone(),
            count: 0,
            bytes: 0,
            total_ns: 0,
            max_ns: 0,
            avg_ns: 0,
            p50_ns: 0,
            p99_ns: 0,
            queued: 0,
            queue_ns: 0,
            histogram: Vec::new(),
            processes: Vec::new(),
        });
        group.count += row.count;
        group.bytes += row.bytes;
        group.total_ns += row.total_ns;
        group.max_ns = group.max_ns.max(row.max_ns);
        group.queued += row.queued;
        group.queue_ns += row.queue_ns;
        // One entry per process: its rows (one per file, stack, ...) add up.
        match group.processes.iter_mut().find(|p| p.pid == row.pid) {
            Some(issuer) => {
                issuer.count += row.count;
                issuer.bytes += row.bytes;
                issuer.total_ns += row.total_ns;
            }
            None => group.processes.push(IoProcess {
                pid: row.pid,
                process: profile.process_name(row.pid),
                count: row.count,
                bytes: row.bytes,
                total_ns: row.total_ns,
            }),
        }
        add_into(hists.entry(key).or_default(), &row.hist);
    }
    let mut out: Vec<IoGroup> = by_key
        .into_iter()
        .map(|(key, mut group)| {
            let hist = hists.remove(&key).unwrap_or_default();
            group.avg_ns = group.total_ns.checked_div(group.count).unwrap_or(0);
            group.p50_ns = percentile_ns(&hist, 0.50).min(group.max_ns);
            group.p99_ns = percentile_ns(&hist, 0.99).min(group.max_ns);
            group.histogram = hist
                .iter()
                .enumerate()
                .map(|(slot, &count)| {
                    let (low_us, high_us) = bucket_us(slot);
                    IoBucket {
                        low_us,
                        high_us,
                        count,
                    }
                })
                .collect();
            group
                .processes
                .sort_by(|a, b| b.count.cmp(&a.count).then(a.pid.cmp(&b.pid)));
            group
        })
        .collect();
    out.sort_by(|a, b| b.count.cmp(&a.count).then(a.dev.cmp(&b.dev)));
    out
}

pub(crate) fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The summary: one table line per device and operation, then the histograms.
pub fn table(profile: &Profile, top: usize) -> String {
    let groups = groups(profile);
    if groups.is_empty() {
        return format!("no block IO recorded\n{}", calls_table(profile, top));
    }
    let shown = crate::export::tables::table::shown_rows(top, groups.len());
    let mut out = format!(
        "{:<16} {:<8} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
        "device", "op", "requests", "bytes", "avg", "p50", "p99", "max"
    );
    for group in &groups[..shown] {
        out.push_str(&format!(
            "{:<16} {:<8} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
            format!("{} ({})", group.device, group.dev),
            group.op,
            group.count,
            format_bytes(group.bytes),
            format_ns(group.avg_ns),
            format_ns(group.p50_ns),
            format_ns(group.p99_ns),
            format_ns(group.max_ns),
        ));
    }
    for group in &groups[..shown] {
        out.push_str(&format!(
            "\n{} ({}) {}: {} requests, issued by {}\n",
            group.device,
            group.dev,
            group.op,
            group.count,
            group
                .processes
                .iter()
                .take(3)
                .map(|p| format!("{} ({}) {}", p.process, p.pid, p.count))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        out.push_str(&histogram(&group.histogram));
    }
    out.push_str(&crate::export::tables::table::more_of(
        shown,
        groups.len(),
        "",
    ));
    out.push_str(&files_table(profile, top));
    out
}

/// A file on a host: (host, major, minor, ino).
type FileKey = (String, u32, u32, u64);

/// Who caused an IO row's requests, by share: for the writes of a file, the
/// processes that dirtied its pages on the same host, by their share of the dirtied
/// folios (a flusher kworker's writeback is its writers'); for everything else, and
/// for files nobody recorded dirtying, the issuer.
pub struct Causes<'p> {
    profile: &'p Profile,
    /// (pid, folios) by file.
    dirtiers: BTreeMap<FileKey, Vec<(u32, u64)>>,
}

impl<'p> Causes<'p> {
    pub fn new(profile: &'p Profile) -> Self {
        let mut dirtiers: BTreeMap<_, Vec<(u32, u64)>> = BTreeMap::new();
        for row in &profile.io_dirtied {
            let key = (
                profile.host_of(row.pid),
                row.file.major,
                row.file.minor,
                row.file.ino,
            );
            dirtiers.entry(key).or_default().push((row.pid, row.folios));
        }
        Causes { profile, dirtiers }
    }

    /// (process, share) of `row`, shares summing to 1.
    pub fn of(&self, row: &IoRow) -> Vec<(u32, f64)> {
        let issuer = vec![(row.pid, 1.0)];
        let Some(file) = row.file.as_ref().filter(|_| row.op == "write") else {
            return issuer;
        };
        let key = (
            self.profile.host_of(row.pid),
            file.major,
            file.minor,
            file.ino,
        );
        let Some(dirtiers) = self.dirtiers.get(&key) else {
            return issuer;
        };
        let total: u64 = dirtiers.iter().map(|(_, folios)| folios).sum();
        if total == 0 {
            return issuer;
        }
        dirtiers
            .iter()
            .map(|&(pid, folios)| (pid, folios as f64 / total as f64))
            .collect()
    }
}

/// Block IO of one file: bytes by operation, requests, device time, and the processes
/// that issued its requests and that caused them.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FileGroup {
    pub file: FileRef,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub requests: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    /// Device time of its requests, estimated from the log2 buckets as
    /// `IoGroup::p50_ns`.
    pub p50_ns: u64,
    pub p99_ns: u64,
    /// The log2 histogram of its requests' device time (microseconds, as `IoRow::hist`).
    #[serde(skip)]
    hist: Vec<u64>,
    /// Issuing processes (kernel threads included), most bytes first.
    pub issued_by: Vec<ByteShare>,
    /// Processes that caused the requests (`Causes`), most bytes first.
    pub caused_by: Vec<ByteShare>,
    /// Timed calls on the file (`--file-calls`), by call and process, most time first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<FileCalls>,
}

/// One process's calls of one kind on a file.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FileCalls {
    pub call: String,
    pub pid: u32,
    pub process: String,
    pub count: u64,
    pub bytes: u64,
    pub total_ns: u64,
    pub avg_ns: u64,
    pub max_ns: u64,
    /// Estimated from the log2 buckets, as `IoGroup::p99_ns`.
    pub p99_ns: u64,
}

/// Bytes of a file's block IO charged to one process.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ByteShare {
    pub pid: u32,
    pub process: String,
    pub bytes: u64,
}

/// Block IO by file (requests that carried pages of a file), most bytes first.
pub fn file_groups(profile: &Profile) -> Vec<FileGroup> {
    let causes = Causes::new(profile);
    let mut by_file: BTreeMap<FileKey, FileGroup> = BTreeMap::new();
    let mut issued: BTreeMap<FileKey, BTreeMap<u32, f64>> = BTreeMap::new();
    let mut caused: BTreeMap<FileKey, BTreeMap<u32, f64>> = BTreeMap::new();
    for row in &profile.io {
        let Some(file) = &row.file else {
            continue;
        };
        let key = (profile.host_of(row.pid), file.major, file.minor, file.ino);
        let group = by_file
            .entry(key.clone())
            .or_insert_with(|| FileGroup::new(file));
        if group.file.path.is_empty() {
            group.file.path = file.path.clone();
        }
        match row.op.as_str() {
            "read" => group.read_bytes += row.bytes,
            "write" => group.write_bytes += row.bytes,
            _ => {}
        }
        group.requests += row.count;
        group.total_ns += row.total_ns;
        group.max_ns = group.max_ns.max(row.max_ns);
        add_into(&mut group.hist, &row.hist);
        *issued
            .entry(key.clone())
            .or_default()
            .entry(row.pid)
            .or_default() += row.bytes as f64;
        let charged = caused.entry(key).or_default();
        for (pid, share) in causes.of(row) {
            *charged.entry(pid).or_default() += row.bytes as f64 * share;
        }
    }
    for row in &profile.file_calls {
        let key = (
            profile.host_of(row.pid),
            row.file.major,
            row.file.minor,
            row.file.ino,
        );
        let group = by_file
            .entry(key)
            .or_insert_with(|| FileGroup::new(&row.file));
        group.calls.push(FileCalls {
            call: row.call.clone(),
            pid: row.pid,
            process: profile.process_name(row.pid),
            count: row.count,
            bytes: row.bytes,
            total_ns: row.total_ns,
            avg_ns: row.total_ns.checked_div(row.count).unwrap_or(0),
            max_ns: row.max_ns,
            p99_ns: percentile_ns(&row.hist, 0.99).min(row.max_ns),
        });
    }
    let shares = |by_pid: Option<BTreeMap<u32, f64>>| {
        let mut out: Vec<ByteShare> = by_pid
            .unwrap_or_default()
            .into_iter()
            .map(|(pid, bytes)| ByteShare {
                pid,
                process: profile.process_name(pid),
                bytes: bytes.round() as u64,
            })
            .collect();
        out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.pid.cmp(&b.pid)));
        out
    };
    let mut out: Vec<FileGroup> = by_file
        .into_iter()
        .map(|(key, mut group)| {
            group.issued_by = shares(issued.remove(&key));
            group.caused_by = shares(caused.remove(&key));
            group.p50_ns = percentile_ns(&group.hist, 0.50).min(group.max_ns);
            group.p99_ns = percentile_ns(&group.hist, 0.99).min(group.max_ns);
            group
                .calls
                .sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.pid.cmp(&b.pid)));
            group
        })
        .collect();
    out.sort_by(|a, b| {
        (b.read_bytes + b.write_bytes)
            .cmp(&(a.read_bytes + a.write_bytes))
            .then(b.call_ns().cmp(&a.call_ns()))
            .then(a.file.cmp(&b.file))
    });
    out
}

impl FileGroup {
    fn new(file: &FileRef) -> Self {
        FileGroup {
            file: file.clone(),
            read_bytes: 0,
            write_bytes: 0,
            requests: 0,
            total_ns: 0,
            max_ns: 0,
            p50_ns: 0,
            p99_ns: 0,
            hist: Vec::new(),
            issued_by: Vec::new(),
            caused_by: Vec::new(),
            calls: Vec::new(),
        }
    }

    /// Time in timed calls on the file.
    pub fn call_ns(&self) -> u64 {
        self.calls.iter().map(|calls| calls.total_ns).sum()
    }
}

/// The timed calls of the report: per file, call and process, most time first.
pub fn calls_table(profile: &Profile, top: usize) -> String {
    let mut rows: Vec<(String, &FileCalls)> = Vec::new();
    let groups = file_groups(profile);
    for group in &groups {
        for calls in &group.calls {
            rows.push((group.file.label(), calls));
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    rows.sort_by_key(|row| std::cmp::Reverse(row.1.total_ns));
    let shown = crate::export::tables::table::shown_rows(top, rows.len());
    let mut out = format!(
        "\nfile calls (system call entry to return, per file and process):\n\
         {:<6} {:<24} {:>8} {:>10} {:>10} {:>10} {:>10}  {}\n",
        "call", "process", "calls", "bytes", "avg", "p99", "max", "file"
    );
    for (file, calls) in &rows[..shown] {
        out.push_str(&format!(
            "{:<6} {:<24} {:>8} {:>10} {:>10} {:>10} {:>10}  {}\n",
            calls.call,
            crate::export::tables::table::fit(&format!("{} ({})", calls.process, calls.pid), 24),
            calls.count,
            format_bytes(calls.bytes),
            format_ns(calls.avg_ns),
            format_ns(calls.p99_ns),
            format_ns(calls.max_ns),
            file,
        ));
    }
    out.push_str(&crate::export::tables::table::more_of(
        shown,
        rows.len(),
        "",
    ));
    out
}

/// The per-file table of the IO report; empty when no request carried a file's pages.
pub fn files_table(profile: &Profile, top: usize) -> String {
    let mut groups = file_groups(profile);
    groups.retain(|group| group.requests > 0);
    if groups.is_empty() {
        return calls_table(profile, top);
    }
    let shown = crate::export::tables::table::shown_rows(top, groups.len());
    let people = |shares: &[ByteShare], total: u64| {
        shares
            .iter()
            .take(2)
            .map(|share| {
                let percent = 100.0 * share.bytes as f64 / total.max(1) as f64;
                format!("{} ({}) {percent:.0}%", share.process, share.pid)
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = format!(
        "\nblock IO by file (caused by: who dirtied the pages written; reads: the issuer)\n\
         {:>10} {:>10} {:>9} {:>10} {:>10}  {:<34} {:<34} {}\n",
        "read", "written", "requests", "avg", "p99", "caused by", "issued by", "file"
    );
    for group in &groups[..shown] {
        let total = group.read_bytes + group.write_bytes;
        out.push_str(&format!(
            "{:>10} {:>10} {:>9} {:>10} {:>10}  {:<34} {:<34} {}\n",
            format_bytes(group.read_bytes),
            format_bytes(group.write_bytes),
            group.requests,
            format_ns(group.total_ns.checked_div(group.requests).unwrap_or(0)),
            format_ns(group.p99_ns),
            people(&group.caused_by, total),
            people(&group.issued_by, total),
            group.file.label(),
        ));
    }
    out.push_str(&crate::export::tables::table::more_of(
        shown,
        groups.len(),
        "",
    ));
    out.push_str(&calls_table(profile, top));
    out
}

/// biolatency's layout: `low -> high : count |****|`, from the first to the last
/// non-empty bucket, bars 40 wide.
pub fn histogram(buckets: &[IoBucket]) -> String {
    let first = buckets.iter().position(|b| b.count > 0);
    let last = buckets.iter().rposition(|b| b.count > 0);
    let (Some(first), Some(last)) = (first, last) else {
        return String::new();
    };
    let peak = buckets.iter().map(|b| b.count).max().unwrap_or(1).max(1);
    let mut out = format!("{:>20} : {:<8} {}\n", "usecs", "count", "distribution");
    for bucket in &buckets[first..=last] {
        let stars = (bucket.count * 40).div_ceil(peak) as usize;
        out.push_str(&format!(
            "{:>9} -> {:<7} : {:<8} |{:<40}|\n",
            bucket.low_us,
            bucket.high_us - 1,
            bucket.count,
            "*".repeat(stars.min(40))
        ));
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::profile::IoRow;

    /// 100 reads of loop0 of 4 KiB: 90 in [64, 128) us by `pids[0]`, 10 in
    /// [2048, 4096) us by `pids[1]`.
    pub(crate) fn loop0_reads(pids: [u32; 2]) -> Vec<IoRow> {
        let row = |pid, count, hist: Vec<u64>| IoRow {
            major: 7,
            minor: 0,
            device: "loop0".into(),
            op: "read".into(),
            pid,
            count,
            bytes: count * 4096,
            total_ns: count * 100_000,
            max_ns: 3_000_000,
            queued: 0,
            queue_ns: 0,
            hist,
            file: None,
        };
        vec![
            row(pids[0], 90, vec![0, 0, 0, 0, 0, 0, 90]),
            row(pids[1], 10, vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10]),
        ]
    }

    fn profile_with_io() -> Profile {
        let mut profile = Profile::new();
        profile.io = loop0_reads([10, 11]);
        profile
    }

    #[test]
    fn groups_merge_processes_and_histograms() {
        let groups = groups(&profile_with_io());
        assert_eq!(groups.len(), 1);
        let group = &groups[0];
        assert_eq!(group.count, 100);
        assert_eq!(group.bytes, 409_600);
        assert_eq!(group.avg_ns, 100_000);
        assert!(
            (64_000..128_000).contains(&group.p50_ns),
            "{}",
            group.p50_ns
        );
        assert!(
            (2_048_000..=3_000_000).contains(&group.p99_ns),
            "{}",
            group.p99_ns
        );
        assert_eq!(group.histogram[6].count, 90);
        assert_eq!(group.histogram[11].count, 10);
        assert_eq!(group.processes[0].pid, 10);
    }

    /// Rows of one process (other files, stacks) make one issuer.
    #[test]
    fn an_issuer_is_listed_once() {
        let mut profile = profile_with_io();
        profile.io.extend(loop0_reads([11, 11]));
        let groups = groups(&profile);
        let issuers: Vec<(u32, u64)> = groups[0]
            .processes
            .iter()
            .map(|issuer| (issuer.pid, issuer.count))
            .collect();
        assert_eq!(issuers, [(11, 110), (10, 90)]);
    }

    fn file(ino: u64, path: &str) -> FileRef {
        FileRef {
            major: 7,
            minor: 0,
            ino,
            path: path.into(),
        }
    }

    /// Writes of one file issued by a kworker (pid 2) and by the writer (pid 10), the
    /// file dirtied by pids 10 (3 folios) and 11 (1 folio); a read of another file.
    fn profile_with_writeback() -> Profile {
        let mut profile = Profile::new();
        let write = |pid, bytes, file: FileRef| IoRow {
            major: 7,
            minor: 0,
            device: "loop0".into(),
            op: "write".into(),
            pid,
            count: 1,
            bytes,
            total_ns: 1_000_000,
            max_ns: 1_000_000,
            hist: vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            file: Some(file),
            ..Default::default()
        };
        profile.io = vec![
            write(2, 3000, file(12, "/mnt/data")),
            write(10, 1000, file(12, "")),
            IoRow {
                op: "read".into(),
                ..write(11, 500, file(13, "/mnt/other"))
            },
        ];
        profile.io_dirtied = vec![
            crate::profile::DirtiedRow {
                pid: 10,
                file: file(12, "/mnt/data"),
                folios: 3,
            },
            crate::profile::DirtiedRow {
                pid: 11,
                file: file(12, "/mnt/data"),
                folios: 1,
            },
        ];
        profile
    }

    #[test]
    fn writeback_is_charged_to_the_writers_by_their_share() {
        let groups = file_groups(&profile_with_writeback());
        assert_eq!(groups.len(), 2);
        let data = &groups[0];
        assert_eq!(data.file.path, "/mnt/data");
        assert_eq!(data.write_bytes, 4000);
        let issued: Vec<(u32, u64)> = data.issued_by.iter().map(|s| (s.pid, s.bytes)).collect();
        assert_eq!(issued, vec![(2, 3000), (10, 1000)]);
        let caused: Vec<(u32, u64)> = data.caused_by.iter().map(|s| (s.pid, s.bytes)).collect();
        assert_eq!(caused, vec![(10, 3000), (11, 1000)]);
        // A read is its issuer's, even of a file someone dirtied.
        let other = &groups[1];
        assert_eq!(other.read_bytes, 500);
        assert_eq!(other.caused_by[0].pid, 11);
        let table = files_table(&profile_with_writeback(), 20);
        assert!(table.contains("/mnt/data"), "{table}");
        assert!(table.contains("pid 10 (10) 75%"), "{table}");
    }

    #[test]
    fn files_in_metrics_html_and_diff() {
        let profile = profile_with_writeback();
        let metrics = crate::export::formats::prometheus::render(&profile);
        assert!(
            metrics.contains("lockpath_io_file_bytes_total{file=\"/mnt/data\",op=\"write\"} 4000"),
            "{metrics}"
        );
        assert!(
            metrics.contains(
                "lockpath_io_file_caused_bytes_total{file=\"/mnt/data\",process=\"pid 10\"} 3000"
            ),
            "{metrics}"
        );
        let page = crate::export::formats::html::render(&profile).expect("HTML");
        assert!(page.contains("<h3>By file</h3>"), "no file table");
        assert!(page.contains("/mnt/other"), "no row of the read file");
        let breakdowns =
            crate::export::operations::diff::breakdowns(&profile, crate::kind::Kind::File);
        let by_file = breakdowns
            .iter()
            .find(|breakdown| breakdown.by == "file")
            .expect("a breakdown by file");
        assert!(
            by_file.entries.contains_key("/mnt/data block write"),
            "{:?}",
            by_file.entries.keys()
        );
        // The file flamegraph: rooted at the file, the writeback under its writers.
        let lines = crate::export::formats::folded::lines(&profile, crate::kind::Kind::File);
        let stacks: Vec<&str> = lines.iter().map(|(stack, _)| stack.as_str()).collect();
        assert!(
            stacks.contains(&"/mnt/data;block write;pid 10"),
            "{stacks:?}"
        );
    }

    #[test]
    fn table_prints_biolatency_histogram_in_100_columns() {
        crate::export::tables::table::assert_table_shows(
            &table(&profile_with_io(), 20),
            &[
                "loop0 (7:0)",
                "64 -> 127",
                "|****************************************|",
            ],
        );
    }
}
