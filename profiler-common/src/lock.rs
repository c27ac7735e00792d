//! Lock contention: `lock:contention_begin` / `lock:contention_end`.

/// Flags of `lock:contention_begin` (include/trace/events/lock.h, `LCB_F_*`).
pub const LCB_F_SPIN: u32 = 1 << 0;
pub const LCB_F_READ: u32 = 1 << 1;
pub const LCB_F_WRITE: u32 = 1 << 2;
pub const LCB_F_RT: u32 = 1 << 3;
pub const LCB_F_PERCPU: u32 = 1 << 4;
pub const LCB_F_MUTEX: u32 = 1 << 5;

/// Aggregation key: one row per process, kernel stack, lock and lock type.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey {
    pub lock_addr: u64,
    /// Process id (tgid) of the waiter.
    pub tgid: u32,
    /// Stack id in the shared stack map, or a negative errno when the stack was lost.
    pub kstack_id: i32,
    /// `LCB_F_*` flags seen at contention_end time for this wait.
    pub flags: u32,
    /// What the lock is, when the kernel side can tell (`LOCK_CLASS_*`).
    pub lock_class: u32,
    /// Process (tgid) holding a sleeping lock when the wait began; 0 when unknown
    /// (spinlocks, reader-owned rwsems, no BTF).
    pub owner_tgid: u32,
    /// Kernel stack where the owner sleeps (from its off-CPU switch-out, when the
    /// off-CPU family records it), or a negative value when unknown.
    pub owner_kstack_id: i32,
    /// How the wait ended (`LOCK_OUTCOME_*`): acquired, or given up.
    pub outcome: u32,
    /// Always 0: the map hashes every byte of the key, so the padding must not be left
    /// to chance (stray stack bytes there would split one row into several).
    pub _pad: u32,
}

impl LockKey {
    /// The row of `LOCK_OVERFLOW` that takes this contention when `LOCK_STATS` is full:
    /// its process, lock type and outcome, without lock, stack or owner, so the totals
    /// per process and lock type stay right ("[stats map full]" in the profile).
    pub const fn overflow(&self) -> LockKey {
        LockKey {
            lock_addr: 0,
            tgid: self.tgid,
            kstack_id: -1,
            flags: self.flags,
            lock_class: 0,
            owner_tgid: 0,
            owner_kstack_id: -1,
            outcome: self.outcome,
            _pad: 0,
        }
    }
}

/// How a wait ended, from `contention_end`'s `ret` (0: the lock was taken).
pub const LOCK_OUTCOME_ACQUIRED: u32 = 0;
/// `-EINTR`: a killable or interruptible wait was interrupted by a signal.
pub const LOCK_OUTCOME_INTERRUPTED: u32 = 1;
/// `-ETIMEDOUT`: a timed wait (or a resilient queued spinlock) gave up.
pub const LOCK_OUTCOME_TIMED_OUT: u32 = 2;
/// `-EDEADLK`: the wait was abandoned to avoid a deadlock (ww_mutex, rqspinlock).
pub const LOCK_OUTCOME_DEADLOCK: u32 = 3;
/// Any other non-zero `ret`.
pub const LOCK_OUTCOME_FAILED: u32 = 4;

/// In a profile's lock row, the outcome sits in the flags above the `LCB_F_*` bits, so
/// an interrupted wait is a row (and a type, `mutex !EINTR`) of its own everywhere.
pub const OUTCOME_SHIFT: u32 = 16;

/// The outcome of a wait from `contention_end`'s `ret`.
#[inline(always)]
pub fn outcome_of(ret: i64) -> u32 {
    match ret {
        0 => LOCK_OUTCOME_ACQUIRED,
        -4 => LOCK_OUTCOME_INTERRUPTED,
        -110 => LOCK_OUTCOME_TIMED_OUT,
        -35 => LOCK_OUTCOME_DEADLOCK,
        _ => LOCK_OUTCOME_FAILED,
    }
}

/// Whether a contention's flags are a plain spinlock's (`spinlock_t`,
/// `raw_spinlock_t`): the spin flag alone, no rwlock, mutex or rwsem bit. Only such a
/// lock can be a task's `pi_lock` or `alloc_lock`.
#[inline(always)]
pub fn is_plain_spinlock(flags: u32) -> bool {
    flags == LCB_F_SPIN
}

/// How a spin wait already open on a CPU relates to a contention that begins or ends on
/// that CPU, in another context or frame (`open_spin_relation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenSpin {
    /// The open wait is still going on: the new contention interrupted it (an interrupt
    /// of the spinning task, or a nested lock deeper in the same frame chain).
    Outer,
    /// The open wait is over: its end was never seen (the kernel skips an interrupt's
    /// end program while the end program runs on that CPU).
    Ended,
}

/// Whether the spin wait open on this CPU (opened at stack address `open_sp` while thread
/// `open_tid` was current) still goes on when a contention begins or ends at stack
/// address `sp` with thread `tid` current. Spinning keeps preemption off, so:
/// - under another thread, the open wait is over (a context switch came since);
/// - on the same stack (addresses closer than a stack's size), a contention deeper down
///   is nested inside the open wait, and one at the same depth or above comes after it;
/// - on another stack, the open wait goes on only if it is on the task's own stack
///   (`open_on_task_stack`, asked only then): this contention is then an interrupt's.
///   Otherwise the open wait was an interrupt's, and that interrupt has returned.
#[inline(always)]
pub fn open_spin_relation(
    open_tid: u32,
    open_sp: u64,
    tid: u32,
    sp: u64,
    thread_size: u64,
    open_on_task_stack: impl FnOnce() -> bool,
) -> OpenSpin {
    if open_tid != tid {
        return OpenSpin::Ended;
    }
    if open_sp.abs_diff(sp) < thread_size {
        return if sp < open_sp {
            OpenSpin::Outer
        } else {
            OpenSpin::Ended
        };
    }
    if open_on_task_stack() {
        OpenSpin::Outer
    } else {
        OpenSpin::Ended
    }
}

