//! What every probe family shares: the stack map, loss counters and thread names.

use std::collections::{BTreeMap, HashMap as StdHashMap};

use anyhow::{Context, Result};
use aya::{
    maps::{HashMap, Map, MapData, PerCpuArray, RingBuf, StackTraceMap},
    programs::TracePoint,
    Ebpf,
};
use profiler_common::{
    loss::{LOSS_NAMES, LOSS_SLOTS},
    shared::names,
    target::TaskInfo,
};

use crate::{
    profile::{Frame, Process, StackInterner, Thread},
    symbolize::{user::reaches_root, KernelSymbols, UserSymbols},
};

/// The kernel maps, taken out of the loaded object so that dropping the object detaches
/// every program and link while the maps stay readable for the drain.
pub struct MapSet {
    maps: StdHashMap<String, Map>,
}

impl MapSet {
    pub fn take_all(ebpf: &mut Ebpf) -> MapSet {
        let names: Vec<String> = ebpf.maps().map(|(name, _)| name.to_string()).collect();
        let maps = names
            .into_iter()
            .filter_map(|name| ebpf.take_map(&name).map(|map| (name, map)))
            .collect();
        MapSet { maps }
    }

    pub fn get(&self, name: &str) -> Result<&Map> {
        self.maps
            .get(name)
            .with_context(|| format!("map {name} missing from the eBPF object"))
    }

    /// A hash map of the set, typed (`K`, `V` as the eBPF side declares them).
    pub fn hash_map<K: aya::Pod, V: aya::Pod>(
        &self,
        name: &str,
    ) -> Result<HashMap<&MapData, K, V>> {
        HashMap::try_from(self.get(name)?).with_context(|| format!("{name} has an unexpected type"))
    }

    pub fn take(&mut self, name: &str) -> Result<Map> {
        self.maps
            .remove(name)
            .with_context(|| format!("map {name} missing from the eBPF object"))
    }
}

/// Deepest stack the kernel walks (`PERF_MAX_STACK_DEPTH`); a stack this deep was cut.
const MAX_STACK_DEPTH: usize = 127;

/// Turns stack ids from the kernel into symbolized, interned profile stacks.
pub struct StackResolver {
    stack_map: StackTraceMap<MapData>,
    kernel: KernelSymbols,
    kernel_cache: StdHashMap<i32, Option<u32>>,
    /// User symbols; `record` hands over the one that snapshotted processes during the run.
    pub user: UserSymbols,
    /// Stack ids are shared by processes with identical frames: cache per process.
    user_cache: StdHashMap<(u32, i32), Option<u32>>,
    pub interner: StackInterner,
}

impl StackResolver {
    pub fn new(maps: &mut MapSet, kernel: KernelSymbols) -> Result<Self> {
        let map = maps.take(names::STACKS)?;
        let stack_map = StackTraceMap::try_from(map).context("STACKS has an unexpected type")?;
        Ok(StackResolver {
            stack_map,
            kernel,
            kernel_cache: StdHashMap::new(),
            user: UserSymbols::new(),
            user_cache: StdHashMap::new(),
            interner: StackInterner::default(),
        })
    }

