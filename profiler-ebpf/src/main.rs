//! lockpath's eBPF programs. This file only wires entry points; each probe family
//! lives in its own module (lock, ...), and `shared` holds the maps every family uses.
#![no_std]
// Atomic adds on shared map values: core's atomics are not offered on the BPF target.
#![feature(core_intrinsics)]
#![allow(internal_features)]
#![no_main]

mod cpu;
mod lock;
mod shared;
mod target;

use aya_ebpf::{
    macros::{perf_event, raw_tracepoint},
    programs::{PerfEventContext, RawTracePointContext},
};

/// `lock:contention_begin(void *lock, unsigned int flags)`.
///
/// Raw tracepoints, not classic ones: a classic tracepoint program that returns 0
/// (as aya's `#[tracepoint]` macro does) drops the event for perf and every other
/// tracer of that tracepoint; raw tracepoints do not filter, and are cheaper.
#[raw_tracepoint(tracepoint = "contention_begin")]
pub fn lock_contention_begin(ctx: RawTracePointContext) -> i32 {
    lock::on_contention_begin(&ctx);
    0
}

/// `lock:contention_end(void *lock, int ret)`.
#[raw_tracepoint(tracepoint = "contention_end")]
pub fn lock_contention_end(ctx: RawTracePointContext) -> i32 {
    lock::on_contention_end(&ctx);
    0
}

/// On-CPU sample: a software CPU-clock perf event, one per online CPU.
#[perf_event]
pub fn cpu_sample(ctx: PerfEventContext) -> u32 {
    cpu::on_sample(&ctx);
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
