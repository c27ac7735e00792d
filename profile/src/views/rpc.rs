//! `rpc`: request latency, weighted onto the stack that completes each request.

use anyhow::Result;

use super::{AddCause, AddSample, CausePart, FlameLabels, View, ViewInfo};
use crate::{
    export::{
        diff::Breakdown,
        folded::{clean, push_stack},
        html::latency_section,
        latency::{latency_breakdowns, rpc_groups},
        prometheus::latency_series,
    },
    kind::Kind,
    profile::Profile,
};

const INFO: ViewInfo = ViewInfo {
    kind: Kind::Rpc,
    name: "rpc",
    about: "Request latency by process, provider, operation and completion stack",
    families: &["rpc"],
    sample_types: &[("requests", "count"), ("latency", "nanoseconds")],
};

pub struct RpcView;

impl View for RpcView {
    fn info(&self) -> &'static ViewInfo {
        &INFO
    }

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

    fn flame_labels(&self) -> FlameLabels {
        FlameLabels::ms("Request latency by completion stack (width: request time, ms)")
    }

    fn diff_flame_labels(&self) -> FlameLabels {
        FlameLabels::ms_per_s(
            "Request latency, NEW against BASE (width: NEW latency in ms per second of run; red grew, blue shrank)",
        )
    }

    /// Request latency by operation and by process.
    fn breakdowns(&self, profile: &Profile, out: &mut Vec<Breakdown>) {
        latency_breakdowns(rpc_groups(profile), "operation", out);
    }

    /// Request time by provider and operation.
    fn causes(&self, profile: &Profile, add: &mut AddCause) {
        for row in &profile.rpcs {
            add(CausePart {
                key: format!("{} {}", row.provider, row.op_name),
                ns: row.latency.total_ns as f64,
                events: row.latency.count,
                longest_ns: row.latency.max_ns as f64,
                pid: row.pid,
                stack: row.start_stack,
            });
        }
    }

    fn diff_columns(&self) -> (&'static str, &'static str) {
        ("latency/s", "req/s")
    }

    fn metrics(&self, profile: &Profile, out: &mut String) {
        latency_series(out, "rpc", "request", &rpc_groups(profile));
    }

    fn html_section(&self, profile: &Profile) -> Result<String> {
        latency_section(
            profile,
            Kind::Rpc,
            "rpc",
            "Request latency",
            "request",
            &rpc_groups(profile),
        )
    }
}