    /// The profile stack for a kernel stack id; `None` when the id is an error (lost).
    pub fn kernel_stack(&mut self, stack_id: i32) -> Option<u32> {
        if stack_id < 0 {
            return None;
        }
        if let Some(&cached) = self.kernel_cache.get(&stack_id) {
            return cached;
        }
        let resolved = self.stack_map.get(&(stack_id as u32), 0).ok().map(|trace| {
            let mut frames: Vec<Frame> = trace
                .frames()
                .iter()
                .map(|frame| self.kernel.frame(frame.ip))
                .collect();
            strip_tracing_frames(&mut frames);
            let truncated = frames.len() >= MAX_STACK_DEPTH;
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
        let resolved = self.stack_map.get(&(stack_id as u32), 0).ok().map(|trace| {
            let addrs: Vec<u64> = trace.frames().iter().map(|frame| frame.ip).collect();
            let frames = self.user.frames(tgid, &addrs);
            let truncated = addrs.len() >= MAX_STACK_DEPTH || !reaches_root(&frames);
            self.interner.stack(frames, truncated)
        });
        self.user_cache.insert((tgid, stack_id), resolved);
        resolved
    }

    /// Static locks by symbol, the rest by address.
    pub fn lock_name(&self, lock_addr: u64) -> String {
        self.kernel
            .data_name(lock_addr)
            .unwrap_or_else(|| format!("0x{lock_addr:x}"))
    }
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

/// The error of an object the kernel would not load, in one line (a BTF or verifier log
/// goes to a file). Load and attach errors of programs: `load_error`, `explain`.
pub fn object_load_error(err: &str) -> anyhow::Error {
    // A BTF or verifier log can follow the message: first line only, the rest to a file.
    let (first, rest) = err.split_once('\n').unwrap_or((err, ""));
    let err = if rest.trim().is_empty() {
        first.to_string()
    } else {
        log::debug!("eBPF object load error in full:\n{err}");
        let path = std::env::temp_dir().join(format!("lockpath-load-{}.log", std::process::id()));
        match std::fs::write(&path, err) {
            Ok(()) => format!("{} (full log in {})", first.trim(), path.display()),
            Err(_) => format!("{} (RUST_LOG=debug prints the full log)", first.trim()),
        }
    };
    if err.contains("Operation not permitted") || err.contains("EPERM") {
        anyhow::anyhow!("the kernel refused to load lockpath's eBPF programs ({err}): run as root, or with CAP_BPF and CAP_PERFMON")
    } else {
        anyhow::anyhow!("cannot load lockpath's eBPF programs: {err}")
    }
}

/// The error of a program the kernel would not load, in one line. A verifier rejection
/// carries a log of hundreds of lines: it goes to a file (named in the message) and to
/// the debug log (`RUST_LOG=debug`), never into the one-line error.
pub fn load_error(name: &str, err: aya::programs::ProgramError) -> anyhow::Error {
    match err {
        aya::programs::ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            let log = verifier_log.to_string();
            log::debug!("verifier log of {name}:\n{log}");
            let path = std::env::temp_dir().join(format!(
                "lockpath-verifier-{name}-{}.log",
                std::process::id()
            ));
            let saved = std::fs::write(&path, &log).is_ok().then_some(path);
            anyhow::anyhow!(verifier_message(
                name,
                &io_error.to_string(),
                saved.as_deref()
            ))
        }
        other => anyhow::anyhow!(
            "the kernel refused to load {name}: {}",
            one_line(&other.to_string())
        ),
    }
}

fn verifier_message(name: &str, io_error: &str, log: Option<&std::path::Path>) -> String {
    let where_log = match log {
        Some(path) => format!("its log is in {}", path.display()),
        None => "run with RUST_LOG=debug to see its log".into(),
    };
    format!(
        "the kernel's verifier rejected the eBPF program {name} ({}); {where_log}; \
         report it with the output of `uname -r`",
        one_line(io_error)
    )
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Sums the per-CPU loss counters, by name; zero counters are left out.
pub fn drain_losses(maps: &MapSet) -> Result<BTreeMap<String, u64>> {
    let map = maps.get(names::LOSSES)?;
    let losses: PerCpuArray<_, u64> =
        PerCpuArray::try_from(map).context("LOSSES has an unexpected type")?;
    let mut out = BTreeMap::new();
    for slot in 0..LOSS_SLOTS {
        let values = losses
            .get(&slot, 0)
            .with_context(|| format!("cannot read LOSSES[{slot}]"))?;
        let total: u64 = values.iter().sum();
        if total == 0 {
            continue;
        }
        let name = LOSS_NAMES
            .iter()
            .find(|(index, _, _)| *index == slot)
            .map(|(_, name, _)| name.to_string())
            .unwrap_or_else(|| format!("loss_{slot}"));
        out.insert(name, total);
    }
    Ok(out)
}

/// Processes and their threads, from the kernel's thread-name map, completed from
/// /proc for processes still alive. `pids` lists every process some row refers to.
pub fn drain_processes(maps: &MapSet, pids: &[u32]) -> Result<Vec<Process>> {
    let tasks: HashMap<_, u32, TaskInfo> = maps.hash_map(names::TASKS)?;
    let mut by_pid: BTreeMap<u32, Process> = BTreeMap::new();
    for entry in tasks.iter() {
        let (tid, info) = entry.context("cannot read TASKS")?;
        let process = by_pid.entry(info.tgid).or_insert_with(|| Process {
            pid: info.tgid,
            ..Default::default()
        });
        let comm = comm_to_string(&info.comm);
        if tid == info.tgid {
            process.comm = comm.clone();
        }
        process.threads.push(Thread { tid, comm });
    }
    for &pid in pids {
        by_pid.entry(pid).or_insert_with(|| Process {
            pid,
            ..Default::default()
        });
    }
    for process in by_pid.values_mut() {
        if process.comm.is_empty() {
            process.comm = std::fs::read_to_string(format!("/proc/{}/comm", process.pid))
                .map(|comm| comm.trim_end().to_string())
                .ok()
                .or_else(|| process.threads.first().map(|thread| thread.comm.clone()))
                .unwrap_or_else(|| format!("pid {}", process.pid));
        }
        if process.pid == 0 {
            process.comm = "swapper".into();
        }
        process.threads.sort_by_key(|thread| thread.tid);
    }
    Ok(by_pid.into_values().collect())
}

pub fn comm_to_string(comm: &[u8]) -> String {
    let end = comm
        .iter()
        .position(|&byte| byte == 0)
        .unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

/// The profile's form of an in-kernel latency aggregate (trailing empty buckets cut).
pub fn latency_from(stat: &profiler_common::latency::LatencyStat) -> crate::profile::Latency {
    let used = stat
        .hist
        .iter()
        .rposition(|&count| count != 0)
        .map_or(0, |last| last + 1);
    crate::profile::Latency {
        count: stat.count,
        total_ns: stat.total_ns,
        max_ns: stat.max_ns,
        min_ns: if stat.count == 0 { 0 } else { stat.min_ns },
        hist: stat.hist[..used].to_vec(),
    }
}

/// A program of the object by name, as its type (`FEntry`, `KProbe`, ...).
pub fn program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    ebpf.program_mut(name)
        .with_context(|| format!("program {name} missing from the eBPF object"))?
        .try_into()
        .with_context(|| format!("program {name} has an unexpected type"))
}

/// Loads the tracepoint program `name` (unless it is loaded already) and attaches it to
/// `group:event`. Every tracepoint of every family goes through here.
pub fn attach_tracepoint(ebpf: &mut Ebpf, name: &str, group: &str, event: &str) -> Result<()> {
    let program: &mut TracePoint = program(ebpf, name)?;
    if program.fd().is_err() {
        program.load().map_err(|err| load_error(name, err))?;
    }
    program
        .attach(group, event)
        .with_context(|| format!("cannot attach to {group}:{event}"))?;
    Ok(())
}

/// Attaches the loaded kprobe `entry` and kretprobe `ret` to `function`, the return
/// probe first: the kernel runs the handlers of one address newest first, so the entry
/// program walks the stack before the kretprobe replaces the return address (5.10's
/// unwinder stops at `kretprobe_trampoline`). Every entry/return pair goes through here.
pub fn attach_kprobe_pair(ebpf: &mut Ebpf, entry: &str, ret: &str, function: &str) -> Result<()> {
    for name in [ret, entry] {
        let program: &mut aya::programs::KProbe = program(ebpf, name)?;
        program
            .attach(function, 0)
            .with_context(|| format!("cannot attach {name} to {function}"))?;
    }
    Ok(())
}

/// Shortens the loader's error chains of fentry/kprobe attachments to what a user
/// needs to read.
pub fn explain(err: &str) -> String {
    if err.contains("Operation not permitted") {
        let step = err.split(':').next().unwrap_or("load");
        format!(
            "{step} refused by the kernel with EPERM: BPF tracing programs are not allowed here"
        )
    } else {
        err.replace(". Verifier output: ", ": ")
    }
}

pub use crate::tracefs::kprobes_unavailable;

/// Every mapped object of every profiled process is kept open until the end: allow as
/// many descriptors as the hard limit does (a failure only means falling back to paths).
fn raise_open_file_limit() {
    // SAFETY: getrlimit/setrlimit with a struct we own.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// Watches for processes whose user stacks are being recorded (the kernel notes each
/// one in `NEW_PROCESSES` the first time, and again after an exec) and snapshots their
/// memory maps at once, so they are symbolized even if they exit before the end.
pub struct ProcessWatcher {
    notes: RingBuf<MapData>,
    last_refresh: std::time::Instant,
}

impl ProcessWatcher {
    /// Attaches the exec hook and takes the notice ring out of the object.
    pub fn start(ebpf: &mut Ebpf) -> Result<ProcessWatcher> {
        raise_open_file_limit();
        attach_tracepoint(ebpf, names::PROCESSES_EXEC, "sched", "sched_process_exec")?;
        let map = ebpf
            .take_map(names::NEW_PROCESSES)
            .context("map NEW_PROCESSES missing from the eBPF object")?;
        let notes = RingBuf::try_from(map).context("NEW_PROCESSES has an unexpected type")?;
        Ok(ProcessWatcher {
            notes,
            last_refresh: std::time::Instant::now(),
        })
    }

    /// Snapshots every newly noted process into `symbols`; now and then, the known ones
    /// again (a library loaded later). Call often while recording.
    pub fn poll(&mut self, symbols: &mut UserSymbols) {
        while let Some(item) = self.notes.next() {
            if let Ok(bytes) = <[u8; 4]>::try_from(&item[..4.min(item.len())]) {
                let pid = u32::from_ne_bytes(bytes);
                drop(item);
                symbols.remember(pid);
            }
        }
        if self.last_refresh.elapsed() >= std::time::Duration::from_secs(1) {
            symbols.refresh();
            self.last_refresh = std::time::Instant::now();
        }
    }

    /// The last snapshots, for the symbolization at the end of the run.
    pub fn finish(mut self, symbols: &mut UserSymbols) {
        self.poll(symbols);
        symbols.refresh();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(names: &[&str]) -> Vec<Frame> {
        names
            .iter()
            .map(|name| Frame {
                name: name.to_string(),
                module: None,
                kernel: true,
            })
            .collect()
    }

    fn stripped(names: &[&str]) -> Vec<String> {
        let mut stack = frames(names);
        strip_tracing_frames(&mut stack);
        stack.into_iter().map(|frame| frame.name).collect()
    }

    #[test]
    fn verifier_rejection_is_one_line_naming_the_log() {
        let path = std::path::Path::new("/tmp/lockpath-verifier-x-1.log");
        let text = verifier_message(
            "offcpu_sched_switch",
            "Permission denied\n(os error 13)",
            Some(path),
        );
        assert!(!text.contains('\n'), "{text}");
        assert!(text.contains("offcpu_sched_switch"), "{text}");
        assert!(text.contains("/tmp/lockpath-verifier-x-1.log"), "{text}");
        let text = verifier_message("p", "EINVAL", None);
        assert!(text.contains("RUST_LOG=debug"), "{text}");
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
