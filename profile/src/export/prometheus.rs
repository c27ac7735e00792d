//! Prometheus text exposition format (version 0.0.4) of a profile: what
//! `record --metrics` serves, rendered from a live snapshot of the kernel maps.
//! One function per family; label values are escaped.

use std::collections::{BTreeMap, HashMap};

use crate::{
    export::{
        exposition::{header, histogram_lines, labels, lost_events, metric, seconds},
        io::{groups as io_groups, IoGroup},
        lock::{STACK_LOST, UNKNOWN},
    },
    lock::{caller, lock_type_name},
    profile::Profile,
};

/// On-CPU samples per process (name and pid).
fn cpu_series(profile: &Profile, out: &mut String) {
    metric(
        out,
        "lockpath_cpu_samples_total",
        "counter",
        "On-CPU samples (perf cpu-clock, idle not counted), by process.",
        crate::export::cpu::cpu_processes(profile)
            .into_iter()
            .map(|process| {
                let pid = process.pid.to_string();
                (
                    labels(&["process", "pid"], &[&process.process, &pid]),
                    process.samples,
                )
            }),
    );
}

/// (lock type, caller, name source) of one lock series.
type LockSeries<'a> = (&'static str, String, &'a str);

/// Lock wait and contentions per (type, caller, name source), most wait first. The name
/// source (`task`, `runqueue`, `kallsyms`, `address`, ...) splits a caller's series by
/// how its locks were named: a handful of values, so the series stay few; the lock
/// names themselves are in the fleet counters, which bound their label sets.
fn lock_sums(profile: &Profile) -> Vec<(LockSeries<'_>, (u64, u64))> {
    let mut callers: HashMap<Option<u32>, String> = HashMap::new();
    let mut sums: BTreeMap<LockSeries, (u64, u64)> = BTreeMap::new();
    for row in &profile.locks {
        let caller = callers
            .entry(row.stack)
            .or_insert_with(|| match row.stack {
                None => STACK_LOST.to_string(),
                Some(_) => caller(&profile.stack_frames(row.stack))
                    .map(|frame| frame.display())
                    .unwrap_or_else(|| UNKNOWN.to_string()),
            })
            .clone();
        let key = (
            lock_type_name(row.flags),
            caller,
            row.lock_name_source.as_str(),
        );
        let sum = sums.entry(key).or_default();
        sum.0 = sum.0.saturating_add(row.total_ns);
        sum.1 = sum.1.saturating_add(row.count);
    }
    let mut sums: Vec<_> = sums.into_iter().collect();
    sums.sort_by(|a, b| (b.1).0.cmp(&(a.1).0).then_with(|| a.0.cmp(&b.0)));
    sums
}

fn lock_series(profile: &Profile, out: &mut String) {
    let sums = lock_sums(profile);
    let lock_labels = |(lock_type, caller, source): &LockSeries| {
        labels(
            &["type", "caller", "name_source"],
            &[lock_type, caller.as_str(), source],
        )
    };
    metric(
        out,
        "lockpath_lock_wait_seconds_total",
        "counter",
        "Time threads waited for contended kernel locks, by lock type, calling function and how the lock was named.",
        sums.iter()
            .map(|(series, (total_ns, _))| (lock_labels(series), seconds(*total_ns))),
    );
    metric(
        out,
        "lockpath_lock_contentions_total",
        "counter",
        "Contended kernel lock acquisitions, by lock type, calling function and how the lock was named.",
        sums.iter()
            .map(|(series, (_, count))| (lock_labels(series), count)),
    );
}

