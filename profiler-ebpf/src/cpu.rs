//! On-CPU sampling from a perf_event software CPU clock (one event per online CPU).
//!
//! Each sample adds one to the in-kernel count of (process, thread, kernel stack, user
//! stack). Idle (pid 0, the per-CPU swapper tasks) is dropped: it is not a process, and
//! the sampling frequency times the duration tells how much time was not sampled.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{
        bpf_get_current_pid_tgid, bpf_probe_read_kernel,
        generated::{bpf_get_current_task, bpf_get_smp_processor_id, bpf_probe_read_user},
    },
    macros::map,
    maps::{Array, HashMap, RingBuf},
    programs::PerfEventContext,
};
use profiler_common::{
    cpu::losses::{CPU_MAP_FULL, CPU_OVERFLOW_FULL, USER_STACK_FAILED},
    cpu::{CpuKey, STACK_RING_MIN_BYTES, StackSample, StackSampleHeader, USER_STACK_MAX},
};

use crate::{
    arch::{UserRegs, entry_user_regs, sample_user_regs},
    shared::{
        Aggregate, EBUSY, EEXIST, EFAULT, STACK_FLAGS_KERNEL, STACK_FLAGS_USER,
        add_to_row_or_overflow, atomic_add, count_loss, load_u32, note_user_process, overflow_map,
        remember_current_task, stack_id, stack_id_or_loss, stats_map,
    },
    target::is_target,
};

/// The aggregate read by user space. Size set at load time (`--map-entries`).
#[map]
pub static CPU_SAMPLES: HashMap<CpuKey, u64> = stats_map();

/// Samples `CPU_SAMPLES` had no room for, per thread, without stacks.
#[map]
pub static CPU_OVERFLOW: HashMap<CpuKey, u64> = overflow_map();

pub fn on_sample(ctx: &PerfEventContext) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    if tgid == 0 || !is_target() {
        return;
    }
    let kstack_id = match stack_id(ctx, STACK_FLAGS_KERNEL) {
        Ok(id) => id as i32,
        // Sampled in user mode: no kernel frames, nothing lost.
        Err(errno) if errno == -EFAULT => errno,
        Err(errno) => stack_id_or_loss(Err(errno)),
    };
    let ustack_id = user_stack_id(ctx);
    if ustack_id >= 0 {
        note_user_process(tgid);
    }
    let key = CpuKey {
        tgid,
        tid: pid_tgid as u32,
        kstack_id,
        ustack_id,
    };
    // With stack copies on, a sample taken in user mode goes to user space whole, to
    // be unwound there; when the ring is full it is counted here with its frame-pointer
    // stack, like every sample taken in kernel mode.
    if send_stack_sample(ctx, &key) {
        // The thread's name, as adding a sample notes it for the rows it creates.
        remember_current_task();
        return;
    }
    add_to_row_or_overflow(
        (&CPU_SAMPLES, &CPU_OVERFLOW),
        &key,
        CpuKey::overflow,
        &(),
        (CPU_MAP_FULL, CPU_OVERFLOW_FULL),
        true,
    );
}

/// Bytes of user stack to copy per sample (`--user-stack-bytes`); 0: frame pointers only.
#[unsafe(no_mangle)]
static CPU_USER_STACK_BYTES: u32 = 0;

/// Samples with their user registers and stack bytes, for unwinding in user space.
/// Sized at load time when copies are on.
#[map]
pub static CPU_STACK_SAMPLES: RingBuf = RingBuf::with_byte_size(STACK_RING_MIN_BYTES, 0);

/// Where a sample is assembled before it is sent (too big for the BPF stack), one slot
/// per CPU (entries set at load time to the possible CPUs).
#[map]
pub static CPU_STACK_SCRATCH: Array<StackSample> = Array::with_max_entries(1, 0);

const HEADER_BYTES: usize = core::mem::size_of::<StackSampleHeader>();

