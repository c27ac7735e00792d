//! Prometheus counters of an always-on recording (`record --rotate --metrics`): the
//! totals of every period so far, so each series only grows and a central Prometheus
//! ranks many clients with `rate()`. Labels are names (lock and how it was named, type,
//! caller, wait class, process), never pids or addresses alone, and each metric keeps at most `top` label
//! sets: the first ones seen (most wait first within a period) get a series of their
//! own for the life of the agent, the rest add into one series whose labels are all
//! `other`. A label set never moves between series, so no counter ever goes down.

use std::collections::{BTreeMap, HashMap};

use crate::{
    export::formats::exposition::{header, histogram_lines, labels, lost_events, metric, seconds},
    lock::{caller, lock_type_name},
    profile::{Latency, Profile},
};

/// The label value of the series that collects every label set beyond the top N.
pub const OTHER: &str = "other";

/// What one series adds up.
#[derive(Debug, Clone, Default, PartialEq)]
struct Totals {
    count: u64,
    total_ns: u64,
    /// Log2 microsecond buckets (histograms only).
    hist: Vec<u64>,
}

impl Totals {
    fn add(&mut self, other: &Totals) {
        self.count += other.count;
        self.total_ns += other.total_ns;
        crate::histogram::add_into(&mut self.hist, &other.hist);
    }

    /// Totals without a histogram (counters).
    fn counts(count: u64, total_ns: u64) -> Totals {
        Totals {
            count,
            total_ns,
            hist: Vec::new(),
        }
    }

    fn of_latency(latency: &Latency) -> Totals {
        Totals {
            count: latency.count,
            total_ns: latency.total_ns,
            hist: latency.hist.clone(),
        }
    }
}

/// The series of one metric: up to `top` label sets of their own, the rest in `other`.
#[derive(Debug, Clone, Default)]
struct Series {
    own: BTreeMap<Vec<String>, Totals>,
    other: Totals,
}

impl Series {
    /// Decides where `labels` count (for good: the first `top` label sets seen).
    fn admit(&mut self, labels: &[String], top: usize) -> bool {
        if self.own.contains_key(labels) {
            return true;
        }
        if self.own.len() < top {
            self.own.insert(labels.to_vec(), Totals::default());
            return true;
        }
        false
    }

    fn add(&mut self, labels: Vec<String>, totals: &Totals, top: usize) {
        match self.admit(&labels, top) {
            true => self.own.entry(labels).or_default().add(totals),
            false => self.other.add(totals),
        }
    }
}

/// One metric: its name, what it is, its label names.
struct Metric {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    /// A Prometheus histogram (seconds) of the totals; else two counters, wait seconds
    /// (`name`, none when empty) and events (`count_name`).
    histogram: bool,
    count_name: &'static str,
    count_help: &'static str,
}

const LOCK: usize = 0;
const OFFCPU: usize = 1;
const IO: usize = 2;
const RPC: usize = 3;
const FUNC: usize = 4;
const CPU: usize = 5;

const METRICS: [Metric; 6] = [
    Metric {
        name: "lockpath_lock_wait_seconds_total",
        help: "Time threads waited for contended kernel locks, by lock (and how it was named), type, caller and process.",
        labels: &["lock", "name_source", "type", "caller", "process"],
        histogram: false,
        count_name: "lockpath_lock_contentions_total",
        count_help: "Contended kernel lock acquisitions, by lock (and how it was named), type, caller and process.",
    },
    Metric {
        name: "lockpath_offcpu_seconds_total",
        help: "Time threads spent off the CPU, by wait class and process.",
        labels: &["class", "process"],
        histogram: false,
        count_name: "lockpath_offcpu_waits_total",
        count_help: "Times threads left the CPU to wait, by wait class and process.",
    },
    Metric {
        name: "lockpath_io_latency_seconds",
        help: "Block-IO request latency, issue to completion, by device, operation and process.",
        labels: &["device", "op", "process"],
        histogram: true,
        count_name: "",
        count_help: "",
    },
    Metric {
        name: "lockpath_rpc_latency_seconds",
        help: "Request latency, send to reply, by provider, operation and process.",
        labels: &["provider", "op", "process"],
        histogram: true,
        count_name: "",
        count_help: "",
    },
    Metric {
        name: "lockpath_func_latency_seconds",
        help: "Function latency, entry to return, by function and process.",
        labels: &["function", "process"],
        histogram: true,
        count_name: "",
        count_help: "",
    },
    Metric {
        // Samples only: no seconds counter.
        name: "",
        help: "",
        labels: &["process"],
        histogram: false,
        count_name: "lockpath_cpu_samples_total",
        count_help: "On-CPU samples (perf cpu-clock, idle not counted), by process.",
    },
];

