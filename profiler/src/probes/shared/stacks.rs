//! Stack resolution: stack ids from the kernel into symbolized, interned profile
//! stacks, without the tracing machinery's own frames.

use std::collections::HashMap as StdHashMap;

use anyhow::{Context, Result};
use aya::maps::{Array, HashMap as BpfHashMap, MapData, StackTraceMap};
use profiler_common::{
    offcpu::SCANNED_STACK_BASE,
    shared::{is_spare, names, stack_index, stack_tag, SpareStack, SPARE_STACK_DEPTH, STACK_TAGS},
};

use super::MapSet;
use crate::{
    profile::{Frame, StackInterner},
    symbolize::{stackcheck, user::reaches_root, KernelSymbols, UserSymbols},
};

/// Deepest stack the kernel walks (`PERF_MAX_STACK_DEPTH`); a stack this deep was cut.
const MAX_STACK_DEPTH: usize = 127;

/// Turns stack ids from the kernel into symbolized, interned profile stacks.
pub struct StackResolver {
    /// The stacks of even and odd generations (`STACKS`, `STACKS_ODD`).
    stack_maps: [StackTraceMap<MapData>; 2],
    spare: SpareStacks,
    generations: Generations,
    kernel: KernelSymbols,
    kernel_cache: StdHashMap<i32, Option<u32>>,
    /// User symbols; `record` hands over the one that snapshotted processes during the run.
    pub user: UserSymbols,
    /// Stack ids are shared by processes with identical frames: cache per process.
    user_cache: StdHashMap<(u32, i32), Option<u32>>,
    pub interner: StackInterner,
    /// Stacks read from `/proc` for waits that began before the recording, under ids
    /// from `SCANNED_STACK_BASE` up (the programs carry these ids like their own).
    scanned: StdHashMap<i32, Scanned>,
}

/// The stack generation in progress and the stacks of finished generations whose map
/// was reused.
struct Generations {
    /// `STACK_GENERATION`, read by the programs at each stack walk.
    current: Array<MapData, u32>,
    generation: u32,
    /// Addresses by stack id, and the last generation in which a row asked for them.
    retired: StdHashMap<i32, (Vec<u64>, u32)>,
}

impl Generations {
    fn retire(&mut self, generation: u32, index: u32, addrs: Vec<u64>) {
        let id = profiler_common::shared::tagged_stack_id(index as i64, generation) as i32;
        self.retire_id(id, generation, addrs);
    }

    fn retire_id(&mut self, id: i32, generation: u32, addrs: Vec<u64>) {
        self.retired.insert(id, (addrs, generation + 2));
    }

    fn retired_stack(&mut self, stack_id: i32) -> Option<Vec<u64>> {
        let generation = self.generation;
        self.retired.get_mut(&stack_id).map(|(addrs, used)| {
            *used = generation;
            addrs.clone()
        })
    }

    /// Drops the copies no row asked for in the last two generations, and those whose
    /// tag the new generation takes over. (A wait in progress for `STACK_TAGS` periods
    /// outlives its tag: its id then names the new generation's stack at its index.)
    fn forget_unused(&mut self, generation: u32) {
        let tag = generation % STACK_TAGS;
        self.retired
            .retain(|&id, (_, used)| used.saturating_add(2) >= generation && stack_tag(id) != tag);
    }
}

/// The stacks the programs kept in `STACKS_SPARE` (their stack map's hash bucket was
/// taken by another stack), read when a row first names one.
struct SpareStacks {
    map: BpfHashMap<MapData, SpareStack, u32>,
    /// Addresses by stack id, as last read from the map.
    read: StdHashMap<i32, Vec<u64>>,
}

impl SpareStacks {
    /// The addresses of a spare stack, reading the map again when the id is new.
    fn addresses(&mut self, stack_id: i32) -> Option<Vec<u64>> {
        if !self.read.contains_key(&stack_id) {
            for (stack, id) in self.map.iter().filter_map(|entry| entry.ok()) {
                self.read.insert(id as i32, spare_addresses(&stack));
            }
        }
        self.read.get(&stack_id).cloned()
    }

    /// Removes the spare stacks of the generation with tag `tag` from the map (so that
    /// the programs add them again, under ids of the new generation), returning them.
    fn take_generation(&mut self, tag: u32) -> Result<Vec<(i32, Vec<u64>)>> {
        let taken: Vec<(SpareStack, i32)> = self
            .map
            .iter()
            .filter_map(|entry| entry.ok())
            .map(|(stack, id)| (stack, id as i32))
            .filter(|&(_, id)| stack_tag(id) == tag)
            .collect();
        let mut stacks = Vec::with_capacity(taken.len());
        for (stack, id) in taken {
            self.map.remove(&stack).with_context(|| {
                format!("cannot empty the spare stacks for the next period (stack {id})")
            })?;
            self.read.remove(&id);
            stacks.push((id, spare_addresses(&stack)));
        }
        Ok(stacks)
    }
}

