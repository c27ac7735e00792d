//! Kernel-memory reads on demand (see profiler_common::kread): run by user space with
//! `BPF_PROG_TEST_RUN`, never attached, so it costs nothing while lockpath records.

use aya_ebpf::{
    helpers::generated::{bpf_get_current_task, bpf_probe_read_kernel},
    macros::{map, raw_tracepoint},
    maps::Array,
    programs::RawTracePointContext,
};
use profiler_common::kread::{
    KREAD_BUF_LEN, KREAD_OP_CURRENT_TASK, KREAD_OP_READ, KREAD_STATUS_BAD_ARGS, KreadBuf,
};

/// The one value this program writes and user space reads back.
#[map]
pub static KREAD_BUF: Array<KreadBuf> = Array::with_max_entries(1, 0);

/// One run: `(op, address, length, sequence)` from the test run's context.
#[inline(always)]
pub fn run(ctx: &RawTracePointContext) {
    let op = ctx.arg::<u64>(0);
    let address = ctx.arg::<u64>(1);
    let length = ctx.arg::<u64>(2);
    let sequence = ctx.arg::<u64>(3);
    let Some(buf) = KREAD_BUF.get_ptr_mut(0) else {
        return;
    };
    let status = match op {
        KREAD_OP_READ if length <= KREAD_BUF_LEN as u64 => {
            // SAFETY: `buf` points to a map value of `KREAD_BUF_LEN` bytes of `bytes`,
            // valid for this run, and `length` is at most that; bpf_probe_read_kernel
            // checks the source address and fails (zeroing the destination) on a bad one.
            unsafe {
                bpf_probe_read_kernel(
                    (&raw mut (*buf).bytes).cast(),
                    length as u32,
                    address as *const core::ffi::c_void,
                )
            }
        }
        KREAD_OP_CURRENT_TASK => {
            // SAFETY: bpf_get_current_task has no preconditions.
            let task = unsafe { bpf_get_current_task() };
            // SAFETY: `buf` points to a map value valid for this run, 8-byte aligned
            // (`KreadBuf` is `align(8)`), with at least 8 bytes in `bytes`.
            unsafe { core::ptr::write((&raw mut (*buf).bytes).cast::<u64>(), task) };
            0
        }
        _ => KREAD_STATUS_BAD_ARGS,
    };
    // SAFETY: as above; the sequence number goes last, so a value that carries this
    // run's number holds this run's status and bytes.
    unsafe {
        (*buf).status = status;
        (*buf).sequence = sequence;
    }
}

/// The kernel-memory reader: never attached, run by user space with
/// `BPF_PROG_TEST_RUN` (raw tracepoint programs can be since Linux 5.10).
#[raw_tracepoint]
pub fn kread_run(ctx: RawTracePointContext) -> i32 {
    run(&ctx);
    0
}
