//! Maps and helpers shared by every probe family.

use core::intrinsics::{AtomicOrdering, atomic_xadd};

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_get_smp_processor_id, bpf_get_stack,
    },
    macros::map,
    maps::{Array, HashMap, PerCpuArray, RingBuf, StackTrace},
    programs::tracing::StackIdContext,
};
use profiler_common::{
    loss::{LOSS_SLOTS, PROCESS_NOTE_LOST, PROCESS_SEEN_MAP_FULL, TASK_MAP_FULL},
    shared::{SPARE_DEPTHS, SpareStack, spare_slot, spare_stack_id, tagged_stack_id},
    target::TaskInfo,
};

/// Stack frames, stored once; every aggregation key holds ids into this map (even
/// stack generations) or `STACKS_ODD` (odd ones): see `stack_id`.
/// Size is set by user space at load time (`--stack-entries`).
#[map]
pub static STACKS: StackTrace =
    StackTrace::with_max_entries(profiler_common::shared::STACKS_ENTRIES, 0);

/// The stacks of odd generations (`record --rotate`); one entry without periods.
#[map]
pub static STACKS_ODD: StackTrace =
    StackTrace::with_max_entries(profiler_common::shared::STACKS_ENTRIES, 0);

/// The stack generation in progress, written by user space at each period boundary.
#[map]
pub static STACK_GENERATION: Array<u32> = Array::with_max_entries(1, 0);

/// Spare stacks (see `profiler_common::shared::SPARE_INDEX_BASE`): a stack the stack
/// map turned away on a hash collision, keyed by its frames, to its id. Size set by
/// user space at load time.
#[map]
pub static STACKS_SPARE: HashMap<SpareStack, u32> =
    HashMap::with_max_entries(profiler_common::shared::SPARE_MIN_ENTRIES, 0);

/// Per CPU, one per nesting level (`SPARE_DEPTHS`): the frames of the spare stack
/// being looked up (too large for the BPF stack), and the ids this slot handed out in
/// the current generation.
#[map]
static SPARE_SCRATCH: PerCpuArray<SpareScratch> = PerCpuArray::with_max_entries(SPARE_DEPTHS, 0);

/// Per CPU: how many programs on this CPU are using a spare scratch slot (the next one
/// takes the slot at that level).
#[map]
static SPARE_DEPTH: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// Spare stack ids per scratch slot (`profiler_common::shared::spare_stack_id`), set
/// by user space for the machine's CPUs.
#[unsafe(no_mangle)]
static SPARE_IDS_PER_SLOT: u32 = profiler_common::shared::SPARE_IDS_PER_SLOT_DEFAULT;

#[repr(C)]
pub struct SpareScratch {
    stack: SpareStack,
    /// The generation of `used`, and how many ids of it this slot has handed out.
    generation: u32,
    used: u32,
}

/// Walks the current task's stack (kernel, or user with `STACK_FLAGS_USER`) into the
/// map of the current stack generation; the id carries the generation's tag
/// (`profiler_common::shared::tagged_stack_id`). A stack the map turns away on a hash
/// collision goes to the spare stacks. Every stack walk goes through here.
#[inline(always)]
pub fn stack_id<C: StackIdContext>(ctx: &C, flags: u64) -> Result<i64, i32> {
    let generation = match STACK_GENERATION.get(0) {
        Some(generation) => *generation,
        None => 0,
    };
    let walked = match generation & 1 {
        0 => ctx.get_stackid(&STACKS, flags),
        _ => ctx.get_stackid(&STACKS_ODD, flags),
    };
    match walked {
        Ok(index) => Ok(tagged_stack_id(index, generation)),
        Err(errno) if errno == -EEXIST => spare_stack(ctx, flags, generation),
        Err(errno) => Err(errno),
    }
}

