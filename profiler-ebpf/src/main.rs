//! lockpath's eBPF programs. This file only wires entry points; each probe family
//! lives in its own module (lock, rpc, func, ...), and `shared` holds the maps every
//! family uses.
#![no_std]
// Atomic adds on shared map values: core's atomics are not offered on the BPF target.
#![feature(core_intrinsics)]
#![allow(internal_features)]
#![no_main]

mod arch;
mod cpu;
mod filelock;
mod func;
mod hold;
mod io;
mod kread;
mod latency;
mod lock;
mod lockname;
mod offcpu;
mod rpc;
mod shared;
mod target;
mod wakers;

use aya_ebpf::{
    macros::{fentry, fexit, kprobe, kretprobe, perf_event, raw_tracepoint, uprobe, uretprobe},
    programs::{
        FEntryContext, FExitContext, PerfEventContext, ProbeContext, RawTracePointContext,
        RetProbeContext, TracePointContext,
    },
};
use profiler_common::{
    func::UFUNC_SLOT_BASE,
    io::{CALL_FSYNC, CALL_OPEN, CALL_READ, CALL_WRITE, SYSCALL_ARG0_OFFSET},
    lock::{LCB_F_MUTEX, LCB_F_READ, LCB_F_WRITE},
};

/// `lock:contention_begin(void *lock, unsigned int flags)`.
///
/// Raw tracepoints, not classic ones: a classic tracepoint program that returns 0
/// (as aya's `#[tracepoint]` macro does) drops the event for perf and every other
/// tracer of that tracepoint; raw tracepoints do not filter, and are cheaper.
#[raw_tracepoint(tracepoint = "contention_begin")]
pub fn lock_contention_begin(ctx: RawTracePointContext) -> i32 {
    lock::on_contention_begin(ctx);
    0
}

/// `lock:contention_end(void *lock, int ret)`.
#[raw_tracepoint(tracepoint = "contention_end")]
pub fn lock_contention_end(ctx: RawTracePointContext) -> i32 {
    lock::on_contention_end(&ctx);
    0
}

/// `sched:sched_waking(struct task_struct *p)` (`--lock`): an unlock waking the next
/// waiter ends the waker's hold under contention.
#[raw_tracepoint(tracepoint = "sched_waking")]
pub fn lock_sched_waking(ctx: RawTracePointContext) -> i32 {
    lock::on_waking(&ctx);
    0
}

/// The kernel-memory reader: never attached, run by user space with
/// `BPF_PROG_TEST_RUN` (raw tracepoint programs can be since Linux 5.10).
#[raw_tracepoint]
pub fn kread_run(ctx: RawTracePointContext) -> i32 {
    kread::run(&ctx);
    0
}