/// A spare stack's addresses: its frames up to the first zero.
fn spare_addresses(stack: &SpareStack) -> Vec<u64> {
    stack
        .frames
        .iter()
        .take_while(|&&addr| addr != 0)
        .copied()
        .collect()
}

/// Whether a stack walked under `stack_id` with `len` frames may have been cut by the
/// depth its map keeps.
fn at_depth_limit(stack_id: i32, len: usize) -> bool {
    match is_spare(stack_id) {
        true => len >= SPARE_STACK_DEPTH,
        false => len >= MAX_STACK_DEPTH,
    }
}

/// A stack read by user space rather than by the kernel's stack walker.
enum Scanned {
    /// Kernel frames as `/proc/TID/stack` names them, leaf first.
    Kernel(Vec<Frame>),
    /// User addresses, leaf first, and whether the unwind reached the outermost frame.
    User { addrs: Vec<u64>, complete: bool },
}

impl StackResolver {
    pub fn new(maps: &mut MapSet, kernel: KernelSymbols) -> Result<Self> {
        let even = StackTraceMap::try_from(maps.take(names::STACKS)?)
            .context("STACKS has an unexpected type")?;
        let odd = StackTraceMap::try_from(maps.take(names::STACKS_ODD)?)
            .context("STACKS_ODD has an unexpected type")?;
        let current = Array::try_from(maps.take(names::STACK_GENERATION)?)
            .context("STACK_GENERATION has an unexpected type")?;
        let spare = BpfHashMap::try_from(maps.take(names::STACKS_SPARE)?)
            .context("STACKS_SPARE has an unexpected type")?;
        Ok(StackResolver {
            stack_maps: [even, odd],
            spare: SpareStacks {
                map: spare,
                read: StdHashMap::new(),
            },
            generations: Generations {
                current,
                generation: 0,
                retired: StdHashMap::new(),
            },
            kernel,
            kernel_cache: StdHashMap::new(),
            user: UserSymbols::new(),
            user_cache: StdHashMap::new(),
            interner: StackInterner::default(),
            scanned: StdHashMap::new(),
        })
    }

    /// Keeps kernel frames read from `/proc`; returns the stack id that names them.
    pub fn add_scanned_kernel(&mut self, frames: Vec<Frame>) -> i32 {
        self.add_scanned(Scanned::Kernel(frames))
    }

    /// Keeps user addresses unwound from a blocked thread's registers and stack;
    /// returns the stack id that names them.
    pub fn add_scanned_user(&mut self, addrs: Vec<u64>, complete: bool) -> i32 {
        self.add_scanned(Scanned::User { addrs, complete })
    }

    fn add_scanned(&mut self, stack: Scanned) -> i32 {
        let id = SCANNED_STACK_BASE + self.scanned.len() as i32;
        self.scanned.insert(id, stack);
        id
    }

    /// Whether a stack id names a stack read from `/proc` (a wait found in progress).
    pub fn is_scanned(&self, stack_id: i32) -> bool {
        self.scanned.contains_key(&stack_id)
    }

    /// The profile stack for a kernel stack id; `None` when the id is an error (lost).
    pub fn kernel_stack(&mut self, stack_id: i32) -> Option<u32> {
        if stack_id < 0 {
            return None;
        }
        if let Some(&cached) = self.kernel_cache.get(&stack_id) {
            return cached;
        }
        if let Some(Scanned::Kernel(frames)) = self.scanned.get(&stack_id) {
            let resolved = Some(self.interner.stack(frames.clone(), false));
            self.kernel_cache.insert(stack_id, resolved);
            return resolved;
        }
        let resolved = self.addresses(stack_id).map(|addrs| {
            let mut frames: Vec<Frame> =
                addrs.iter().map(|&addr| self.kernel.frame(addr)).collect();
            strip_tracing_frames(&mut frames);
            let truncated = at_depth_limit(stack_id, addrs.len());
            self.interner.stack(frames, truncated)
        });
        self.kernel_cache.insert(stack_id, resolved);
        resolved
    }