/// Whether a contention of the open wait's lock, at stack address `sp` with thread `tid`
/// current, is in the context the wait was opened in (same thread, same stack): then it is
/// that wait's end. Not the same frame: the kernel calls a tracepoint's probes directly
/// when there is one, through an iterator (one frame deeper) when there are several, so
/// a begin and its end are a frame apart when another tool (`perf stat -e
/// lock:contention_begin`) watches only one of them. A lock cannot be waited for twice in
/// one context, so the stack is enough. `thread_size` 0 (unknown): every such end is
/// the wait's.
#[inline(always)]
pub fn same_spin_context(open_tid: u32, open_sp: u64, tid: u32, sp: u64, thread_size: u64) -> bool {
    thread_size == 0 || (open_tid == tid && open_sp.abs_diff(sp) < thread_size)
}

/// The flags a wait keeps when a later `contention_begin` of the same wait changes them:
/// a mutex that once went to sleep (MUTEX without SPIN) stays a sleeping mutex even if it
/// spins again after a wake-up, so one wait is one row (`mutex`, not `mutex:spin`).
#[inline(always)]
pub fn sticky_flags(open: u32, new: u32) -> u32 {
    if open & LCB_F_MUTEX != 0 && open & LCB_F_SPIN == 0 {
        new & !LCB_F_SPIN
    } else {
        new
    }
}

/// Stack capture: a contention's stack is looked up in a cache keyed by (lock, context
/// fingerprint); a full kernel stack walk (`bpf_get_stackid`, 3 us or more) happens only
/// on a cache miss and when the cached walk is older than `STACK_REFRESH_NS`, to follow
/// changes: a storm on one call site walks at most ten times a second, however fast it
/// contends. (A refresh of one hit in 64 at random instead cost a third of the begin
/// program's time on lock-storm.)
pub const STACK_REFRESH_NS: u64 = 100_000_000;
/// Words of the kernel stack above the tracepoint's arguments read for a spinning
/// waiter's fingerprint. On 6.18/x86_64 the tracepoint glue's frames come first (one
/// frame more when two programs are attached to the tracepoint: `__traceiter_*` then
/// calls each), then the lock functions' (the slow path, the lock function), then the
/// caller's; saved registers and locals lie between the return addresses. The call
/// path's words start above the first lock function's return address, and for a
/// sleeping lock (`__mutex_lock` keeps its waiter on the stack) they lie deeper: with 32
/// words and two programs attached, 43% of lock-paths' mutex waits found only one
/// call-path word. A spinning waiter's three are within 32 (on lock-storm's storms
/// fewer than 1 in 10,000 fingerprints were short). The site cache keeps this read off
/// the common path.
pub const SPIN_FINGERPRINT_WORDS: usize = 32;
/// The same for a sleeping waiter (mutex, rwsem).
pub const SLEEP_FINGERPRINT_WORDS: usize = 48;
/// How many call-path return addresses, nearest first, make the fingerprint: the
/// caller of the lock functions (a wrapper such as `fdget_pos`), its caller and that
/// one's caller, so two call paths through one wrapper (or two) differ. The lock
/// functions themselves (`LockText::internal`), the same for every caller, are not
/// counted, nor are words outside kernel text. A fingerprint that finds fewer within
/// its words is not used: the stack is walked and not cached (counted as
/// `lock_stack_fingerprint_short`). The read stops at the last one. (Call paths that
/// differ only deeper share a fingerprint; `EXACT_WAIT_NS` bounds what they can be
/// charged.)
pub const FINGERPRINT_TEXT_WORDS: u32 = 3;
const _: () = assert!(
    FINGERPRINT_TEXT_WORDS >= 2,
    "the site cache checks two words"
);
/// A sleeping wait (mutex, rwsem) at least this long whose stack came from a cache gets
/// its stack walked at its end (the waiter is still in the lock's slow path, on the same
/// call path), after the end's timestamp: the walk (3 us or more) adds at most a few
/// percent to such a wait's cost, and a call path whose fingerprint another one shares
/// cannot be charged a long wait that was not its own. Shorter waits, spin waits (whose
/// end runs with a spinlock held) and the kprobe fallback's waits (a walk from a return
/// probe shows the kretprobe trampoline where the callers were) keep the cached stack.
pub const EXACT_WAIT_NS: u64 = 50_000;
/// Most ranges of lock-function text (`LockText::internal`): 6.12 has four, older kernels
/// interleave more of the scheduler's functions with the locking ones in `.sched.text`.
pub const LOCK_TEXT_RANGES: usize = 16;

