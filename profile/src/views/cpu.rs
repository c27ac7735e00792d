//! `cpu`: on-CPU samples (perf cpu-clock), counted rather than timed.

use inferno::flamegraph::color::{MultiPalette, Palette};

use super::{AddCause, AddSample, CausePart, ReportHeadings, View, ViewInfo};
use crate::{
    export::{
        formats::{
            exposition::{labels, metric},
            folded::clean,
            html::table,
            report::TextReport,
        },
        operations::diff::{summed, Breakdown},
        tables::cpu::{cpu_functions, cpu_processes},
    },
    profile::{CpuRow, Profile},
};

/// `CpuView`'s constants (its `info`, by the `kinds!` table).
pub(super) const INFO: ViewInfo = ViewInfo {
    about: "On-CPU samples by process and stack (user frames, then kernel frames `_[k]`)",
    families: &["cpu"],
    sample_types: &[("samples", "count")],
    flame_title: "On-CPU samples (width: CPU time; kernel frames _[k], orange)",
    diff_flame_title: "On-CPU samples, NEW against BASE (width: NEW samples per second of run; red grew, blue shrank)",
    diff_columns: ("samples/s", "total/s"),
    report: ReportHeadings {
        title: "On-CPU samples",
        flame_heading: Some("Flamegraph (width: CPU samples; kernel frames _[k])"),
        flame_title: "on-CPU flamegraph",
    },
};

pub struct CpuView;

impl View for CpuView {
    fn has_rows(&self, profile: &Profile) -> bool {
        !profile.cpu.is_empty()
    }

    fn weighs_time(&self) -> bool {
        false
    }

    fn samples(&self, profile: &Profile, add: &mut AddSample) {
        for row in &profile.cpu {
            add(cpu_frames(profile, row), &[row.samples]);
        }
    }

    /// What one sample is worth, when the profile says how often it sampled.
    fn flame_subtitle(&self, profile: &Profile) -> Option<String> {
        (profile.cpu_freq_hz > 0).then(|| {
            format!(
                "{} Hz per CPU: one sample is about {:.1} ms of CPU",
                profile.cpu_freq_hz,
                1000.0 / profile.cpu_freq_hz as f64
            )
        })
    }

    /// Kernel frames (`_[k]`) orange, Rust/C++ (`::`) yellow, C red.
    fn flame_palette(&self) -> Option<Palette> {
        Some(Palette::Multi(MultiPalette::Perl))
    }

    /// On-CPU samples by process and by function (self, total).
    fn breakdowns(&self, profile: &Profile, out: &mut Vec<Breakdown>) {
        let processes = cpu_processes(profile)
            .into_iter()
            .map(|process| (process.process, process.samples, process.samples));
        out.push(Breakdown::new("process", summed(processes)));
        let functions = cpu_functions(profile).into_iter().map(|function| {
            (
                function.function,
                function.self_samples,
                function.total_samples,
            )
        });
        out.push(Breakdown::new("function (self, total)", summed(functions)));
    }

    /// CPU time by the function on the CPU (the leaf of the kernel stack, else of the
    /// user stack), a sample being worth one sampling period.
    fn causes(&self, profile: &Profile, add: &mut AddCause) {
        if profile.cpu_freq_hz == 0 {
            return;
        }
        let sample_ns = 1e9 / profile.cpu_freq_hz as f64;
        for row in &profile.cpu {
            let stack = row.kernel_stack.or(row.user_stack);
            let leaf = profile
                .stack_frames(stack)
                .first()
                .map(|frame| frame.display())
                .unwrap_or_else(|| "[unknown]".to_string());
            add(CausePart {
                key: leaf,
                ns: row.samples as f64 * sample_ns,
                events: row.samples,
                longest_ns: sample_ns,
                pid: row.pid,
                stack,
            });
        }
    }

    /// On-CPU samples per process (name and pid).
    fn metrics(&self, profile: &Profile, out: &mut String) {
        metric(
            out,
            "lockpath_cpu_samples_total",
            "counter",
            "On-CPU samples (perf cpu-clock, idle not counted), by process.",
            cpu_processes(profile).into_iter().map(|process| {
                let pid = process.pid.to_string();
                (
                    labels(&["process", "pid"], &[&process.process, &pid]),
                    process.samples,
                )
            }),
        );
    }

    fn text_section(&self, profile: &Profile, text: &TextReport) -> String {
        text.section(
            text.shows(profile, self.families(), self.has_rows(profile)),
            "",
            || crate::export::tables::cpu::cpu_tables(profile, text.top),
        )
    }

    /// The tables of on-CPU samples by process and by function.
    fn html_tables(&self, profile: &Profile, out: &mut String) {
        let processes: Vec<Vec<String>> = cpu_processes(profile)
            .into_iter()
            .take(50)
            .map(|process| {
                vec![
                    process.samples.to_string(),
                    process.pid.to_string(),
                    process.process,
                ]
            })
            .collect();
        let functions: Vec<Vec<String>> = cpu_functions(profile)
            .into_iter()
            .take(50)
            .map(|function| {
                let suffix = if function.kernel { " [k]" } else { "" };
                vec![
                    function.self_samples.to_string(),
                    function.total_samples.to_string(),
                    format!("{}{suffix}", function.function),
                ]
            })
            .collect();
        for (title, header, rows) in [
            ("By process", ["samples", "pid", "process"], processes),
            (
                "Top functions (self, total)",
                ["self", "total", "function"],
                functions,
            ),
        ] {
            out.push_str(&format!("<h3>{title}</h3>\n"));
            out.push_str(&table(&header, &[true, true, false], &rows));
        }
    }
}

/// Suffix of kernel frames in CPU stacks, as perf and inferno write it (inferno's
/// palettes color such frames apart).
pub const KERNEL_SUFFIX: &str = "_[k]";

/// On-CPU sample: process; user frames from the outermost; kernel frames (`_[k]`) from
/// the system call or interrupt entry to the leaf. A user stack that stops short of the
/// program's entry point starts with `[truncated]`, so it does not pose as complete.
pub fn cpu_frames(profile: &Profile, row: &CpuRow) -> Vec<String> {
    let mut frames = vec![clean(&profile.process_name(row.pid))];
    let user = profile.stack_frames(row.user_stack);
    if row.user_stack.is_some() && profile.stack_truncated(row.user_stack) {
        frames.push("[truncated]".into());
    }
    frames.extend(user.iter().rev().map(|frame| clean(&frame.display())));
    let kernel = profile.stack_frames(row.kernel_stack);
    frames.extend(
        kernel
            .iter()
            .rev()
            .map(|frame| format!("{}{KERNEL_SUFFIX}", clean(&frame.display()))),
    );
    if user.is_empty() && kernel.is_empty() {
        frames.push("[stack lost]".into());
    }
    frames
}
