//! The timeline of a recording (`record --interval DUR`): per interval, the wait time
//! that ended in it, for every lock, wait class and process; and the block-IO bytes
//! written in it, by the process that caused them (`--io`: a writer's writeback beside
//! its throttling waits).
//!
//! Design: user space reads the kernel's cumulative aggregates at every interval
//! boundary and keeps the difference from the previous read; the kernel does nothing
//! more per event. Bucketing in the kernel would put an interval index in every key:
//! a lookup more per event, and maps (interval count) times as large for the same run.
//! What this costs instead: a wait counts in the interval in which it ended (a 3 s
//! wait that ended at 10 s is all in the interval of 10 s), and a boundary is the
//! moment of the read (its `ends_s`, within a few tens of milliseconds of the asked
//! interval). The last interval ends with the final read of the run, so the sum of each
//! series over the intervals is exactly that key's total in the profile.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{
    lock::lock_type_name,
    profile::{LockRow, Profile},
};

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Timeline {
    /// The asked interval, in seconds.
    pub interval_s: f64,
    /// End of each interval, seconds from the start of the recording (the moment its
    /// totals were read); the first interval starts at 0.
    pub ends_s: Vec<f64>,
    /// One per (family, grouping, name), most total time first.
    pub series: Vec<Series>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Series {
    /// Whose wait time: "lock" (lock contention) or "offcpu" (off-CPU waits); or "io"
    /// (block-IO writes, in `bytes`).
    pub family: String,
    /// "lock" (one lock: type and name), "class" (a wait class), "process", or "cause"
    /// (io: the process that caused the writes, see `export::tables::io::Causes`).
    pub by: String,
    /// Lock (`mutex 0xffff...`), class, or process name.
    pub name: String,
    /// The process of a `process` series.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Wait time of each interval, nanoseconds: lock waits that ended in it, off-CPU
    /// time that passed in it (a wait still open at a boundary counts up to it).
    pub wait_ns: Vec<u64>,
    /// Waits that ended in each interval (io: requests completed).
    pub count: Vec<u64>,
    /// io: bytes written in each interval (empty for wait series). An io series'
    /// `wait_ns` is the device time of those requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bytes: Vec<u64>,
}

impl Series {
    pub fn total_ns(&self) -> u64 {
        self.wait_ns
            .iter()
            .fold(0u64, |sum, &ns| sum.saturating_add(ns))
    }

    pub fn total_bytes(&self) -> u64 {
        self.bytes
            .iter()
            .fold(0u64, |sum, &b| sum.saturating_add(b))
    }

    /// What the series measures per interval: bytes for io, else wait time.
    pub fn values(&self) -> &[u64] {
        if self.family == "io" {
            &self.bytes
        } else {
            &self.wait_ns
        }
    }
}

/// A series' identity: (family, by, name, pid).
pub type SeriesKey = (&'static str, &'static str, String, Option<u32>);

/// Cumulative (wait ns, count, bytes) of every series at one moment.
pub type Totals = BTreeMap<SeriesKey, (u64, u64, u64)>;

/// The cumulative totals of a profile's lock, off-CPU and block-IO write rows, per
/// series.
pub fn totals(profile: &Profile) -> Totals {
    let mut out = Totals::new();
    let mut add_io = |key: SeriesKey, ns: u64, count: u64, bytes: u64| {
        let entry = out.entry(key).or_default();
        entry.0 = entry.0.saturating_add(ns);
        entry.1 = entry.1.saturating_add(count);
        entry.2 = entry.2.saturating_add(bytes);
    };
    let causes = crate::export::tables::io::Causes::new(profile);
    for row in profile.io.iter().filter(|row| row.op == "write") {
        for (pid, share) in causes.of(row) {
            let part = |value: u64| (value as f64 * share).round() as u64;
            add_io(
                ("io", "cause", String::new(), Some(pid)),
                part(row.total_ns),
                part(row.count),
                part(row.bytes),
            );
        }
    }
    let mut add = |key: SeriesKey, ns: u64, count: u64| add_io(key, ns, count, 0);
    for row in &profile.locks {
        add(
            ("lock", "lock", lock_key(row), None),
            row.total_ns,
            row.count,
        );
        add(
            ("lock", "process", String::new(), Some(row.pid)),
            row.total_ns,
            row.count,
        );
    }
    for row in &profile.offcpu {
        add(
            ("offcpu", "class", row.class.clone(), None),
            row.total_ns,
            row.count,
        );
        add(
            ("offcpu", "process", String::new(), Some(row.pid)),
            row.total_ns,
            row.count,
        );
    }
    out
}

/// A lock series while it is built: its type and address. A lock's name can change
/// during a recording (a runqueue, or the `wait_lock` of a sleeping lock, is named once
/// the kernel side or the drain has seen enough), so the name is taken from the final
/// profile; keyed by name, a renamed lock's whole total would count again.
fn lock_key(row: &LockRow) -> String {
    format!("{} @{:x}", lock_type_name(row.flags), row.lock_addr)
}

/// Each lock series' name in `profile`: `TYPE NAME`, the name a row of that address
/// gives (one that is not an address, where rows differ).
fn lock_names(profile: &Profile) -> BTreeMap<String, String> {
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    for row in &profile.locks {
        let name = format!("{} {}", lock_type_name(row.flags), row.lock_name);
        let entry = names.entry(lock_key(row)).or_insert_with(|| name.clone());
        if entry.ends_with(&format!("0x{:x}", row.lock_addr)) {
            *entry = name;
        }
    }
    names
}

/// Builds a timeline from the totals read at each boundary.
#[derive(Debug, Default)]
pub struct Builder {
    interval_s: f64,
    ends_s: Vec<f64>,
    last: Totals,
    /// Per series: (wait ns, count, bytes) per interval so far.
    columns: BTreeMap<SeriesKey, Columns>,
}

/// (wait ns, count, bytes) per interval of one series.
type Columns = (Vec<u64>, Vec<u64>, Vec<u64>);

impl Builder {
    pub fn new(interval_s: f64) -> Self {
        Builder {
            interval_s,
            ..Default::default()
        }
    }

    /// Closes an interval at `at_s` with the cumulative `totals` read then.
    pub fn add(&mut self, at_s: f64, totals: Totals) {
        let index = self.ends_s.len();
        self.ends_s.push(at_s);
        for (key, &(ns, count, bytes)) in &totals {
            let (last_ns, last_count, last_bytes) =
                self.last.get(key).copied().unwrap_or((0, 0, 0));
            let column = self
                .columns
                .entry(key.clone())
                .or_insert_with(|| (vec![0; index], vec![0; index], vec![0; index]));
            // Cumulative totals only grow; a smaller one (an entry gone) adds nothing.
            column.0.push(ns.saturating_sub(last_ns));
            column.1.push(count.saturating_sub(last_count));
            column.2.push(bytes.saturating_sub(last_bytes));
        }
        for column in self.columns.values_mut() {
            column.0.resize(index + 1, 0);
            column.1.resize(index + 1, 0);
            column.2.resize(index + 1, 0);
        }
        self.last = totals;
    }

    /// The timeline, its last interval closed by the final profile (read after the
    /// programs were detached) at its duration; process series get their names.
    pub fn finish(mut self, profile: &Profile) -> Timeline {
        self.add(profile.duration_s, totals(profile));
        let lock_names = lock_names(profile);
        // Locks by their final names; locks of one name (each process's `mmap_lock`)
        // are one series.
        let mut named: BTreeMap<SeriesKey, Columns> = BTreeMap::new();
        for ((family, by, name, pid), (wait_ns, count, bytes)) in self.columns {
            let name = match (family, by) {
                ("lock", "lock") => lock_names.get(&name).cloned().unwrap_or(name),
                _ => name,
            };
            match named.entry((family, by, name, pid)) {
                std::collections::btree_map::Entry::Vacant(slot) => {
                    slot.insert((wait_ns, count, bytes));
                }
                std::collections::btree_map::Entry::Occupied(mut slot) => {
                    let (sum_ns, sum_count, sum_bytes) = slot.get_mut();
                    for (sum, add) in sum_ns
                        .iter_mut()
                        .zip(&wait_ns)
                        .chain(sum_count.iter_mut().zip(&count))
                        .chain(sum_bytes.iter_mut().zip(&bytes))
                    {
                        *sum = sum.saturating_add(*add);
                    }
                }
            }
        }
        let mut series: Vec<Series> = named
            .into_iter()
            .map(
                |((family, by, name, pid), (wait_ns, count, bytes))| Series {
                    family: family.into(),
                    by: by.into(),
                    name: match pid {
                        Some(pid) => profile.process_name(pid),
                        None => name,
                    },
                    pid,
                    wait_ns,
                    count,
                    bytes: if family == "io" { bytes } else { Vec::new() },
                },
            )
            .collect();
        series.sort_by(|a, b| {
            (a.family.as_str(), a.by.as_str())
                .cmp(&(b.family.as_str(), b.by.as_str()))
                .then(b.total_ns().cmp(&a.total_ns()))
                .then(a.name.cmp(&b.name))
        });
        Timeline {
            interval_s: self.interval_s,
            ends_s: self.ends_s,
            series,
        }
    }
}

/// Eight levels of a sparkline, lowest first.
const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// `values` merged into at most `width` buckets of adjacent values (sums).
pub fn buckets(values: &[u64], width: usize) -> Vec<u64> {
    if values.is_empty() || width == 0 {
        return Vec::new();
    }
    let per = values.len().div_ceil(width);
    values
        .chunks(per)
        .map(|chunk| chunk.iter().fold(0u64, |sum, &v| sum.saturating_add(v)))
        .collect()
}

/// A sparkline of at most `width` characters (a blank for an empty bucket).
pub fn sparkline(values: &[u64], width: usize) -> String {
    let merged = buckets(values, width);
    let max = merged.iter().copied().max().unwrap_or(0);
    merged
        .iter()
        .map(|&value| {
            if value == 0 || max == 0 {
                ' '
            } else {
                let level = ((value as f64 / max as f64) * (BARS.len() - 1) as f64).round();
                BARS[level as usize]
            }
        })
        .collect()
}

/// `report --timeline`: per grouping, the top series with their time per interval (at
/// most 8 columns, adjacent intervals merged) and a sparkline, within 100 columns.
pub fn text(profile: &Profile, top: usize) -> String {
    let Some(timeline) = &profile.timeline else {
        return String::new();
    };
    const COLUMNS: usize = 8;
    let intervals = timeline.ends_s.len();
    let per = intervals.div_ceil(COLUMNS).max(1);
    let mut out = format!(
        "\ntimeline: {intervals} intervals of {:.3} s (wait time in each, ms; a column is {per} interval{})\n",
        timeline.interval_s,
        if per == 1 { "" } else { "s" }
    );
    for (family, by, series) in series_groups(timeline) {
        let io = family == "io";
        let (title, total, unit) = if io {
            (
                format!("\nblock IO written by {by} (MiB in each interval):\n"),
                "total MiB",
                1024.0 * 1024.0,
            )
        } else {
            (format!("\n{family} wait by {by}:\n"), "total ms", 1e6)
        };
        out.push_str(&title);
        let ends: Vec<String> = timeline
            .ends_s
            .chunks(per)
            .map(|chunk| format!("{:.1}s", chunk.last().copied().unwrap_or(0.0)))
            .collect();
        out.push_str(&format!("{:<28} {:>10}", by, total));
        for end in &ends {
            out.push_str(&format!(
                " {:>6}",
                crate::export::tables::table::fit(end, 6)
            ));
        }
        out.push('\n');
        let shown = crate::export::tables::table::shown_rows(top, series.len());
        for one in &series[..shown] {
            let total = one
                .values()
                .iter()
                .fold(0u64, |sum, &v| sum.saturating_add(v));
            out.push_str(&format!(
                "{:<28} {:>10.1}",
                crate::export::tables::table::fit(&one.name, 28),
                total as f64 / unit
            ));
            for value in buckets(one.values(), COLUMNS) {
                out.push_str(&format!(" {:>6.0}", value as f64 / unit));
            }
            out.push('\n');
            out.push_str(&format!("{:>40}{}\n", "", sparkline(one.values(), 56)));
        }
        out.push_str(&crate::export::tables::table::more_of(
            shown,
            series.len(),
            "",
        ));
    }
    out
}

/// The series by (family, grouping), in their order (consecutive series share one).
fn series_groups(timeline: &Timeline) -> Vec<(&str, &str, Vec<&Series>)> {
    let mut groups: Vec<(&str, &str)> = timeline
        .series
        .iter()
        .map(|series| (series.family.as_str(), series.by.as_str()))
        .collect();
    groups.dedup();
    groups
        .into_iter()
        .map(|(family, by)| {
            let series = timeline
                .series
                .iter()
                .filter(|series| series.family == family && series.by == by)
                .collect();
            (family, by, series)
        })
        .collect()
}

/// The HTML section: per grouping, the top series as bar charts (inline SVG, one bar
/// per interval, height: wait time).
pub fn html_section(profile: &Profile) -> String {
    use crate::export::formats::escape::html as esc;
    let Some(timeline) = &profile.timeline else {
        return String::new();
    };
    let mut out = format!(
        "<section id=\"timeline\">\n<h2>Timeline</h2>\n<p>{} intervals of {:.3} s: the lock waits that ended in each, the off-CPU time that passed in each.</p>\n",
        timeline.ends_s.len(),
        timeline.interval_s
    );
    for (family, by, series) in series_groups(timeline) {
        let io = family == "io";
        let heading = if io { "block IO written" } else { "wait" };
        out.push_str(&format!(
            "<h3>{} {heading} by {}</h3>\n<table>\n<thead><tr><th>{}</th><th class=\"n\">total</th><th>over time</th></tr></thead>\n<tbody>\n",
            esc(family),
            esc(by),
            esc(by)
        ));
        for series in series.into_iter().take(10) {
            let total = if io {
                crate::export::tables::io::format_bytes(series.total_bytes())
            } else {
                crate::units::format_ns(series.total_ns())
            };
            out.push_str(&format!(
                "<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
                esc(&series.name),
                esc(&total),
                chart(series.values(), &timeline.ends_s, io)
            ));
        }
        out.push_str("</tbody>\n</table>\n");
    }
    out.push_str("</section>\n");
    out
}

/// An inline SVG bar chart, 400x40, one bar per (merged) interval, with a tooltip each
/// (`bytes`: the values are bytes, else nanoseconds).
fn chart(values: &[u64], ends_s: &[f64], bytes: bool) -> String {
    const WIDTH: usize = 400;
    const HEIGHT: f64 = 40.0;
    let per = values.len().div_ceil(WIDTH / 2).max(1);
    let merged = buckets(values, WIDTH / 2);
    let max = merged.iter().copied().max().unwrap_or(0).max(1);
    let bar = WIDTH as f64 / merged.len().max(1) as f64;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\">"
    );
    for (index, &value) in merged.iter().enumerate() {
        let height = (value as f64 / max as f64 * HEIGHT).max(if value > 0 { 1.0 } else { 0.0 });
        let end = ends_s
            .get(((index + 1) * per).min(ends_s.len()).saturating_sub(1))
            .copied()
            .unwrap_or(0.0);
        out.push_str(&format!(
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{height:.1}\" fill=\"#c0392b\"><title>{}</title></rect>",
            index as f64 * bar,
            HEIGHT - height,
            (bar - 0.5).max(0.5),
            crate::export::formats::escape::html(&format!(
                "until {end:.1} s: {}",
                if bytes {
                    crate::export::tables::io::format_bytes(value)
                } else {
                    crate::units::format_ns(value)
                }
            ))
        ));
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{export::formats::report::tests::profile_with_two_locks, profile::LockRow};

    /// The timeline of `profile` read every second: the read at `n + 1` s is `profile`
    /// with `earlier[n]` made to each lock row, the last read `profile` itself.
    fn timeline_of(profile: &Profile, earlier: &[fn(&mut LockRow)]) -> Timeline {
        let mut builder = Builder::new(1.0);
        for (index, change) in earlier.iter().enumerate() {
            let mut read = profile.clone();
            read.locks.iter_mut().for_each(change);
            builder.add(index as f64 + 1.0, totals(&read));
        }
        builder.finish(profile)
    }

    #[test]
    fn intervals_sum_to_the_total_and_land_where_they_ended() {
        let mut profile = profile_with_two_locks();
        profile.duration_s = 3.0;
        // Nothing in the first second, then a third of the final totals each read.
        let timeline = timeline_of(
            &profile,
            &[
                |row| {
                    row.total_ns = 0;
                    row.count = 0;
                },
                |row| {
                    row.total_ns /= 3;
                    row.count /= 3;
                },
            ],
        );
        assert_eq!(timeline.ends_s, vec![1.0, 2.0, 3.0]);
        let spin = timeline
            .series
            .iter()
            .find(|series| series.by == "lock" && series.name == "spinlock 0xffff1")
            .expect("spin lock series");
        assert_eq!(spin.wait_ns[0], 0);
        assert_eq!(spin.total_ns(), 7_000_000, "the sum is the total");
        let process = timeline
            .series
            .iter()
            .find(|series| series.by == "process" && series.pid == Some(10))
            .expect("process series");
        assert_eq!(process.name, "ior");
        assert_eq!(process.total_ns(), 11_000_000);
        let mut with = profile.clone();
        with.timeline = Some(timeline);
        crate::export::tables::table::assert_table_shows(&text(&with, 10), &["lock wait by lock"]);
    }

    #[test]
    fn a_lock_named_late_counts_once() {
        let mut profile = profile_with_two_locks();
        for row in &mut profile.locks {
            row.lock_name = format!("named{:x}", row.lock_addr).into();
        }
        profile.duration_s = 2.0;
        // The first read knows the spinlock only by its address; the final profile has
        // its name.
        let timeline = timeline_of(
            &profile,
            &[|row| {
                row.lock_name = format!("0x{:x}", row.lock_addr).into();
                row.total_ns /= 2;
                row.count /= 2;
            }],
        );
        let locks: Vec<&Series> = timeline
            .series
            .iter()
            .filter(|series| series.by == "lock")
            .collect();
        let by_rows: u64 = profile.locks.iter().map(|row| row.total_ns).sum();
        let by_series: u64 = locks.iter().map(|series| series.total_ns()).sum();
        assert_eq!(by_series, by_rows, "{locks:?}");
        assert!(
            locks.iter().all(|series| series.name.contains("named")),
            "{locks:?}"
        );
    }

    #[test]
    fn writes_by_cause_per_interval() {
        let mut profile = Profile::new();
        profile.duration_s = 2.0;
        profile.io = vec![crate::profile::IoRow {
            op: "write".into(),
            pid: 2,
            count: 4,
            bytes: 4 << 20,
            total_ns: 4_000_000,
            file: Some(crate::profile::FileRef {
                ino: 12,
                ..Default::default()
            }),
            ..Default::default()
        }];
        profile.io_dirtied = vec![crate::profile::DirtiedRow {
            pid: 10,
            file: crate::profile::FileRef {
                ino: 12,
                ..Default::default()
            },
            folios: 1,
        }];
        let mut builder = Builder::new(1.0);
        let mut first = profile.clone();
        first.io[0].bytes = 1 << 20;
        builder.add(1.0, totals(&first));
        let timeline = builder.finish(&profile);
        let written = timeline
            .series
            .iter()
            .find(|series| series.family == "io")
            .expect("an io series");
        assert_eq!((written.by.as_str(), written.pid), ("cause", Some(10)));
        assert_eq!(written.bytes, vec![1 << 20, 3 << 20]);
        let mut with = profile.clone();
        with.timeline = Some(timeline);
        crate::export::tables::table::assert_table_shows(
            &text(&with, 10),
            &["block IO written by cause (MiB in each interval)"],
        );
    }

    #[test]
    fn buckets_merge_and_sparkline_scales() {
        assert_eq!(buckets(&[1, 2, 3, 4, 5], 2), vec![6, 9]);
        assert_eq!(sparkline(&[0, 1, 8], 10), " ▂█");
    }
}
