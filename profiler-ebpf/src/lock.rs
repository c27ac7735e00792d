//! Lock contention from `lock:contention_begin` / `lock:contention_end` (kernel 5.19+),
//! or, on older kernels, from kprobes/kretprobes on the contention slow paths; both
//! fill the same in-flight maps and the same aggregate through the same helpers.
//!
//! At begin: remember the start time, the lock and the waiter's kernel stack. Spinning
//! waiters (spinlocks, rwlocks) cannot sleep or migrate until the end, so their start
//! lives in a per-CPU slot; sleeping waiters (mutex, rwsem, rt-mutex, semaphore) in a
//! hash keyed by thread id. At end: add the wait to the in-kernel aggregate keyed by
//! (lock, process, stack, flags, outcome). Nothing travels to user space per event.
//! Modelled on perf's `lock_contention.bpf.c`.
//!
//! The end program runs with the lock just taken: whatever it does lengthens the
//! critical section of a contended lock, serially, on every handoff. So it only closes
//! the wait (and the previous acquirer's hold) and leaves the finished contention in
//! its CPU's `LOCK_PENDING` ring; the next begin on that CPU, outside any critical
//! section, adds it to the aggregate. User space adds what the rings still hold once
//! the programs are detached. (The kprobe fallback adds at once: its programs may nest
//! with the tracepoints'.)
//!
//! Cost and accuracy: a kernel stack walk (`bpf_get_stackid`) costs about 3 us, several
//! times a typical spin. So the walk is not done per contention: the stack is looked up
//! in `LOCK_STACK_CACHE` by (lock, fingerprint of the kernel stack above the tracepoint),
//! and walked only on a miss or when the cached walk is `STACK_REFRESH_NS` old. The
//! fingerprint is made of call-path return addresses only (the lock functions' own,
//! the same for every caller, and words that are not kernel text are skipped: see
//! `LockText`), and one that finds too few of them is not used. A wait of
//! `EXACT_WAIT_NS` or more whose stack came from a cache is walked again at its end when
//! it is a sleeping wait (mutex, rwsem), so a long wait is charged to its own call path
//! whatever the fingerprint. The wait starts at the program's entry (the moment the waiter found the lock taken); when the
//! program walked, it starts after the walk, so lockpath's own work is never reported
//! as waiting.
//!
//! Holds under contention: each acquisition after a wait (`contention_end`, ret 0) is
//! remembered per lock in `LOCK_LAST_ACQUIRER`. When the next waiter that was already
//! waiting at that acquisition gets the lock, the previous acquirer has let it go: its
//! hold (acquisition to this handoff) is added to `LOCK_HOLDS` under its own acquisition
//! stack. Two moments show the release sooner, and the first one ends the hold: a
//! sleeping wait's begin that finds the lock free or another thread's (`note_owner_seen`),
//! and the acquirer waking a thread that sleeps waiting for the lock, as a mutex or rwsem
//! unlock does once it let the lock go (`on_waking`).

use aya_ebpf::{
    EbpfContext,
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel, generated::bpf_get_current_task},
    macros::{map, raw_tracepoint},
    maps::{Array, HashMap, PerCpuArray},
    programs::{ProbeContext, RawTracePointContext, RetProbeContext, tracing::StackIdContext},
};
use profiler_common::{
    latency::LatencyStat,
    lock::losses::{
        LOCK_HOLD_MAP_FULL, LOCK_HOLD_MIXED, LOCK_HOLD_OVERFLOW_FULL, LOCK_INTERRUPT_WAIT_LOST,
        LOCK_KPROBE_RETURN_LOST, LOCK_MAP_FULL, LOCK_NEGATIVE_DELTA, LOCK_NESTED,
        LOCK_OVERFLOW_FULL, LOCK_STACK_CACHE_FAILED, LOCK_STACK_FINGERPRINT_SHORT, LOCK_STALE_WAIT,
        LOCK_UNMATCHED_END, LOCK_WAIT_MAP_FULL,
    },
    lock::{
        ContendedHoldKey, EXACT_WAIT_NS, FINGERPRINT_TEXT_WORDS, LCB_F_MUTEX, LCB_F_PERCPU,
        LCB_F_READ, LCB_F_RT, LCB_F_SPIN, LCB_F_WRITE, LOCK_CLASS_MMAP_LOCK, LOCK_CLASS_UNKNOWN,
        LOCK_FILTER_MAX_ADDRS, LOCK_LAST_ACQUIRER_ENTRIES, LOCK_OUTCOME_ACQUIRED,
        LOCK_SITE_CACHE_ENTRIES, LOCK_STACK_CACHE_ENTRIES, LOCK_TEXT_RANGES, LockAcquirer,
        LockFilter, LockKey, LockLayout, LockStat, LockText, LockWait, OpenSpin,
        SLEEP_FINGERPRINT_WORDS, SPIN_FINGERPRINT_WORDS, STACK_REFRESH_NS, SiteCacheEntry,
        StackCacheEntry, StackCacheKey, conflicts, filter_keeps, free_at_wake, open_spin_relation,
        outcome_of, reader_woken_by_unlock, same_spin_context, slot_of, sticky_flags,
    },
    lock::{
        LOCK_NAMED_ENTRIES, LOCK_PENDING_ENDS, NO_HOLD, OWNER_FLAG_BITS, PendingEnd, PendingRing,
        named_slot,
    },
    lockname::StackCacheValue,
};

use crate::{
    arch::kprobe_sp,
    latency::add_latency,
    offcpu::OFFCPU_START,
    shared::{
        Aggregate, STACK_FLAGS_KERNEL, TASKS, add_count_total_max, add_to_row_or_overflow,
        atomic_add, count_loss, now_ns, overflow_map, remember_current_task, stack_id,
        stack_id_or_loss, stats_map, tasks_moved,
    },
    target::is_target,
};

/// The aggregate read by user space. Size set at load time (`--map-entries`).
#[map]
pub static LOCK_STATS: HashMap<LockKey, LockStat> = stats_map();

/// Contentions `LOCK_STATS` had no room for, per process, lock type and outcome
/// (`LockKey::overflow`).
#[map]
pub static LOCK_OVERFLOW: HashMap<LockKey, LockStat> = overflow_map();

/// Contention in progress of a spinning waiter, one per CPU.
#[map]
static LOCK_SPIN_WAIT: PerCpuArray<SpinSlot> = PerCpuArray::with_max_entries(1, 0);

/// A CPU's spin slot: the open spin wait, and a word through which a frame address
/// becomes a number (it is a context pointer, on which the verifier allows no
/// arithmetic; read back from a map it is plain data).
#[repr(C)]
struct SpinSlot {
    wait: LockWait,
    frame: u64,
}

/// This CPU's spin slot: its open wait, and the frame address of `ctx` as a number.
#[inline(always)]
fn spin_slot<C: LockContext>(ctx: &C) -> Option<(*mut LockWait, u64)> {
    let spin = LOCK_SPIN_WAIT.get_ptr_mut(0)?;
    let frame = ctx.stack_base().unwrap_or(0);
    // SAFETY: this CPU's slot from a successful lookup; only this CPU writes it, and the
    // word is read back at once (volatile: the read must come from the map).
    unsafe {
        core::ptr::write_volatile(&raw mut (*spin).frame, frame);
        Some((
            &raw mut (*spin).wait,
            core::ptr::read_volatile(&raw const (*spin).frame),
        ))
    }
}

/// Contention in progress of a sleeping waiter, by thread id.
#[map]
static LOCK_SLEEP_WAIT: HashMap<u32, LockWait> =
    HashMap::with_max_entries(profiler_common::lock::LOCK_SLEEP_WAIT_ENTRIES, 0);

/// Stack ids by (lock, fingerprint of the kernel stack): see the module comment.
#[map]
static LOCK_STACK_CACHE: PerCpuArray<StackCacheEntry> =
    PerCpuArray::with_max_entries(LOCK_STACK_CACHE_ENTRIES, 0);

/// The call site last seen per (lock, stack depth), per CPU: see `waiter_stack`.
#[map]
static LOCK_SITE_CACHE: PerCpuArray<SiteCacheEntry> =
    PerCpuArray::with_max_entries(LOCK_SITE_CACHE_ENTRIES, 0);

/// The words of the stack a fingerprint reads, and the masks of what they are, per CPU
/// (too many for the BPF stack; see `FingerprintScratch`).
#[map]
static LOCK_STACK_WORDS: PerCpuArray<FingerprintScratch> = PerCpuArray::with_max_entries(1, 0);

/// The last contended acquisition of each lock (holds under contention). Mappable, for
/// the layout alone: the kernel then starts the values on a page boundary, so each
/// cache-line-sized slot is exactly one cache line (otherwise where the values start
/// depends on the kernel's own structures).
#[map]
static LOCK_LAST_ACQUIRER: Array<LockAcquirer> =
    Array::with_max_entries(LOCK_LAST_ACQUIRER_ENTRIES, BPF_F_MMAPABLE);

/// `BPF_F_MMAPABLE` (uapi bpf.h): an array map whose values user space may map.
const BPF_F_MMAPABLE: u32 = 1 << 10;

/// Holds under contention, per lock and holder. Size set at load time (`--map-entries`).
#[map]
pub static LOCK_HOLDS: HashMap<ContendedHoldKey, LatencyStat> = stats_map();

/// Holds `LOCK_HOLDS` had no room for, per process and mode.
#[map]
pub static LOCK_HOLDS_OVERFLOW: HashMap<ContendedHoldKey, LatencyStat> = overflow_map();

/// Finished contentions not yet in the aggregate, per CPU (see the module comment).
#[map]
static LOCK_PENDING: PerCpuArray<PendingRing> = PerCpuArray::with_max_entries(1, 0);