/// Where kernel text lies, for the fingerprint: the load-time global `LOCK_TEXT`, from
/// kallsyms. A stack word is a call-path return address when it lies in the image's
/// text or in the span of the modules' functions, and outside every `internal` range.
/// All zero (kallsyms unreadable): no word is text, every fingerprint is short, and
/// user space asks for exact walks instead.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockText {
    /// `_stext`..`_etext` of the kernel image.
    pub image_start: u64,
    pub image_end: u64,
    /// From the lowest module function to the end of the module holding the highest
    /// (BPF programs excluded): module data between modules' text is inside the span.
    pub modules_start: u64,
    pub modules_end: u64,
    /// `[start, end)` ranges of the lock functions (the `.spinlock.text` section, the
    /// locking functions of `.sched.text`), unused ones `[0, 0)`. A word in one of them
    /// restarts the fingerprint: what follows it on the stack is the call path.
    pub internal: [[u64; 2]; LOCK_TEXT_RANGES],
}

/// Key of the stack cache.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackCacheKey {
    pub lock_addr: u64,
    pub fingerprint: u64,
}

/// The last contended acquisition of a lock (a `contention_end` with ret 0): who took
/// it, with which stack, when, and since when it had waited.
/// One cache line (`LOCK_ACQUIRER_SIZE`): every contended acquisition of a lock reads and
/// writes its slot while it holds the lock, on whichever CPU it runs, so a slot that
/// straddled two lines would cost two transfers between CPUs instead of one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct LockAcquirer {
    /// The lock this slot describes (slots are shared by locks whose addresses collide).
    pub lock_addr: u64,
    pub acquired_ns: u64,
    /// `check_of` the fields above and below it, written with them: a slot read while
    /// another CPU rewrites it (two readers of a group acquire at once, or a waiter's
    /// begin reads it as the next acquirer writes it) mixes two acquisitions, which
    /// this tells (`is_whole`).
    pub check: u64,
    pub tid: u32,
    pub tgid: u32,
    pub kstack_id: i32,
    pub flags: u32,
    /// The first moment after the acquisition at which a waiter's begin found the lock
    /// free or owned by another thread (its `owner` word: a mutex, or an rwsem held for
    /// writing), or the acquirer woke a thread waiting for the lock (an unlock's wake-up):
    /// the acquirer had let it go by then, and another thread may have taken it without
    /// contention. 0 until seen.
    pub released_by_ns: u64,
    /// The acquisition `released_by_ns` belongs to (its `acquired_ns`): a sighting that
    /// raced with the next acquisition's rewrite of the slot is not taken for that one's.
    pub released_of_ns: u64,
    /// Read by nobody: a spinning waiter's begin adds 1 to it, which takes the slot's
    /// cache line to the waiter's CPU before its end needs it (`warm_last_acquirer`).
    pub warm: u64,
}

impl LockAcquirer {
    /// A mix of the acquisition's identity (lock, time, thread, process, stack, mode) in
    /// which a field of another acquisition shows.
    #[inline(always)]
    pub fn check_of(&self) -> u64 {
        let who = (u64::from(self.tid) << 32) | u64::from(self.tgid);
        let how = (u64::from(self.kstack_id as u32) << 32) | u64::from(self.flags);
        let when = self.acquired_ns.wrapping_mul(FIBONACCI_MIX);
        let who = who.wrapping_mul(FIBONACCI_MIX ^ 0xff);
        (self.lock_addr ^ when ^ who).wrapping_mul(FIBONACCI_MIX) ^ how
    }

    /// Whether the slot's fields all belong to one acquisition.
    #[inline(always)]
    pub fn is_whole(&self) -> bool {
        self.check == self.check_of()
    }
}

/// The size of a `LockAcquirer`: one cache line of the CPUs lockpath runs on.
pub const LOCK_ACQUIRER_SIZE: usize = 64;
const _: () = assert!(core::mem::size_of::<LockAcquirer>() == LOCK_ACQUIRER_SIZE);

/// Key of a hold under contention: the lock and the holder (thread, process, the
/// stack of its own contended acquisition, its mode).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContendedHoldKey {
    pub lock_addr: u64,
    pub tid: u32,
    pub tgid: u32,
    pub kstack_id: i32,
    pub flags: u32,
}

impl ContendedHoldKey {
    /// The row of `LOCK_HOLDS_OVERFLOW` that takes this hold when `LOCK_HOLDS` is full:
    /// its process and mode, without lock, thread or stack (as `LockKey::overflow`).
    pub const fn overflow(&self) -> ContendedHoldKey {
        ContendedHoldKey {
            lock_addr: 0,
            tid: 0,
            tgid: self.tgid,
            kstack_id: -1,
            flags: self.flags,
        }
    }
}

/// Whether a waiter in mode `waiter_flags` waited because of a holder in mode
/// `holder_flags`: readers of an rwsem or rwlock share the lock, so a reader that
/// follows a reader did not wait for it (the first reader of a group stands for it).
#[inline(always)]
pub fn conflicts(holder_flags: u32, waiter_flags: u32) -> bool {
    !(holder_flags & LCB_F_READ != 0 && waiter_flags & LCB_F_READ != 0)
}

/// The low bits of a mutex's or an rwsem's owner word are flags; the rest is the task.
pub const OWNER_FLAG_BITS: u64 = 0x7;

/// An rwsem's count when held: `RWSEM_WRITER_LOCKED` (bit 0) and the readers' count
/// (bits 8-62); the other bits are flags (waiters, handoff, a failed read).
pub const RWSEM_LOCK_MASK: u64 = 0x1 | 0x7fff_ffff_ffff_ff00;

