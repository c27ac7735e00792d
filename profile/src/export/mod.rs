//! Exporters: everything here works from a saved `Profile`, never from the kernel.

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
pub mod pprof;
pub mod pprof_proto;
pub mod prometheus;
pub mod report;
pub mod table;
pub mod wakers;

use crate::{kind::Kind, profile::Profile, waitclass::IO_CLASSES};

/// Whether a profile has data of `kind` (a family of the kind recorded, or rows present).
pub fn has_kind(profile: &Profile, kind: Kind) -> bool {
    let recorded = kind
        .info()
        .families
        .iter()
        .any(|family| profile.recorded(family));
    recorded
        || match kind {
            Kind::Lock => !profile.locks.is_empty(),
            Kind::Hold => !profile.contended_holds.is_empty(),
            Kind::Rpc => !profile.rpcs.is_empty(),
            Kind::Func => !profile.funcs.is_empty(),
            Kind::Cpu => !profile.cpu.is_empty(),
            Kind::Offcpu => !profile.offcpu.is_empty(),
            Kind::Offwake => profile.offcpu.iter().any(|row| !row.wakers.is_empty()),
            // Block-IO rows, or off-CPU waits in an IO class (the IO flamegraph).
            Kind::Io => {
                !profile.io.is_empty()
                    || profile
                        .offcpu
                        .iter()
                        .any(|row| IO_CLASSES.contains(&row.class.as_str()))
            }
        }
}

/// Every kind the profile has, in the order of `Kind`.
pub fn kinds_present(profile: &Profile) -> Vec<Kind> {
    Kind::ALL
        .into_iter()
        .filter(|&kind| has_kind(profile, kind))
        .collect()
}
