//! `func`: function latency (kernel `func` and user `ufunc` probes), by the stack at
//! the function's entry.

use super::{AddCause, AddSample, CausePart, ReportHeadings, View, ViewInfo};
use crate::{
    export::{
        formats::{
            folded::{clean, push_stack},
            html::latency_table,
            prometheus::latency_series,
            report::TextReport,
        },
        operations::diff::Breakdown,
        tables::latency::{self, func_groups, latency_breakdowns},
    },
    profile::Profile,
};

/// `FuncView`'s constants (its `info`, by the `kinds!` table).
pub(super) const INFO: ViewInfo = ViewInfo {
    about: "Function latency by process, function and stack at entry",
    families: &["func", "ufunc"],
    sample_types: &[("calls", "count"), ("latency", "nanoseconds")],
    flame_title: "Function latency by stack at entry (width: time in the function, ms)",
    diff_flame_title: "Function latency, NEW against BASE (width: NEW time in ms per second of run; red grew, blue shrank)",
    diff_columns: ("time/s", "calls/s"),
    report: ReportHeadings {
        title: "Function latency",
        flame_heading: Some("Flamegraph (width: latency)"),
        flame_title: "func latency flamegraph",
    },
};

pub struct FuncView;

impl View for FuncView {
    fn has_rows(&self, profile: &Profile) -> bool {
        !profile.funcs.is_empty()
    }

    /// Process; function; the stack at entry from the outermost frame.
    fn samples(&self, profile: &Profile, add: &mut AddSample) {
        for row in &profile.funcs {
            let mut parts = vec![clean(&profile.process_name(row.pid)), clean(&row.function)];
            push_stack(&mut parts, profile, row.stack);
            add(parts, &[row.latency.count, row.latency.total_ns]);
        }
    }

    /// Function latency by function and by process.
    fn breakdowns(&self, profile: &Profile, out: &mut Vec<Breakdown>) {
        latency_breakdowns(func_groups(profile), "function", out);
    }

    /// Time in each traced function.
    fn causes(&self, profile: &Profile, add: &mut AddCause) {
        for row in &profile.funcs {
            let key = row.function.clone();
            add(CausePart::of_latency(key, row.pid, row.stack, &row.latency));
        }
    }

    fn metrics(&self, profile: &Profile, out: &mut String) {
        latency_series(out, "func", "function", &func_groups(profile));
    }

    fn text_section(&self, profile: &Profile, text: &TextReport) -> String {
        text.section(
            text.shows(profile, self.families(), self.has_rows(profile)),
            "function latency, by function and process (total time):\n",
            || latency::latency_table(&func_groups(profile), "function", text.top),
        )
    }

    fn html_tables(&self, profile: &Profile, out: &mut String) {
        latency_table(out, "function", &func_groups(profile));
    }
}
