//! lockpath's eBPF programs. Each probe family is one module (lock, rpc, func, ...)
//! with its maps, its programs and their handlers; `shared` holds the maps and helpers
//! every family uses. This file declares the modules.
#![no_std]
// Atomic adds on shared map values: core's atomics are not offered on the BPF target.
#![feature(core_intrinsics)]
#![allow(internal_features)]
#![no_main]

mod arch;
mod filelock;
mod kread;
mod latency;
mod lockname;
mod shared;
mod target;

/// Declares the probe families' modules, one per name of profiler-common's
/// `for_each_family!` list (the one list of the families, for both crates).
macro_rules! family_modules {
    ($($family:ident,)*) => {
        $(mod $family;)*
    };
}

profiler_common::for_each_family!(family_modules);

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