/// Whether a lock a thread sleeps waiting for is let go, as its wake-up (`woken_task`)
/// finds it: a mutex whose owner word names nobody or the woken thread (a handoff), or
/// an rwsem whose count (`rwsem_count`, read only for an rwsem) shows neither a writer
/// nor a reader.
#[inline(always)]
pub fn free_at_wake(
    flags: u32,
    owner: u64,
    woken_task: u64,
    rwsem_count: impl FnOnce() -> Option<u64>,
) -> bool {
    if flags & LCB_F_MUTEX != 0 {
        let owner = owner & !OWNER_FLAG_BITS;
        return owner == 0 || owner == woken_task;
    }
    rwsem_count().is_some_and(|count| count & RWSEM_LOCK_MASK == 0)
}

/// Whether waking a reader that waits for an rwsem shows that the waker let it go: an
/// unlock wakes readers, and so does a writer that downgrades to a read hold, which stays
/// the owner (`owner`, the owner word, names `waker_task`).
#[inline(always)]
pub fn reader_woken_by_unlock(owner: u64, waker_task: u64) -> bool {
    owner & !OWNER_FLAG_BITS != waker_task
}

/// The lock is not recognized.
pub const LOCK_CLASS_UNKNOWN: u32 = 0;
/// The lock is the waiting task's own `mm->mmap_lock`.
pub const LOCK_CLASS_MMAP_LOCK: u32 = 1;

/// Kernel struct offsets (from BTF) that let the lock programs read a lock's owner and
/// recognize `mmap_lock`. Passed as the load-time global `LOCK_LAYOUT`; `enabled` is 0
/// when the kernel has no BTF, and then neither is read.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockLayout {
    pub enabled: u32,
    pub task_mm: u32,
    pub task_pid: u32,
    pub task_tgid: u32,
    pub task_comm: u32,
    pub mm_mmap_lock: u32,
    pub mutex_owner: u32,
    pub rwsem_owner: u32,
    /// 1: walk every contention's stack (`--lock-stacks exact`), no cache.
    pub exact_stacks: u32,
    /// `task_struct.stack`: the base of the task's kernel stack.
    pub task_stack: u32,
    /// The size of a task's kernel stack (`THREAD_SIZE`), 0 when unknown.
    pub thread_size: u32,
    /// `rw_semaphore.count`: the writer bit and the readers' count.
    pub rwsem_count: u32,
}

/// Aggregated wait times of one key, in nanoseconds.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockStat {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    pub min_ns: u64,
}

impl LockStat {
    /// The row of one wait of `ns`.
    pub const fn one(ns: u64) -> LockStat {
        LockStat {
            count: 1,
            total_ns: ns,
            max_ns: ns,
            min_ns: ns,
        }
    }

    /// The row with one more wait of `ns` (as the programs add it).
    pub fn with(&self, ns: u64) -> LockStat {
        LockStat {
            count: self.count + 1,
            total_ns: self.total_ns + ns,
            max_ns: self.max_ns.max(ns),
            min_ns: self.min_ns.min(ns),
        }
    }
}

/// A contention in progress (begin seen, end not yet).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct LockWait {
    pub start_ns: u64,
    pub lock_addr: u64,
    pub flags: u32,
    pub kstack_id: i32,
    pub lock_class: u32,
    pub owner_tgid: u32,
    pub owner_kstack_id: i32,
    /// 1 when the stack came from a cache, not from a walk at the wait's begin.
    pub cached: u32,
    /// Spin waits: where on the kernel stack the begin ran (the tracepoint's arguments),
    /// which tells the context that waits (a task, or an interrupt on its own stack).
    pub sp: u64,
    /// Spin waits: the thread that was current at the begin (in an interrupt, the one it
    /// interrupted).
    pub tid: u32,
    pub reserved: u32,
}

/// The record-time lock filter (`record --type`, `--lock-filter`), applied in the
/// kernel at the start of a contention, before any other work: the load-time global
/// `LOCK_FILTER`. `enabled` 0 (the default) is no filter: the begin programs then read
/// one word of it and go on.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockFilter {
    /// `LOCK_FILTER_TYPES` and/or `LOCK_FILTER_ADDRS`.
    pub enabled: u32,
    /// How many of `addrs` are used.
    pub addr_count: u32,
    /// Bit `f` set: a contention with `LCB_F_*` flags `f` (below 64) is kept.
    pub type_mask: u64,
    /// The locks kept (with `LOCK_FILTER_ADDRS`).
    pub addrs: [u64; LOCK_FILTER_MAX_ADDRS],
}

/// `LockFilter::enabled`: the type mask applies.
pub const LOCK_FILTER_TYPES: u32 = 1;
/// `LockFilter::enabled`: only the locks of `addrs` are kept.
pub const LOCK_FILTER_ADDRS: u32 = 2;
/// Most lock addresses the kernel checks; more are filtered at drain time only.
pub const LOCK_FILTER_MAX_ADDRS: usize = 8;

impl LockFilter {
    /// Whether a contention on `lock_addr` with `flags` is recorded.
    #[inline(always)]
    pub fn keeps(&self, lock_addr: u64, flags: u32) -> bool {
        filter_keeps(self.enabled, self.type_mask, lock_addr, flags, |index| {
            (index < self.addr_count as usize).then(|| self.addrs[index])
        })
    }
}

