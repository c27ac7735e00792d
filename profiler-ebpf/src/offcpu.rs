//! Off-CPU time from `sched:sched_switch`.
//!
//! The program runs in the task leaving the CPU (`prev` is current). If it leaves in a
//! recorded state (D, and S with `--offcpu-all`) and is a target, its stacks and the
//! time are kept in `OFFCPU_START` by thread id. When a thread comes back (`next`), its
//! time off the CPU is added to `OFFCPU_STATS`. Nothing travels to user space per event.
//! Modelled on bcc's offcputime, with the wait measured switch-out to switch-in (so it
//! includes the time runnable in the queue after the wake-up).

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid, macros::map, maps::HashMap, programs::TracePointContext,
};
use profiler_common::{
    offcpu::losses::{
        OFFCPU_MAP_FULL, OFFCPU_NEGATIVE_DELTA, OFFCPU_OVERFLOW_FULL, OFFCPU_START_MAP_FULL,
    },
    offcpu::{OffcpuKey, OffcpuStart, OffcpuStat, STATE_UNINTERRUPTIBLE, WaitPart},
};

use crate::{
    shared::{
        Aggregate, STACK_FLAGS_KERNEL, STACK_FLAGS_USER, add_count_total_max,
        add_to_row_or_overflow, count_loss, load_u32, load_u64, note_user_process, now_ns,
        overflow_map, remember_current_task, stack_id, stack_id_or_loss, stats_map,
        user_stack_id_or_collision,
    },
    target::is_target,
};

/// Record offsets in `sched_switch`, from its format file (layouts differ between kernels).
#[unsafe(no_mangle)]
static SWITCH_PREV_PID_OFFSET: u32 = 24;
/// `prev_state` is a `long` on current kernels; only its low 32 bits are read (little endian).
#[unsafe(no_mangle)]
static SWITCH_PREV_STATE_OFFSET: u32 = 32;
#[unsafe(no_mangle)]
static SWITCH_NEXT_PID_OFFSET: u32 = 56;
/// `STATE_*` bits to record: D by default, D|S with `--offcpu-all`.
#[unsafe(no_mangle)]
static OFFCPU_STATES: u32 = STATE_UNINTERRUPTIBLE;
/// Waits shorter than this are dropped (`--min-wait`).
#[unsafe(no_mangle)]
static OFFCPU_MIN_NS: u64 = 0;

/// The aggregate read by user space. Size set at load time (`--map-entries`).
#[map]
pub static OFFCPU_STATS: HashMap<OffcpuKey, OffcpuStat> = stats_map();

/// Waits `OFFCPU_STATS` had no room for, per thread and state, without stacks.
#[map]
pub static OFFCPU_OVERFLOW: HashMap<OffcpuKey, OffcpuStat> = overflow_map();

/// Threads off the CPU in a recorded state, by thread id.
#[map]
pub static OFFCPU_START: HashMap<u32, OffcpuStart> =
    HashMap::with_max_entries(profiler_common::offcpu::OFFCPU_START_ENTRIES, 0);

/// `WAKERS`: the program with the waker join and wait chains (`--wakers`), a program of
/// its own so a kernel that refuses it still records off-CPU waits with the other.
pub fn on_sched_switch<const WAKERS: bool>(ctx: &TracePointContext) {
    let now = now_ns();
    // SAFETY: offsets from this kernel's format file of sched_switch; reads are checked.
    let (prev_pid, prev_state, next_pid) = unsafe {
        (
            ctx.read_at::<i32>(load_u32(&SWITCH_PREV_PID_OFFSET) as usize),
            ctx.read_at::<u32>(load_u32(&SWITCH_PREV_STATE_OFFSET) as usize),
            ctx.read_at::<i32>(load_u32(&SWITCH_NEXT_PID_OFFSET) as usize),
        )
    };
    if let (Ok(prev_pid), Ok(prev_state)) = (prev_pid, prev_state) {
        switch_out(ctx, prev_pid as u32, prev_state, now);
    }
    if let Ok(next_pid) = next_pid {
        switch_in::<WAKERS>(next_pid as u32, now);
    }
}

