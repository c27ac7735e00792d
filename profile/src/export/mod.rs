//! Exporters: everything here works from a saved `Profile`, never from the kernel.

pub mod blockers;
pub mod chains;
pub mod cpu;
pub mod csv;
pub mod diff;
pub mod escape;
pub(crate) mod exposition;
pub(crate) mod flame_prune;
pub mod flamegraph;
pub mod fleet;
pub mod folded;
pub mod html;
pub mod io;
pub mod json;
pub mod latency;
pub mod lock;
pub(crate) mod lock_lines;
pub mod merge;
pub mod offcpu;
pub mod outliers;
pub mod pprof;
pub mod pprof_proto;
pub mod prometheus;
pub mod report;
pub mod table;
pub mod wakers;

use crate::{kind::Kind, profile::Profile, views::VIEWS};

/// Whether a profile has data of `kind` (a family of the kind recorded, or rows present).
pub fn has_kind(profile: &Profile, kind: Kind) -> bool {
    kind.view().present_in(profile)
}

/// Every kind the profile has, in the order of `Kind`.
pub fn kinds_present(profile: &Profile) -> Vec<Kind> {
    VIEWS
        .iter()
        .filter(|view| view.present_in(profile))
        .map(|view| view.kind())
        .collect()
}