/// Sends a sample taken in user mode with its registers and a copy of the top of its
/// user stack. False when copies are off, the sample was taken in kernel mode (the
/// registers are the kernel's), or the ring is full.
#[inline(always)]
fn send_stack_sample(ctx: &PerfEventContext, key: &CpuKey) -> bool {
    let wanted = load_u32(&CPU_USER_STACK_BYTES) as usize;
    if wanted == 0 {
        return false;
    }
    // Taken in kernel mode (a system call, a fault): the registers are the kernel's;
    // the task's user registers are at the top of its kernel stack.
    let Some(regs) = sample_user_regs(ctx).or_else(user_regs_of_current_task) else {
        return false;
    };
    // SAFETY: helper without arguments.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let Some(sample) = CPU_STACK_SCRATCH.get_ptr_mut(cpu) else {
        return false;
    };
    // SAFETY: the map value stays valid for this program run, and only this CPU's runs
    // use its slot (the program does not nest on one CPU).
    let sample = unsafe { &mut *sample };
    sample.header = StackSampleHeader {
        tgid: key.tgid,
        tid: key.tid,
        kstack_id: key.kstack_id,
        ustack_id: key.ustack_id,
        ip: regs.ip,
        sp: regs.sp,
        bp: regs.fp,
        lr: regs.lr,
        len: 0,
        _pad: 0,
    };
    let wanted = if wanted > USER_STACK_MAX {
        USER_STACK_MAX
    } else {
        wanted
    };
    let sp = regs.sp;
    let mut copied = 0usize;
    if read_stack(sample, sp, wanted) {
        copied = wanted;
    } else {
        // The read crossed the top of the stack mapping, which ends on a page boundary:
        // find the last boundary that can be read up to, by bisection over the pages.
        let first = ((sp | 4095) + 1 - sp) as usize;
        let (mut good, mut bad) = (0usize, wanted.saturating_sub(first) / 4096 + 1);
        for _ in 0..5 {
            if bad - good <= 1 {
                break;
            }
            let middle = (good + bad) / 2;
            if read_stack(sample, sp, first + middle * 4096) {
                good = middle;
            } else {
                bad = middle;
            }
        }
        // A failed read zeroes the buffer: read the good length again.
        let len = first + good * 4096;
        if len <= wanted && read_stack(sample, sp, len) {
            copied = len;
        }
    }
    if copied > USER_STACK_MAX {
        return false;
    }
    sample.header.len = copied as u32;
    let size = HEADER_BYTES + copied;
    if size > HEADER_BYTES + USER_STACK_MAX {
        return false;
    }
    // SAFETY: `size` bytes from the start of the scratch value lie inside it.
    let bytes =
        unsafe { core::slice::from_raw_parts(sample as *const StackSample as *const u8, size) };
    CPU_STACK_SAMPLES.output::<[u8]>(bytes, 0).is_ok()
}

/// The user stack of the sampled task; kernel threads have none (-EFAULT, not a loss).
#[inline(always)]
fn user_stack_id(ctx: &PerfEventContext) -> i32 {
    match stack_id(ctx, STACK_FLAGS_USER) {
        Ok(id) => id as i32,
        Err(errno) if errno == -EFAULT => errno,
        Err(errno) if errno == -EEXIST || errno == -EBUSY => stack_id_or_loss(Err(errno)),
        Err(errno) => {
            count_loss(USER_STACK_FAILED);
            errno
        }
    }
}

/// Sample counts: one per sample.
impl Aggregate<()> for u64 {
    #[inline(always)]
    fn first(_: &()) -> Self {
        1
    }

    #[inline(always)]
    unsafe fn add(count: *mut Self, _: &()) {
        // SAFETY: `count` points into a map value that stays valid for this program run
        // (the caller's contract); several CPUs may share a key (threads migrate), so the
        // add is atomic.
        unsafe {
            atomic_add(count, 1);
        }
    }
}

/// Offset of `task_struct.stack` (from the kernel's BTF); 0: unknown, samples taken in
/// kernel mode keep frame pointers.
#[unsafe(no_mangle)]
static CPU_TASK_STACK_OFFSET: u32 = 0;

/// Size of the kernel's `struct pt_regs` (from BTF; arm64's grows between releases).
#[unsafe(no_mangle)]
static CPU_PT_REGS_SIZE: u32 = 0;

/// The user registers the current task entered the kernel with (`task_pt_regs`): the
/// `pt_regs` at the top of its kernel stack. Only registers of user mode are taken.
#[inline(always)]
fn user_regs_of_current_task() -> Option<UserRegs> {
    let offset = load_u32(&CPU_TASK_STACK_OFFSET) as u64;
    if offset == 0 {
        return None;
    }
    // SAFETY: helper without arguments; the task pointer is only read through
    // bpf_probe_read_kernel.
    let task = unsafe { bpf_get_current_task() };
    // SAFETY: fault-safe read of the task's `stack` member.
    let stack = unsafe { bpf_probe_read_kernel((task + offset) as *const u64) }.ok()?;
    if stack == 0 {
        return None;
    }
    entry_user_regs(stack, load_u32(&CPU_PT_REGS_SIZE) as u64)
}

/// Copies `len` bytes of user stack from `sp` into the sample; false when the read
/// faulted (the buffer is then zeroed) or `len` is too long.
#[inline(always)]
fn read_stack(sample: &mut StackSample, sp: u64, len: usize) -> bool {
    if len == 0 || len > USER_STACK_MAX {
        return false;
    }
    // SAFETY: the destination is the sample's stack buffer, `len` bytes at most of its
    // USER_STACK_MAX; the source is user memory, read with the fault-safe helper.
    let ret = unsafe {
        bpf_probe_read_user(
            sample.stack.as_mut_ptr() as *mut c_void,
            len as u32,
            sp as *const c_void,
        )
    };
    ret == 0
}

crate::programs! {
    /// On-CPU sample: a software CPU-clock perf event, one per online CPU.
    perf_event cpu_sample(PerfEventContext) => on_sample;
}
