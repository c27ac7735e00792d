//! lockpath's profile and everything that reads it, without the kernel: the data model
//! (`profile`: JSON "lockpath/1", loading and validation), its kinds (`kind`) and the
//! view of each (`views`: one module per kind), the domain rules every view follows
//! (`lock`: type names and callers; `histogram`: percentiles; `waitclass`: off-CPU wait
//! classes) and the exporters (`export`: text and JSON reports, flamegraphs, folded,
//! JSON tree, pprof, HTML, diff, merge, Prometheus).
//!
//! No aya, no clap: `lockpath` (the CLI and recorder) and the fuzz target use it, and so
//! can any tool that reads profiles.

pub mod binary;
pub mod export;
pub mod filter;
#[cfg(test)]
mod fixtures;
pub mod histogram;
pub mod jobs;
pub mod kind;
pub mod lock;
pub mod lockclass;
mod presized;
pub mod profile;
pub mod synthetic;
pub mod timeline;
pub mod units;
pub mod views;
pub mod waitclass;
pub mod waiting;

pub use kind::{GroupBy, Kind};
pub use profile::Profile;