/// `prev` (the current task) leaves the CPU.
#[inline(always)]
fn switch_out(ctx: &TracePointContext, prev_pid: u32, prev_state: u32, now: u64) {
    let state = prev_state & load_u32(&OFFCPU_STATES);
    // pid 0 is the idle task; it never waits.
    if state == 0 || prev_pid == 0 || !is_target() {
        return;
    }
    let kstack_id = stack_id_or_loss(stack_id(ctx, STACK_FLAGS_KERNEL));
    let ustack_id = user_stack_id_or_collision(stack_id(ctx, STACK_FLAGS_USER));
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    // User space snapshots the process's memory map, to name the user frames even if
    // the process exits before the end of the run.
    if ustack_id >= 0 {
        note_user_process(tgid);
    }
    let start = OffcpuStart {
        start_ns: now,
        tgid,
        kstack_id,
        ustack_id,
        state: if state & STATE_UNINTERRUPTIBLE != 0 {
            STATE_UNINTERRUPTIBLE
        } else {
            state
        },
        holder_tgid: crate::filelock::take_holder(prev_pid, now),
        _pad: 0,
        counted_from_ns: now,
    };
    if OFFCPU_START.insert(prev_pid, start, 0).is_err() {
        count_loss(OFFCPU_START_MAP_FULL);
        return;
    }
    // The thread's name, while it is current (it is not at switch-in).
    remember_current_task();
}

/// `next` comes back on the CPU: close its wait, if one is open.
#[inline(always)]
fn switch_in<const WAKERS: bool>(next_pid: u32, now: u64) {
    let Some(start) = OFFCPU_START.get_ptr(next_pid) else {
        return;
    };
    // SAFETY: element of a hash map from a successful lookup; copied at once.
    let start = unsafe { *start };
    let _ = OFFCPU_START.remove(next_pid);
    // `--wakers`: who woke this wait (taken out whatever happens to the wait).
    let (found, waker) = if WAKERS {
        crate::wakers::take_waker(next_pid)
    } else {
        (false, crate::wakers::no_waker())
    };
    if now < start.start_ns {
        count_loss(OFFCPU_NEGATIVE_DELTA);
        return;
    }
    let part = WaitPart::of(start.start_ns, start.counted_from_ns, now);
    let wait_ns = part.whole_ns;
    if wait_ns < load_u64(&OFFCPU_MIN_NS) {
        return;
    }
    let key = OffcpuKey {
        tgid: start.tgid,
        tid: next_pid,
        kstack_id: start.kstack_id,
        ustack_id: start.ustack_id,
        state: start.state,
        holder_tgid: start.holder_tgid,
    };
    let in_stats = add_to_row_or_overflow(
        (&OFFCPU_STATS, &OFFCPU_OVERFLOW),
        &key,
        OffcpuKey::overflow,
        &part,
        (OFFCPU_MAP_FULL, OFFCPU_OVERFLOW_FULL),
        false,
    );
    if WAKERS {
        // The waker and chain rows name the wait's row: its overflow row when the wait
        // went there.
        let key = if in_stats { key } else { key.overflow() };
        if found {
            crate::wakers::add_waker_wait(&key, waker, wait_ns);
        }
        crate::wakers::on_wait_closed(next_pid, &key, start.start_ns, now, found, waker);
    }
}

/// Off-CPU rows: the part of the wait inside the profile to the total, the whole wait
/// to the maximum.
impl Aggregate<WaitPart> for OffcpuStat {
    #[inline(always)]
    fn first(part: &WaitPart) -> Self {
        OffcpuStat {
            count: 1,
            total_ns: part.counted_ns,
            max_ns: part.whole_ns,
        }
    }

    #[inline(always)]
    unsafe fn add(stat: *mut Self, part: &WaitPart) {
        // SAFETY: `stat` points into a map value valid for this program run (the
        // caller's contract).
        unsafe {
            add_count_total_max(
                &raw mut (*stat).count,
                &raw mut (*stat).total_ns,
                &raw mut (*stat).max_ns,
                part.counted_ns,
            );
            if part.whole_ns > (*stat).max_ns {
                (*stat).max_ns = part.whole_ns;
            }
        }
    }
}

/// The (waiter, waker) rows of `wakers`.
impl Aggregate<u64> for OffcpuStat {
    #[inline(always)]
    fn first(wait_ns: &u64) -> Self {
        OffcpuStat {
            count: 1,
            total_ns: *wait_ns,
            max_ns: *wait_ns,
        }
    }

    #[inline(always)]
    unsafe fn add(stat: *mut Self, wait_ns: &u64) {
        let wait_ns = *wait_ns;
        // SAFETY: `stat` points into a map value valid for this program run (the
        // caller's contract).
        unsafe {
            add_count_total_max(
                &raw mut (*stat).count,
                &raw mut (*stat).total_ns,
                &raw mut (*stat).max_ns,
                wait_ns,
            )
        }
    }
}

crate::classic_tracepoint!(
    /// `sched:sched_switch`.
    offcpu_sched_switch,
    "tracepoint/sched/sched_switch",
    on_sched_switch::<false>
);
crate::classic_tracepoint!(
    /// The same with `--wakers`: closes each wait with its waker and follows wait chains.
    offcpu_sched_switch_wakers,
    "tracepoint/sched/sched_switch",
    on_sched_switch::<true>
);