/// The threads this CPU's begin program named last, by `tid % LOCK_NAMED_ENTRIES`: the
/// rows are added by a later begin, in another task, so the waiter is named at its
/// begin, once, and again after a cgroup move (see `named_slot`).
#[map]
static LOCK_NAMED: PerCpuArray<u64> = PerCpuArray::with_max_entries(LOCK_NAMED_ENTRIES, 0);

/// Threads whose sleeping wait was not recorded (LOCK_SLEEP_WAIT full, counted then):
/// their end is not counted a second time as unmatched. A slot per `tid % entries`
/// holding the thread id: an array, because the end program runs with the acquired lock
/// held and an LRU map's list locks have no recursion guard (the lock could be one of
/// them). Two such threads in one slot: the first one's end counts as unmatched.
#[map]
static LOCK_SLEEP_DROPPED: Array<u32> =
    Array::with_max_entries(profiler_common::lock::LOCK_SLEEP_DROPPED_ENTRIES, 0);

/// Notes that `tid`'s wait was dropped.
#[inline(always)]
fn note_dropped(tid: u32) {
    if let Some(slot) =
        LOCK_SLEEP_DROPPED.get_ptr_mut(tid % profiler_common::lock::LOCK_SLEEP_DROPPED_ENTRIES)
    {
        // SAFETY: element of an array map; a racing write only loses one note.
        unsafe { *slot = tid };
    }
}

/// Whether `tid`'s wait was dropped; forgets it.
#[inline(always)]
fn take_dropped(tid: u32) -> bool {
    match LOCK_SLEEP_DROPPED.get_ptr_mut(tid % profiler_common::lock::LOCK_SLEEP_DROPPED_ENTRIES) {
        // SAFETY: as in note_dropped.
        Some(slot) if tid != 0 && unsafe { *slot } == tid => {
            // SAFETY: as above.
            unsafe { *slot = 0 };
            true
        }
        _ => false,
    }
}

/// What the lock programs need from their context besides the stack walk: where the
/// kernel stack of the contending code starts, for the fingerprint.
pub trait LockContext: StackIdContext {
    /// The address, as a number, where the words of the fingerprint start.
    fn stack_base(&self) -> Option<u64>;
}

impl LockContext for RawTracePointContext {
    /// The tracepoint's arguments live in the frame of `bpf_trace_runN`, on the kernel
    /// stack of the contending task: above them are the tracepoint glue, the lock's slow
    /// path, the lock function and its caller. The two arguments themselves (lock and
    /// flags, already in every key) are skipped.
    fn stack_base(&self) -> Option<u64> {
        Some(self.as_ptr() as u64 + 16)
    }
}

impl LockContext for ProbeContext {
    /// At a kprobe on a slow path's entry, the saved stack pointer points at the return
    /// address into the lock function.
    fn stack_base(&self) -> Option<u64> {
        Some(kprobe_sp(self))
    }
}

/// Struct offsets from the kernel's BTF, set at load time (see `LockLayout`).
#[unsafe(no_mangle)]
static LOCK_LAYOUT: LockLayout = LockLayout {
    enabled: 0,
    task_mm: 0,
    task_pid: 0,
    task_tgid: 0,
    task_comm: 0,
    mm_mmap_lock: 0,
    mutex_owner: 0,
    rwsem_owner: 0,
    exact_stacks: 0,
    task_stack: 0,
    thread_size: 0,
    rwsem_count: 0,
};

/// Kernel text and the lock functions' text, set at load time (see `LockText`).
#[unsafe(no_mangle)]
static LOCK_TEXT: LockText = LockText {
    image_start: 0,
    image_end: 0,
    modules_start: 0,
    modules_end: 0,
    internal: [[0; 2]; LOCK_TEXT_RANGES],
};

/// The record-time lock filter (`--type`, `--lock-filter`), set at load time; all zero
/// (no filter) by default.
#[unsafe(no_mangle)]
static LOCK_FILTER: LockFilter = LockFilter {
    enabled: 0,
    addr_count: 0,
    type_mask: 0,
    addrs: [0; LOCK_FILTER_MAX_ADDRS],
};

/// Whether a contention on `lock_addr` with `flags` is left out by the record-time
/// filter. Without a filter: one global read and a branch, nothing else; with one, a
/// few more global reads, and a left-out contention costs nothing further (no
/// timestamp, no map, no stack).
#[inline(always)]
fn filtered_out(lock_addr: u64, flags: u32) -> bool {
    // SAFETY: reading a load-time global; volatile so the default is not folded in.
    let enabled = unsafe { core::ptr::read_volatile(&LOCK_FILTER.enabled) };
    if enabled == 0 {
        return false;
    }
    rejects(lock_addr, flags, enabled)
}

/// The filter's check proper: out of line, so the unfiltered path stays as it was.
#[inline(never)]
fn rejects(lock_addr: u64, flags: u32, enabled: u32) -> bool {
    // SAFETY: reading load-time globals; volatile so the defaults are not folded in.
    let (type_mask, count) = unsafe {
        (
            core::ptr::read_volatile(&LOCK_FILTER.type_mask),
            core::ptr::read_volatile(&LOCK_FILTER.addr_count),
        )
    };
    !filter_keeps(enabled, type_mask, lock_addr, flags, |index| {
        if index >= count as usize || index >= LOCK_FILTER_MAX_ADDRS {
            return None;
        }
        // SAFETY: as above; the index is below the array's length.
        Some(unsafe { core::ptr::read_volatile(&LOCK_FILTER.addrs[index]) })
    })
}

/// Whether a record-time lock filter is set (its left-out waits end unmatched).
#[inline(always)]
fn lock_filter_set() -> bool {
    // SAFETY: reading a load-time global; volatile so the default is not folded in.
    unsafe { core::ptr::read_volatile(&LOCK_FILTER.enabled) != 0 }
}

/// `RWSEM_READER_OWNED`: readers hold the rwsem; the pointer is only a hint.
const RWSEM_READER_OWNED: u64 = 0x1;

/// Spinlocks and rwlocks spin with preemption off; a mutex that spins optimistically
/// (MUTEX|SPIN) may still go to sleep, so it is tracked by thread.
#[inline(always)]
fn spins(flags: u32) -> bool {
    flags & LCB_F_SPIN != 0 && flags & LCB_F_MUTEX == 0
}

/// Takes the context by value: the program then passes its one register on as it did
/// before the filter check grew this function (by reference it spilled it).
pub fn on_contention_begin(ctx: RawTracePointContext) {
    let ctx = &ctx;
    let lock_addr: u64 = ctx.arg(0);
    let flags = ctx.arg::<u64>(1) as u32;
    // A contention the record-time filter leaves out ends here, before any other work
    // (its end is not counted as unmatched: see count_unmatched_end).
    if filtered_out(lock_addr, flags) {
        return;
    }
    add_pending_ends();
    // The moment the waiter found the lock taken: before any of lockpath's own work
    // (the filter's check above is one global read when there is no filter, and the
    // pending ends are added before it).
    let start_ns = now_ns();
    if !is_target() {
        return;
    }
    name_once(bpf_get_current_pid_tgid() as u32);
    if spins(flags) {
        let Some((slot, sp)) = spin_slot(ctx) else {
            return;
        };
        // SAFETY: per-CPU slot from a successful lookup; only this CPU writes it, and a
        // spinning waiter runs with preemption off until contention_end.
        let open = unsafe { &*slot };
        let tid = bpf_get_current_pid_tgid() as u32;
        if open.lock_addr != 0 {
            if start_ns.saturating_sub(open.start_ns) >= SPIN_STALE_NS {
                // Nobody spins for a second: that wait's end was never seen. Replace it.
                count_loss(LOCK_STALE_WAIT);
            } else if spin_relation(open, tid, sp) == OpenSpin::Outer {
                // An interrupt contending while this CPU already waits: ignore the inner
                // one (its end is not counted again).
                count_loss(LOCK_NESTED);
                return;
            } else {
                // An interrupt's wait whose end the kernel skipped: replace it.
                count_loss(LOCK_INTERRUPT_WAIT_LOST);
            }
        }
        open_spin_wait(ctx, slot, lock_addr, flags, start_ns, sp, tid);
        return;
    }
    let tid = bpf_get_current_pid_tgid() as u32;
    if let Some(open) = LOCK_SLEEP_WAIT.get_ptr_mut(tid) {
        // SAFETY: element of a hash map owned by this thread id; only this thread
        // writes it.
        let open = unsafe { &mut *open };
        if open.lock_addr == lock_addr && open.flags & flags & LCB_F_MUTEX != 0 {
            // The same wait goes on (a mutex that stopped spinning and now sleeps, or
            // spins again after a wake-up): one wait, one row. Only a mutex begins one
            // wait more than once; another lock's second begin is a new wait.
            open.flags = sticky_flags(open.flags, flags);
            return;
        }
        // A task waits for one sleeping lock at a time: the open wait's end was never
        // seen (it began before the end program was attached). Replace it, counted,
        // rather than ignore every later wait of this thread.
        count_loss(LOCK_STALE_WAIT);
        let _ = LOCK_SLEEP_WAIT.remove(tid);
    }
    open_sleep_wait(ctx, tid, lock_addr, flags, start_ns);
}

