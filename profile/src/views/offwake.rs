//! `offwake`: off-CPU time by waiter and by the waker seen to end each wait (`--wakers`).

use super::{AddSample, FlameLabels, View};
use crate::{export::wakers, kind::Kind, profile::Profile};

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
}
