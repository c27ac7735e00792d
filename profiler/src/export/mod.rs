//! Exporters: everything here works from a saved `Profile`, never from the kernel.

pub mod flamegraph;
pub mod folded;
pub mod io;
pub mod offcpu;
pub mod report;