/// `LockFilter::keeps` on its fields, the kernel side reading each (volatile) only when
/// needed: `addr(i)` is the `i`th address, `None` past the last.
#[inline(always)]
pub fn filter_keeps(
    enabled: u32,
    type_mask: u64,
    lock_addr: u64,
    flags: u32,
    addr: impl Fn(usize) -> Option<u64>,
) -> bool {
    if enabled & LOCK_FILTER_TYPES != 0 && (flags >= 64 || (type_mask >> flags) & 1 == 0) {
        return false;
    }
    if enabled & LOCK_FILTER_ADDRS == 0 {
        return true;
    }
    let mut index = 0;
    while index < LOCK_FILTER_MAX_ADDRS {
        match addr(index) {
            Some(wanted) if wanted == lock_addr => return true,
            Some(_) => index += 1,
            None => break,
        }
    }
    false
}

/// Entries of the sleeping-lock waits in progress (`LOCK_SLEEP_WAIT`), by thread.
pub const LOCK_SLEEP_WAIT_ENTRIES: u32 = 16384;
/// Slots of the last contended acquisition per lock (`LOCK_LAST_ACQUIRER`, an array
/// indexed by `slot_of(lock)`: no hash map lookup on the end program's path; two locks
/// in one slot take turns, and a hold whose slot was taken in between is not measured).
pub const LOCK_LAST_ACQUIRER_ENTRIES: u32 = 4096;
/// Slots of the stack cache (`LOCK_STACK_CACHE`), per CPU, indexed by
/// `slot_of(lock ^ fingerprint)`: a direct-mapped cache, no hash map lookup on the begin
/// program's path. A call path whose slot another one took is walked again.
pub const LOCK_STACK_CACHE_ENTRIES: u32 = 1024;

/// 2^64 divided by the golden ratio: a multiplication by it spreads neighbouring values
/// over the high bits (Fibonacci hashing).
pub const FIBONACCI_MIX: u64 = 0x9e37_79b9_7f4a_7c15;

/// The slot of `value` in a direct-mapped table of `entries` (a power of two) slots: the
/// high bits of a Fibonacci hash, so neighbouring addresses spread.
#[inline(always)]
pub fn slot_of(value: u64, entries: u32) -> u32 {
    (value.wrapping_mul(FIBONACCI_MIX) >> 32) as u32 & (entries - 1)
}

/// Slots of the site cache (`LOCK_SITE_CACHE`), per CPU: two ways per lock, at
/// `slot_of(lock)` rounded down to even and the next.
pub const LOCK_SITE_CACHE_ENTRIES: u32 = 1024;

/// A call site of a lock as the begin program last saw it on this CPU: the word indexes
/// (from the tracepoint's arguments) of the second and third call-path words of its
/// fingerprint (the return addresses into the lock functions' caller's caller and into
/// the next frame out) and those words. Two words read there confirm the site, so the
/// whole fingerprint is read only when they differ. (Not keyed by stack depth: kernels
/// randomize the stack offset of each system call.)
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SiteCacheEntry {
    pub lock_addr: u64,
    pub anchor: u32,
    pub next_anchor: u32,
    pub word: u64,
    pub next_word: u64,
    pub value: crate::lockname::StackCacheValue,
}

/// One slot of the stack cache.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct StackCacheEntry {
    pub key: StackCacheKey,
    pub value: crate::lockname::StackCacheValue,
}
/// A finished contention not yet added to the aggregate: the end program, which runs
/// with the lock just taken, leaves it in its CPU's `LOCK_PENDING` ring, and the next
/// begin on that CPU (outside any critical section) adds it to `LOCK_STATS` and, with a
/// hold, to `LOCK_HOLDS`. What a ring still holds when the programs are detached is
/// added by user space.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PendingEnd {
    pub key: LockKey,
    pub wait_ns: u64,
    /// The previous acquirer's hold this acquisition closed, when `hold_ns` is not
    /// `NO_HOLD`.
    pub hold: ContendedHoldKey,
    pub hold_ns: u64,
}

/// `PendingEnd::hold_ns` of an end that closed no hold.
pub const NO_HOLD: u64 = u64::MAX;

/// Ends a CPU's ring holds (a power of two). A CPU sees more ends than begins when
/// sleeping waits that began elsewhere end on it; a full ring makes the end program
/// add the wait itself, as it would without the ring.
pub const LOCK_PENDING_ENDS: usize = 8;

/// A CPU's ring of pending ends: `head` counts the ends written, `tail` those added to
/// the aggregate; the ends `tail..head` (modulo the ring's size) are pending.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PendingRing {
    pub head: u32,
    pub tail: u32,
    pub ends: [PendingEnd; LOCK_PENDING_ENDS],
}

impl PendingRing {
    /// The ends still pending, oldest first.
    pub fn pending(&self) -> impl Iterator<Item = &PendingEnd> {
        let count = self
            .head
            .wrapping_sub(self.tail)
            .min(LOCK_PENDING_ENDS as u32);
        (0..count)
            .map(move |i| &self.ends[(self.tail.wrapping_add(i) as usize) % LOCK_PENDING_ENDS])
    }
}

/// Threads each CPU's begin program named, by `tid % LOCK_NAMED_ENTRIES` (`LOCK_NAMED`):
/// a thread found there is not named again until a task moves to another cgroup (8 KiB
/// per CPU, so that threads seldom share a slot and name themselves over and over).
/// Each slot is [`named_slot`]`(tid, moves)`.
pub const LOCK_NAMED_ENTRIES: u32 = 1024;