pub fn on_contention_end(ctx: &RawTracePointContext) {
    let end_ns = now_ns();
    let lock_addr: u64 = ctx.arg(0);
    let outcome = outcome_of(ctx.arg::<u64>(1) as i32 as i64);
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some((slot, sp)) = spin_slot(ctx) else {
        return;
    };
    // SAFETY: per-CPU slot from a successful lookup, written only by this CPU.
    let mut spin_open = unsafe { (*slot).lock_addr };
    // SAFETY: as above.
    if spin_open != 0 && unsafe { (*slot).start_ns } >= end_ns {
        // Opened after this program began: by an interrupt that contended while it ran.
        // The kernel skipped that interrupt's end program (one run of a program per CPU
        // at a time), so the wait would never close: every later spin on this CPU would
        // be dropped as nested, and the next end of its lock would close it as one long
        // bogus wait. Dropped, counted.
        count_loss(LOCK_INTERRUPT_WAIT_LOST);
        // SAFETY: as above.
        unsafe { (*slot).lock_addr = 0 };
        spin_open = 0;
    }
    // SAFETY: as above.
    if spin_open == lock_addr && ends_open_wait(unsafe { &*slot }, pid_tgid as u32, sp) {
        // The end of the open wait: the same lock, in the context of its begin.
        // SAFETY: as above.
        let wait = unsafe { *slot };
        close_wait(&wait, end_ns, pid_tgid, outcome, Defer::ToNextBegin);
        // Cleared only once the aggregate is written: a begin nested in between sees
        // the slot busy and is ignored instead of overwriting it.
        // SAFETY: as above.
        unsafe { (*slot).lock_addr = 0 };
        return;
    }
    if spin_open != 0 {
        // SAFETY: as above.
        if spin_relation(unsafe { &*slot }, pid_tgid as u32, sp) == OpenSpin::Outer {
            // The end of a contention nested in the open wait (ignored at its begin).
            end_other(ctx, lock_addr, outcome, end_ns, pid_tgid, true);
            return;
        }
        // An interrupt's wait whose end the kernel skipped: this CPU is past it.
        count_loss(LOCK_INTERRUPT_WAIT_LOST);
    }
    // The slot is marked busy while this program runs: the kernel skips an interrupt's
    // end program while this one runs (its recursion guard), so a spin wait the
    // interrupt's begin opened here would never close. Its begin is ignored as nested.
    // SAFETY: as above.
    unsafe {
        (*slot).lock_addr = SLOT_BUSY;
        (*slot).start_ns = end_ns;
        (*slot).sp = sp;
        (*slot).tid = pid_tgid as u32;
    }
    end_other(ctx, lock_addr, outcome, end_ns, pid_tgid, false);
    // SAFETY: as above.
    unsafe { (*slot).lock_addr = 0 };
}

/// A spin slot's lock address while the end program handles an end that is not of the
/// slot's wait (no lock lives at address 1).
const SLOT_BUSY: u64 = 1;

/// The size of a task's kernel stack and the offset of `task_struct.stack`, from the
/// load-time layout; `None` when the kernel's layout or the stack size is unknown.
#[inline(always)]
fn task_stacks() -> Option<(u64, u32)> {
    // SAFETY: reading a load-time global; volatile so the default is not folded in.
    let layout = unsafe { core::ptr::read_volatile(&LOCK_LAYOUT) };
    (layout.enabled != 0 && layout.thread_size != 0)
        .then(|| (u64::from(layout.thread_size), layout.task_stack))
}

/// Whether an end of the open wait's lock at frame `sp` under thread `tid` is in the
/// wait's own context (see `same_spin_context`; stacks unknown: the lock decides).
#[inline(always)]
fn ends_open_wait(open: &LockWait, tid: u32, sp: u64) -> bool {
    let thread_size = task_stacks().map_or(0, |(size, _)| size);
    same_spin_context(open.tid, open.sp, tid, sp, thread_size)
}

/// How the spin wait `open` relates to a contention at frame `sp` under thread `tid`
/// (see `open_spin_relation`). The task's stack is read only when the two frames are on
/// different stacks; with stacks unknown the open wait is taken to go on.
#[inline(always)]
fn spin_relation(open: &LockWait, tid: u32, sp: u64) -> OpenSpin {
    let Some((thread_size, task_stack)) = task_stacks() else {
        return OpenSpin::Outer;
    };
    open_spin_relation(open.tid, open.sp, tid, sp, thread_size, || {
        // SAFETY: helper without arguments.
        let task = unsafe { bpf_get_current_task() };
        // SAFETY: bpf_probe_read_kernel checks the address; a bad one yields an error.
        match unsafe { bpf_probe_read_kernel((task + u64::from(task_stack)) as *const u64) } {
            Ok(stack) => open.sp.wrapping_sub(stack) < thread_size,
            Err(_) => true,
        }
    })
}

/// The end of a sleeping wait, or of a wait not recorded. `spinning`: this CPU has a spin
/// wait open (of another lock).
#[inline(always)]
fn end_other(
    ctx: &RawTracePointContext,
    lock_addr: u64,
    outcome: u32,
    end_ns: u64,
    pid_tgid: u64,
    spinning: bool,
) {
    let tid = pid_tgid as u32;
    if let Some(open) = LOCK_SLEEP_WAIT.get_ptr(tid) {
        // SAFETY: element of a hash map owned by this thread id.
        let mut wait = unsafe { *open };
        if wait.lock_addr == lock_addr {
            walk_if_long(ctx, &mut wait, end_ns);
            close_wait(&wait, end_ns, pid_tgid, outcome, Defer::ToNextBegin);
            let _ = LOCK_SLEEP_WAIT.remove(tid);
        }
        // Otherwise the end of a wait whose begin was ignored (and counted) as nested.
        return;
    }
    if spinning {
        // The end of an interrupt's nested spin, counted at its begin.
        return;
    }
    if take_dropped(tid) {
        // Its begin found the wait map full and was counted then.
        return;
    }
    // Began before the recording started, or belongs to a task outside the targets.
    count_unmatched_end();
}

// ---- kprobe fallback (kernels before 5.19: no lock:contention_* tracepoints) ----
//
// Entry of a contention slow path = contention_begin (lock = first argument, flags
// synthesized from which slow path it is); its return = contention_end. A return has
// no lock argument, so the wait opened at entry is closed by CPU (spinning) or by
// thread (sleeping) alone.

/// Per-CPU nesting depth of spin slow paths entered by a target (the kprobe fallback has
/// no lock address at return time to tell an interrupt's inner wait from the outer one).
#[map]
static LOCK_SPIN_DEPTH: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// Marks a spin nesting depth whose outermost wait is the tracepoints', not this probe's.
const INSIDE_TRACEPOINT_WAIT: u32 = 1 << 31;

/// A spin wait open for longer than this lost its return probe (nobody spins for a second
/// without the soft-lockup detector firing): the slot is reclaimed.
const SPIN_STALE_NS: u64 = 1_000_000_000;

/// This CPU's spin nesting depth and open spin wait.
#[inline(always)]
fn spin_slots() -> Option<(&'static mut u32, &'static mut LockWait)> {
    let (Some(depth), Some(spin)) = (
        LOCK_SPIN_DEPTH.get_ptr_mut(0),
        LOCK_SPIN_WAIT.get_ptr_mut(0),
    ) else {
        return None;
    };
    // SAFETY: as below.
    let slot = unsafe { &raw mut (*spin).wait };
    // SAFETY: per-CPU slots from successful lookups; only this CPU writes them, and the
    // spin slow path runs with preemption off until it returns. The callers (the spin
    // entry and return programs) use them only during their run.
    Some(unsafe { (&mut *depth, &mut *slot) })
}

/// Entry of `queued_spin_lock_slowpath` (or its native_/__pv_ variant).
pub fn on_spin_slowpath_entry(ctx: &ProbeContext) {
    let Some(lock_addr) = ctx.arg::<u64>(0) else {
        return;
    };
    if filtered_out(lock_addr, LCB_F_SPIN) {
        // The return has no lock address: an interrupt's left-out wait inside a recorded
        // one must still count as nested, or its return would close the outer wait.
        if let Some(depth) = LOCK_SPIN_DEPTH.get_ptr_mut(0) {
            // SAFETY: this CPU's slot, as in the rest of this function.
            unsafe {
                if *depth > 0 {
                    *depth += 1;
                }
            }
        }
        return;
    }
    let start_ns = now_ns();
    if !is_target() {
        return;
    }
    let Some((depth, slot)) = spin_slots() else {
        return;
    };
    if *depth == 0 && slot.lock_addr != 0 && start_ns.saturating_sub(slot.start_ns) < SPIN_STALE_NS
    {
        // The slot is the tracepoints' (the probe runs beside them on a virtual machine
        // whose spinlocks bypass them): an rwlock's wait, whose own wait lock spins in
        // this slow path, or an end program at work. This wait is inside it.
        *depth = INSIDE_TRACEPOINT_WAIT | 1;
        count_loss(LOCK_NESTED);
        return;
    }
    if *depth > 0 {
        if start_ns.saturating_sub(slot.start_ns) < SPIN_STALE_NS {
            // An interrupt contending while this CPU already waits: ignore the inner one.
            *depth += 1;
            count_loss(LOCK_NESTED);
            return;
        }
        count_loss(LOCK_KPROBE_RETURN_LOST);
        *depth = 0;
    }
    *depth = 1;
    let tid = bpf_get_current_pid_tgid() as u32;
    // The fallback closes its waits by nesting depth; the frame (the saved stack pointer,
    // plain data) tells a tracepoint's begin nested in this wait.
    let sp = ctx.stack_base().unwrap_or(0);
    open_spin_wait(ctx, slot, lock_addr, LCB_F_SPIN, start_ns, sp, tid);
}

