//! Wakers (`--wakers`): `sched:sched_waking` runs in the task that wakes another (or in
//! the interrupt that does). When the woken thread has an open off-CPU wait, the waker
//! and its stacks are kept by the woken thread id in `WAKER_PENDING`; the off-CPU
//! program takes them back when it closes the wait at switch-in and adds the wait's
//! time under (waiter, waker) to `WAKER_STATS`. Nothing travels to user space per
//! event, and a wake-up of a thread that is not waiting costs one hash lookup.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::map,
    maps::{HashMap, LruHashMap},
    programs::TracePointContext,
};
use profiler_common::{
    offcpu::{OffcpuKey, OffcpuStat},
    wakers::losses::{
        CHAIN_MAP_FULL, CHAIN_OVERFLOW_FULL, WAKER_MAP_FULL, WAKER_OVERFLOW_FULL,
        WAKER_PENDING_FULL,
    },
    wakers::{
        CHAIN_LINKS, ChainKey, ChainLink, ChainStat, LastWait, RECENT_WAITS, RecentWaits, WakeInfo,
        WakerKey,
    },
};

use crate::{
    offcpu::OFFCPU_START,
    shared::{
        Aggregate, STACK_FLAGS_KERNEL, STACK_FLAGS_USER, add_to_row_or_overflow, atomic_add,
        count_loss, load_u32, note_user_process, overflow_map, remember_current_task, stack_id,
        stack_id_or_loss, stats_map, user_stack_id_or_collision,
    },
};

/// 1 when wakers are recorded (`--wakers`).
#[unsafe(no_mangle)]
static WAKERS_ON: u32 = 0;
/// Offset of `pid` (the woken thread) in `sched_waking`'s record, from its format file.
#[unsafe(no_mangle)]
static WAKING_PID_OFFSET: u32 = 24;

/// The aggregate read by user space. Size set at load time (`--map-entries`).
#[map]
pub static WAKER_STATS: HashMap<WakerKey, OffcpuStat> = stats_map();

/// Waits `WAKER_STATS` had no room for, per waiter and waker thread, without stacks.
#[map]
pub static WAKER_OVERFLOW: HashMap<WakerKey, OffcpuStat> = overflow_map();

/// Wakers of threads woken but not yet back on a CPU, by woken thread id.
#[map]
pub static WAKER_PENDING: HashMap<u32, WakeInfo> =
    HashMap::with_max_entries(profiler_common::wakers::WAKER_PENDING_ENTRIES, 0);

/// The last closed wait of each thread, for wait chains (least recently used go).
#[map]
pub static LAST_WAIT: LruHashMap<u32, RecentWaits> =
    LruHashMap::with_max_entries(profiler_common::wakers::LAST_WAIT_ENTRIES, 0);

/// Wait chains: (waiter row, links) -> times. Size set at load time (`--map-entries`).
#[map]
pub static CHAIN_STATS: HashMap<ChainKey, ChainStat> = stats_map();

/// Chains `CHAIN_STATS` had no room for, per thread of each wait, without the waits'
/// stacks.
#[map]
pub static CHAIN_OVERFLOW: HashMap<ChainKey, ChainStat> = overflow_map();