/// A `LOCK_NAMED` slot: the thread named (low half) and the count of cgroup moves
/// (`TASKS_MOVED`) when it was (high half). A thread is named again after any move,
/// since the move of a process moves all its threads and names only its leader.
pub const fn named_slot(tid: u32, moves: u32) -> u64 {
    (moves as u64) << 32 | tid as u64
}

/// The thread of a `LOCK_NAMED` slot.
pub const fn named_tid(slot: u64) -> u32 {
    slot as u32
}

/// Threads whose sleeping wait the full wait map dropped (`LOCK_SLEEP_DROPPED`).
pub const LOCK_SLEEP_DROPPED_ENTRIES: u32 = 1024;

/// What the family's programs could not record: each loss's slot in `LOSSES`, its name
/// in a profile and what it means (`ALL`, which the report prints).
pub mod losses {
    crate::loss::losses! {
        LOCK_MAP_FULL = 2, "lock_map_full",
            "lock aggregation map full: contention counted in its process's \"[stats map full]\" row \
             (raise --map-entries for its own row)";
        LOCK_UNMATCHED_END = 3, "lock_unmatched_end",
            "contention_end without a matching begin";
        LOCK_NEGATIVE_DELTA = 4, "lock_negative_delta",
            "contention with end before begin";
        LOCK_NESTED = 5, "lock_nested",
            "nested contention ignored (a begin while another is open)";
        LOCK_WAIT_MAP_FULL = 6, "lock_wait_map_full",
            "in-flight sleeping-lock map full: contention dropped";
        LOCK_INTERRUPT_WAIT_LOST = 9, "lock_interrupt_wait_lost",
            "a spin wait of an interrupt that came while the end program ran: the kernel skipped its \
             end (one run of a program per CPU), so it was dropped once the CPU was seen past it";
        LOCK_KPROBE_RETURN_LOST = 26, "lock_kprobe_return_lost",
            "kprobe fallback: a slow path's return was missed (kretprobe instances exhausted); wait \
             dropped";
        LOCK_STALE_WAIT = 30, "lock_stale_wait",
            "a wait whose end never came (lost before the recording or the end probe) was replaced by \
             a new one";
        LOCK_HOLD_MAP_FULL = 31, "lock_hold_map_full",
            "map of holds under contention full: hold counted in its (process, mode) row without lock \
             or stack (raise --map-entries for its own row)";
        LOCK_STACK_CACHE_FAILED = 32, "lock_stack_cache_failed",
            "the kernel stack above a lock tracepoint could not be read: stack walked instead",
            nothing_lost;
        LOCK_STACK_FINGERPRINT_SHORT = 34, "lock_stack_fingerprint_short",
            "the kernel stack above a lock tracepoint showed too few call-path frames to tell its \
             call path from others: stack walked instead, and not cached", nothing_lost;
        LOCK_OVERFLOW_FULL = 39, "lock_overflow_full",
            "lock aggregation map and its overflow map full: contention dropped";
        LOCK_HOLD_OVERFLOW_FULL = 51, "lock_hold_overflow_full",
            "map of holds under contention and its overflow map full: a hold dropped";
        LOCK_HOLD_MIXED = 55, "lock_hold_mixed",
            "a hold under contention not measured: its acquirer's record was read while another \
             CPU rewrote it (two acquisitions at once)";
    }
}

pub mod names {
    crate::define_names! {
        LOCK_STATS,
        LOCK_OVERFLOW,
        LOCK_SLEEP_WAIT,
        LOCK_SPIN_WAIT,
        LOCK_SPIN_DEPTH,
        LOCK_LAYOUT,
        LOCK_FILTER,
        LOCK_TEXT,
        LOCK_HOLDS,
        LOCK_HOLDS_OVERFLOW,
        LOCK_LAST_ACQUIRER,
        LOCK_STACK_CACHE,
        LOCK_SITE_CACHE,
        LOCK_STACK_WORDS,
        LOCK_SLEEP_DROPPED,
        LOCK_PENDING,
        LOCK_NAMED,
        LOCK_CONTENTION_BEGIN = lock_contention_begin,
        LOCK_CONTENTION_END = lock_contention_end,
        LOCK_SCHED_WAKING = lock_sched_waking,
        LOCK_KPROBE_SPIN = lock_kprobe_spin,
        LOCK_KRETPROBE_SPIN = lock_kretprobe_spin,
        LOCK_KPROBE_MUTEX = lock_kprobe_mutex,
        LOCK_KPROBE_RWSEM_READ = lock_kprobe_rwsem_read,
        LOCK_KPROBE_RWSEM_WRITE = lock_kprobe_rwsem_write,
        LOCK_KRETPROBE_SLEEP = lock_kretprobe_sleep,
        @also [crate::lockname::names::LOCK_NAME_LAYOUT, crate::lockname::names::LOCK_RQ_ADDRS, crate::lockname::names::LOCK_SLAB_NAMES],
    }
}

#[cfg(feature = "user")]
crate::impl_pod!(
    LockKey,
    LockStat,
    LockWait,
    LockLayout,
    LockFilter,
    LockText,
    StackCacheKey,
    LockAcquirer,
    ContendedHoldKey,
    PendingRing
);

#[cfg(test)]
mod tests {
    use super::*;

