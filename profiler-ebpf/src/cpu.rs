//! On-CPU sampling from a perf_event software CPU clock (one event per online CPU).
//!
//! Each sample adds one to the in-kernel count of (process, thread, kernel stack, user
//! stack). Idle (pid 0, the per-CPU swapper tasks) is dropped: it is not a process, and
//! the sampling frequency times the duration tells how much time was not sampled.

use core::intrinsics::{AtomicOrdering, atomic_xadd};

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::bpf_get_current_pid_tgid,
    macros::map,
    maps::HashMap,
    programs::{PerfEventContext, tracing::StackIdContext},
};
use profiler_common::{
    cpu::CpuKey,
    loss::{CPU_MAP_FULL, USER_STACK_FAILED},
};

use crate::{
    shared::{
        STACK_FLAGS_KERNEL, STACK_FLAGS_USER, STACKS, count_loss, note_user_process,
        remember_current_task, stack_id_or_loss,
    },
    target::is_target,
};

/// The aggregate read by user space. Size set at load time (`--map-entries`).
#[map]
pub static CPU_SAMPLES: HashMap<CpuKey, u64> =
    HashMap::with_max_entries(profiler_common::STATS_ENTRIES, 0);

const EEXIST: i32 = 17;
const EFAULT: i32 = 14;

pub fn on_sample(ctx: &PerfEventContext) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    if tgid == 0 || !is_target() {
        return;
    }
    let kstack_id = match ctx.get_stackid(&STACKS, STACK_FLAGS_KERNEL) {
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
    add_sample(&key);
}

/// The user stack of the sampled task; kernel threads have none (-EFAULT, not a loss).
#[inline(always)]
fn user_stack_id(ctx: &PerfEventContext) -> i32 {
    match ctx.get_stackid(&STACKS, STACK_FLAGS_USER) {
        Ok(id) => id as i32,
        Err(errno) if errno == -EFAULT => errno,
        Err(errno) if errno == -EEXIST => stack_id_or_loss(Err(errno)),
        Err(errno) => {
            count_loss(USER_STACK_FAILED);
            errno
        }
    }
}

#[inline(always)]
fn add_sample(key: &CpuKey) {
    if let Some(count) = CPU_SAMPLES.get_ptr_mut(key) {
        increment(count);
        return;
    }
    match CPU_SAMPLES.insert(key, 1, BPF_NOEXIST as u64) {
        Ok(()) => remember_current_task(),
        // Another CPU inserted the same key in between.
        Err(errno) if errno == -EEXIST => {
            if let Some(count) = CPU_SAMPLES.get_ptr_mut(key) {
                increment(count);
            }
        }
        Err(_) => count_loss(CPU_MAP_FULL),
    }
}

#[inline(always)]
fn increment(count: *mut u64) {
    // SAFETY: `count` points into a map value that stays valid for this program run;
    // several CPUs may share a key (threads migrate), so the add is atomic.
    unsafe {
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(count, 1);
    }
}