/// Return of the spin slow path: the lock is held.
pub fn on_spin_slowpath_return(_ctx: &RetProbeContext) {
    let end_ns = now_ns();
    let Some((depth, slot)) = spin_slots() else {
        return;
    };
    if *depth == 0 {
        // Entered before the recording started, or by a task outside the targets.
        count_unmatched_end();
        return;
    }
    *depth -= 1;
    if *depth == INSIDE_TRACEPOINT_WAIT {
        // The slow path inside a tracepoints' wait returned: that wait stays open.
        *depth = 0;
        return;
    }
    if *depth > 0 {
        // The inner (ignored) wait of an interrupt ended.
        return;
    }
    let wait = *slot;
    close_wait(
        &wait,
        end_ns,
        bpf_get_current_pid_tgid(),
        LOCK_OUTCOME_ACQUIRED,
        Defer::No,
    );
    slot.lock_addr = 0;
}

/// Entry of a sleeping lock's slow path (`__mutex_lock_slowpath`, `rwsem_down_*_slowpath`).
#[inline(always)]
pub fn on_sleep_slowpath_entry(ctx: &ProbeContext, flags: u32) {
    let Some(lock_addr) = ctx.arg::<u64>(0) else {
        return;
    };
    if filtered_out(lock_addr, flags) {
        return;
    }
    let start_ns = now_ns();
    if !is_target() {
        return;
    }
    let tid = bpf_get_current_pid_tgid() as u32;
    if LOCK_SLEEP_WAIT.get_ptr(tid).is_some() {
        // A thread sleeps on one lock at a time: an open wait is one whose return probe
        // was lost (kretprobe instances exhausted). Drop it, keep the new one.
        count_loss(LOCK_KPROBE_RETURN_LOST);
        let _ = LOCK_SLEEP_WAIT.remove(tid);
    }
    open_sleep_wait(ctx, tid, lock_addr, flags, start_ns);
}

/// Return of a sleeping lock's slow path (the lock is held, or the wait was interrupted).
pub fn on_sleep_slowpath_return(_ctx: &RetProbeContext) {
    let end_ns = now_ns();
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let Some(open) = LOCK_SLEEP_WAIT.get_ptr(tid) else {
        if !take_dropped(tid) {
            count_unmatched_end();
        }
        return;
    };
    // SAFETY: element of a hash map owned by this thread id.
    // (Not walked again here, however long: from a return probe the walk shows the
    // kretprobe trampoline where the callers were, on 5.10 at least.)
    let wait = unsafe { *open };
    // The slow paths' return values differ (void, or an int for the killable ones):
    // the fallback cannot tell an interrupted wait from an acquisition.
    close_wait(&wait, end_ns, pid_tgid, LOCK_OUTCOME_ACQUIRED, Defer::No);
    let _ = LOCK_SLEEP_WAIT.remove(tid);
}

// ---- shared by both methods ----

/// A sleeping wait of `EXACT_WAIT_NS` or more whose stack came from a cache: its stack
/// walked now, at its end, after the end's timestamp (the waiter is still in the lock's
/// slow path: above it lies the same call path as at the begin). A failed walk keeps the
/// cached one. Not for spin waits: their end runs with a spinlock held, often with
/// interrupts off, where a walk would lengthen every handoff; they keep the
/// fingerprint's stack.
#[inline(always)]
fn walk_if_long<C: StackIdContext>(ctx: &C, wait: &mut LockWait, end_ns: u64) {
    if wait.cached == 0 || end_ns.saturating_sub(wait.start_ns) < EXACT_WAIT_NS {
        return;
    }
    let kstack_id = stack_id_or_loss(stack_id(ctx, STACK_FLAGS_KERNEL));
    if kstack_id >= 0 {
        wait.kstack_id = kstack_id;
    }
}

/// The waiter's kernel stack id, and whether it was walked now (then the wait starts
/// after the walk, `walked_ns`), or taken from the cache; and the lock's class
/// (`lockname.rs`), decided with the walk and cached with the stack.
#[inline(always)]
fn waiter_stack<C: LockContext, const WORDS: usize>(
    ctx: &C,
    lock_addr: u64,
    flags: u32,
    now: u64,
) -> (i32, Option<u64>, u32) {
    // SAFETY: reading a load-time global; volatile so the default is not folded in.
    let exact = unsafe { core::ptr::read_volatile(&LOCK_LAYOUT.exact_stacks) } != 0;
    let base = if exact { None } else { ctx.stack_base() };
    let Some(base) = base else {
        return walked_stack(ctx, lock_addr, flags);
    };
    // First the two call sites seen last at this lock on this CPU: two words to check.
    let way0 = slot_of(lock_addr, LOCK_SITE_CACHE_ENTRIES) & !1;
    let sites = (
        LOCK_SITE_CACHE.get_ptr_mut(way0),
        LOCK_SITE_CACHE.get_ptr_mut(way0 + 1),
    );
    let (Some(site0), Some(site1)) = sites else {
        return walked_stack(ctx, lock_addr, flags);
    };
    // SAFETY: this CPU's elements of a per-CPU array; only this CPU writes them.
    let (known0, known1) = unsafe { (&*site0, &*site1) };
    if site_matches(base, known0, lock_addr, now) {
        return (known0.value.kstack_id, None, known0.value.lock_class);
    }
    if site_matches(base, known1, lock_addr, now) {
        return (known1.value.kstack_id, None, known1.value.lock_class);
    }
    // Then the fingerprint of the whole call path.
    let fingerprint = match stack_fingerprint::<WORDS>(base) {
        Ok(fingerprint) => fingerprint,
        Err(NoFingerprint::Unreadable) => {
            count_loss(LOCK_STACK_CACHE_FAILED);
            return walked_stack(ctx, lock_addr, flags);
        }
        Err(NoFingerprint::Short) => {
            // Too few call-path words to tell this path from another: walked, and not
            // cached (under this fingerprint another path would find its stack).
            count_loss(LOCK_STACK_FINGERPRINT_SHORT);
            return walked_stack(ctx, lock_addr, flags);
        }
    };
    let key = StackCacheKey {
        lock_addr,
        fingerprint: fingerprint.hash,
    };
    let entry = LOCK_STACK_CACHE.get_ptr_mut(slot_of(
        lock_addr ^ fingerprint.hash,
        LOCK_STACK_CACHE_ENTRIES,
    ));
    let mut found = None;
    if let Some(entry) = entry {
        // SAFETY: this CPU's element of a per-CPU array; only this CPU writes it.
        let cached = unsafe { &*entry };
        if cached.key == key && now.saturating_sub(cached.value.walked_ns) < STACK_REFRESH_NS {
            found = Some(cached.value);
        }
    }
    let (value, walked_ns) = match found {
        Some(value) => (value, None),
        None => {
            let (kstack_id, walked_ns, lock_class) = walked_stack(ctx, lock_addr, flags);
            let value = StackCacheValue {
                kstack_id,
                lock_class,
                walked_ns: walked_ns.unwrap_or(now),
            };
            if kstack_id >= 0
                && let Some(entry) = entry
            {
                // SAFETY: as above.
                unsafe { *entry = StackCacheEntry { key, value } };
            }
            (value, walked_ns)
        }
    };
    // A fingerprint always has both anchors (it has FINGERPRINT_TEXT_WORDS call-path
    // words, at least two). (Not checked: a check would make the verifier tell every
    // anchor position apart, and the begin program's verification exceeded its limit.)
    if value.kstack_id >= 0 {
        // The way this lock does not use, else the older one.
        let site = if known0.lock_addr == lock_addr
            && (known1.lock_addr != lock_addr || known1.value.walked_ns < known0.value.walked_ns)
        {
            site1
        } else {
            site0
        };
        // SAFETY: as above.
        unsafe {
            *site = SiteCacheEntry {
                lock_addr,
                anchor: fingerprint.anchor,
                next_anchor: fingerprint.next_anchor,
                word: fingerprint.word,
                next_word: fingerprint.next_word,
                value,
            }
        };
    }
    (value.kstack_id, walked_ns, value.lock_class)
}

/// A stack walk now, with the lock's class (decided with each walk, cached with it).
#[inline(always)]
fn walked_stack<C: StackIdContext>(ctx: &C, lock_addr: u64, flags: u32) -> (i32, Option<u64>, u32) {
    let lock_class = crate::lockname::classify(lock_addr, flags);
    let kstack_id = stack_id_or_loss(stack_id(ctx, STACK_FLAGS_KERNEL));
    (kstack_id, Some(now_ns()), lock_class)
}

/// Whether `known` is a fresh site of this lock whose second and third call-path words
/// (the return addresses into the lock functions' caller's caller and into the next
/// frame out, see `stack_fingerprint`) are still where they were.
#[inline(always)]
fn site_matches(base: u64, known: &SiteCacheEntry, lock_addr: u64, now: u64) -> bool {
    if known.lock_addr != lock_addr || now.saturating_sub(known.value.walked_ns) >= STACK_REFRESH_NS
    {
        return false;
    }
    word_at(base, known.anchor) == Some(known.word)
        && (known.next_anchor == NO_ANCHOR
            || word_at(base, known.next_anchor) == Some(known.next_word))
}

/// `base` as a plain number, for arithmetic the verifier refuses on a pointer into the
/// tracepoint's context (a frame pointer's distance from the word before it): copied
/// through a helper, whose result the verifier knows only as a number. 0 where it is
/// not needed (x86_64, see `call_path_word`).
#[inline(always)]
fn scalar_address(base: u64) -> u64 {
    #[cfg(bpf_target_arch = "aarch64")]
    {
        let pointer = base;
        // SAFETY: reads this program's own stack slot holding `pointer`.
        unsafe { bpf_probe_read_kernel(&pointer as *const u64) }.unwrap_or(0)
    }
    #[cfg(not(bpf_target_arch = "aarch64"))]
    {
        let _ = base;
        0
    }
}

#[inline(always)]
fn word_at(base: u64, index: u32) -> Option<u64> {
    let at = base + ((index as u64) % MAX_FINGERPRINT_WORDS as u64) * 8;
    // SAFETY: bpf_probe_read_kernel checks the source address; a bad one is an error.
    unsafe { bpf_probe_read_kernel(at as *const u64) }.ok()
}