/// The id of the current stack among the spare stacks, added if new. `-EBUSY` when
/// every scratch slot of this CPU is in use by the programs this one interrupted;
/// `-EEXIST` (a collision, as the stack map said) when the spare map is full or the
/// slot has used its ids; the walk's error when the stack cannot be read.
#[inline(always)]
fn spare_stack<C: StackIdContext>(ctx: &C, flags: u64, generation: u32) -> Result<i64, i32> {
    let depth = SPARE_DEPTH.get_ptr_mut(0).ok_or(-EEXIST)?;
    // SAFETY: the pointer comes from a successful per-CPU array lookup; programs do not
    // migrate while they run. A program that interrupts this one on the same CPU runs
    // to its end before this one goes on, so it leaves the depth as it found it; it
    // takes the next level's slot while this one holds its own.
    let level = unsafe { *depth };
    if level >= SPARE_DEPTHS {
        return Err(-EBUSY);
    }
    let scratch = SPARE_SCRATCH.get_ptr_mut(level).ok_or(-EEXIST)?;
    // SAFETY: as above; the slot at `level` is this program's until it lowers the depth.
    unsafe {
        *depth = level + 1;
        let found = spare_stack_in(ctx, flags, generation, level, &mut *scratch);
        *depth = level;
        found
    }
}

#[inline(always)]
fn spare_stack_in<C: StackIdContext>(
    ctx: &C,
    flags: u64,
    generation: u32,
    level: u32,
    scratch: &mut SpareScratch,
) -> Result<i64, i32> {
    // bpf_get_stack takes the skip count and BPF_F_USER_STACK, not the stack map flags;
    // it zeroes the buffer past the last frame, so equal stacks are equal keys.
    let stack_flags = flags & (STACK_SKIP_MASK | STACK_FLAG_USER);
    // SAFETY: the buffer is the scratch's `stack`, `size_of::<SpareStack>()` bytes of
    // map memory this program owns while it holds the slot.
    let copied = unsafe {
        bpf_get_stack(
            ctx.as_ptr(),
            &mut scratch.stack as *mut SpareStack as *mut core::ffi::c_void,
            core::mem::size_of::<SpareStack>() as u32,
            stack_flags,
        )
    };
    if copied < 0 {
        return Err(copied as i32);
    }
    if copied == 0 {
        return Err(-EFAULT);
    }
    let key: &SpareStack = &scratch.stack;
    // SAFETY: a hash map lookup; the value is a plain u32, read at once.
    if let Some(id) = unsafe { STACKS_SPARE.get(key) } {
        return Ok(*id as i64);
    }
    if scratch.generation != generation {
        scratch.generation = generation;
        scratch.used = 0;
    }
    // SAFETY: a load-time constant, read as such.
    let per_slot = unsafe { core::ptr::read_volatile(&SPARE_IDS_PER_SLOT) };
    // SAFETY: a helper without arguments.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let slot = spare_slot(cpu, level);
    let id = spare_stack_id(slot, scratch.used, per_slot, generation).ok_or(-EEXIST)?;
    scratch.used += 1;
    match STACKS_SPARE.insert(key, id as u32, BPF_NOEXIST as u64) {
        Ok(()) => Ok(id),
        // Another CPU added the same stack meanwhile, or the map is full.
        // SAFETY: as above.
        Err(_) => unsafe { STACKS_SPARE.get(key) }
            .map(|id| *id as i64)
            .ok_or(-EEXIST),
    }
}

/// Loss counters, per CPU, indexed by the slots of `profiler_common::loss` and of each
/// family's `losses`.
#[map]
pub static LOSSES: PerCpuArray<u64> = PerCpuArray::with_max_entries(LOSS_SLOTS, 0);

/// Thread names: tid -> (tgid, comm). Written the first time a thread creates a key,
/// so processes that exit before the end of the run keep their names.
#[map]
pub static TASKS: HashMap<u32, TaskInfo> =
    HashMap::with_max_entries(profiler_common::shared::TASKS_ENTRIES, 0);

