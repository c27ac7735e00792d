//! The in-kernel target filter: which processes are profiled.
//!
//! User space fills `TARGETS` with the process ids it was given (`-p`, or the child it
//! started for `-- CMD`) and sets `FILTER_MODE`. `sched_process_fork` adds children of
//! tracked processes, `sched_process_exit` removes them, so the set stays current and
//! every probe family asks the same cheap question: `is_target()`.

use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid},
    macros::map,
    maps::{Array, HashMap, PerCpuArray},
    programs::TracePointContext,
};
use profiler_common::{
    loss::TARGET_MAP_FULL,
    target::{FILTER_ALL, FILTER_CGROUP, FILTER_PIDS},
};

use crate::shared::{atomic_add, count_loss};

/// Selects the filter (`profiler_common::target::FILTER_*`). Set at load time.
#[unsafe(no_mangle)]
static FILTER_MODE: u32 = FILTER_ALL;

/// Offset of `child_pid` in the `sched_process_fork` record (from its format file).
#[unsafe(no_mangle)]
static FORK_CHILD_PID_OFFSET: u32 = 20;

/// Offset of `group_dead` in the `sched_process_exit` record; 0 when the kernel's record
/// has no such field (before 6.9): the main thread's exit then ends the process.
#[unsafe(no_mangle)]
static EXIT_GROUP_DEAD_OFFSET: u32 = 0;

/// Tracked process ids (tgid -> 1). Threads of a tracked process share its tgid.
#[map]
pub static TARGETS: HashMap<u32, u8> =
    HashMap::with_max_entries(profiler_common::target::TARGETS_ENTRIES, 0);

/// Tracked cgroup v2 ids (the inode numbers of the cgroup directories).
#[map]
pub static CGROUPS: HashMap<u64, u8> =
    HashMap::with_max_entries(profiler_common::target::CGROUPS_ENTRIES, 0);

#[inline(always)]
fn load_u32(global: &u32) -> u32 {
    // SAFETY: reading a load-time global; volatile so the compiler does not fold the
    // default value into the program (user space rewrites it before load).
    unsafe { core::ptr::read_volatile(global) }
}

/// True when the current task belongs to a profiled process.
#[inline(always)]
pub fn is_target() -> bool {
    match load_u32(&FILTER_MODE) {
        FILTER_PIDS => is_tracked_current((bpf_get_current_pid_tgid() >> 32) as u32),
        FILTER_CGROUP => {
            // SAFETY: helper without arguments.
            let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
            // SAFETY: lookup in a map of plain data; the reference is not kept.
            unsafe { CGROUPS.get(cgroup_id) }.is_some()
        }
        _ => true,
    }
}

/// True when process `tgid`, which need not be the current task's (the requester of a
/// FUSE background request sent by another task), is profiled. Under a cgroup filter
/// only the current task's cgroup is known: the current task decides.
#[inline(always)]
pub fn is_target_process(tgid: u32) -> bool {
    match load_u32(&FILTER_MODE) {
        FILTER_PIDS => is_tracked(tgid),
        FILTER_CGROUP => is_target(),
        _ => true,
    }
}

#[inline(always)]
fn is_tracked(tgid: u32) -> bool {
    // SAFETY: lookup in a map of plain data; the reference is not kept.
    unsafe { TARGETS.get(tgid) }.is_some()
}

/// The last verdict of this CPU: a lock storm asks about the same process on every
/// event, and an array slot costs a load where the hash lookup costs a hash.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct TargetVerdict {
    tgid: u32,
    generation: u32,
    tracked: u32,
}

#[map]
static TARGET_VERDICT: PerCpuArray<TargetVerdict> = PerCpuArray::with_max_entries(1, 0);

/// Bumped whenever `TARGETS` changes in the kernel (fork, exit): cached verdicts of an
/// older generation are asked again. (User space fills `TARGETS` before attaching.)
#[map]
static TARGET_GENERATION: Array<u32> = Array::with_max_entries(1, 0);

/// `is_tracked` for the current task's process, through this CPU's last verdict.
#[inline(always)]
fn is_tracked_current(tgid: u32) -> bool {
    let generation = match TARGET_GENERATION.get_ptr(0) {
        // SAFETY: array element from a successful lookup; a plain u32.
        Some(generation) => unsafe { core::ptr::read_volatile(generation) },
        None => return is_tracked(tgid),
    };
    let Some(verdict) = TARGET_VERDICT.get_ptr_mut(0) else {
        return is_tracked(tgid);
    };
    // SAFETY: this CPU's slot; programs do not migrate while they run. A program in an
    // interrupt may rewrite it meanwhile, which at worst costs one more lookup.
    let verdict = unsafe { &mut *verdict };
    if verdict.tgid == tgid && verdict.generation == generation && tgid != 0 {
        return verdict.tracked != 0;
    }
    let tracked = is_tracked(tgid);
    *verdict = TargetVerdict {
        tgid,
        generation,
        tracked: tracked as u32,
    };
    tracked
}

/// Marks `TARGETS` as changed.
#[inline(always)]
fn targets_changed() {
    if let Some(generation) = TARGET_GENERATION.get_ptr_mut(0) {
        // SAFETY: array element from a successful lookup; the add is atomic (several
        // CPUs fork and exit at once).
        unsafe { atomic_add(generation, 1) };
    }
}

crate::classic_tracepoint!(
    /// `sched:sched_process_fork`, runs in the parent. A new process of a tracked parent
    /// is tracked; a new thread needs nothing (it shares the tgid), but inserting its id
    /// is harmless and cheaper than telling the two apart here.
    target_fork,
    "tracepoint/sched/sched_process_fork",
    on_fork
);

crate::classic_tracepoint!(
    /// `sched:sched_process_exit`, runs in the exiting thread.
    target_exit,
    "tracepoint/sched/sched_process_exit",
    on_exit
);

#[inline(always)]
fn on_fork(ctx: &TracePointContext) {
    if load_u32(&FILTER_MODE) != FILTER_PIDS {
        return;
    }
    let parent_tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !is_tracked(parent_tgid) {
        return;
    }
    // SAFETY: the offset comes from this kernel's format file for this event.
    if let Ok(child_pid) = unsafe { ctx.read_at::<i32>(load_u32(&FORK_CHILD_PID_OFFSET) as usize) }
        && TARGETS.insert(child_pid as u32, 1, 0).is_err()
    {
        count_loss(TARGET_MAP_FULL);
    }
    targets_changed();
}

#[inline(always)]
fn on_exit(ctx: &TracePointContext) {
    if load_u32(&FILTER_MODE) != FILTER_PIDS {
        return;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let tgid = (pid_tgid >> 32) as u32;
    let group_dead_offset = load_u32(&EXIT_GROUP_DEAD_OFFSET);
    if tid != tgid {
        // A thread (tracked by tid only if it was inserted at fork time).
        let _ = TARGETS.remove(tid);
    }
    let process_ends = if group_dead_offset == 0 {
        tid == tgid
    } else {
        // SAFETY: the offset comes from this kernel's format file for this event.
        unsafe { ctx.read_at::<u8>(group_dead_offset as usize) }.unwrap_or(0) != 0
    };
    if process_ends {
        let _ = TARGETS.remove(tgid);
        targets_changed();
    }
}

/// True when every process is profiled (no target given).
#[inline(always)]
pub fn filter_is_all() -> bool {
    load_u32(&FILTER_MODE) == FILTER_ALL
}