/// The fingerprint of a call path and where its last two call-path words lie, for the
/// site cache's quick check.
struct Fingerprint {
    hash: u64,
    anchor: u32,
    next_anchor: u32,
    word: u64,
    next_word: u64,
}

/// Why a contention has no fingerprint.
enum NoFingerprint {
    /// The stack could not be read.
    Unreadable,
    /// Fewer than `FINGERPRINT_TEXT_WORDS` call-path words after the lock functions.
    Short,
}

const NO_ANCHOR: u32 = u32::MAX;

/// What a stack word is to the fingerprint (`word_kind`): not kernel text (a stack or
/// heap address, a saved value, a static's address).
const WORD_OTHER: u32 = 0;
/// A return address into a lock function (or the lock text around it).
const WORD_LOCK_FUNCTION: u32 = 1;
/// Any other kernel text: a return address on the call path (or a saved register holding
/// a text address, constant for a call path).
const WORD_CALL_PATH: u32 = 2;

/// What the word at `words[index]` is, by `LOCK_TEXT`. Out of line, reading the word
/// itself: the verifier then checks its range comparisons once per word and call,
/// without carrying what they tell about the word into the caller's states (inline, the
/// begin program's verification passed the million-instruction limit).
#[inline(never)]
fn word_kind(words: *const u64, index: usize) -> u32 {
    if index >= MAX_FINGERPRINT_WORDS {
        return WORD_OTHER;
    }
    // SAFETY: the caller passes its array of words and an index below its length (at
    // most MAX_FINGERPRINT_WORDS, checked again above for the verifier).
    let word = unsafe { core::ptr::read_volatile(words.add(index)) };
    // SAFETY: reading load-time globals; volatile so the defaults are not folded in.
    let (image_start, image_end) = unsafe {
        (
            core::ptr::read_volatile(&LOCK_TEXT.image_start),
            core::ptr::read_volatile(&LOCK_TEXT.image_end),
        )
    };
    if word >= image_start && word < image_end {
        let mut range = 0;
        while range < LOCK_TEXT_RANGES {
            // SAFETY: as above; the index is below the array's length.
            let [start, end] = unsafe { core::ptr::read_volatile(&LOCK_TEXT.internal[range]) };
            if end == 0 {
                // The used ranges come first.
                break;
            }
            if word >= start && word < end {
                return WORD_LOCK_FUNCTION;
            }
            range += 1;
        }
        return call_path_word(words, index);
    }
    // SAFETY: as above.
    let (modules_start, modules_end) = unsafe {
        (
            core::ptr::read_volatile(&LOCK_TEXT.modules_start),
            core::ptr::read_volatile(&LOCK_TEXT.modules_end),
        )
    };
    if word >= modules_start && word < modules_end {
        call_path_word(words, index)
    } else {
        WORD_OTHER
    }
}

/// A text word that is not a lock function's: a call-path word if it is a return
/// address saved in a frame record. On arm64, whose kernel keeps frame pointers, a
/// frame record is the pair (frame pointer, return address), and the frame pointer is
/// the address of the next record out: above its own, within the 16 KiB of the task's
/// stack. A text word without one is a stale return address among a frame's locals,
/// which would make two call paths look alike (or one look like two). Elsewhere
/// (x86_64 with ORC, no frame pointers) every such word is one.
#[inline(always)]
fn call_path_word(words: *const u64, index: usize) -> u32 {
    #[cfg(bpf_target_arch = "aarch64")]
    {
        if index == 0 || index >= MAX_FINGERPRINT_WORDS {
            return WORD_OTHER;
        }
        // SAFETY: the caller's array of words, at an index below its length (checked
        // again above for the verifier).
        let frame_pointer = unsafe { core::ptr::read_volatile(words.add(index - 1)) };
        // SAFETY: `words` is the first field of a FingerprintScratch (repr(C)), so a
        // pointer to it is one to the scratch slot.
        let stack_addr = unsafe {
            core::ptr::read_volatile(core::ptr::addr_of!(
                (*words.cast::<FingerprintScratch>()).stack_addr
            ))
        };
        if stack_addr == 0 {
            return WORD_OTHER;
        }
        let at = stack_addr + (index as u64 - 1) * 8;
        if frame_pointer <= at || frame_pointer - at >= 16384 {
            return WORD_OTHER;
        }
    }
    #[cfg(not(bpf_target_arch = "aarch64"))]
    let _ = (words, index);
    WORD_CALL_PATH
}

/// The largest `WORDS` of `stack_fingerprint`: one bit of a `u64` mask per word.
const MAX_FINGERPRINT_WORDS: usize = 64;

/// `stack_fingerprint`'s working memory. The masks live in map memory, not in registers:
/// a value loaded from a map is unknown to the verifier, so the states of the loop over
/// the words do not differ by which words were text so far, and they prune (with the
/// masks in registers, 6.1's verifier passed its million-instruction limit).
#[repr(C)]
pub struct FingerprintScratch {
    words: [u64; MAX_FINGERPRINT_WORDS],
    /// Bit `i`: word `i` is a return address into a lock function.
    lock_mask: u64,
    /// Bit `i`: word `i` is other kernel text (a call path's return address).
    text_mask: u64,
    /// The address of `words[0]` on the stack, as a number (arm64's frame-pointer test,
    /// `call_path_word`). In map memory for the same reason as the masks: passed in a
    /// register, each test of it would tell the verifier more about the caller's copy.
    stack_addr: u64,
}

/// A de Bruijn sequence of order 6: the top six bits of it times a power of two are
/// different for each of the 64 powers.
const DE_BRUIJN_64: u64 = 0x03f7_9d71_b4cb_0a89;

/// The exponent of each power of two, by the top six bits of its product with
/// `DE_BRUIJN_64`.
static LOWEST_BIT_OF: [u8; 64] = {
    let mut table = [0u8; 64];
    let mut bit = 0;
    while bit < 64 {
        table[((1u64 << bit).wrapping_mul(DE_BRUIJN_64) >> 58) as usize] = bit as u8;
        bit += 1;
    }
    table
};

/// The index of the lowest set bit of `mask` (not 0): a multiplication and a table
/// lookup, no branch (a branch per bit halving, as in a binary search, would multiply
/// the verifier's paths by 32 per call).
#[inline(always)]
fn lowest_bit(mask: u64) -> u32 {
    let slot = ((mask & mask.wrapping_neg()).wrapping_mul(DE_BRUIJN_64) >> 58) as usize;
    LOWEST_BIT_OF.get(slot).copied().unwrap_or(0) as u32
}