    /// The profile stack for a user stack id of process `tgid` (frames `kernel: false`,
    /// module = object path); `None` when the id is an error (lost, or a kernel thread).
    /// A stack that does not reach the program's or thread's entry point is marked
    /// truncated (a function without frame pointers, or the depth limit).
    pub fn user_stack(&mut self, tgid: u32, stack_id: i32) -> Option<u32> {
        if stack_id < 0 {
            return None;
        }
        if let Some(&cached) = self.user_cache.get(&(tgid, stack_id)) {
            return cached;
        }
        if let Some(Scanned::User { addrs, complete }) = self.scanned.get(&stack_id) {
            let (addrs, stopped) = (addrs.clone(), !*complete);
            let resolved = Some(self.user_addrs_stack(tgid, &addrs, false, stopped));
            self.user_cache.insert((tgid, stack_id), resolved);
            return resolved;
        }
        let resolved = self.addresses(stack_id).map(|addrs| {
            let at_limit = at_depth_limit(stack_id, addrs.len());
            self.user_addrs_stack(tgid, &addrs, at_limit, false)
        });
        self.user_cache.insert((tgid, stack_id), resolved);
        resolved
    }

    /// The profile stack for user addresses of process `tgid` (leaf first) from any
    /// unwinder: a walk that left the process's code or looped is cut at its last good
    /// frame and ends in `[unwind stopped]` (see symbolize::stackcheck); one that does
    /// not reach an entry point is truncated (`at_limit`: the walk hit its depth limit),
    /// or ends in `[unwind stopped]` when the unwinder says it `stopped` early.
    pub fn user_addrs_stack(
        &mut self,
        tgid: u32,
        addrs: &[u64],
        at_limit: bool,
        stopped: bool,
    ) -> u32 {
        let mut frames = self.user.frames(tgid, addrs);
        let user = &self.user;
        let in_code = |addr: u64| user.in_code(tgid, addr);
        let check: Option<&dyn Fn(u64) -> bool> = match user.knows(tgid) {
            true => Some(&in_code),
            false => None,
        };
        if let Some(good) = stackcheck::good_prefix(addrs, check) {
            frames.truncate(good);
            frames.push(stackcheck::unwind_stopped_frame());
            return self.interner.stack(frames, false);
        }
        let complete = reaches_root(&frames);
        if stopped && !complete {
            frames.push(stackcheck::unwind_stopped_frame());
            return self.interner.stack(frames, false);
        }
        self.interner.stack(frames, at_limit || !complete)
    }

    /// Whether an interned user stack is whole: it reaches an entry point, neither cut
    /// nor truncated.
    pub fn user_stack_complete(&self, stack: u32) -> bool {
        let Some(interned) = self.interner.stacks.get(stack as usize) else {
            return false;
        };
        let stopped = interned
            .frames
            .last()
            .and_then(|&frame| self.interner.frames.get(frame as usize))
            .is_some_and(|frame| frame.name == stackcheck::UNWIND_STOPPED);
        !interned.truncated && !stopped && !interned.frames.is_empty()
    }

    /// The addresses (leaf first) of the stack a program walked under `stack_id`: from
    /// the map of its generation (or the spare stacks) while the generation or the one after it is in
    /// progress, later from the copy kept when that map was emptied for reuse. `None`
    /// when the stack is gone (never another stack under the same id).
    fn addresses(&mut self, stack_id: i32) -> Option<Vec<u64>> {
        let tag = stack_tag(stack_id);
        let generation = self.generations.generation;
        let live = [Some(generation), generation.checked_sub(1)]
            .into_iter()
            .flatten()
            .find(|live| live % STACK_TAGS == tag);
        match live {
            Some(_) if is_spare(stack_id) => self.spare.addresses(stack_id),
            Some(live) => self.stack_maps[(live & 1) as usize]
                .get(&stack_index(stack_id), 0)
                .ok()
                .map(|trace| trace.frames().iter().map(|frame| frame.ip).collect()),
            None => self.generations.retired_stack(stack_id),
        }
    }

