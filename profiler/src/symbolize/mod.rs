//! The one symbolizer: kernel addresses through `/proc/kallsyms` (kallsyms.rs).
//! User-space addresses are added here too, so every probe family asks one place.

pub mod kallsyms;

pub use kallsyms::KernelSymbols;