/// The counters of an always-on recording.
#[derive(Debug, Clone)]
pub struct FleetCounters {
    top: usize,
    series: [Series; 6],
    losses: BTreeMap<String, u64>,
    periods: u64,
    /// Seconds recorded in the finished periods.
    seconds: f64,
    /// Process names of the period in progress, by pid, as first seen: a process that
    /// is renamed (exec) within a period keeps one label until the period ends, so a
    /// reading of the period in progress never moves counts between series.
    names: HashMap<u32, String>,
}

impl FleetCounters {
    /// Counters with at most `top` label sets per metric (plus `other`).
    pub fn new(top: usize) -> Self {
        FleetCounters {
            top,
            series: Default::default(),
            losses: BTreeMap::new(),
            periods: 0,
            seconds: 0.0,
            names: HashMap::new(),
        }
    }

    /// Adds a finished period.
    pub fn add_period(&mut self, period: &Profile) {
        let top = self.top;
        for (metric, rows) in rows_of(period, &mut self.names).into_iter().enumerate() {
            for (labels, totals) in rows {
                self.series[metric].add(labels, &totals, top);
            }
        }
        self.names.clear();
        for (cause, count) in &period.losses {
            *self.losses.entry(cause.clone()).or_default() += count;
        }
        self.periods += 1;
        self.seconds += period.duration_s;
    }

    /// The exposition text: the finished periods plus `live` (the period in progress,
    /// read from the kernel maps without clearing them). Label sets first seen live are
    /// admitted for good, as if their period had finished.
    pub fn render_with(&mut self, live: Option<&Profile>) -> String {
        let mut view = self.clone();
        if let Some(live) = live {
            let top = self.top;
            for (metric, rows) in rows_of(live, &mut self.names).into_iter().enumerate() {
                for (labels, totals) in rows {
                    match self.series[metric].admit(&labels, top) {
                        true => view.series[metric].own.entry(labels).or_default(),
                        false => &mut view.series[metric].other,
                    }
                    .add(&totals);
                }
            }
            for (cause, count) in &live.losses {
                *view.losses.entry(cause.clone()).or_default() += count;
            }
            view.seconds += live.duration_s;
        }
        let mut out = view.render();
        // Waits in progress are a reading of now, not a sum over periods.
        if let Some(live) = live {
            crate::export::formats::prometheus::waiting_series(live, &mut out);
        }
        out
    }

    fn render(&self) -> String {
        let mut out = String::new();
        for (metric, series) in METRICS.iter().zip(&self.series) {
            if series.own.is_empty() && series.other == Totals::default() {
                continue;
            }
            let mut rows: Vec<(String, &Totals)> = series
                .own
                .iter()
                .map(|(values, totals)| (labels(metric.labels, values), totals))
                .collect();
            if series.other != Totals::default() {
                let others: Vec<String> = vec![OTHER.to_string(); metric.labels.len()];
                rows.push((labels(metric.labels, &others), &series.other));
            }
            match metric.histogram {
                true => histogram(&mut out, metric, &rows),
                false => counters(&mut out, metric, &rows),
            }
        }
        lost_events(&mut out, &self.losses);
        metric(
            &mut out,
            "lockpath_periods_total",
            "counter",
            "Periods (profiles) finished by this always-on recording.",
            [("", self.periods)],
        );
        metric(
            &mut out,
            "lockpath_recorded_seconds_total",
            "counter",
            "Seconds recorded so far.",
            [("", self.seconds)],
        );
        out
    }
}

