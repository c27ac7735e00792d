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
    macros::{kprobe, kretprobe, perf_event, raw_tracepoint},
    programs::{PerfEventContext, ProbeContext, RawTracePointContext, RetProbeContext},
};
use profiler_common::lock::{LCB_F_MUTEX, LCB_F_READ, LCB_F_WRITE};

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

// Kprobe fallback for kernels without the lock tracepoints. User space attaches each
// program to the slow-path symbols this kernel has (see profiler/src/probes/lock.rs).

/// `[native_|__pv_]queued_spin_lock_slowpath(struct qspinlock *lock, u32 val)`.
#[kprobe]
pub fn lock_kprobe_spin(ctx: ProbeContext) -> u32 {
    lock::on_spin_slowpath_entry(&ctx);
    0
}

#[kretprobe]
pub fn lock_kretprobe_spin(ctx: RetProbeContext) -> u32 {
    lock::on_spin_slowpath_return(&ctx);
    0
}

/// `__mutex_lock_slowpath(struct mutex *lock)` and its killable/interruptible siblings.
#[kprobe]
pub fn lock_kprobe_mutex(ctx: ProbeContext) -> u32 {
    lock::on_sleep_slowpath_entry(&ctx, LCB_F_MUTEX);
    0
}

/// `rwsem_down_read_slowpath(struct rw_semaphore *sem, ...)`.
#[kprobe]
pub fn lock_kprobe_rwsem_read(ctx: ProbeContext) -> u32 {
    lock::on_sleep_slowpath_entry(&ctx, LCB_F_READ);
    0
}

/// `rwsem_down_write_slowpath(struct rw_semaphore *sem, int state)`.
#[kprobe]
pub fn lock_kprobe_rwsem_write(ctx: ProbeContext) -> u32 {
    lock::on_sleep_slowpath_entry(&ctx, LCB_F_WRITE);
    0
}

/// Return of any sleeping-lock slow path above.
#[kretprobe]
pub fn lock_kretprobe_sleep(ctx: RetProbeContext) -> u32 {
    lock::on_sleep_slowpath_return(&ctx);
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
