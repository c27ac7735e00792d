//! Exporters: everything here works from a saved `Profile`, never from the kernel.
//!
//! - `formats/`: how a profile is written out: the text and JSON reports, HTML, folded
//!   stacks, flamegraphs, pprof, CSV, Prometheus.
//! - `tables/`: the tables and groupings of each kind's rows (by lock, process, device,
//!   ...) that the views and the formats share, and the text table helpers.
//! - `operations/`: what works on several profiles: `diff`, `merge`, `outliers`, the
//!   fleet's aggregation.

pub mod formats;
pub mod operations;
pub mod tables;

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
