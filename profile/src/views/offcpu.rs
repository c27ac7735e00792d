//! `offcpu`: time threads spent off the CPU, by wait class.

use super::{AddSample, FlameLabels, View};
use crate::{
    export::folded::{clean, clean_frames, push_stack},
    kind::Kind,
    profile::{OffcpuRow, Profile},
};

pub struct OffcpuView;

impl View for OffcpuView {
    fn kind(&self) -> Kind {
        Kind::Offcpu
    }

    fn name(&self) -> &'static str {
        "offcpu"
    }

    fn about(&self) -> &'static str {
        "Off-CPU time by process, wait class and stack"
    }

    fn families(&self) -> &'static [&'static str] {
        &["offcpu"]
    }

    fn has_rows(&self, profile: &Profile) -> bool {
        !profile.offcpu.is_empty()
    }

    fn sample_types(&self) -> &'static [(&'static str, &'static str)] {
        &[("waits", "count"), ("off_cpu", "nanoseconds")]
    }

    fn samples(&self, profile: &Profile, add: &mut AddSample) {
        waiter_samples(profile, |_| true, add);
    }

    fn flame_labels(&self) -> FlameLabels {
        FlameLabels::ms("Off-CPU time by process and wait class (width: time off CPU, ms)")
    }

    fn diff_flame_labels(&self) -> FlameLabels {
        FlameLabels::ms_per_s(
            "Off-CPU time, NEW against BASE (width: NEW time off CPU in ms per second of run; red grew, blue shrank)",
        )
    }
}

/// One sample (waits, time) per off-CPU row that `keep` keeps, on its waiter frames.
pub(crate) fn waiter_samples(
    profile: &Profile,
    keep: impl Fn(&OffcpuRow) -> bool,
    add: &mut AddSample,
) {
    for row in profile.offcpu.iter().filter(|row| keep(row)) {
        add(waiter_frames(profile, row), &[row.count, row.total_ns]);
    }
}

/// An off-CPU wait's frames from the root: process; wait class; user stack from main
/// inward; kernel stack from the system call down to the scheduler.
pub(crate) fn waiter_frames(profile: &Profile, row: &OffcpuRow) -> Vec<String> {
    let mut frames = vec![clean(&profile.process_name(row.pid)), clean(&row.class)];
    if row.ustack.is_some() && profile.stack_truncated(row.ustack) {
        frames.push("[truncated]".into());
    }
    frames.extend(clean_frames(profile, row.ustack).rev());
    push_stack(&mut frames, profile, row.stack);
    frames
}