    /// Starts the next stack generation (`record --rotate`, at each period boundary):
    /// the map the programs walk into flips, after the map being reused (the one of the
    /// generation before last) was copied and emptied. Stacks of the finished
    /// generations stay resolvable: the previous one from its map until the next flip,
    /// the one before from the copy, kept as long as a row asks for it at least every
    /// other period (a wait in progress reported period after period).
    pub fn next_generation(&mut self) -> Result<()> {
        let next = self.generations.generation + 1;
        let reused = &mut self.stack_maps[(next & 1) as usize];
        if next >= 2 {
            let ids: Vec<u32> = reused.stack_ids().filter_map(|id| id.ok()).collect();
            for index in ids {
                if let Ok(trace) = reused.get(&index, 0) {
                    let addrs = trace.frames().iter().map(|frame| frame.ip).collect();
                    self.generations.retire(next - 2, index, addrs);
                }
                // A stack that cannot be removed would stand under its id for a later
                // stack of another generation: the map is then not reused.
                reused.remove(&index).with_context(|| {
                    format!("cannot empty the stack map for the next period (stack {index})")
                })?;
            }
            for (id, addrs) in self.spare.take_generation((next - 2) % STACK_TAGS)? {
                self.generations.retire_id(id, next - 2, addrs);
            }
        }
        self.generations
            .current
            .set(0, next, 0)
            .context("cannot start the next stack generation")?;
        self.generations.generation = next;
        self.generations.forget_unused(next);
        Ok(())
    }

    /// Hands over the stacks interned so far and starts afresh (`record --rotate`: each
    /// period's profile has its own stack table; the symbols stay cached).
    pub fn take_period(&mut self) -> crate::profile::StackInterner {
        self.kernel_cache.clear();
        self.user_cache.clear();
        std::mem::take(&mut self.interner)
    }

    /// Whether a lock at `lock_addr` is a static object of the kernel image (named by
    /// kallsyms or not).
    pub fn is_static(&self, lock_addr: u64) -> bool {
        self.kernel.in_image_data(lock_addr)
    }

    /// Static locks by symbol, the rest by address. With `NO_KALLSYMS_LOCK_NAMES` set,
    /// no lock is named by symbol: the names a kernel without data symbols gets.
    pub fn lock_name(&self, lock_addr: u64) -> String {
        let symbol = match lock_names_without_kallsyms() {
            true => None,
            false => self.kernel.data_name(lock_addr),
        };
        symbol.unwrap_or_else(|| format!("0x{lock_addr:x}"))
    }
}

/// Set (to anything but `0`) in the environment of `lockpath record`, lock names
/// come from everything but kallsyms data symbols: static locks are named after the
/// function that takes them (`static@FUNCTION`), as on a kernel built without
/// `CONFIG_KALLSYMS_ALL`. For checking those names against kallsyms on a kernel that
/// has data symbols (the lab's `lock-names-kallsyms` check); not an option for users.
pub const NO_KALLSYMS_LOCK_NAMES: &str = "LOCKPATH_NO_KALLSYMS_LOCK_NAMES";

fn lock_names_without_kallsyms() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| std::env::var_os(NO_KALLSYMS_LOCK_NAMES).is_some_and(|value| value != "0"))
}

/// The tracing machinery between the traced kernel code and the BPF program: always
/// tracing frames, whatever comes before them.
fn is_tracing_machinery(name: &str) -> bool {
    name.starts_with("bpf_trace_run")
        || name.starts_with("__bpf_trace_")
        || name.starts_with("__traceiter_")
        || name.starts_with("bpf_prog_")
        || name.starts_with("__bpf_prog_run")
        || name == "trace_call_bpf"
        || name == "perf_trace_run_bpf_submit"
}

/// How far into a stack (leaf first) the tracing machinery can reach.
const TRACING_DEPTH: usize = 8;

/// Removes the leaf frames of the tracing machinery (the BPF program, `bpf_trace_run2`,
/// `__traceiter_*`, and for classic tracepoints `perf_trace_run_bpf_submit` and the
/// event's `perf_trace_<class>` handler) so a stack starts at the traced kernel
/// function. Only an unbroken run from the leaf, within the first frames, is removed:
/// real functions with a tracing-like name (`perf_trace_destroy`, `perf_trace_init`)
/// deeper in the stack stay, and a `perf_trace_*` frame counts only right above
/// `perf_trace_run_bpf_submit`, which it called.
pub fn strip_tracing_frames(frames: &mut Vec<Frame>) {
    let mut cut = 0;
    let mut previous = "";
    for (index, frame) in frames.iter().enumerate().take(TRACING_DEPTH) {
        let name = frame.name.as_str();
        let event_handler =
            previous == "perf_trace_run_bpf_submit" && name.starts_with("perf_trace_");
        if is_tracing_machinery(name) || event_handler {
            cut = index + 1;
        } else if !(cut == 0 && name.starts_with("0x")) {
            // An unsymbolized leaf (a BPF program without a symbol) may precede the
            // machinery; anything else ends it.
            break;
        }
        previous = name;
    }
    frames.drain(..cut);
    strip_trampolines(frames);
    // What is left unsymbolized at the leaf is BPF code (a trampoline image, a program)
    // that was not in kallsyms when it was read: not part of the traced kernel path.
    let jit = frames
        .iter()
        .take_while(|frame| frame.kernel && frame.name.starts_with("0x"))
        .count();
    if jit < frames.len() {
        frames.drain(..jit);
    }
}