/// Programs that hand their context to a family's handler and return 0:
/// `KIND NAME(CONTEXT) => HANDLER;`, KIND being aya's program macro.
macro_rules! programs {
    ($($(#[$doc:meta])* $kind:ident $program:ident($context:ty) => $handler:expr;)*) => {
        $(
            $(#[$doc])*
            #[$kind]
            pub fn $program(ctx: $context) -> u32 {
                ($handler)(&ctx);
                0
            }
        )*
    };
}

programs! {
    /// On-CPU sample: a software CPU-clock perf event, one per online CPU.
    perf_event cpu_sample(PerfEventContext) => cpu::on_sample;

    // Kprobe fallback for kernels without the lock tracepoints. User space attaches each
    // program to the slow-path symbols this kernel has (see profiler/src/probes/lock.rs).

    /// `[native_|__pv_]queued_spin_lock_slowpath(struct qspinlock *lock, u32 val)`.
    kprobe lock_kprobe_spin(ProbeContext) => lock::on_spin_slowpath_entry;
    kretprobe lock_kretprobe_spin(RetProbeContext) => lock::on_spin_slowpath_return;
    /// `__mutex_lock_slowpath(struct mutex *lock)` and its killable/interruptible siblings.
    kprobe lock_kprobe_mutex(ProbeContext) =>
        |ctx: &ProbeContext| lock::on_sleep_slowpath_entry(ctx, LCB_F_MUTEX);
    /// `rwsem_down_read_slowpath(struct rw_semaphore *sem, ...)`.
    kprobe lock_kprobe_rwsem_read(ProbeContext) =>
        |ctx: &ProbeContext| lock::on_sleep_slowpath_entry(ctx, LCB_F_READ);
    /// `rwsem_down_write_slowpath(struct rw_semaphore *sem, int state)`.
    kprobe lock_kprobe_rwsem_write(ProbeContext) =>
        |ctx: &ProbeContext| lock::on_sleep_slowpath_entry(ctx, LCB_F_WRITE);
    /// Return of any sleeping-lock slow path above.
    kretprobe lock_kretprobe_sleep(RetProbeContext) => lock::on_sleep_slowpath_return;

    /// Span start / completion on kprobes (Lustre's `ptl_send_rpc` / `after_reply`, or a
    /// user's `--span kprobe:...`). The fuse and tracepoint span programs are in rpc.rs.
    kprobe rpc_span_begin_kp(ProbeContext) => rpc::on_span_begin_kprobe;
    kprobe rpc_span_end_kp(ProbeContext) => rpc::on_span_end_kprobe;
}

// Classic tracepoints (fields from the format file), each returning 1 so perf and
// other tracers keep seeing the event (see `classic_tracepoint!`).
classic_tracepoint!(
    /// `sched:sched_switch`.
    offcpu_sched_switch,
    "tracepoint/sched/sched_switch",
    offcpu::on_sched_switch::<false>
);
classic_tracepoint!(
    /// The same with `--wakers`: closes each wait with its waker and follows wait chains.
    offcpu_sched_switch_wakers,
    "tracepoint/sched/sched_switch",
    offcpu::on_sched_switch::<true>
);
classic_tracepoint!(
    /// `sched:sched_waking` (`--wakers`): the woken pid from the format file.
    wakers_sched_waking,
    "tracepoint/sched/sched_waking",
    wakers::on_sched_waking
);
classic_tracepoint!(
    /// `filelock:posix_lock_inode` and `filelock:flock_lock_inode` (one record format):
    /// the holder of the file lock a thread is about to wait for (off-CPU family).
    offcpu_filelock,
    "tracepoint/filelock/posix_lock_inode",
    filelock::on_lock_inode
);
// Timed file calls (`--file-calls`): `syscalls:sys_enter_*` of reads, writes, fsyncs and
// opens, one program per kind of call attached to each such syscall this kernel has, and
// one program on all their `sys_exit_*`.
classic_tracepoint!(
    /// `sys_enter_read`, `pread64`, `readv`, `preadv`, `preadv2`.
    io_call_read,
    "tracepoint/syscalls/sys_enter_read",
    |ctx: &TracePointContext| io::on_call_enter(CALL_READ, syscall_arg0(ctx))
);
classic_tracepoint!(
    /// `sys_enter_write`, `pwrite64`, `writev`, `pwritev`, `pwritev2`.
    io_call_write,
    "tracepoint/syscalls/sys_enter_write",
    |ctx: &TracePointContext| io::on_call_enter(CALL_WRITE, syscall_arg0(ctx))
);
classic_tracepoint!(
    /// `sys_enter_fsync`, `fdatasync`.
    io_call_fsync,
    "tracepoint/syscalls/sys_enter_fsync",
    |ctx: &TracePointContext| io::on_call_enter(CALL_FSYNC, syscall_arg0(ctx))
);
classic_tracepoint!(
    /// `sys_enter_openat`, `open`, `openat2`, `creat`.
    io_call_open,
    "tracepoint/syscalls/sys_enter_openat",
    |_: &TracePointContext| io::on_call_enter(CALL_OPEN, -1)
);
classic_tracepoint!(
    /// `sys_exit_*` of all of them: the return value.
    io_call_exit,
    "tracepoint/syscalls/sys_exit_read",
    |ctx: &TracePointContext| io::on_call_exit(syscall_arg0(ctx))
);

/// A syscall tracepoint's first argument (`sys_enter_*`) or return value (`sys_exit_*`).
#[inline(always)]
fn syscall_arg0(ctx: &TracePointContext) -> i64 {
    // SAFETY: the offset is that of every syscall tracepoint's record (user space checks
    // it against the format files); the read is checked.
    unsafe { ctx.read_at::<i64>(SYSCALL_ARG0_OFFSET as usize) }.unwrap_or(-1)
}

classic_tracepoint!(
    /// `filelock:break_lease_block`: the owner of the lease an open waits for.
    offcpu_filelock_lease,
    "tracepoint/filelock/break_lease_block",
    filelock::on_lease_block
);

// Block IO: raw tracepoints, so the request pointer is the key and perf still sees
// the events. A raw tracepoint program may only read as many arguments as the
// tracepoint has (checked at attach), so each event that took `(q, rq)` before 5.11
// has a second program reading `rq` from argument 1 (`_q`); user space attaches the
// one this kernel's BTF calls for, and insert, requeue and merge only where they exist.
macro_rules! io_request_event {
    ($($program:ident, $program_q:ident, $event:literal, $handler:path;)*) => {
        $(
            #[raw_tracepoint(tracepoint = $event)]
            pub fn $program(ctx: RawTracePointContext) -> i32 {
                $handler(ctx.arg::<u64>(0));
                0
            }

            #[raw_tracepoint(tracepoint = $event)]
            pub fn $program_q(ctx: RawTracePointContext) -> i32 {
                $handler(ctx.arg::<u64>(1));
                0
            }
        )*
    };
}

io_request_event! {
    io_rq_insert, io_rq_insert_q, "block_rq_insert", io::on_rq_insert;
    io_rq_issue, io_rq_issue_q, "block_rq_issue", io::on_rq_issue;
    io_rq_requeue, io_rq_requeue_q, "block_rq_requeue", io::on_rq_requeue;
    io_rq_merge, io_rq_merge_q, "block_rq_merge", io::on_rq_merge;
}

/// `block_rq_complete(struct request *rq, error, unsigned int nr_bytes)` on every kernel
/// lockpath supports (interrupt context).
#[raw_tracepoint(tracepoint = "block_rq_complete")]
pub fn io_rq_complete(ctx: RawTracePointContext) -> i32 {
    io::on_rq_complete(ctx.arg::<u64>(0), ctx.arg::<u64>(2) as u32);
    0
}

/// `writeback_dirty_folio(struct folio *folio, struct address_space *mapping)`, or
/// `writeback_dirty_page(struct page *page, ...)` before 5.17 (user space attaches the
/// one this kernel has): a task dirtied a page of a file.
#[raw_tracepoint(tracepoint = "writeback_dirty_folio")]
pub fn io_dirty(ctx: RawTracePointContext) -> i32 {
    io::on_dirty(ctx.arg::<u64>(1));
    0
}

/// One program set per function slot: user space loads the fentry/fexit pair where
/// the kernel allows it, else the kprobe/kretprobe pair; user functions use uprobes.
macro_rules! func_slots {
    ($($slot:literal => $fentry:ident, $fexit:ident, $kprobe:ident, $kretprobe:ident,
       $uprobe:ident, $uretprobe:ident;)*) => {
        $(
            programs! {
                fentry $fentry(FEntryContext) =>
                    |ctx: &FEntryContext| func::on_entry(ctx, $slot, false);
                fexit $fexit(FExitContext) => |_: &FExitContext| func::on_return($slot);
                kprobe $kprobe(ProbeContext) =>
                    |ctx: &ProbeContext| func::on_entry(ctx, $slot, false);
                kretprobe $kretprobe(RetProbeContext) =>
                    |_: &RetProbeContext| func::on_return($slot);
                uprobe $uprobe(ProbeContext) =>
                    |ctx: &ProbeContext| func::on_entry(ctx, UFUNC_SLOT_BASE + $slot, true);
                uretprobe $uretprobe(RetProbeContext) =>
                    |_: &RetProbeContext| func::on_return(UFUNC_SLOT_BASE + $slot);
            }
        )*
    };
}

func_slots! {
    0 => func_fentry_0, func_fexit_0, func_kprobe_0, func_kretprobe_0,
        ufunc_entry_0, ufunc_return_0;
    1 => func_fentry_1, func_fexit_1, func_kprobe_1, func_kretprobe_1,
        ufunc_entry_1, ufunc_return_1;
    2 => func_fentry_2, func_fexit_2, func_kprobe_2, func_kretprobe_2,
        ufunc_entry_2, ufunc_return_2;
    3 => func_fentry_3, func_fexit_3, func_kprobe_3, func_kretprobe_3,
        ufunc_entry_3, ufunc_return_3;
    4 => func_fentry_4, func_fexit_4, func_kprobe_4, func_kretprobe_4,
        ufunc_entry_4, ufunc_return_4;
    5 => func_fentry_5, func_fexit_5, func_kprobe_5, func_kretprobe_5,
        ufunc_entry_5, ufunc_return_5;
    6 => func_fentry_6, func_fexit_6, func_kprobe_6, func_kretprobe_6,
        ufunc_entry_6, ufunc_return_6;
    7 => func_fentry_7, func_fexit_7, func_kprobe_7, func_kretprobe_7,
        ufunc_entry_7, ufunc_return_7;
}

/// Hold times (`--hold`): one program set per acquire slot (an entry point such as
/// `mutex_lock` or `down_write_killable`): fexit where the kernel allows, else a
/// kprobe/kretprobe pair. Every acquire function takes the lock as its only argument,
/// so an fexit program finds the return value right after it; functions that return
/// nothing get the `_void` fexit, which does not read it (the verifier refuses that).
macro_rules! hold_acquire_slots {
    ($($slot:literal => $fexit:ident, $fexit_void:ident, $kprobe:ident, $kretprobe:ident;)*) => {
        $(
            #[fexit]
            pub fn $fexit(ctx: FExitContext) -> i32 {
                if hold::is_held_lock(ctx.arg::<u64>(0)) {
                    hold::on_acquire_return(&ctx, $slot, ctx.arg::<i64>(1));
                }
                0
            }

            #[fexit]
            pub fn $fexit_void(ctx: FExitContext) -> i32 {
                if hold::is_held_lock(ctx.arg::<u64>(0)) {
                    hold::on_acquire_return(&ctx, $slot, 0);
                }
                0
            }

            #[kprobe]
            pub fn $kprobe(ctx: ProbeContext) -> u32 {
                if hold::is_held_lock(ctx.arg::<u64>(0).unwrap_or(0)) {
                    hold::on_acquire_entry(&ctx);
                }
                0
            }

            #[kretprobe]
            pub fn $kretprobe(ctx: RetProbeContext) -> u32 {
                hold::on_acquire_kretprobe($slot, ctx.ret::<i64>());
                0
            }
        )*
    };
}

hold_acquire_slots! {
    0 => hold_fexit_0, hold_fexit_void_0, hold_kprobe_0, hold_kretprobe_0;
    1 => hold_fexit_1, hold_fexit_void_1, hold_kprobe_1, hold_kretprobe_1;
    2 => hold_fexit_2, hold_fexit_void_2, hold_kprobe_2, hold_kretprobe_2;
    3 => hold_fexit_3, hold_fexit_void_3, hold_kprobe_3, hold_kretprobe_3;
    4 => hold_fexit_4, hold_fexit_void_4, hold_kprobe_4, hold_kretprobe_4;
    5 => hold_fexit_5, hold_fexit_void_5, hold_kprobe_5, hold_kretprobe_5;
    6 => hold_fexit_6, hold_fexit_void_6, hold_kprobe_6, hold_kretprobe_6;
    7 => hold_fexit_7, hold_fexit_void_7, hold_kprobe_7, hold_kretprobe_7;
    8 => hold_fexit_8, hold_fexit_void_8, hold_kprobe_8, hold_kretprobe_8;
    9 => hold_fexit_9, hold_fexit_void_9, hold_kprobe_9, hold_kretprobe_9;
    10 => hold_fexit_10, hold_fexit_void_10, hold_kprobe_10, hold_kretprobe_10;
    11 => hold_fexit_11, hold_fexit_void_11, hold_kprobe_11, hold_kretprobe_11;
    12 => hold_fexit_12, hold_fexit_void_12, hold_kprobe_12, hold_kretprobe_12;
    13 => hold_fexit_13, hold_fexit_void_13, hold_kprobe_13, hold_kretprobe_13;
    14 => hold_fexit_14, hold_fexit_void_14, hold_kprobe_14, hold_kretprobe_14;
    15 => hold_fexit_15, hold_fexit_void_15, hold_kprobe_15, hold_kretprobe_15;
}

/// Release: one fentry program per unlock entry point (an fentry program is bound to
/// its function at load time), or this one kprobe attached to all of them.
macro_rules! hold_release_slots {
    ($($fentry:ident),*) => {
        $(
            #[fentry]
            pub fn $fentry(ctx: FEntryContext) -> i32 {
                if hold::is_held_lock(ctx.arg::<u64>(0)) {
                    hold::on_release();
                }
                0
            }
        )*
    };
}

hold_release_slots!(hold_fentry_0, hold_fentry_1, hold_fentry_2, hold_fentry_3);

#[kprobe]
pub fn hold_release_kprobe(ctx: ProbeContext) -> u32 {
    if hold::is_held_lock(ctx.arg::<u64>(0).unwrap_or(0)) {
        hold::on_release();
    }
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
