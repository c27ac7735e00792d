//! How a profile is written out: one module per format.

pub mod csv;
pub mod escape;
pub(crate) mod exposition;
pub(crate) mod flame_prune;
pub mod flamegraph;
pub mod folded;
pub mod html;
pub mod json;
pub mod pprof;
pub mod pprof_proto;
pub mod prometheus;
pub mod report;