/// A hash of the nearest `FINGERPRINT_TEXT_WORDS` call-path words among the first
/// `WORDS` words of the stack at `base`: the kernel text words after the first return
/// address into a lock function (the tracepoint glue before the lock functions, and the
/// lock functions themselves, are the same for every caller; lock-function words among
/// the call path's are skipped), so the same call path gives the same fingerprint and
/// two call paths through one wrapper differ by the wrapper's caller. One bounded read
/// into a per-CPU scratch slot (the BPF stack is too small for 48 words), no unwinding.
/// Without a lock function's return address among the words, or with fewer call-path
/// words after it, there is no fingerprint (`Short`).
#[inline(always)]
fn stack_fingerprint<const WORDS: usize>(base: u64) -> Result<Fingerprint, NoFingerprint> {
    const { assert!(WORDS <= MAX_FINGERPRINT_WORDS && FINGERPRINT_TEXT_WORDS == 3) };
    let Some(scratch) = LOCK_STACK_WORDS.get_ptr_mut(0) else {
        return Err(NoFingerprint::Unreadable);
    };
    // SAFETY: the destination is this CPU's scratch slot, whose first `size` bytes (at
    // most its words) are written (only one lock program runs at a time on a CPU); the
    // helper checks the source address, a bad one is an error.
    let read = |size: usize| unsafe {
        aya_ebpf::helpers::generated::bpf_probe_read_kernel(
            scratch.cast(),
            size as u32,
            base as *const core::ffi::c_void,
        )
    };
    let mut count = WORDS;
    if read(WORDS * 8) != 0 {
        // Near the top of a shallow stack, a read across its end fails as a whole: the
        // nearer half may still hold the call path.
        count = WORDS / 2;
        if read(count * 8) != 0 {
            return Err(NoFingerprint::Unreadable);
        }
    }
    // SAFETY: this CPU's scratch slot, as above.
    let scratch = unsafe { &mut *scratch };
    let words = scratch.words.as_ptr();
    // SAFETY: the scratch slot's field; volatile so that it stays in map memory.
    unsafe { core::ptr::write_volatile(&mut scratch.stack_addr, scalar_address(base)) };
    scratch.lock_mask = 0;
    scratch.text_mask = 0;
    // Below both the image and the modules no word is text: most words of the stack are
    // left out with this one comparison, before word_kind's call.
    // SAFETY: reading load-time globals; volatile so the defaults are not folded in.
    let lowest_text = unsafe {
        let image = core::ptr::read_volatile(&LOCK_TEXT.image_start);
        let modules = core::ptr::read_volatile(&LOCK_TEXT.modules_start);
        if modules != 0 && modules < image {
            modules
        } else {
            image
        }
    };
    for index in 0..WORDS {
        if index >= count {
            break;
        }
        // SAFETY: reading the scratch words at an index below `count`, all written.
        if unsafe { core::ptr::read_volatile(words.add(index)) } < lowest_text {
            continue;
        }
        let kind = word_kind(words, index);
        let bit = 1u64 << index;
        // SAFETY: the scratch slot's masks; volatile so that they stay in map memory.
        unsafe {
            if kind == WORD_LOCK_FUNCTION {
                let mask = core::ptr::read_volatile(&scratch.lock_mask);
                core::ptr::write_volatile(&mut scratch.lock_mask, mask | bit);
            } else if kind == WORD_CALL_PATH {
                let mask = core::ptr::read_volatile(&scratch.text_mask);
                core::ptr::write_volatile(&mut scratch.text_mask, mask | bit);
            }
        }
    }
    // SAFETY: as above.
    let (lock_mask, text_mask) = unsafe {
        (
            core::ptr::read_volatile(&scratch.lock_mask),
            core::ptr::read_volatile(&scratch.text_mask),
        )
    };
    if lock_mask == 0 {
        return Err(NoFingerprint::Short);
    }
    // The call path: the text words above the first lock function's.
    let first_lock = lowest_bit(lock_mask);
    let mut call = text_mask & !2u64.wrapping_shl(first_lock).wrapping_sub(1);
    let mut at = [0u32; 3];
    for slot in at.iter_mut() {
        if call == 0 {
            return Err(NoFingerprint::Short);
        }
        *slot = lowest_bit(call);
        call &= call - 1;
    }
    // The three words read again from the stack itself (a helper's address argument
    // needs no exact index, where an index into the scratch words would), one after
    // the other: read all at once and checked together, the compiler joins the checks
    // into one test of their OR, from which older verifiers cannot tell that each read
    // succeeded.
    let first = word_at(base, at[0]).ok_or(NoFingerprint::Unreadable)?;
    let second = word_at(base, at[1]).ok_or(NoFingerprint::Unreadable)?;
    let third = word_at(base, at[2]).ok_or(NoFingerprint::Unreadable)?;
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for word in [first, second, third] {
        hash = (hash ^ word).wrapping_mul(0x0100_0000_01b3);
    }
    Ok(Fingerprint {
        hash,
        anchor: at[1],
        next_anchor: at[2],
        word: second,
        next_word: third,
    })
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn open_spin_wait<C: LockContext>(
    ctx: &C,
    slot: *mut LockWait,
    lock_addr: u64,
    flags: u32,
    start_ns: u64,
    sp: u64,
    tid: u32,
) {
    let (kstack_id, walked_ns, lock_class) =
        waiter_stack::<C, SPIN_FINGERPRINT_WORDS>(ctx, lock_addr, flags, start_ns);
    // SAFETY: the caller passes this CPU's slot of LOCK_SPIN_WAIT.
    let wait = unsafe { &mut *slot };
    wait.start_ns = walked_ns.unwrap_or(start_ns);
    wait.lock_addr = lock_addr;
    wait.flags = flags;
    wait.kstack_id = kstack_id;
    wait.lock_class = lock_class;
    wait.owner_tgid = 0;
    wait.owner_kstack_id = -1;
    wait.cached = u32::from(walked_ns.is_none());
    wait.sp = sp;
    wait.tid = tid;
    warm_last_acquirer(lock_addr);
}

/// Brings the lock's `LOCK_LAST_ACQUIRER` slot into this CPU's cache, owned, while the
/// waiter waits: its end reads and writes the slot with the lock held, and would
/// otherwise fetch the line from the previous acquirer's CPU then, lengthening the
/// critical section of every waiter queued behind it. The begin runs before the waiter
/// queues on the lock, so the fetch is paid by this waiter's own wait alone. (A sleeping
/// waiter's end comes after a wake-up, long after any such warm-up: not done there.)
#[inline(always)]
fn warm_last_acquirer(lock_addr: u64) {
    if let Some(slot) =
        LOCK_LAST_ACQUIRER.get_ptr_mut(slot_of(lock_addr, LOCK_LAST_ACQUIRER_ENTRIES))
    {
        // SAFETY: array element from a successful lookup; `warm` is read by nobody.
        // Adding 1, not 0: the compiler turns an atomic add of 0 into an atomic or, which
        // kernels before 5.12 refuse (an add whose result is unused stays `BPF_XADD`).
        unsafe {
            atomic_add(&raw mut (*slot).warm, 1);
        }
    }
}

#[inline(always)]
fn open_sleep_wait<C: LockContext>(ctx: &C, tid: u32, lock_addr: u64, flags: u32, start_ns: u64) {
    // SAFETY: reading a load-time global; volatile so the default is not folded in.
    let layout = unsafe { core::ptr::read_volatile(&LOCK_LAYOUT) };
    let (lock_class, owner) = if layout.enabled != 0 {
        (
            classify_lock(&layout, lock_addr),
            read_owner(&layout, lock_addr, flags),
        )
    } else {
        (LOCK_CLASS_UNKNOWN, NO_OWNER)
    };
    let (kstack_id, walked_ns, cached_class) =
        waiter_stack::<C, SLEEP_FINGERPRINT_WORDS>(ctx, lock_addr, flags, start_ns);
    let lock_class = if lock_class == LOCK_CLASS_UNKNOWN {
        cached_class
    } else {
        lock_class
    };
    note_owner_seen(lock_addr, &owner, start_ns);
    let wait = LockWait {
        start_ns: walked_ns.unwrap_or(start_ns),
        lock_addr,
        flags,
        kstack_id,
        lock_class,
        owner_tgid: owner.tgid,
        owner_kstack_id: owner.kstack_id,
        cached: u32::from(walked_ns.is_none()),
        sp: 0,
        tid,
        reserved: 0,
    };
    if LOCK_SLEEP_WAIT
        .insert(tid, wait, BPF_NOEXIST as u64)
        .is_err()
    {
        count_loss(LOCK_WAIT_MAP_FULL);
        note_dropped(tid);
    }
}

/// `mmap_lock` when the lock is the waiting task's own `mm->mmap_lock`.
#[inline(always)]
fn classify_lock(layout: &LockLayout, lock_addr: u64) -> u32 {
    // SAFETY: helper without arguments; the task pointer is only read through
    // bpf_probe_read_kernel, which tolerates any address.
    let task = unsafe { bpf_get_current_task() };
    // SAFETY: as above.
    let mm: u64 =
        unsafe { bpf_probe_read_kernel((task + layout.task_mm as u64) as *const u64) }.unwrap_or(0);
    if mm != 0 && lock_addr == mm + layout.mm_mmap_lock as u64 {
        LOCK_CLASS_MMAP_LOCK
    } else {
        LOCK_CLASS_UNKNOWN
    }
}

/// Who holds a sleeping lock when a wait on it begins.
#[derive(Clone, Copy)]
struct Owner {
    tgid: u32,
    /// Where the owner sleeps, when it is off-CPU and the off-CPU family saw it leave.
    kstack_id: i32,
    /// The owner thread; 0 when the lock was found free.
    tid: u32,
    /// Whether the owner word was read and names the holder (or says the lock is free):
    /// false for spinlocks, readers' rwsems and unreadable words.
    known: bool,
}

const NO_OWNER: Owner = Owner {
    tgid: 0,
    kstack_id: -1,
    tid: 0,
    known: false,
};

/// The owner word says that the lock is free (no owner task).
const FREE: Owner = Owner {
    known: true,
    ..NO_OWNER
};

/// The process holding a mutex or a writer-held rwsem when the wait begins (like
/// `perf lock contention -o`); its thread name goes to TASKS so the report can name it.
/// An owner that is off-CPU (holding the lock across a sleep: IO, an RPC, another lock)
/// has its switch-out stack in OFFCPU_START when the off-CPU family is recorded: that
/// stack is where the owner is while it makes the waiters wait.
#[inline(always)]
fn read_owner(layout: &LockLayout, lock_addr: u64, flags: u32) -> Owner {
    let Some(owner) = owner_word(layout, lock_addr, flags) else {
        return NO_OWNER;
    };
    if flags & LCB_F_MUTEX == 0 && owner & RWSEM_READER_OWNED != 0 {
        return NO_OWNER;
    }
    let task = owner & !OWNER_FLAG_BITS;
    if task == 0 {
        return FREE;
    }
    // SAFETY: as above, for fields of the owner task.
    let (tid, tgid) = unsafe {
        (
            bpf_probe_read_kernel((task + layout.task_pid as u64) as *const u32).unwrap_or(0),
            bpf_probe_read_kernel((task + layout.task_tgid as u64) as *const u32).unwrap_or(0),
        )
    };
    // SAFETY: lookup in a map of plain data; the reference is not kept.
    if tid != 0 && unsafe { TASKS.get(tid) }.is_none() {
        // SAFETY: as above, for the owner's 16-byte comm.
        let comm =
            unsafe { bpf_probe_read_kernel((task + layout.task_comm as u64) as *const [u8; 16]) }
                .unwrap_or([0u8; 16]);
        let info = profiler_common::target::TaskInfo {
            tgid,
            _pad: 0,
            comm,
            // Unknown: reading the owner's cgroup would cost more reads.
            cgroup_id: 0,
        };
        let _ = TASKS.insert(tid, info, BPF_NOEXIST as u64);
    }
    // SAFETY: lookup in a map of plain data; the value is copied out.
    let kstack_id = match unsafe { OFFCPU_START.get(tid) } {
        Some(start) if tid != 0 => start.kstack_id,
        _ => -1,
    };
    Owner {
        tgid,
        kstack_id,
        tid,
        known: tid != 0,
    }
}

/// The owner word of a mutex or an rwsem (a task pointer and flag bits); None for other
/// locks, or when it cannot be read.
#[inline(always)]
fn owner_word(layout: &LockLayout, lock_addr: u64, flags: u32) -> Option<u64> {
    let owner_offset = if flags & LCB_F_MUTEX != 0 {
        layout.mutex_owner
    } else if flags & (LCB_F_READ | LCB_F_WRITE) != 0
        && flags & (LCB_F_SPIN | LCB_F_PERCPU | LCB_F_RT) == 0
    {
        layout.rwsem_owner
    } else {
        return None;
    };
    // SAFETY: bpf_probe_read_kernel checks the address; a bad one yields an error.
    unsafe { bpf_probe_read_kernel((lock_addr + owner_offset as u64) as *const u64) }.ok()
}

/// A waiter's begin (at `begin_ns`) then found `owner` on the lock: when that is not the lock's
/// last contended acquirer (another thread, or nobody), the acquirer had let the lock
/// go by then. The first such moment bounds its hold under contention (see
/// `note_acquisition`): what follows is another thread's hold, one that took the lock
/// without contention (an rwsem writer's optimistic spin, a trylock), or the handoff.
#[inline(always)]
fn note_owner_seen(lock_addr: u64, owner: &Owner, begin_ns: u64) {
    if !owner.known {
        return;
    }
    // The owner word was read after `begin_ns`; when that is after the acquisition, the
    // acquirer had set the owner word before it was read, so another owner (or none)
    // means it had let the lock go by the read.
    note_release_seen(lock_addr, |tid, acquired_ns| {
        owner.tid != tid && begin_ns > acquired_ns
    });
}

/// `sched:sched_waking(struct task_struct *p)`, in the waker's context. A mutex or rwsem
/// unlock wakes the next sleeping waiter once it let the lock go: when the woken thread
/// waits for a lock that is seen let go, the lock's last contended acquirer's hold under
/// contention ends now, before the woken waiter's way back to a CPU (which its own
/// acquisition, the hold's upper bound otherwise, includes). Let go means:
/// - for a mutex waiter or an rwsem writer, the waker is the last acquirer, or the lock
///   is free: a mutex's owner word names nobody, or the woken thread (a handoff); an
///   rwsem's count shows neither a writer nor a reader;
/// - for an rwsem reader (woken with the readers' count already raised for it), the
///   waker is the last acquirer and the owner word does not name it: a writer that
///   downgrades to a read hold wakes the waiting readers too, but stays the owner.
///
/// A wake-up that is not an unlock (a signal to a killable waiter) finds the lock held.
pub fn on_waking(ctx: &RawTracePointContext) {
    // Only the pid's offset first: most wake-ups are of threads that wait for no lock.
    // SAFETY: reading a load-time global field; volatile so the default is not folded in.
    let task_pid = unsafe { core::ptr::read_volatile(&raw const LOCK_LAYOUT.task_pid) };
    if task_pid == 0 {
        return; // no BTF layout
    }
    // Argument 0 of sched_waking is the woken task.
    let woken_task: u64 = ctx.arg(0);
    // SAFETY: bpf_probe_read_kernel checks the address; a bad one yields an error.
    let Ok(woken) =
        (unsafe { bpf_probe_read_kernel((woken_task + task_pid as u64) as *const u32) })
    else {
        return;
    };
    // SAFETY: lookup in a map of plain data; the fields are copied out.
    let Some((lock_addr, flags)) =
        (unsafe { LOCK_SLEEP_WAIT.get(woken) }).map(|wait| (wait.lock_addr, wait.flags))
    else {
        return;
    };
    // SAFETY: reading a load-time global; volatile so the default is not folded in.
    let layout = unsafe { core::ptr::read_volatile(&LOCK_LAYOUT) };
    let waker = bpf_get_current_pid_tgid() as u32;
    if flags & LCB_F_READ != 0 {
        note_release_seen(lock_addr, |tid, _| {
            // SAFETY: the helper only returns the current task's address.
            let current = unsafe { bpf_get_current_task() };
            tid == waker
                && owner_word(&layout, lock_addr, flags)
                    .is_some_and(|owner| reader_woken_by_unlock(owner, current))
        });
        return;
    }
    // The waker is the last acquirer letting it go, or the lock is seen free after that
    // acquisition (another thread may have taken it since the unlock). The lock is read
    // only when the waker is not the acquirer.
    note_release_seen(lock_addr, |tid, acquired_ns| {
        if tid == waker {
            return true;
        }
        // Taken before the lock is read: an acquisition before it was before the read.
        let checked_ns = now_ns();
        acquired_ns < checked_ns && lock_free(&layout, lock_addr, flags, woken_task)
    });
}

/// The lock as the wake-up of `woken_task` finds it: let go or not (see `free_at_wake`).
#[inline(always)]
fn lock_free(layout: &LockLayout, lock_addr: u64, flags: u32, woken_task: u64) -> bool {
    let Some(owner) = owner_word(layout, lock_addr, flags) else {
        return false;
    };
    free_at_wake(flags, owner, woken_task, || {
        // SAFETY: bpf_probe_read_kernel checks the address; a bad one yields an error.
        unsafe { bpf_probe_read_kernel((lock_addr + layout.rwsem_count as u64) as *const u64) }.ok()
    })
}

/// The lock's last contended acquirer had let it go by now when `released(its thread, its
/// acquisition time)` says so: the first such moment is kept for that acquisition.
#[inline(always)]
fn note_release_seen(lock_addr: u64, released: impl FnOnce(u32, u64) -> bool) {
    let Some(slot) = LOCK_LAST_ACQUIRER.get_ptr_mut(slot_of(lock_addr, LOCK_LAST_ACQUIRER_ENTRIES))
    else {
        return;
    };
    // SAFETY: array element from a successful lookup, valid for this program run. An
    // end on another CPU may rewrite the whole slot at any moment, so it is read once
    // into a copy (volatile: not read again after the checks) and the sighting names the
    // acquisition it was checked against (`released_of_ns`); `note_acquisition` takes it
    // only for that acquisition.
    let seen = unsafe { core::ptr::read_volatile(slot) };
    // A copy that mixes two acquisitions (read while an end rewrote the slot) would
    // give one acquisition's time the other's thread: no sighting then.
    if seen.lock_addr == lock_addr
        && seen.released_by_ns == 0
        && seen.is_whole()
        && released(seen.tid, seen.acquired_ns)
    {
        let acquired_ns = seen.acquired_ns;
        // The moment of the sighting is now, after what showed the release was read.
        let seen_ns = now_ns();
        // SAFETY: as above; the two stores may interleave with a rewrite, which leaves
        // either this sighting or a slot whose `released_of_ns` is not its own.
        unsafe {
            core::ptr::write_volatile(&raw mut (*slot).released_of_ns, acquired_ns);
            core::ptr::write_volatile(&raw mut (*slot).released_by_ns, seen_ns);
        }
    }
}

#[inline(always)]
fn count_unmatched_end() {
    // Only meaningful system-wide and unfiltered: with a target filter most ends belong
    // to others, with a lock filter to the waits it left out (their begins return
    // before any work, so their ends cannot be told apart; this check costs nothing on
    // a matched end).
    if crate::target::filter_is_all() && !lock_filter_set() {
        count_loss(LOCK_UNMATCHED_END);
    }
}

/// Whether a finished contention is added to the aggregate now or by the next begin on
/// this CPU (see the module comment).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Defer {
    No,
    ToNextBegin,
}

