//! Prometheus text exposition format (version 0.0.4) of a profile: what
//! `record --metrics` serves, rendered from a live snapshot of the kernel maps.
//! One function per family; label values are escaped.

use std::fmt::Write;

use crate::{
    cli::GroupBy,
    export::{escape::prometheus_label as label, report::lock_groups},
    profile::Profile,
};

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Lock wait seconds and contentions per lock type and caller.
fn cpu_series(profile: &Profile, out: &mut String) {
    header(
        out,
        "lockpath_cpu_samples_total",
        "counter",
        "On-CPU samples (perf cpu-clock, idle not counted), by process.",
    );
    for process in crate::export::report::cpu_processes(profile) {
        let _ = writeln!(
            out,
            "lockpath_cpu_samples_total{{process=\"{}\",pid=\"{}\"}} {}",
            label(&process.process),
            process.pid,
            process.samples
        );
    }
}

fn lock_series(profile: &Profile, out: &mut String) {
    let groups = lock_groups(profile, GroupBy::Caller);
    header(
        out,
        "lockpath_lock_wait_seconds_total",
        "counter",
        "Time threads waited for contended kernel locks, by lock type and calling function.",
    );
    for group in &groups {
        let _ = writeln!(
            out,
            "lockpath_lock_wait_seconds_total{{type=\"{}\",caller=\"{}\"}} {}",
            label(&group.lock_type),
            label(&group.caller),
            group.total_wait_ns as f64 / 1e9
        );
    }
    header(
        out,
        "lockpath_lock_contentions_total",
        "counter",
        "Contended kernel lock acquisitions, by lock type and calling function.",
    );
    for group in &groups {
        let _ = writeln!(
            out,
            "lockpath_lock_contentions_total{{type=\"{}\",caller=\"{}\"}} {}",
            label(&group.lock_type),
            label(&group.caller),
            group.contended
        );
    }
}

fn common_series(profile: &Profile, out: &mut String) {
    header(
        out,
        "lockpath_recording_seconds",
        "gauge",
        "Seconds since the recording started.",
    );
    let _ = writeln!(out, "lockpath_recording_seconds {}", profile.duration_s);
    header(
        out,
        "lockpath_lost_events_total",
        "counter",
        "Events the kernel side could not record, by cause (the other series are lower bounds).",
    );
    for (cause, count) in &profile.losses {
        let _ = writeln!(
            out,
            "lockpath_lost_events_total{{cause=\"{}\"}} {count}",
            label(cause)
        );
    }
}

/// Latency totals and counts of the rpc or func tables, by name and process.
fn latency_series(
    out: &mut String,
    family: &str,
    what: &str,
    groups: &[crate::export::report::LatencyGroup],
) {
    let seconds = format!("lockpath_{family}_latency_seconds_total");
    header(
        out,
        &seconds,
        "counter",
        &format!("Time spent in each {what}, by {what} and process."),
    );
    for group in groups {
        let _ = writeln!(
            out,
            "{seconds}{{{what}=\"{}\",process=\"{}\"}} {}",
            label(&group.name),
            label(&group.process),
            group.total_ns as f64 / 1e9
        );
    }
    let count = format!("lockpath_{family}_total");
    header(
        out,
        &count,
        "counter",
        &format!("Completed {what}s, by {what} and process."),
    );
    for group in groups {
        let _ = writeln!(
            out,
            "{count}{{{what}=\"{}\",process=\"{}\"}} {}",
            label(&group.name),
            label(&group.process),
            group.count
        );
    }
}

pub fn render(profile: &Profile) -> String {
    let mut out = String::new();
    common_series(profile, &mut out);
    for kind in crate::export::kinds_present(profile) {
        match kind {
            crate::cli::Kind::Lock => lock_series(profile, &mut out),
            crate::cli::Kind::Rpc => latency_series(
                &mut out,
                "rpc",
                "request",
                &crate::export::report::rpc_groups(profile),
            ),
            crate::cli::Kind::Func => latency_series(
                &mut out,
                "func",
                "function",
                &crate::export::report::func_groups(profile),
            ),
            crate::cli::Kind::Cpu => cpu_series(profile, &mut out),
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
    fn lock_series_per_type_and_caller() {
        let mut profile = profile_with_two_locks();
        profile.losses.insert("stack_lost".into(), 3);
        profile.duration_s = 1.5;
        let text = render(&profile);
        assert!(
            text.contains(
                "lockpath_lock_wait_seconds_total{type=\"spinlock\",caller=\"do_pipe2\"} 0.007\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "lockpath_lock_contentions_total{type=\"rwsem:W\",caller=\"vm_mmap_pgoff\"} 10\n"
            ),
            "{text}"
        );
        assert!(text.contains("lockpath_lost_events_total{cause=\"stack_lost\"} 3\n"));
        assert!(text.contains("# TYPE lockpath_lock_wait_seconds_total counter\n"));
        assert!(text.contains("lockpath_recording_seconds 1.5\n"));
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