    fn acquirer(acquired_ns: u64, tid: u32, kstack_id: i32, flags: u32) -> LockAcquirer {
        let mut slot = LockAcquirer {
            lock_addr: 0xffff_8880_1234_5640,
            acquired_ns,
            tid,
            tgid: tid,
            kstack_id,
            flags,
            ..LockAcquirer::default()
        };
        slot.check = slot.check_of();
        slot
    }

    /// A slot holds one acquisition's fields or shows that it does not: a reader's that
    /// a writer's rewrite caught halfway (acquisition time of the new one, thread, stack
    /// and mode of the old one) is not whole, whichever fields came from which; the
    /// sightings of its release (`released_*`) and `warm` are not part of it.
    #[test]
    fn a_slot_mixed_from_two_acquisitions_is_not_whole() {
        let writer = acquirer(1_000_000, 41, 7, LCB_F_WRITE);
        let reader = acquirer(1_000_075, 42, 9, LCB_F_READ);
        assert!(writer.is_whole() && reader.is_whole());
        assert!(LockAcquirer::default().is_whole());
        let fields: [fn(&mut LockAcquirer, &LockAcquirer); 6] = [
            |slot, other| slot.acquired_ns = other.acquired_ns,
            |slot, other| slot.check = other.check,
            |slot, other| slot.tid = other.tid,
            |slot, other| slot.tgid = other.tgid,
            |slot, other| slot.kstack_id = other.kstack_id,
            |slot, other| slot.flags = other.flags,
        ];
        for (i, take) in fields.iter().enumerate() {
            let mut mixed = writer;
            take(&mut mixed, &reader);
            assert!(!mixed.is_whole(), "field {i} of the other acquisition");
        }
        let mut seen = writer;
        seen.released_by_ns = 1_000_500;
        seen.released_of_ns = writer.acquired_ns;
        seen.warm = 3;
        assert!(seen.is_whole());
    }

    fn ring_with(head: u32, tail: u32) -> PendingRing {
        let mut ring = PendingRing {
            head,
            tail,
            ..PendingRing::default()
        };
        for (i, end) in ring.ends.iter_mut().enumerate() {
            end.wait_ns = i as u64;
        }
        ring
    }

    fn pending_are(ring: PendingRing, slots: &[u64]) -> bool {
        ring.pending()
            .map(|end| end.wait_ns)
            .eq(slots.iter().copied())
    }

    /// The ends between `tail` and `head` are pending, oldest first, across the ring's
    /// end and across the wrap of the counters.
    #[test]
    fn pending_ends_are_those_between_tail_and_head() {
        assert!(pending_are(ring_with(5, 5), &[]));
        assert!(pending_are(ring_with(3, 1), &[1, 2]));
        assert!(pending_are(ring_with(10, 6), &[6, 7, 0, 1]));
        let full = LOCK_PENDING_ENDS as u32;
        assert!(pending_are(ring_with(full, 0), &[0, 1, 2, 3, 4, 5, 6, 7]));
        // The counters wrap: head 1 and tail u32::MAX - 1 leave three ends.
        assert!(pending_are(ring_with(1, u32::MAX - 1), &[6, 7, 0]));
        // A ring read while torn (more than it can hold) reads as full, not beyond.
        assert_eq!(ring_with(100, 0).pending().count(), LOCK_PENDING_ENDS);
    }

    /// A wake-up shows a mutex let go when its owner is nobody or the woken thread, an
    /// rwsem when its count has neither the writer bit nor a reader (flags aside), and a
    /// woken reader's waker let go unless it still owns the rwsem (a downgrade).
    #[test]
    fn wake_ups_that_show_a_release() {
        let (woken, waker) = (0xffff_8880_1234_5600u64, 0xffff_8880_abcd_ef00u64);
        let no_count = || -> Option<u64> { panic!("a mutex's count is not read") };
        assert!(free_at_wake(LCB_F_MUTEX, 0, woken, no_count));
        assert!(
            free_at_wake(LCB_F_MUTEX, 0x2, woken, no_count),
            "flags only"
        );
        assert!(
            free_at_wake(LCB_F_MUTEX, woken | 0x2, woken, no_count),
            "handoff"
        );
        assert!(
            !free_at_wake(LCB_F_MUTEX, waker, woken, no_count),
            "still held"
        );
        let rwsem = |count: u64| free_at_wake(LCB_F_WRITE, waker, woken, || Some(count));
        assert!(rwsem(0));
        assert!(rwsem(0x2 | 0x4), "waiters and handoff flags");
        assert!(rwsem(1 << 63), "a failed read's flag");
        assert!(!rwsem(0x1), "a writer");
        assert!(!rwsem(0x100 | 0x2), "a reader");
        assert!(!free_at_wake(LCB_F_WRITE, 0, woken, || None), "unreadable");
        assert!(
            reader_woken_by_unlock(woken | 0x1, waker),
            "the woken reader owns it"
        );
        assert!(reader_woken_by_unlock(0, waker));
        assert!(!reader_woken_by_unlock(waker | 0x1, waker), "a downgrade");
    }

    #[test]
    fn outcomes_from_ret() {
        assert_eq!(outcome_of(0), LOCK_OUTCOME_ACQUIRED);
        assert_eq!(outcome_of(-4), LOCK_OUTCOME_INTERRUPTED);
        assert_eq!(outcome_of(-110), LOCK_OUTCOME_TIMED_OUT);
        assert_eq!(outcome_of(-35), LOCK_OUTCOME_DEADLOCK);
        assert_eq!(outcome_of(-22), LOCK_OUTCOME_FAILED);
    }