/// Closes a finished wait and, when it ended with the lock taken, the previous
/// acquirer's hold under contention; adds both to the aggregate now, or leaves them for
/// the next begin (`defer`; at once when this CPU's ring is full).
#[inline(always)]
fn close_wait(wait: &LockWait, end_ns: u64, pid_tgid: u64, outcome: u32, defer: Defer) {
    if end_ns < wait.start_ns {
        count_loss(LOCK_NEGATIVE_DELTA);
        return;
    }
    let wait_ns = end_ns - wait.start_ns;
    // Always initialized, `NO_HOLD` for none: the payload of an `Option` may be read
    // uninitialized, which verifiers before 6.4 or so refuse.
    let (hold_key, hold_ns) = if outcome == LOCK_OUTCOME_ACQUIRED {
        note_acquisition(wait, end_ns, pid_tgid)
    } else {
        (ContendedHoldKey::default(), NO_HOLD)
    };
    let key = LockKey {
        lock_addr: wait.lock_addr,
        tgid: (pid_tgid >> 32) as u32,
        kstack_id: wait.kstack_id,
        flags: wait.flags,
        lock_class: wait.lock_class,
        owner_tgid: wait.owner_tgid,
        owner_kstack_id: wait.owner_kstack_id,
        outcome,
        _pad: 0,
    };
    if defer == Defer::ToNextBegin {
        let end = PendingEnd {
            key,
            wait_ns,
            hold: hold_key,
            hold_ns,
        };
        if push_pending(&end) {
            return;
        }
    }
    add_wait(&key, &wait_ns, true);
    if hold_ns != NO_HOLD {
        add_hold(&hold_key, hold_ns, true);
    }
}

/// Adds one wait to its row (`remember`: name the current thread on a new row).
#[inline(always)]
fn add_wait(key: &LockKey, wait_ns: &u64, remember: bool) {
    add_to_row_or_overflow(
        (&LOCK_STATS, &LOCK_OVERFLOW),
        key,
        LockKey::overflow,
        wait_ns,
        (LOCK_MAP_FULL, LOCK_OVERFLOW_FULL),
        remember,
    );
}

/// Adds one hold under contention to its row (`remember` as in `add_wait`).
#[inline(always)]
fn add_hold(key: &ContendedHoldKey, hold_ns: u64, remember: bool) {
    add_latency(
        (&LOCK_HOLDS, &LOCK_HOLDS_OVERFLOW),
        key,
        ContendedHoldKey::overflow,
        hold_ns,
        (LOCK_HOLD_MAP_FULL, LOCK_HOLD_OVERFLOW_FULL),
        remember,
    );
}

