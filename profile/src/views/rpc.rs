//! `rpc`: request latency, weighted onto the stack that completes each request.

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
        tables::latency::{self, latency_breakdowns, rpc_groups},
    },
    profile::Profile,
};

/// `RpcView`'s constants (its `info`, by the `kinds!` table).
pub(super) const INFO: ViewInfo = ViewInfo {
    about: "Request latency by process, provider, operation and completion stack",
    families: &["rpc"],
    sample_types: &[("requests", "count"), ("latency", "nanoseconds")],
    flame_title: "Request latency by completion stack (width: request time, ms)",
    diff_flame_title: "Request latency, NEW against BASE (width: NEW latency in ms per second of run; red grew, blue shrank)",
    diff_columns: ("latency/s", "req/s"),
    report: ReportHeadings {
        title: "Request latency",
        flame_heading: Some("Flamegraph (width: latency)"),
        flame_title: "rpc latency flamegraph",
    },
};

pub struct RpcView;

impl View for RpcView {
    fn has_rows(&self, profile: &Profile) -> bool {
        !profile.rpcs.is_empty()
    }

    /// Process; provider and operation; who runs the completion path, weighted by the
    /// latency of the requests.
    fn samples(&self, profile: &Profile, add: &mut AddSample) {
        for row in &profile.rpcs {
            let mut parts = vec![
                clean(&profile.process_name(row.pid)),
                clean(&format!("{} {}", row.provider, row.op_name)),
            ];
            push_stack(&mut parts, profile, row.end_stack);
            add(parts, &[row.latency.count, row.latency.total_ns]);
        }
    }

    /// Request latency by operation and by process.
    fn breakdowns(&self, profile: &Profile, out: &mut Vec<Breakdown>) {
        latency_breakdowns(rpc_groups(profile), "operation", out);
    }

    /// Request time by provider and operation.
    fn causes(&self, profile: &Profile, add: &mut AddCause) {
        for row in &profile.rpcs {
            let key = format!("{} {}", row.provider, row.op_name);
            add(CausePart::of_latency(
                key,
                row.pid,
                row.start_stack,
                &row.latency,
            ));
        }
    }

    fn metrics(&self, profile: &Profile, out: &mut String) {
        latency_series(out, "rpc", "request", &rpc_groups(profile));
    }

    fn text_section(&self, profile: &Profile, text: &TextReport) -> String {
        text.section(
            text.shows(profile, self.families(), self.has_rows(profile)),
            "request latency, by operation and process (total time):\n",
            || latency::latency_table(&rpc_groups(profile), "request", text.top),
        )
    }

    fn html_tables(&self, profile: &Profile, out: &mut String) {
        latency_table(out, "request", &rpc_groups(profile));
    }
}