    /// Stack addresses as on x86_64: a task's 16 KiB stack, and an interrupt stack
    /// elsewhere; the tracepoint frames near each stack's top.
    #[test]
    fn an_open_spin_wait_goes_on_only_under_the_context_it_was_opened_in() {
        const SIZE: u64 = 16 << 10;
        let task_frame = 0xffff_c900_0012_3e40;
        let irq_frame = 0xffff_fe00_0000_7e80;
        let never = || -> bool { panic!("the task's stack is not needed here") };
        // Another thread is current: a context switch came since the open (spinning
        // keeps preemption off), so the open wait is over.
        assert_eq!(
            open_spin_relation(7, task_frame, 8, task_frame, SIZE, never),
            OpenSpin::Ended
        );
        // Same stack, deeper: a lock taken inside the waiting one (an rwlock's wait lock)
        // or a hardirq inside a softirq's spin on the interrupt stack.
        assert_eq!(
            open_spin_relation(7, task_frame, 7, task_frame - 0x300, SIZE, never),
            OpenSpin::Outer
        );
        // Same stack, same depth or above: the open wait's end was lost.
        assert_eq!(
            open_spin_relation(7, task_frame, 7, task_frame, SIZE, never),
            OpenSpin::Ended
        );
        assert_eq!(
            open_spin_relation(7, irq_frame - 0x200, 7, irq_frame, SIZE, never),
            OpenSpin::Ended
        );
        // An interrupt contends while its task spins: the task's wait goes on.
        assert_eq!(
            open_spin_relation(7, task_frame, 7, irq_frame, SIZE, || true),
            OpenSpin::Outer
        );
        // The task contends after an interrupt whose end was skipped: that wait is over.
        assert_eq!(
            open_spin_relation(7, irq_frame, 7, task_frame, SIZE, || false),
            OpenSpin::Ended
        );
    }

    #[test]
    fn a_spin_wait_ends_in_its_own_context_whatever_frame_the_end_runs_in() {
        const SIZE: u64 = 16 << 10;
        let task_frame = 0xffff_c900_0012_3e40;
        let irq_frame = 0xffff_fe00_0000_7e80;
        // Its begin ran through the tracepoint's iterator (another probe on the begin
        // only), one frame deeper than its end.
        assert!(same_spin_context(7, task_frame - 56, 7, task_frame, SIZE));
        assert!(same_spin_context(7, task_frame, 7, task_frame, SIZE));
        // An interrupt's end of that lock, or another thread's: not this wait's.
        assert!(!same_spin_context(7, task_frame, 7, irq_frame, SIZE));
        assert!(!same_spin_context(7, task_frame, 8, task_frame, SIZE));
        // Stacks unknown: as before frames were kept, the lock decides.
        assert!(same_spin_context(7, task_frame, 7, irq_frame, 0));
    }

    #[test]
    fn a_mutex_that_slept_stays_a_sleeping_mutex() {
        let spin = LCB_F_MUTEX | LCB_F_SPIN;
        // Spinning, then sleeping: the sleep is what counts.
        assert_eq!(sticky_flags(spin, LCB_F_MUTEX), LCB_F_MUTEX);
        // Woken, spins again: still a sleeping mutex.
        assert_eq!(sticky_flags(LCB_F_MUTEX, spin), LCB_F_MUTEX);
        // Only spun so far: mutex:spin.
        assert_eq!(sticky_flags(spin, spin), spin);
        // Other types take the latest flags.
        assert_eq!(sticky_flags(LCB_F_READ, LCB_F_WRITE), LCB_F_WRITE);
    }

    #[test]
    fn the_filter_keeps_types_of_its_mask_and_its_addresses() {
        let none = LockFilter::default();
        assert!(none.keeps(0x1234, LCB_F_SPIN));
        let spin = LockFilter {
            enabled: LOCK_FILTER_TYPES,
            type_mask: 1 << LCB_F_SPIN,
            ..Default::default()
        };
        assert!(spin.keeps(0x1234, LCB_F_SPIN));
        assert!(!spin.keeps(0x1234, LCB_F_WRITE));
        assert!(!spin.keeps(0x1234, 1 << 6));
        let mut addrs = [0; LOCK_FILTER_MAX_ADDRS];
        addrs[0] = 0x10;
        addrs[1] = 0x20;
        let two = LockFilter {
            enabled: LOCK_FILTER_ADDRS | LOCK_FILTER_TYPES,
            addr_count: 2,
            type_mask: u64::MAX,
            addrs,
        };
        assert!(two.keeps(0x20, LCB_F_MUTEX));
        assert!(!two.keeps(0x30, LCB_F_MUTEX));
        // Unused slots (0) are not addresses.
        assert!(!two.keeps(0, LCB_F_MUTEX));
    }

    #[test]
    fn readers_do_not_make_readers_wait() {
        assert!(!conflicts(LCB_F_READ, LCB_F_READ));
        assert!(!conflicts(LCB_F_SPIN | LCB_F_READ, LCB_F_SPIN | LCB_F_READ));
        assert!(conflicts(LCB_F_WRITE, LCB_F_READ));
        assert!(conflicts(LCB_F_READ, LCB_F_WRITE));
        assert!(conflicts(LCB_F_SPIN, LCB_F_SPIN));
        assert!(conflicts(LCB_F_MUTEX, LCB_F_MUTEX));
    }
}
