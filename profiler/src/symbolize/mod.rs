//! The one symbolizer: kernel addresses through `/proc/kallsyms` (kallsyms.rs).
//! User-space addresses through blazesym with memory-map snapshots (user.rs), so every
//! probe family asks one place.

pub mod kallsyms;
pub mod stackcheck;
pub mod unwind;
pub mod user;

pub use kallsyms::KernelSymbols;
pub use user::UserSymbols;
