//! The Prometheus text exposition format (version 0.0.4) as both metric exporters
//! write it: the snapshot of `record --metrics` (prometheus.rs) and the counters of an
//! always-on recording (fleet.rs). Headers, label sets (values escaped), one line per
//! series, cumulative log2 histograms and the loss counter are written here once.

use std::{
    collections::BTreeMap,
    fmt::{Display, Write},
};

use crate::{export::formats::escape::prometheus_label, histogram::bucket_us};

/// Highest log2 microsecond bucket given its own `le`: 2^25 us (33.6 s); slower ones
/// count in `+Inf` only. Fixed, so every scrape has the same buckets.
pub(crate) const LAST_BUCKET: usize = 24;

/// The `# HELP` and `# TYPE` lines of a metric.
pub(crate) fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label set, `name="value",...`, values escaped.
pub(crate) fn labels(names: &[&str], values: &[impl AsRef<str>]) -> String {
    names
        .iter()
        .zip(values)
        .map(|(name, value)| format!("{name}=\"{}\"", prometheus_label(value.as_ref())))
        .collect::<Vec<_>>()
        .join(",")
}

/// Nanoseconds as the seconds a series counts.
pub(crate) fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// A metric: its header, then a line per series, `name{labels} value` (`name value`
/// for a series without labels).
pub(crate) fn metric<L: AsRef<str>, V: Display>(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    series: impl IntoIterator<Item = (L, V)>,
) {
    header(out, name, kind, help);
    for (labels, value) in series {
        let labels = labels.as_ref();
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
}

/// The lines of one histogram series (its header is the caller's): the cumulative
/// counts of the log2 microsecond buckets (`bucket(slot)` counts one) up to
/// [`LAST_BUCKET`], `+Inf`, then the sum in seconds and the count.
pub(crate) fn histogram_lines(
    out: &mut String,
    name: &str,
    labels: &str,
    bucket: impl Fn(usize) -> u64,
    count: u64,
    total_ns: u64,
) {
    let mut cumulative = 0;
    for slot in 0..=LAST_BUCKET {
        cumulative += bucket(slot);
        let (_, high_us) = bucket_us(slot);
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels},le=\"{}\"}} {cumulative}",
            high_us as f64 / 1e6
        );
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", seconds(total_ns));
    let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
}

/// `lockpath_lost_events_total`: events the kernel side could not record, by cause;
/// `lockpath_slow_path_events_total`: the counters that lose nothing (a slower path the
/// programs took instead), by cause.
pub(crate) fn lost_events(out: &mut String, losses: &BTreeMap<String, u64>) {
    let (lost, kept) = crate::profile::lost_and_kept(losses);
    metric(
        out,
        "lockpath_lost_events_total",
        "counter",
        "Events the kernel side could not record in full, by cause (the other series miss those \
         dropped).",
        cause_series(lost),
    );
    metric(
        out,
        "lockpath_slow_path_events_total",
        "counter",
        "Events the kernel side recorded in full by a slower path, by cause (nothing lost).",
        cause_series(kept),
    );
}

fn cause_series(counters: crate::profile::Counters<'_>) -> impl Iterator<Item = (String, &u64)> {
    counters
        .into_iter()
        .map(|(cause, count)| (labels(&["cause"], &[cause]), count))
}
