//! Types shared by the eBPF programs (profiler-ebpf) and user space (profiler).
//!
//! Every type here is `#[repr(C)]` and plain old data: the kernel side writes it into
//! maps, the user side reads it back byte for byte. One module per probe family.
//!
//! Each family's module also names, once for both sides, its maps, programs and
//! load-time globals (`names`) and the sizes of its fixed-size maps (`*_ENTRIES`): the
//! eBPF statics carry those names as their Rust names (a unit test of profiler checks
//! the built object), user space refers to them only through these constants.
#![no_std]

/// Declares a family's `names`, each the Rust name of the eBPF symbol it stands for,
/// written once: `CONST` names the map or global `CONST`, `CONST = symbol` the program
/// `symbol` (a name ending in `_` is a prefix: the slot number follows). `ALL` lists
/// every name declared, then the `@also` names (declared in another family's module).
macro_rules! define_names {
    (
        $($(#[$doc:meta])* $name:ident $(= $symbol:ident)?,)*
        $(@also [$($also:path),* $(,)?] $(,)?)?
    ) => {
        $(
            $(#[$doc])*
            pub const $name: &str = crate::define_names!(@symbol $name $($symbol)?);
        )*

        /// Every name above (a name ending in `_` is a prefix: slot 0 is checked).
        pub const ALL: &[&str] = &[$($name,)* $($($also,)*)?];
    };
    (@symbol $name:ident) => {
        stringify!($name)
    };
    (@symbol $name:ident $symbol:ident) => {
        stringify!($symbol)
    };
}
pub(crate) use define_names;

/// Calls `$declare! { cpu, func, ... }` with every probe family: the one list of them.
/// Each family has a module of its name here and in profiler-ebpf, whose main.rs
/// declares its family modules with it; here it declares the modules and
/// `FAMILY_LOSSES`.
#[macro_export]
macro_rules! for_each_family {
    ($declare:ident) => {
        $declare! {
            cpu,
            func,
            hold,
            io,
            lock,
            offcpu,
            rpc,
            wakers,
        }
    };
}

/// Declares the families' modules, each with its `losses`, and `FAMILY_LOSSES`.
macro_rules! families {
    ($($family:ident,)*) => {
        $(pub mod $family;)*

        /// Every family's losses (`<family>::losses::ALL`).
        pub(crate) const FAMILY_LOSSES: &[&[loss::Loss]] =
            &[$($family::losses::ALL,)*];
    };
}

for_each_family!(families);

pub mod kread;
pub mod latency;
pub mod lockname;
pub mod loss;
pub mod shared;
pub mod target;

/// Entries of every aggregation map (`*_STATS`, `CPU_SAMPLES`) unless `--map-entries`
/// says otherwise; the eBPF statics are declared with it.
pub const STATS_ENTRIES: u32 = 16384;

/// Implements `aya::Pod` for the listed types on the user side.
#[cfg(feature = "user")]
macro_rules! impl_pod {
    ($($t:ty),* $(,)?) => {
        $(
            // SAFETY: the type is #[repr(C)], Copy, holds only integers and integer arrays,
            // and every bit pattern is a valid value.
            unsafe impl aya::Pod for $t {}
        )*
    };
}
#[cfg(feature = "user")]
pub(crate) use impl_pod;