fn counters(out: &mut String, metric_of: &Metric, rows: &[(String, &Totals)]) {
    if !metric_of.name.is_empty() {
        metric(
            out,
            metric_of.name,
            "counter",
            metric_of.help,
            rows.iter()
                .map(|(labels, totals)| (labels, seconds(totals.total_ns))),
        );
    }
    metric(
        out,
        metric_of.count_name,
        "counter",
        metric_of.count_help,
        rows.iter().map(|(labels, totals)| (labels, totals.count)),
    );
}

fn histogram(out: &mut String, metric: &Metric, rows: &[(String, &Totals)]) {
    header(out, metric.name, "histogram", metric.help);
    for (labels, totals) in rows {
        histogram_lines(
            out,
            metric.name,
            labels,
            |slot| totals.hist.get(slot).copied().unwrap_or(0),
            totals.count,
            totals.total_ns,
        );
    }
}

/// The rows of each metric in a profile, summed by label set, most wait first (the
/// order in which new label sets are admitted).
fn rows_of(profile: &Profile, names: &mut HashMap<u32, String>) -> [Vec<(Vec<String>, Totals)>; 6] {
    let mut process = |pid: u32| {
        names
            .entry(pid)
            .or_insert_with(|| profile.process_name(pid))
            .clone()
    };
    let mut sums: [HashMap<Vec<String>, Totals>; 6] = Default::default();
    let mut put = |metric: usize, labels: Vec<String>, totals: Totals| {
        sums[metric].entry(labels).or_default().add(&totals);
    };
    let mut callers: HashMap<Option<u32>, String> = HashMap::new();
    for row in &profile.locks {
        let caller = callers
            .entry(row.stack)
            .or_insert_with(|| {
                caller(&profile.stack_frames(row.stack))
                    .map(|frame| frame.name.clone())
                    .unwrap_or_else(|| "unknown".into())
            })
            .clone();
        // The name source is one per lock name (the method that named it), so it adds
        // no label sets of its own.
        let labels = vec![
            row.lock_name.to_string(),
            row.lock_name_source.to_string(),
            lock_type_name(row.flags).to_string(),
            caller,
            process(row.pid),
        ];
        put(LOCK, labels, Totals::counts(row.count, row.total_ns));
    }
    for row in &profile.offcpu {
        let labels = vec![row.class.clone(), process(row.pid)];
        put(OFFCPU, labels, Totals::counts(row.count, row.total_ns));
    }
    for row in &profile.io {
        let labels = vec![row.device.clone(), row.op.clone(), process(row.pid)];
        let totals = Totals {
            count: row.count,
            total_ns: row.total_ns,
            hist: row.hist.clone(),
        };
        put(IO, labels, totals);
    }
    for row in &profile.rpcs {
        let labels = vec![row.provider.clone(), row.op_name.clone(), process(row.pid)];
        put(RPC, labels, Totals::of_latency(&row.latency));
    }
    for row in &profile.funcs {
        let labels = vec![row.function.clone(), process(row.pid)];
        put(FUNC, labels, Totals::of_latency(&row.latency));
    }
    for row in &profile.cpu {
        put(CPU, vec![process(row.pid)], Totals::counts(row.samples, 0));
    }
    sums.map(|sums| {
        let mut rows: Vec<(Vec<String>, Totals)> = sums.into_iter().collect();
        rows.sort_by(|a, b| {
            (b.1.total_ns, b.1.count)
                .cmp(&(a.1.total_ns, a.1.count))
                .then_with(|| a.0.cmp(&b.0))
        });
        rows
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{LockRow, Process};

    fn period(rows: &[(&str, u32, u64, u64)]) -> Profile {
        let mut profile = Profile::new();
        profile.duration_s = 2.0;
        for (index, &(lock, pid, count, total_ns)) in rows.iter().enumerate() {
            profile.locks.push(LockRow {
                pid,
                lock_addr: index as u64 + 1,
                lock_name: lock.into(),
                lock_name_source: if lock.starts_with("0x") {
                    "address"
                } else {
                    "task"
                }
                .into(),
                flags: 0,
                stack: None,
                count,
                total_ns,
                max_ns: total_ns,
                min_ns: 1,
                owner_pid: None,
                owner_stack: None,
            });
            if profile.process(pid).is_none() {
                profile.processes.push(Process {
                    pid,
                    comm: format!("proc{pid}"),
                    ..Default::default()
                });
            }
        }
        profile
    }

    /// `name{labels} value` lines of one metric, as label text -> value.
    fn values(text: &str, metric: &str) -> BTreeMap<String, f64> {
        text.lines()
            .filter(|line| line.starts_with(&format!("{metric}{{")))
            .map(|line| {
                let (series, value) = line.rsplit_once(' ').expect("value");
                (series.to_string(), value.parse().expect("number"))
            })
            .collect()
    }

    #[test]
    fn counters_only_grow_and_cardinality_is_bounded() {
        let mut counters = FleetCounters::new(2);
        counters.add_period(&period(&[("a", 1, 10, 3000), ("b", 1, 5, 2000)]));
        let first = values(
            &counters.render_with(None),
            "lockpath_lock_contentions_total",
        );
        assert_eq!(first.len(), 2, "{first:?}");
        assert!(
            first.contains_key(
                "lockpath_lock_contentions_total{lock=\"a\",name_source=\"task\",type=\"semaphore\",caller=\"unknown\",process=\"proc1\"}"
            ),
            "{first:?}"
        );
        // A third lock goes to `other`; the first two keep their series.
        counters.add_period(&period(&[("c", 2, 100, 90000), ("a", 1, 1, 10)]));
        let live = period(&[("d", 2, 7, 50)]);
        let text = counters.render_with(Some(&live));
        let second = values(&text, "lockpath_lock_contentions_total");
        assert_eq!(second.len(), 3, "top 2 plus other: {second:?}");
        for (series, value) in &first {
            assert!(second[series] >= *value, "{series} went down");
        }
        let other = second
            .iter()
            .find(|(series, _)| series.contains("lock=\"other\""))
            .expect("an other series");
        assert_eq!(*other.1, 107.0, "c and the live d");
        assert!(other.0.contains("name_source=\"other\""), "{other:?}");
        // An unnamed lock says so; its label set counts like any other.
        let mut counters = FleetCounters::new(1);
        counters.add_period(&period(&[("0xffff8881", 3, 2, 10)]));
        let unnamed_text = counters.render_with(Some(&period(&[("0xffff8882", 3, 1, 5)])));
        let unnamed = values(&unnamed_text, "lockpath_lock_contentions_total");
        assert_eq!(unnamed.len(), 2, "one own series and other: {unnamed:?}");
        assert!(
            unnamed
                .keys()
                .any(|series| series.contains("lock=\"0xffff8881\",name_source=\"address\",type=")),
            "{unnamed:?}"
        );
        let total: f64 = second.values().sum();
        assert_eq!(total, 10.0 + 5.0 + 100.0 + 1.0 + 7.0);
        assert!(text.contains("lockpath_periods_total 2"));
    }

    #[test]
    fn histograms_are_cumulative() {
        let mut profile = Profile::new();
        profile.rpcs.push(crate::profile::RpcRow {
            provider: "fuse".into(),
            op: 15,
            op_name: "READ".into(),
            pid: 7,
            start_stack: None,
            end_stack: None,
            latency: Latency {
                count: 3,
                total_ns: 9000,
                max_ns: 5000,
                min_ns: 1000,
                hist: vec![0, 2, 1],
            },
        });
        let mut counters = FleetCounters::new(5);
        counters.add_period(&profile);
        let text = counters.render_with(None);
        let buckets = values(&text, "lockpath_rpc_latency_seconds_bucket");
        let le = |bound: &str| {
            buckets
                .iter()
                .find(|(series, _)| series.contains(&format!("le=\"{bound}\"")))
                .map(|(_, value)| *value)
                .expect("bucket")
        };
        assert_eq!(le("0.000002"), 0.0);
        assert_eq!(le("0.000004"), 2.0);
        assert_eq!(le("0.000008"), 3.0);
        assert_eq!(le("+Inf"), 3.0);
        assert!(text.contains("lockpath_rpc_latency_seconds_count{provider=\"fuse\",op=\"READ\",process=\"pid 7\"} 3"), "{text}");
    }
}
