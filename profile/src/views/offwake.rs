//! `offwake`: off-CPU time by waiter and by the waker seen to end each wait (`--wakers`).

use super::{AddSample, FlameLabels, View};
use std::collections::BTreeMap;

use anyhow::Result;

use crate::{
    export::{
        diff::{add, Breakdown, Measure},
        wakers,
    },
    kind::Kind,
    profile::Profile,
};

pub struct OffwakeView;

impl View for OffwakeView {
    fn kind(&self) -> Kind {
        Kind::Offwake
    }

    fn name(&self) -> &'static str {
        "offwake"
    }

    fn about(&self) -> &'static str {
        "Off-CPU time by waiter stack and waker (--wakers): the waiter's stack, a `--` \
         frame, then the waker's stack upside down with its thread on top"
    }

    fn families(&self) -> &'static [&'static str] {
        &["wakers"]
    }

    fn has_rows(&self, profile: &Profile) -> bool {
        profile.offcpu.iter().any(|row| !row.wakers.is_empty())
    }

    fn sample_types(&self) -> &'static [(&'static str, &'static str)] {
        &[("waits", "count"), ("off_cpu", "nanoseconds")]
    }

    /// Waiter stack; `--`; the waker's stack upside down (export/wakers.rs).
    fn samples(&self, profile: &Profile, add: &mut AddSample) {
        wakers::offwake_samples(profile, add);
    }

    fn flame_labels(&self) -> FlameLabels {
        FlameLabels::ms(
            "Off-CPU time by waiter and waker: waiter stack, --, waker stack upside down (width: time off CPU, ms)",
        )
    }

    fn diff_flame_labels(&self) -> FlameLabels {
        FlameLabels::ms_per_s(
            "Off-CPU time by waker, NEW against BASE (width: NEW time off CPU in ms per second of run; red grew, blue shrank)",
        )
    }

    /// Off-CPU time by who woke it: the waker's process and where it woke (names only).
    fn breakdowns(&self, profile: &Profile, out: &mut Vec<Breakdown>) {
        let mut wakers: BTreeMap<String, Measure> = BTreeMap::new();
        for row in &profile.offcpu {
            for share in crate::export::wakers::shares(profile, [row]) {
                let site = crate::export::wakers::wake_site(&share.frames);
                let key = format!(
                    "{} {} < {}",
                    row.class,
                    share.process,
                    site.first().cloned().unwrap_or_default()
                );
                add(&mut wakers, key, share.wait_ns, share.count);
            }
        }
        out.push(Breakdown::new("class and waker", wakers));
    }

    fn diff_columns(&self) -> (&'static str, &'static str) {
        ("off/s", "waits/s")
    }

    /// No series yet: wakers are in the report, JSON and flamegraphs.
    fn metrics(&self, _profile: &Profile, _out: &mut String) {}

    fn html_section(&self, profile: &Profile) -> Result<String> {
        wakers::html_section(profile)
    }
}
