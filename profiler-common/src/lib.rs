//! Types shared by the eBPF programs (profiler-ebpf) and user space (profiler).
//!
//! Every type here is `#[repr(C)]` and plain old data: the kernel side writes it into
//! maps, the user side reads it back byte for byte. One module per probe family.
#![no_std]

pub mod config;
pub mod cpu;
pub mod func;
pub mod hold;
pub mod io;
pub mod latency;
pub mod lock;
pub mod loss;
pub mod offcpu;
pub mod rpc;
pub mod target;

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