/// Programs that hand their context to a family's handler and return 0:
/// `KIND NAME(CONTEXT) => HANDLER;`, KIND being aya's program macro.
#[macro_export]
macro_rules! programs {
    ($($(#[$doc:meta])* $kind:ident $program:ident($context:ty) => $handler:expr;)*) => {
        $(
            $(#[$doc])*
            #[aya_ebpf::macros::$kind]
            pub fn $program(ctx: $context) -> u32 {
                ($handler)(&ctx);
                0
            }
        )*
    };
}

/// Declares the program `NAME` on a classic tracepoint (ELF section `"tracepoint/CAT/EVENT"`;
/// the record's fields at offsets from the format file) that hands its context to
/// `HANDLER` and returns 1. aya's `#[tracepoint]` returns 0, and a classic tracepoint
/// program that returns 0 drops the event for perf and every other tracer of it.
#[macro_export]
macro_rules! classic_tracepoint {
    ($(#[$doc:meta])* $program:ident, $section:literal, $handler:expr) => {
        $(#[$doc])*
        #[unsafe(no_mangle)]
        #[unsafe(link_section = $section)]
        pub extern "C" fn $program(ctx: *mut core::ffi::c_void) -> u32 {
            ($handler)(&aya_ebpf::programs::TracePointContext::new(ctx));
            1
        }
    };
}

/// `BPF_F_FAST_STACK_CMP`: compare stacks by hash only; a collision is -EEXIST, and
/// the stack goes to the spare stacks (counted as a loss when it cannot).
pub const STACK_FLAGS_KERNEL: u64 = 1 << 9;
/// `BPF_F_USER_STACK | BPF_F_FAST_STACK_CMP`: the user-space stack of the current task.
pub const STACK_FLAGS_USER: u64 = STACK_FLAG_USER | (1 << 9);
/// `BPF_F_USER_STACK`.
const STACK_FLAG_USER: u64 = 1 << 8;
/// `BPF_F_SKIP_FIELD_MASK`: the frames to skip, in a stack walk's flags.
const STACK_SKIP_MASK: u64 = 0xff;

/// Adds `value` to `*target` atomically without reading the result back: a plain
/// `BPF_XADD`, which every kernel lockpath supports. An atomic whose result is read, or
/// an atomic add of a constant 0 (the compiler turns it into an atomic or), needs Linux
/// 5.12; the host test `atomics_load_on_every_kernel` finds them in the object.
///
/// # Safety
/// `target` points into a map value that stays valid for this program run.
#[inline(always)]
pub unsafe fn atomic_add<T: Copy>(target: *mut T, value: T) {
    // SAFETY: the caller's contract.
    unsafe {
        atomic_xadd::<T, T, { AtomicOrdering::Relaxed }>(target, value);
    }
}

#[inline(always)]
pub fn count_loss(slot: u32) {
    if let Some(counter) = LOSSES.get_ptr_mut(slot) {
        // SAFETY: the pointer comes from a successful per-CPU array lookup; programs do
        // not migrate while they run, but one may interrupt another on the same CPU (a
        // tracepoint in an interrupt), so the add is atomic.
        unsafe { atomic_add(counter, 1) };
    }
}

/// Turns a `bpf_get_stackid` result into a key field, counting failures.
#[inline(always)]
pub fn stack_id_or_loss(result: Result<i64, i32>) -> i32 {
    match result {
        Ok(id) => id as i32,
        Err(errno) => {
            // -EEXIST: hash collision with BPF_F_FAST_STACK_CMP that the spare stacks
            // could not take; -EBUSY: the spare stacks' scratch was in use.
            let loss = match errno {
                errno if errno == -EEXIST => profiler_common::loss::STACK_COLLISION,
                errno if errno == -EBUSY => profiler_common::loss::STACK_SPARE_BUSY,
                _ => profiler_common::loss::STACK_FAILED,
            };
            count_loss(loss);
            errno
        }
    }
}

/// Turns a user-stack `bpf_get_stackid` result into a key field. Kernel threads have
/// no user stack: a failure is not a loss, only a collision is (counted by
/// `stack_id_or_loss`'s rule).
#[inline(always)]
pub fn user_stack_id_or_collision(result: Result<i64, i32>) -> i32 {
    match result {
        Ok(id) => id as i32,
        Err(errno) if errno == -EEXIST || errno == -EBUSY => stack_id_or_loss(Err(errno)),
        Err(errno) => errno,
    }
}

/// Remembers the current thread's name and cgroup. Kept current: a thread that runs
/// `exec` gets a new name (a command lockpath starts is first seen under lockpath's own
/// name), one moved to another cgroup its new cgroup.
#[inline(always)]
pub fn remember_current_task() {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let comm = bpf_get_current_comm().unwrap_or([0u8; 16]);
    // SAFETY: helper without arguments.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    if let Some(known) = TASKS.get_ptr_mut(tid) {
        // SAFETY: element of a hash map from a successful lookup; only this thread
        // writes its own entry.
        unsafe {
            if (*known).comm != comm {
                (*known).comm = comm;
                (*known).tgid = (pid_tgid >> 32) as u32;
            }
            if (*known).cgroup_id != cgroup_id {
                (*known).cgroup_id = cgroup_id;
            }
        }
        return;
    }
    let info = TaskInfo {
        tgid: (pid_tgid >> 32) as u32,
        _pad: 0,
        comm,
        cgroup_id,
    };
    if TASKS.insert(tid, info, 0).is_err() {
        count_loss(TASK_MAP_FULL);
    }
}

/// Remembers the current thread's process under its leader's name `leader_comm` when the
/// current thread is not the leader and the leader was not seen (an io_uring worker,
/// `iou-wrk-N`, does the process's IO, and the process may end before it is listed).
#[inline(always)]
pub fn remember_leader(leader_comm: [u8; 16]) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    if pid_tgid as u32 == tgid || TASKS.get_ptr(tgid).is_some() {
        return;
    }
    let info = TaskInfo {
        tgid,
        _pad: 0,
        comm: leader_comm,
        // SAFETY: helper without arguments.
        cgroup_id: unsafe { bpf_get_current_cgroup_id() },
    };
    if TASKS.insert(tgid, info, 0).is_err() {
        count_loss(TASK_MAP_FULL);
    }
}

/// Reads a load-time global (set by user space with `EbpfLoader::override_global`).
#[inline(always)]
pub fn load_u32(global: &u32) -> u32 {
    // SAFETY: reading a load-time global; volatile so the compiler does not fold the
    // default value into the program (user space rewrites it before load).
    unsafe { core::ptr::read_volatile(global) }
}

#[inline(always)]
pub fn load_u64(global: &u64) -> u64 {
    // SAFETY: as in `load_u32`.
    unsafe { core::ptr::read_volatile(global) }
}

#[inline(always)]
pub fn now_ns() -> u64 {
    // SAFETY: helper without arguments.
    unsafe { aya_ebpf::helpers::generated::bpf_ktime_get_ns() }
}

/// Processes whose user stacks were recorded: tgid -> 1. The first time a process is
/// seen, its tgid goes to `NEW_PROCESSES` so user space snapshots its memory map while
/// it lives (it may exit before the end of the run). An exec empties its entry: the
/// process then has a new map.
#[map]
pub static PROCESSES_SEEN: HashMap<u32, u8> =
    HashMap::with_max_entries(profiler_common::shared::PROCESSES_SEEN_ENTRIES, 0);

/// Process ids whose memory map user space should snapshot now.
#[map]
pub static NEW_PROCESSES: RingBuf =
    RingBuf::with_byte_size(profiler_common::shared::NEW_PROCESSES_BYTES, 0);

/// Tells user space about a process with user stacks the first time it is seen, so
/// its user addresses can be symbolized even after it exits. Every family that records
/// user stacks calls this.
#[inline(always)]
pub fn note_user_process(tgid: u32) {
    // SAFETY: lookup in a map of plain data; the reference is not kept.
    if unsafe { PROCESSES_SEEN.get(tgid) }.is_some() {
        return;
    }
    match PROCESSES_SEEN.insert(tgid, 1, BPF_NOEXIST as u64) {
        Ok(()) => {
            if NEW_PROCESSES.output::<u32>(&tgid, 0).is_err() {
                count_loss(PROCESS_NOTE_LOST);
            }
        }
        // Another CPU noted it in between.
        Err(-17) => {}
        Err(_) => count_loss(PROCESS_SEEN_MAP_FULL),
    }
}

crate::classic_tracepoint!(
    /// `sched:sched_process_exec`, in the task that exec'd: its memory map is new, so the
    /// next user stack notes the process again.
    processes_exec,
    "tracepoint/sched/sched_process_exec",
    on_exec
);

#[inline(always)]
fn on_exec(_ctx: &aya_ebpf::programs::TracePointContext) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let _ = PROCESSES_SEEN.remove(tgid);
    // A thread named before the exec (lockpath's own child waiting to exec the command)
    // takes its new name now, even if it records nothing after the exec.
    let tid = pid_tgid as u32;
    // SAFETY: lookup in a map of plain data; the reference is not kept.
    if unsafe { TASKS.get(tid) }.is_some() {
        remember_current_task();
    }
}

/// Offsets in `task:task_rename`'s record, from its format file: the renamed thread's id
/// (0: the record has none, the current thread is the one renamed) and its new name.
#[unsafe(no_mangle)]
static TASK_RENAME_PID_OFFSET: u32 = 8;
#[unsafe(no_mangle)]
static TASK_RENAME_NEWCOMM_OFFSET: u32 = 28;

crate::classic_tracepoint!(
    /// `task:task_rename`: a thread renamed (`prctl(PR_SET_NAME)`, a write to its
    /// `comm`, an exec). A thread already named takes its new name: the programs that
    /// name a thread once (the lock begin) would otherwise keep its first one.
    tasks_rename,
    "tracepoint/task/task_rename",
    on_rename
);

#[inline(always)]
fn on_rename(ctx: &aya_ebpf::programs::TracePointContext) {
    let tid = match load_u32(&TASK_RENAME_PID_OFFSET) {
        0 => bpf_get_current_pid_tgid() as u32,
        // SAFETY: an offset from this kernel's format file; the read is checked.
        offset => match unsafe { ctx.read_at::<i32>(offset as usize) } {
            Ok(pid) => pid as u32,
            Err(_) => return,
        },
    };
    let Some(known) = TASKS.get_ptr_mut(tid) else {
        return;
    };
    // SAFETY: as above, for the 16-byte name.
    let Ok(comm) =
        (unsafe { ctx.read_at::<[u8; 16]>(load_u32(&TASK_RENAME_NEWCOMM_OFFSET) as usize) })
    else {
        return;
    };
    // SAFETY: element of a hash map from a successful lookup; a plain struct.
    unsafe { (*known).comm = comm };
}

/// How many times tasks moved to another cgroup (`cgroup:cgroup_attach_task`) while
/// recorded. The programs that name a thread once (the lock begin) name it again when
/// this changed, so that a thread keeps no cgroup it left.
#[map]
pub static TASKS_MOVED: Array<u32> = Array::with_max_entries(1, 0);

crate::classic_tracepoint!(
    /// `cgroup:cgroup_attach_task`: a task, or a process with all its threads, moved to
    /// another cgroup. The event names one task, so every named thread is named again.
    tasks_cgroup_move,
    "tracepoint/cgroup/cgroup_attach_task",
    on_cgroup_move
);

#[inline(always)]
fn on_cgroup_move(_ctx: &aya_ebpf::programs::TracePointContext) {
    if let Some(moves) = TASKS_MOVED.get_ptr_mut(0) {
        // SAFETY: element of an array map from a successful lookup; two moves at once
        // may count as one, which still changes the count.
        unsafe {
            core::ptr::write_volatile(moves, core::ptr::read_volatile(moves).wrapping_add(1))
        };
    }
}

/// The count of cgroup moves (`TASKS_MOVED`).
#[inline(always)]
pub fn tasks_moved() -> u32 {
    // SAFETY: element of an array map from a successful lookup, read once.
    TASKS_MOVED
        .get_ptr(0)
        .map_or(0, |moves| unsafe { core::ptr::read_volatile(moves) })
}

/// `-EEXIST`: from a map insert with `BPF_NOEXIST`, or a stack hash collision.
pub const EEXIST: i32 = 17;
/// `-EFAULT`: a stack walk that found no stack (a kernel thread has no user stack).
pub const EFAULT: i32 = 14;
/// `-EBUSY`: every spare stack scratch slot of the CPU is in use (see `stack_id`).
pub const EBUSY: i32 = 16;

/// The aggregate user space reads for one family, keyed by `K`. Size set at load time
/// (`--map-entries`).
pub const fn stats_map<K, V>() -> HashMap<K, V> {
    HashMap::with_max_entries(profiler_common::STATS_ENTRIES, 0)
}

/// A row of an aggregate that starts as its first sample and adds the next ones in
/// place (`S` is what one event adds).
pub trait Aggregate<S> {
    /// The row of a key seen for the first time.
    fn first(sample: &S) -> Self;

    /// Adds `sample` to the row: atomically where several CPUs may share the key.
    ///
    /// # Safety
    /// `row` points into a map value that stays valid for this program run.
    unsafe fn add(row: *mut Self, sample: &S);
}

/// Adds one wait of `ns` to a row's count, total and maximum: count and total
/// atomically (several CPUs may share a row), the maximum best effort like perf's.
///
/// # Safety
/// The pointers point into a map value that stays valid for this program run.
#[inline(always)]
pub unsafe fn add_count_total_max(count: *mut u64, total_ns: *mut u64, max_ns: *mut u64, ns: u64) {
    // SAFETY: the caller's contract.
    unsafe {
        atomic_add(count, 1);
        atomic_add(total_ns, ns);
        if ns > *max_ns {
            *max_ns = ns;
        }
    }
}

/// Adds `sample` under `key`: in place when the row exists, else inserts the first
/// value (when another CPU inserted the key in between, adds to its row). A full map
/// is counted in `loss_slot`, and false returned. `remember` names the current thread
/// when its row is new.
#[inline(always)]
pub fn add_to_row<K, V: Aggregate<S>, S>(
    map: &HashMap<K, V>,
    key: &K,
    sample: &S,
    loss_slot: u32,
    remember: bool,
) -> bool {
    if let Some(row) = map.get_ptr_mut(key) {
        // SAFETY: from a successful lookup; valid for this program run.
        unsafe { V::add(row, sample) };
        return true;
    }
    match map.insert(key, V::first(sample), BPF_NOEXIST as u64) {
        Ok(()) => {
            if remember {
                remember_current_task();
            }
        }
        // Another CPU inserted the same key in between.
        Err(errno) if errno == -EEXIST => {
            if let Some(row) = map.get_ptr_mut(key) {
                // SAFETY: as above.
                unsafe { V::add(row, sample) };
            }
        }
        Err(_) => {
            count_loss(loss_slot);
            return false;
        }
    }
    true
}

/// `add_to_row` into a family's aggregation map, and when that is full, into its
/// overflow map under `overflow(key)` (the key without its stacks): a full map then
/// loses detail, not events, and totals and shares stay right. Each full map is
/// counted in its loss slot (`loss_slots`: the aggregation map's, the overflow map's).
/// Returns whether the sample went to the aggregation map.
#[inline(always)]
pub fn add_to_row_or_overflow<K, V: Aggregate<S>, S>(
    maps: (&HashMap<K, V>, &HashMap<K, V>),
    key: &K,
    overflow: impl FnOnce(&K) -> K,
    sample: &S,
    loss_slots: (u32, u32),
    remember: bool,
) -> bool {
    if add_to_row(maps.0, key, sample, loss_slots.0, remember) {
        return true;
    }
    add_to_row(maps.1, &overflow(key), sample, loss_slots.1, remember);
    false
}

/// A family's overflow map (see `add_to_row_or_overflow`); preallocated, as maps of
/// programs that run in NMI context (perf events) must be.
pub const fn overflow_map<K, V>() -> HashMap<K, V> {
    HashMap::with_max_entries(profiler_common::shared::OVERFLOW_ENTRIES, 0)
}

/// Runs `add` on the row of `key` in a family's aggregation map, inserted from
/// `empties.0` when missing (a row another CPU inserted in between is used), for values
/// too large to build on the BPF stack; when that map is full, on the row of
/// `overflow(key)` in its overflow map, inserted from `empties.1` (which may leave out
/// detail the overflow key drops), as `add_to_row_or_overflow` does. Each full map is
/// counted in its loss slot. `remember` names the current thread when its row is new.
#[inline(always)]
pub fn update_row_or_overflow<K, V>(
    maps: (&HashMap<K, V>, &HashMap<K, V>),
    key: &K,
    overflow: impl FnOnce(&K) -> K,
    empties: (&V, &V),
    loss_slots: (u32, u32),
    remember: bool,
    add: impl FnOnce(*mut V),
) {
    let row = match row_of(maps.0, key, empties.0, loss_slots.0, remember) {
        Some(row) => row,
        None => match row_of(maps.1, &overflow(key), empties.1, loss_slots.1, remember) {
            Some(row) => row,
            None => return,
        },
    };
    add(row);
}

/// The row of `key`, inserted from `empty` when missing; None (counted in `loss_slot`)
/// when the map is full.
#[inline(always)]
fn row_of<K, V>(
    map: &HashMap<K, V>,
    key: &K,
    empty: &V,
    loss_slot: u32,
    remember: bool,
) -> Option<*mut V> {
    if let Some(row) = map.get_ptr_mut(key) {
        return Some(row);
    }
    match map.insert(key, empty, BPF_NOEXIST as u64) {
        Ok(()) => {
            if remember {
                remember_current_task();
            }
        }
        // Another CPU inserted the same key in between: use its row.
        Err(errno) if errno == -EEXIST => {}
        Err(_) => {
            count_loss(loss_slot);
            return None;
        }
    }
    let row = map.get_ptr_mut(key);
    if row.is_none() {
        count_loss(loss_slot);
    }
    row
}

/// An open entry that nests (recursive calls, recursive read acquisitions): only the
/// outermost level is timed.
pub trait Nested: Copy {
    /// Where the entry counts its inner levels.
    ///
    /// # Safety
    /// `entry` points into a map value valid for this program run.
    unsafe fn depth(entry: *mut Self) -> *mut u32;
}

/// Entries whose `depth` field counts their inner levels.
macro_rules! nested_by_depth_field {
    ($($entry:ty),*) => {
        $(
            impl Nested for $entry {
                #[inline(always)]
                unsafe fn depth(entry: *mut Self) -> *mut u32 {
                    // SAFETY: `entry` points into a live map value (the caller's contract).
                    unsafe { &raw mut (*entry).depth }
                }
            }
        )*
    };
}

nested_by_depth_field!(
    profiler_common::func::FuncEntry,
    profiler_common::hold::HoldOpen
);

/// Closes one level of the current thread's open entry under `key`: `None` while inner
/// levels remain open (or when nothing is open), else the outermost entry, removed.
#[inline(always)]
pub fn close_nested<K, V: Nested>(map: &HashMap<K, V>, key: &K) -> Option<V> {
    let open = map.get_ptr_mut(key)?;
    // SAFETY: element of a map from a successful lookup, owned by this thread (the key
    // holds its id); only this thread writes it.
    let entry = unsafe {
        let depth = V::depth(open);
        if *depth > 0 {
            *depth -= 1;
            return None;
        }
        *open
    };
    let _ = map.remove(key);
    Some(entry)
}
