//! Block-IO reports: per device and operation, count, bytes, latency and the log2
//! histogram printed the way biolatency prints it, with p50/p99 from the buckets.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{
    histogram::{bucket_us, percentile_ns},
    profile::Profile,
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
        group.processes.push(IoProcess {
            pid: row.pid,
            process: profile.process_name(row.pid),
            count: row.count,
            bytes: row.bytes,
            total_ns: row.total_ns,
        });
        let hist = hists.entry(key).or_default();
        if hist.len() < row.hist.len() {
            hist.resize(row.hist.len(), 0);
        }
        for (slot, count) in row.hist.iter().enumerate() {
            hist[slot] += count;
        }
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
        return "no block IO recorded\n".into();
    }
    let shown = super::table::shown_rows(top, groups.len());
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
    out.push_str(&super::table::more_of(shown, groups.len(), ""));
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

    #[test]
    fn table_prints_biolatency_histogram_in_100_columns() {
        crate::export::table::assert_table_shows(
            &table(&profile_with_io(), 20),
            &[
                "loop0 (7:0)",
                "64 -> 127",
                "|****************************************|",
            ],
        );
    }
}
