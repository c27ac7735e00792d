//! Exporters: everything here works from a saved `Profile`, never from the kernel.

pub mod diff;
pub mod escape;
pub mod flamegraph;
pub mod folded;
pub mod html;
pub mod json;
pub mod merge;
pub mod pprof;
pub mod prometheus;
pub mod report;

use crate::{cli::Kind, profile::Profile};

/// Whether a profile has data of `kind` (recorded, or rows present). A kind adds its arm.
pub fn has_kind(profile: &Profile, kind: Kind) -> bool {
    let recorded = |family: &str| profile.probes.iter().any(|probe| probe.family == family);
    match kind {
        Kind::Lock => recorded("lock") || !profile.locks.is_empty(),
        Kind::Rpc => recorded("rpc") || !profile.rpcs.is_empty(),
        Kind::Func => recorded("func") || recorded("ufunc") || !profile.funcs.is_empty(),
        Kind::Cpu => recorded("cpu") || !profile.cpu.is_empty(),
    }
}

/// Every kind the profile has, in the order of `Kind`.
pub fn kinds_present(profile: &Profile) -> Vec<Kind> {
    use clap::ValueEnum;
    Kind::value_variants()
        .iter()
        .copied()
        .filter(|&kind| has_kind(profile, kind))
        .collect()
}
