//! Prometheus text exposition format (version 0.0.4) of a profile: what
//! `record --metrics` serves, rendered from a live snapshot of the kernel maps.
//! The series common to every profile here, then those of each kind its view writes
//! (`View::metrics`); label values are escaped.

use std::collections::BTreeMap;

use crate::{
    export::formats::exposition::{labels, lost_events, metric, seconds},
    profile::Profile,
    views::VIEWS,
};

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
pub(crate) fn latency_series(
    out: &mut String,
    family: &str,
    what: &str,
    groups: &[crate::export::tables::latency::LatencyGroup],
) {
    let name_labels = |group: &crate::export::tables::latency::LatencyGroup| {
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
    for view in VIEWS.iter().filter(|view| view.present_in(profile)) {
        view.metrics(profile, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::formats::report::tests::profile_with_two_locks;

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
        // A counter of a slower path is not a lost event.
        let mut profile = profile.clone();
        profile
            .losses
            .insert("lock_stack_fingerprint_short".into(), 5);
        let with_slow_path = render(&profile);
        assert!(
            with_slow_path.contains(
                "lockpath_slow_path_events_total{cause=\"lock_stack_fingerprint_short\"} 5\n"
            ),
            "{with_slow_path}"
        );
        assert!(
            !with_slow_path
                .contains("lockpath_lost_events_total{cause=\"lock_stack_fingerprint_short\""),
            "{with_slow_path}"
        );
        assert!(text.contains("# TYPE lockpath_lock_wait_seconds_total counter\n"));
        assert!(text.contains("lockpath_recording_seconds 1.5\n"));
    }

    #[test]
    fn offcpu_seconds_per_class_and_io_histogram_per_device() {
        let mut profile = crate::export::tables::offcpu::tests::profile_with_waits_and_io();
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
