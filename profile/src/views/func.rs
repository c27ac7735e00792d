//! `func`: function latency (kernel `func` and user `ufunc` probes), by the stack at
//! the function's entry.

use anyhow::Result;

use super::{AddCause, AddSample, CausePart, FlameLabels, View, ViewInfo};
use crate::{
    export::{
        diff::Breakdown,
        folded::{clean, push_stack},
        html::latency_section,
        latency::{func_groups, latency_breakdowns},
        prometheus::latency_series,
    },
    kind::Kind,
    profile::Profile,
};

const INFO: ViewInfo = ViewInfo {
    kind: Kind::Func,
    name: "func",
    about: "Function latency by process, function and stack at entry",
    families: &["func", "ufunc"],
    sample_types: &[("calls", "count"), ("latency", "nanoseconds")],
};

pub struct FuncView;

impl View for FuncView {
    fn info(&self) -> &'static ViewInfo {
        &INFO
    }

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

    fn flame_labels(&self) -> FlameLabels {
        FlameLabels::ms("Function latency by stack at entry (width: time in the function, ms)")
    }

    fn diff_flame_labels(&self) -> FlameLabels {
        FlameLabels::ms_per_s(
            "Function latency, NEW against BASE (width: NEW time in ms per second of run; red grew, blue shrank)",
        )
    }

    /// Function latency by function and by process.
    fn breakdowns(&self, profile: &Profile, out: &mut Vec<Breakdown>) {
        latency_breakdowns(func_groups(profile), "function", out);
    }

    /// Time in each traced function.
    fn causes(&self, profile: &Profile, add: &mut AddCause) {
        for row in &profile.funcs {
            add(CausePart {
                key: row.function.clone(),
                ns: row.latency.total_ns as f64,
                events: row.latency.count,
                longest_ns: row.latency.max_ns as f64,
                pid: row.pid,
                stack: row.stack,
            });
        }
    }

    fn diff_columns(&self) -> (&'static str, &'static str) {
        ("time/s", "calls/s")
    }

    fn metrics(&self, profile: &Profile, out: &mut String) {
        latency_series(out, "func", "function", &func_groups(profile));
    }

    fn html_section(&self, profile: &Profile) -> Result<String> {
        latency_section(
            profile,
            Kind::Func,
            "func",
            "Function latency",
            "function",
            &func_groups(profile),
        )
    }
}