/// Writes a finished contention into this CPU's ring; false when the ring is full (or
/// missing). Only the tracepoints' end program writes the ring, and it does not nest
/// with itself; a begin that interrupts it before the end is published does not see it
/// yet.
#[inline(always)]
fn push_pending(end: &PendingEnd) -> bool {
    let Some(ring) = LOCK_PENDING.get_ptr_mut(0) else {
        return false;
    };
    // SAFETY: this CPU's ring from a successful lookup. Its writers run on this CPU
    // only: this program (which the kernel does not nest with itself) writes the end
    // at `head` and then moves `head`; the begin program reads the end at `tail` and
    // then moves `tail`, so neither touches an end the other is using. Volatile, all
    // of it: the end is written before `head` moves, in program order (the compiler
    // keeps volatile accesses in order; one CPU sees its own stores in order).
    unsafe {
        let head = core::ptr::read_volatile(&raw const (*ring).head);
        let tail = core::ptr::read_volatile(&raw const (*ring).tail);
        if head.wrapping_sub(tail) >= LOCK_PENDING_ENDS as u32 {
            return false;
        }
        let Some(slot) = (*ring).ends.get_mut(head as usize % LOCK_PENDING_ENDS) else {
            return false;
        };
        core::ptr::write_volatile(slot, *end);
        core::ptr::write_volatile(&raw mut (*ring).head, head.wrapping_add(1));
    }
    true
}

/// Ends this CPU's ring still holds that one begin adds: a begin usually finds the one
/// end of the wait before it; two drain a ring that sleeping waits ending here filled.
const ADDED_PER_BEGIN: usize = 2;

/// Adds the oldest pending ends of this CPU to the aggregate (the begin program,
/// before its own time stamp).
#[inline(always)]
fn add_pending_ends() {
    let Some(ring) = LOCK_PENDING.get_ptr_mut(0) else {
        return;
    };
    for _ in 0..ADDED_PER_BEGIN {
        // SAFETY: as in `push_pending`: the end at `tail` is not written until `tail`
        // moves past it, which only this program does, after reading it.
        unsafe {
            let tail = core::ptr::read_volatile(&raw const (*ring).tail);
            if core::ptr::read_volatile(&raw const (*ring).head) == tail {
                return;
            }
            let Some(end) = (*ring).ends.get(tail as usize % LOCK_PENDING_ENDS) else {
                return;
            };
            // Not named here: this is another task; the waiter was named at its begin.
            add_wait(&end.key, &end.wait_ns, false);
            if end.hold_ns != NO_HOLD {
                add_hold(&end.hold, end.hold_ns, false);
            }
            // The helper calls above read the end before `tail` moves (the compiler
            // cannot move a read of map memory past a call that may write it).
            core::ptr::write_volatile(&raw mut (*ring).tail, tail.wrapping_add(1));
        }
    }
}

/// Names the current thread (`TASKS`) unless this CPU named it lately.
#[inline(always)]
fn name_once(tid: u32) {
    let Some(named) = LOCK_NAMED.get_ptr_mut(tid % LOCK_NAMED_ENTRIES) else {
        return;
    };
    let slot = named_slot(tid, tasks_moved());
    // SAFETY: this CPU's element from a successful lookup; a nested program that names
    // another thread in between only costs one more naming.
    unsafe {
        if *named != slot {
            remember_current_task();
            *named = slot;
        }
    }
}

/// The current task took the lock after waiting since `wait.start_ns`. If it was
/// already waiting when the previous contended acquirer took the lock, that acquirer
/// held it until just now: its hold under contention is `end_ns - acquired_ns`
/// (including the handoff), returned with the hold's key (else `NO_HOLD`). A waiter
/// that arrived later cannot tell the previous acquirer from a holder that took the lock
/// without contention, so it closes no hold.
/// Readers share: a reader that follows a reader of the same group keeps the group's
/// first reader as the one whose hold is measured.
#[inline(always)]
fn note_acquisition(wait: &LockWait, end_ns: u64, pid_tgid: u64) -> (ContendedHoldKey, u64) {
    let tid = pid_tgid as u32;
    let mut current = LockAcquirer {
        lock_addr: wait.lock_addr,
        acquired_ns: end_ns,
        check: 0,
        tid,
        tgid: (pid_tgid >> 32) as u32,
        kstack_id: wait.kstack_id,
        flags: wait.flags,
        released_by_ns: 0,
        released_of_ns: 0,
        warm: 0,
    };
    current.check = current.check_of();
    let no_hold = (ContendedHoldKey::default(), NO_HOLD);
    let Some(slot) =
        LOCK_LAST_ACQUIRER.get_ptr_mut(slot_of(wait.lock_addr, LOCK_LAST_ACQUIRER_ENTRIES))
    else {
        return no_hold;
    };
    // SAFETY: array element from a successful lookup, valid for this program run; read
    // once into a copy. Exclusive acquisitions of one lock are serialized by the lock
    // itself; concurrent readers (or another lock sharing the slot) may race here: a copy
    // that mixes two acquisitions is not whole, and measures no hold.
    let previous = unsafe { core::ptr::read_volatile(slot) };
    if previous.lock_addr != wait.lock_addr {
        // Empty, or another lock's: this lock's previous acquirer is not known.
        // SAFETY: as above.
        unsafe { *slot = current };
        return no_hold;
    }
    if !previous.is_whole() {
        count_loss(LOCK_HOLD_MIXED);
        // SAFETY: as above.
        unsafe { *slot = current };
        return no_hold;
    }
    let waited_for_previous = conflicts(previous.flags, wait.flags);
    let hold = if waited_for_previous
        && previous.tid != tid
        && wait.start_ns <= previous.acquired_ns
        && end_ns >= previous.acquired_ns
    {
        let key = ContendedHoldKey {
            lock_addr: wait.lock_addr,
            tid: previous.tid,
            tgid: previous.tgid,
            kstack_id: previous.kstack_id,
            flags: previous.flags,
        };
        // A waiter found the lock free or another thread's before now: the hold had
        // ended by then.
        let released_ns = if previous.released_of_ns == previous.acquired_ns
            && previous.released_by_ns > previous.acquired_ns
            && previous.released_by_ns < end_ns
        {
            previous.released_by_ns
        } else {
            end_ns
        };
        (key, released_ns - previous.acquired_ns)
    } else {
        no_hold
    };
    if waited_for_previous || wait.start_ns > previous.acquired_ns {
        // SAFETY: as above.
        unsafe { *slot = current };
    }
    hold
}

impl Aggregate<u64> for LockStat {
    #[inline(always)]
    fn first(wait_ns: &u64) -> Self {
        LockStat::one(*wait_ns)
    }

    #[inline(always)]
    unsafe fn add(stat: *mut Self, wait_ns: &u64) {
        let wait_ns = *wait_ns;
        // SAFETY: `stat` points into a map value that stays valid for this program run
        // (the caller's contract); the minimum is best effort like the maximum.
        unsafe {
            add_count_total_max(
                &raw mut (*stat).count,
                &raw mut (*stat).total_ns,
                &raw mut (*stat).max_ns,
                wait_ns,
            );
            if wait_ns < (*stat).min_ns {
                (*stat).min_ns = wait_ns;
            }
        }
    }
}

/// `lock:contention_begin(void *lock, unsigned int flags)`.
///
/// Raw tracepoints, not classic ones: a classic tracepoint program that returns 0
/// (as aya's `#[tracepoint]` macro does) drops the event for perf and every other
/// tracer of that tracepoint; raw tracepoints do not filter, and are cheaper.
#[raw_tracepoint(tracepoint = "contention_begin")]
pub fn lock_contention_begin(ctx: RawTracePointContext) -> i32 {
    on_contention_begin(ctx);
    0
}

/// `lock:contention_end(void *lock, int ret)`.
#[raw_tracepoint(tracepoint = "contention_end")]
pub fn lock_contention_end(ctx: RawTracePointContext) -> i32 {
    on_contention_end(&ctx);
    0
}

/// `sched:sched_waking(struct task_struct *p)` (`--lock`): an unlock waking the next
/// waiter ends the waker's hold under contention.
#[raw_tracepoint(tracepoint = "sched_waking")]
pub fn lock_sched_waking(ctx: RawTracePointContext) -> i32 {
    on_waking(&ctx);
    0
}

crate::programs! {
    // Kprobe fallback for kernels without the lock tracepoints. User space attaches each
    // program to the slow-path symbols this kernel has (see profiler/src/probes/lock.rs).

    /// `[native_|__pv_]queued_spin_lock_slowpath(struct qspinlock *lock, u32 val)`.
    kprobe lock_kprobe_spin(ProbeContext) => on_spin_slowpath_entry;
    kretprobe lock_kretprobe_spin(RetProbeContext) => on_spin_slowpath_return;
    /// `__mutex_lock_slowpath(struct mutex *lock)` and its killable/interruptible siblings.
    kprobe lock_kprobe_mutex(ProbeContext) =>
        |ctx: &ProbeContext| on_sleep_slowpath_entry(ctx, LCB_F_MUTEX);
    /// `rwsem_down_read_slowpath(struct rw_semaphore *sem, ...)`.
    kprobe lock_kprobe_rwsem_read(ProbeContext) =>
        |ctx: &ProbeContext| on_sleep_slowpath_entry(ctx, LCB_F_READ);
    /// `rwsem_down_write_slowpath(struct rw_semaphore *sem, int state)`.
    kprobe lock_kprobe_rwsem_write(ProbeContext) =>
        |ctx: &ProbeContext| on_sleep_slowpath_entry(ctx, LCB_F_WRITE);
    /// Return of any sleeping-lock slow path above.
    kretprobe lock_kretprobe_sleep(RetProbeContext) => on_sleep_slowpath_return;
}
