//! lockpath's eBPF programs. This file only wires entry points; each probe family
//! lives in its own module (lock, ...), and `shared` holds the maps every family uses.
#![no_std]
// Atomic adds on shared map values: core's atomics are not offered on the BPF target.
#![feature(core_intrinsics)]
#![allow(internal_features)]
#![no_main]

mod io;
mod lock;
mod offcpu;
mod shared;
mod target;

use core::ffi::c_void;

use aya_ebpf::{
    macros::raw_tracepoint,
    programs::{RawTracePointContext, TracePointContext},
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

/// `sched:sched_switch`, a classic tracepoint (fields from the format file). Returns 1
/// so perf and other tracers keep seeing the event.
#[unsafe(no_mangle)]
#[unsafe(link_section = "tracepoint/sched/sched_switch")]
pub extern "C" fn offcpu_sched_switch(ctx: *mut c_void) -> u32 {
    offcpu::on_sched_switch(&TracePointContext::new(ctx));
    1
}

/// `block:block_rq_insert` (queue time; absent on queues without a scheduler).
#[unsafe(no_mangle)]
#[unsafe(link_section = "tracepoint/block/block_rq_insert")]
pub extern "C" fn io_rq_insert(ctx: *mut c_void) -> u32 {
    io::on_rq_insert(&TracePointContext::new(ctx));
    1
}

/// `block:block_rq_issue`.
#[unsafe(no_mangle)]
#[unsafe(link_section = "tracepoint/block/block_rq_issue")]
pub extern "C" fn io_rq_issue(ctx: *mut c_void) -> u32 {
    io::on_rq_issue(&TracePointContext::new(ctx));
    1
}

/// `block:block_rq_complete` (interrupt context).
#[unsafe(no_mangle)]
#[unsafe(link_section = "tracepoint/block/block_rq_complete")]
pub extern "C" fn io_rq_complete(ctx: *mut c_void) -> u32 {
    io::on_rq_complete(&TracePointContext::new(ctx));
    1
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