/// `sched_waking(comm, pid, prio, target_cpu)`, in the waker's context.
pub fn on_sched_waking(ctx: &TracePointContext) {
    if load_u32(&WAKERS_ON) == 0 {
        return;
    }
    // SAFETY: offset from this kernel's format file of sched_waking; the read is checked.
    let Ok(woken) = (unsafe { ctx.read_at::<i32>(load_u32(&WAKING_PID_OFFSET) as usize) }) else {
        return;
    };
    let woken = woken as u32;
    // Only wake-ups that end a recorded wait matter (the off-CPU family's filter and
    // states decided which waits are recorded).
    // SAFETY: lookup in a map of plain data; the reference is not kept.
    if woken == 0 || unsafe { OFFCPU_START.get(woken) }.is_none() {
        return;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let tid = pid_tgid as u32;
    let kstack_id = stack_id_or_loss(stack_id(ctx, STACK_FLAGS_KERNEL));
    // Kernel threads and the idle task have no user stack: only a collision is a loss.
    let ustack_id = if tgid == 0 {
        -1
    } else {
        user_stack_id_or_collision(stack_id(ctx, STACK_FLAGS_USER))
    };
    if ustack_id >= 0 {
        note_user_process(tgid);
    }
    let info = WakeInfo {
        tgid,
        tid,
        kstack_id,
        ustack_id,
    };
    if WAKER_PENDING.insert(woken, info, 0).is_err() {
        count_loss(WAKER_PENDING_FULL);
        return;
    }
    // The waker's name, while it is current.
    if tid != 0 {
        remember_current_task();
    }
}

/// The waker of thread `tid`'s wait, taken out of `WAKER_PENDING` (its wait is closed):
/// (found, waker). No `Option` here: the verifier of 6.1 refuses the read of an `Option`'s
/// uninitialised payload that the compiler may emit on the `None` path.
#[inline(always)]
pub fn take_waker(tid: u32) -> (bool, WakeInfo) {
    let Some(info) = WAKER_PENDING.get_ptr(tid) else {
        return (false, no_waker());
    };
    // SAFETY: element of a hash map from a successful lookup; copied at once.
    let info = unsafe { *info };
    let _ = WAKER_PENDING.remove(tid);
    (true, info)
}

/// The waker of a wait none was seen for.
#[inline(always)]
pub fn no_waker() -> WakeInfo {
    WakeInfo {
        tgid: 0,
        tid: 0,
        kstack_id: -1,
        ustack_id: -1,
    }
}

/// Adds a closed wait's time to its (waiter, waker) row.
#[inline(always)]
pub fn add_waker_wait(waiter: &OffcpuKey, waker: WakeInfo, wait_ns: u64) {
    let key = WakerKey {
        waiter: *waiter,
        waker,
    };
    add_to_row_or_overflow(
        (&WAKER_STATS, &WAKER_OVERFLOW),
        &key,
        WakerKey::overflow,
        &wait_ns,
        (WAKER_MAP_FULL, WAKER_OVERFLOW_FULL),
        false,
    );
}

// The chain walk below is written out for these sizes.
const _: () = assert!(RECENT_WAITS == 4 && CHAIN_LINKS == 2);

/// A wait of thread `tid` (row `key`, from `start_ns` to `end_ns`) closed, woken by
/// `waker`: remembers it among the thread's recent waits, and when the waker was itself
/// off the CPU during it, adds the chain (up to `CHAIN_LINKS` wakers deep). Written
/// without loops: 6.1's verifier refuses the loops the compiler made of them.
#[inline(always)]
pub fn on_wait_closed(
    tid: u32,
    key: &OffcpuKey,
    start_ns: u64,
    end_ns: u64,
    found: bool,
    waker: WakeInfo,
) {
    // `waker` is `no_waker()` when none was found: tid 0, stack -1.
    let last = LastWait {
        start_ns,
        end_ns,
        tgid: key.tgid,
        kstack_id: key.kstack_id,
        state: key.state,
        waker_tgid: waker.tgid,
        waker_tid: waker.tid,
        waker_kstack_id: waker.kstack_id,
    };
    remember_wait(tid, last);
    if !found {
        return;
    }
    // The first link: the waker's wait that overlapped this one the most.
    let (first, first_begin, first_end) = link_of(tid, waker.tid, start_ns, end_ns);
    if first_end == 0 {
        return;
    }
    let unused = ChainLink {
        tgid: 0,
        tid: 0,
        kstack_id: -1,
        state: 0,
    };
    let mut chain = ChainKey {
        waiter: *key,
        links: [unused; CHAIN_LINKS],
        last_waker_tgid: first.waker_tgid,
        last_waker_tid: first.waker_tid,
        waker_kstacks: [waker.kstack_id, first.waker_kstack_id, -1],
        _pad: 0,
    };
    chain.links[0] = ChainLink {
        tgid: first.tgid,
        tid: waker.tid,
        kstack_id: first.kstack_id,
        state: first.state,
    };
    let mut times = [first_end - first_begin, 0];
    // The second link: the first link's waker, inside the first link's overlap.
    let (second, begin, end) = link_of(tid, first.waker_tid, first_begin, first_end);
    if end != 0 {
        chain.links[1] = ChainLink {
            tgid: second.tgid,
            tid: first.waker_tid,
            kstack_id: second.kstack_id,
            state: second.state,
        };
        chain.last_waker_tgid = second.waker_tgid;
        chain.last_waker_tid = second.waker_tid;
        chain.waker_kstacks[2] = second.waker_kstack_id;
        times[1] = end - begin;
    }
    let wait_ns = end_ns - start_ns;
    add_to_row_or_overflow(
        (&CHAIN_STATS, &CHAIN_OVERFLOW),
        &chain,
        ChainKey::overflow,
        &(wait_ns, times),
        (CHAIN_MAP_FULL, CHAIN_OVERFLOW_FULL),
        false,
    );
}

/// Of thread `thread`'s recent waits, the one that overlapped [from, to] the most, with
/// the overlap (begin, end); end 0 for none: the idle task (an interrupt), the waiter
/// itself, or no overlap.
#[inline(always)]
fn link_of(waiter: u32, thread: u32, from: u64, to: u64) -> (LastWait, u64, u64) {
    let none = (LastWait::default(), 0u64, 0u64);
    if thread == 0 || thread == waiter {
        return none;
    }
    let Some(recent) = LAST_WAIT.get_ptr(thread) else {
        return none;
    };
    // SAFETY: element of a map from a successful lookup; copied (another CPU may be
    // writing it: at worst one stale wait).
    let waits = unsafe { (*recent).waits };
    let mut best = (LastWait::default(), 0u64, 0u64);
    consider(&waits[0], from, to, &mut best);
    consider(&waits[1], from, to, &mut best);
    consider(&waits[2], from, to, &mut best);
    consider(&waits[3], from, to, &mut best);
    best
}

#[inline(always)]
fn consider(wait: &LastWait, from: u64, to: u64, best: &mut (LastWait, u64, u64)) {
    if wait.end_ns <= from || wait.start_ns >= to || wait.start_ns >= wait.end_ns {
        return;
    }
    let begin = if wait.start_ns > from {
        wait.start_ns
    } else {
        from
    };
    let end = if wait.end_ns < to { wait.end_ns } else { to };
    if end - begin > best.2 - best.1 {
        *best = (*wait, begin, end);
    }
}

/// Puts a closed wait into the thread's ring of recent waits.
#[inline(always)]
fn remember_wait(tid: u32, wait: LastWait) {
    if let Some(recent) = LAST_WAIT.get_ptr_mut(tid) {
        // SAFETY: element of a map from a successful lookup; only the thread's own
        // switch-in writes its ring.
        unsafe {
            let slot = ((*recent).next as usize) & (RECENT_WAITS - 1);
            (*recent).waits[slot] = wait;
            (*recent).next = (*recent).next.wrapping_add(1);
        }
        return;
    }
    let mut fresh = RecentWaits {
        waits: [LastWait::default(); RECENT_WAITS],
        next: 1,
        _pad: 0,
    };
    fresh.waits[0] = wait;
    let _ = LAST_WAIT.insert(tid, fresh, 0);
}

/// A chain's wait and the time of each link.
impl Aggregate<(u64, [u64; CHAIN_LINKS])> for ChainStat {
    #[inline(always)]
    fn first(&(wait_ns, link_ns): &(u64, [u64; CHAIN_LINKS])) -> Self {
        ChainStat {
            count: 1,
            wait_ns,
            link_ns,
        }
    }

    #[inline(always)]
    unsafe fn add(stat: *mut Self, (wait_ns, times): &(u64, [u64; CHAIN_LINKS])) {
        // SAFETY: `stat` points into a map value valid for this program run (the
        // caller's contract); the adds are atomic (CPUs share keys).
        unsafe {
            atomic_add(&raw mut (*stat).count, 1);
            atomic_add(&raw mut (*stat).wait_ns, *wait_ns);
            atomic_add(&raw mut (*stat).link_ns[0], times[0]);
            atomic_add(&raw mut (*stat).link_ns[1], times[1]);
        }
    }
}

crate::classic_tracepoint!(
    /// `sched:sched_waking` (`--wakers`): the woken pid from the format file.
    wakers_sched_waking,
    "tracepoint/sched/sched_waking",
    on_sched_waking
);