/// fentry/fexit trampolines (`--hold`, `--func`) sit between a traced function and its
/// caller: `ftrace_trampoline` and the BPF trampoline image, which has no symbol. They
/// are not the caller; the frames on both sides are kept.
fn strip_trampolines(frames: &mut Vec<Frame>) {
    let is_trampoline = |frame: &Frame| {
        frame.name == "ftrace_trampoline" || frame.name.starts_with("bpf_trampoline_")
    };
    if !frames.iter().any(is_trampoline) {
        return;
    }
    let unsymbolized = |frame: &Frame| frame.name.starts_with("0x");
    let keep: Vec<bool> = (0..frames.len())
        .map(|index| {
            let frame = &frames[index];
            let next_to_trampoline = frames.get(index + 1).is_some_and(is_trampoline)
                || index
                    .checked_sub(1)
                    .and_then(|previous| frames.get(previous))
                    .is_some_and(is_trampoline);
            !(is_trampoline(frame) || unsymbolized(frame) && next_to_trampoline)
        })
        .collect();
    let mut index = 0;
    frames.retain(|_| {
        index += 1;
        keep[index - 1]
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(names: &[&str]) -> Vec<Frame> {
        names.iter().map(|name| Frame::kernel(name)).collect()
    }

    fn stripped(names: &[&str]) -> Vec<String> {
        let mut stack = frames(names);
        strip_tracing_frames(&mut stack);
        stack.into_iter().map(|frame| frame.name).collect()
    }

    #[test]
    fn fentry_trampolines_are_removed() {
        // A --hold fexit stack, and a waiter's stack through a traced down_write.
        assert_eq!(
            stripped(&[
                "0xffffffffc0034ac5",
                "ftrace_trampoline",
                "down_write",
                "path_openat",
            ]),
            ["down_write", "path_openat"]
        );
        assert_eq!(
            stripped(&[
                "rwsem_down_write_slowpath",
                "down_write",
                "0xffffffffc0034ac5",
                "ftrace_trampoline",
                "path_openat",
            ]),
            ["rwsem_down_write_slowpath", "down_write", "path_openat"]
        );
        // 5.10 names no trampoline: the unsymbolized leaf frames are dropped.
        assert_eq!(
            stripped(&[
                "0xffffffffc0201000",
                "0xffffffffc0201080",
                "mutex_lock",
                "m_start"
            ]),
            ["mutex_lock", "m_start"]
        );
        // An unsymbolized frame away from any trampoline stays.
        assert_eq!(
            stripped(&["do_pipe2", "0xffffffffc0001234", "ksys_read"]),
            ["do_pipe2", "0xffffffffc0001234", "ksys_read"]
        );
    }

    #[test]
    fn raw_tracepoint_machinery_is_removed() {
        assert_eq!(
            stripped(&[
                "bpf_prog_6deef7357e7b4530_lock_begin",
                "bpf_trace_run2",
                "__bpf_trace_contention_begin",
                "queued_spin_lock_slowpath",
                "do_pipe2",
            ]),
            ["queued_spin_lock_slowpath", "do_pipe2"]
        );
    }

    #[test]
    fn classic_tracepoint_handler_is_removed_after_submit() {
        assert_eq!(
            stripped(&[
                "0xffffffffc0a01234",
                "trace_call_bpf",
                "perf_trace_run_bpf_submit",
                "perf_trace_sched_switch",
                "__traceiter_sched_switch",
                "__schedule",
                "schedule",
            ]),
            ["__schedule", "schedule"]
        );
    }

    #[test]
    fn real_functions_with_tracing_names_stay() {
        // perf_trace_destroy is a real kernel function, not the machinery.
        let real = [
            "__schedule",
            "schedule",
            "perf_trace_destroy",
            "_free_event",
            "perf_event_release_kernel",
        ];
        assert_eq!(stripped(&real), real);
        let leaf = ["perf_trace_destroy", "_free_event", "bpf_trace_run2"];
        assert_eq!(stripped(&leaf), leaf, "not at the leaf run");
        // After the machinery, a perf_trace_ frame not called by the submit stays.
        assert_eq!(
            stripped(&["bpf_trace_run1", "perf_trace_destroy", "x"]),
            ["perf_trace_destroy", "x"]
        );
    }
}
