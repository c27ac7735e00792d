//! The tables and groupings of each kind's rows, shared by the views (`crate::views`)
//! and the formats, and the text table helpers (`table`).

pub mod blockers;
pub mod chains;
pub mod cpu;
pub mod io;
pub mod latency;
pub mod lock;
pub(crate) mod lock_lines;
pub mod offcpu;
pub mod table;
pub mod wakers;