/// Off-CPU seconds and waits per wait class and process name (names, not pids: the
/// series stay few and survive restarts).
fn offcpu_series(profile: &Profile, out: &mut String) {
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

fn common_series(profile: &Profile, out: &mut String) {
    metric(
        out,
        "lockpath_recording_seconds",
        "gauge",
        "Seconds since the recording started.",
        [("", profile.duration_s)],
    );
    waiting_series(profile, out);
    lost_events(out, &profile.losses);
}

/// Waits in progress at the reading, per kind and class: how many threads, and the
/// oldest (what a hung client shows first).
pub(crate) fn waiting_series(profile: &Profile, out: &mut String) {
    let mut groups: BTreeMap<(&str, &str), (u64, u64)> = BTreeMap::new();
    for row in crate::waiting::by_thread(profile) {
        let group = groups
            .entry((row.kind.as_str(), row.class.as_str()))
            .or_default();
        group.0 += 1;
        group.1 = group.1.max(row.age_ns);
    }
    let kind_labels = |(kind, class): &(&str, &str)| labels(&["kind", "class"], &[kind, class]);
    metric(
        out,
        "lockpath_waits_in_progress",
        "gauge",
        "Threads waiting at the reading (a wait not ended), by kind and class.",
        groups
            .iter()
            .map(|(key, (threads, _))| (kind_labels(key), *threads)),
    );
    metric(
        out,
        "lockpath_wait_in_progress_oldest_seconds",
        "gauge",
        "Age of the oldest wait in progress at the reading, by kind and class.",
        groups
            .iter()
            .map(|(key, (_, oldest))| (kind_labels(key), seconds(*oldest))),
    );
}

/// Latency totals and counts of the rpc or func tables, by name and process.
fn latency_series(
    out: &mut String,
    family: &str,
    what: &str,
    groups: &[crate::export::latency::LatencyGroup],
) {
    let name_labels = |group: &crate::export::latency::LatencyGroup| {
        labels(&[what, "process"], &[&group.name, &group.process])
    };
    metric(
        out,
        &format!("lockpath_{family}_latency_seconds_total"),
        "counter",
        &format!("Time spent in each {what}, by {what} and process."),
        groups
            .iter()
            .map(|group| (name_labels(group), seconds(group.latency.total_ns))),
    );
    metric(
        out,
        &format!("lockpath_{family}_total"),
        "counter",
        &format!("Completed {what}s, by {what} and process."),
        groups
            .iter()
            .map(|group| (name_labels(group), group.latency.count)),
    );
}

pub fn render(profile: &Profile) -> String {
    let mut out = String::new();
    common_series(profile, &mut out);
    for kind in crate::export::kinds_present(profile) {
        match kind {
            crate::kind::Kind::Lock => lock_series(profile, &mut out),
            crate::kind::Kind::Offcpu => offcpu_series(profile, &mut out),
            crate::kind::Kind::Io => io_series(profile, &mut out),
            crate::kind::Kind::Rpc => latency_series(
                &mut out,
                "rpc",
                "request",
                &crate::export::latency::rpc_groups(profile),
            ),
            crate::kind::Kind::Func => latency_series(
                &mut out,
                "func",
                "function",
                &crate::export::latency::func_groups(profile),
            ),
            crate::kind::Kind::Cpu => cpu_series(profile, &mut out),
            // Holds under contention are in the report, JSON and flamegraphs; no series yet.
            crate::kind::Kind::Hold => {}
            // Wakers are in the report, JSON and flamegraphs; no series yet.
            crate::kind::Kind::Offwake => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::report::tests::profile_with_two_locks;

    #[test]
    fn cpu_series_per_process() {
        let mut profile = Profile::new();
        profile.processes = vec![crate::profile::Process {
            pid: 9,
            comm: "app".into(),
            ..Default::default()
        }];
        profile.cpu = vec![crate::profile::CpuRow {
            pid: 9,
            tid: 9,
            kernel_stack: None,
            user_stack: None,
            samples: 42,
        }];
        let text = render(&profile);
        assert!(
            text.contains("lockpath_cpu_samples_total{process=\"app\",pid=\"9\"} 42\n"),
            "{text}"
        );
    }

    #[test]
    fn lock_series_per_type_caller_and_name_source() {
        let mut profile = profile_with_two_locks();
        profile.locks[0].lock_name_source = "address".into();
        profile.locks[1].lock_name_source = "address".into();
        profile.locks[2].lock_name_source = "task".into();
        // The same caller and type on a lock named another way: a series of its own.
        let mut named = profile.locks[1].clone();
        named.lock_name = "rcu_state+0x40".into();
        named.lock_name_source = "kallsyms".into();
        named.total_ns = 3_000_000;
        named.count = 4;
        profile.locks.push(named);
        profile.losses.insert("stack_lost".into(), 3);
        profile.duration_s = 1.5;
        let text = render(&profile);
        assert!(
            text.contains(
                "lockpath_lock_wait_seconds_total{type=\"spinlock\",caller=\"do_pipe2\",name_source=\"address\"} 0.007\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "lockpath_lock_contentions_total{type=\"rwsem:W\",caller=\"vm_mmap_pgoff\",name_source=\"task\"} 10\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "lockpath_lock_contentions_total{type=\"spinlock\",caller=\"do_pipe2\",name_source=\"kallsyms\"} 4\n"
            ),
            "{text}"
        );
        // Most wait first; every series has the three labels.
        let waits: Vec<&str> = text
            .lines()
            .filter(|line| line.starts_with("lockpath_lock_wait_seconds_total{"))
            .collect();
        assert_eq!(waits.len(), 3, "{text}");
        assert!(waits[0].ends_with("} 0.007"), "{waits:?}");
        assert!(waits[2].ends_with("} 0.003"), "{waits:?}");
        assert!(text.contains("lockpath_lost_events_total{cause=\"stack_lost\"} 3\n"));
        assert!(text.contains("# TYPE lockpath_lock_wait_seconds_total counter\n"));
        assert!(text.contains("lockpath_recording_seconds 1.5\n"));
    }

    #[test]
    fn offcpu_seconds_per_class_and_io_histogram_per_device() {
        let mut profile = crate::export::offcpu::tests::profile_with_waits_and_io();
        profile.losses.insert("io_unmatched_complete".into(), 2);
        let text = render(&profile);
        assert!(
            text.contains(
                "lockpath_offcpu_seconds_total{class=\"buffer\",process=\"mdtest\"} 0.06\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("lockpath_offcpu_waits_total{class=\"sleep\",process=\"mdtest\"} 4\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE lockpath_io_latency_seconds histogram\n"));
        let bucket = |le: &str| {
            format!(
                "lockpath_io_latency_seconds_bucket{{device=\"loop0\",op=\"read\",le=\"{le}\"}} "
            )
        };
        // Cumulative: 0 below 64 us, 90 up to 128 us, all 100 from 4096 us on.
        for (le, count) in [
            ("0.000064", 0),
            ("0.000128", 90),
            ("0.002048", 90),
            ("0.004096", 100),
            ("+Inf", 100),
        ] {
            assert!(
                text.contains(&format!("{}{count}\n", bucket(le))),
                "{le}: {text}"
            );
        }
        assert!(
            text.contains("lockpath_io_latency_seconds_sum{device=\"loop0\",op=\"read\"} 0.01\n")
        );
        assert!(
            text.contains("lockpath_io_latency_seconds_count{device=\"loop0\",op=\"read\"} 100\n")
        );
        assert!(text.contains("lockpath_lost_events_total{cause=\"io_unmatched_complete\"} 2\n"));
    }

    #[test]
    fn hostile_caller_is_escaped() {
        let mut profile = profile_with_two_locks();
        profile.frames[2].name = "f<\"x\">\\\n".into();
        let text = render(&profile);
        assert!(text.contains("caller=\"f<\\\"x\\\">\\\\\\n\""), "{text}");
        for line in text.lines() {
            assert!(
                line.starts_with('#') || line.starts_with("lockpath_"),
                "broken line: {line}"
            );
        }
    }
}
