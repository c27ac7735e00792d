//! The profile: one data model, saved as JSON. It is the contract between `record`
//! (on the machine being profiled) and every exporter (anywhere). See docs/profile-format.md.

use std::{collections::BTreeMap, fs, io::Write, path::Path};

use anyhow::{bail, Context, Result};
pub use compact_str::CompactString;
use serde::{Deserialize, Serialize};

use crate::presized::{presized, with_document_size};

pub use crate::kind::{GroupBy, Kind};

/// Written into every profile; loading checks it.
pub const FORMAT: &str = "lockpath/1";

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Profile {
    pub format: String,
    pub host: String,
    pub kernel: String,
    /// Start of the recording, seconds since the Unix epoch.
    pub start_unix_s: u64,
    pub duration_s: f64,
    /// lockpath's own command line.
    pub command_line: Vec<String>,
    pub targets: Targets,
    /// Probe families recorded and how each was attached.
    pub probes: Vec<ProbeUse>,
    /// Events the kernel side could not record, by cause (see `profiler_common::loss`).
    pub losses: BTreeMap<String, u64>,
    pub processes: Vec<Process>,
    /// Symbolized frames, stored once; stacks refer to them by index.
    pub frames: Vec<Frame>,
    /// Stacks as frame indices, innermost (leaf) frame first.
    pub stacks: Vec<Stack>,
    // Rows are at least 90 bytes of JSON (`presized` reserves for the file's size).
    #[serde(default, deserialize_with = "presized::<_, _, 90>")]
    pub locks: Vec<LockRow>,
    /// Off-CPU waits (`record --offcpu`).
    #[serde(default)]
    pub offcpu: Vec<OffcpuRow>,
    /// Block-IO requests (`record --io`).
    #[serde(default)]
    pub io: Vec<IoRow>,
    /// Who dirtied which file's pages (`record --io`): a file's writeback is charged to
    /// these processes by their share (see `export::io::charges`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub io_dirtied: Vec<DirtiedRow>,
    /// Read, write, fsync and open calls timed per file and process
    /// (`record --io --file-calls`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub file_calls: Vec<FileCallRow>,
    /// On-CPU sampling frequency in Hz (0: not sampled).
    #[serde(default)]
    pub cpu_freq_hz: u64,
    /// On-CPU samples by (process, thread, kernel stack, user stack).
    #[serde(default)]
    pub cpu: Vec<CpuRow>,
    /// Request / reply spans (`--rpc`, `--span`).
    #[serde(default)]
    pub rpcs: Vec<RpcRow>,
    /// Function latencies (`--func`, `--ufunc`).
    #[serde(default)]
    pub funcs: Vec<FuncRow>,
    /// Hold times of the lock named by `--hold`.
    #[serde(default)]
    pub holds: Vec<HoldRow>,
    /// Holds under contention, from the lock family's own events: how long each
    /// contended acquirer held a lock while the next waiter waited (`--lock`).
    #[serde(default)]
    pub contended_holds: Vec<HoldRow>,
    /// Probes that were asked for but could not be used on this kernel, and why.
    #[serde(default)]
    pub unavailable: Vec<Unavailable>,
    /// Wait chains (`record --wakers`): waits whose waker was itself off the CPU during
    /// them, followed up to three waits deep.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chains: Vec<ChainRow>,
    /// Wait time per interval (`record --interval`), for every lock, class and process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<crate::timeline::Timeline>,
    /// Waits that had not ended when the profile was drained (its end, or a period's
    /// end): sleeping lock waits, off-CPU waits, requests and block IO in flight, and
    /// the waits that had begun before the recording. See `crate::waiting`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<WaitingRow>,
}

/// A wait still in progress when the profile was drained.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct WaitingRow {
    /// `offcpu`, `lock`, `rpc` or `io`: the family that saw the wait.
    pub kind: String,
    pub pid: u32,
    pub tid: u32,
    /// When the wait began, in CLOCK_MONOTONIC nanoseconds of the recording host.
    pub since_ns: u64,
    /// How long it had lasted at the drain.
    pub age_ns: u64,
    /// The part of it inside this profile's span (the recording, or the period under
    /// `--rotate`): what the profile's totals count of it.
    pub counted_ns: u64,
    /// It had begun before the recording started (found by the scan of blocked tasks;
    /// `since_ns` then comes from the scheduler's own time stamp, see docs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub before_start: bool,
    /// `D` or `S` (off-CPU waits), else empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// Wait class (off-CPU), lock type (`rwsem:W`), operation (`FUSE CREATE`) or IO
    /// operation (`write`).
    pub class: String,
    /// What is waited on, where known: the lock's name, the device, the server.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub what: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ustack: Option<u32>,
    /// The lock waited for (lock waits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_addr: Option<u64>,
    /// The holder of the lock when the wait began (sleeping locks), or the process
    /// serving the request (FUSE): the next link of the wait's chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_tid: Option<u32>,
    /// The request's id (`rpc`: for FUSE, the kernel's `struct fuse_req` address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<u64>,
}

/// A requested probe that this kernel could not offer (the run went on without it).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Unavailable {
    /// "rpc", "func", "hold", ...
    pub family: String,
    /// What was asked for: `sunrpc`, `vfs_read`, `mutex:tasklist_lock`, ...
    pub what: String,
    pub reason: String,
}

/// Latency aggregate of one row: count, total, extremes and a log2 histogram.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    pub min_ns: u64,
    /// `hist[i]` counts latencies in [2^i, 2^(i+1)) ns; trailing empty buckets left out.
    #[serde(default)]
    pub hist: Vec<u64>,
}

impl Latency {
    pub fn mean_ns(&self) -> u64 {
        self.total_ns.checked_div(self.count).unwrap_or(0)
    }

    /// Adds another aggregate (rows grouped for a table).
    pub fn merge(&mut self, other: &Latency) {
        self.min_ns = if self.count == 0 {
            other.min_ns
        } else {
            self.min_ns.min(other.min_ns)
        };
        self.count += other.count;
        self.total_ns += other.total_ns;
        self.max_ns = self.max_ns.max(other.max_ns);
        crate::histogram::add_into(&mut self.hist, &other.hist);
    }
}

/// One aggregated request/reply row: (provider, operation, issuing process, stacks).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RpcRow {
    /// "fuse", "sunrpc", "lustre" or "span".
    pub provider: String,
    /// Operation number (FUSE opcode, ...), 0 when the provider has none.
    pub op: u32,
    /// Operation name: `CREATE`, `WRITE`, ... (the number when unknown).
    pub op_name: String,
    /// Process that issued the request.
    pub pid: u32,
    /// Kernel stack of the issuer at the start.
    pub start_stack: Option<u32>,
    /// Kernel stack of whoever ran the completion.
    pub end_stack: Option<u32>,
    #[serde(flatten)]
    pub latency: Latency,
}

/// One aggregated function-latency row: (function, process, stack at entry).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct FuncRow {
    /// `vfs_read`, `ptlrpc:after_reply`, or `BINARY:SYMBOL` for user functions.
    pub function: String,
    /// A user-space function (`--ufunc`).
    pub user: bool,
    pub pid: u32,
    /// Stack at entry (kernel stack, or user stack for user functions).
    pub stack: Option<u32>,
    #[serde(flatten)]
    pub latency: Latency,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Targets {
    /// "system", "pids", "command" or "cgroup".
    pub mode: String,
    #[serde(default)]
    pub pids: Vec<u32>,
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub cgroup: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProbeUse {
    /// "lock", "offcpu", "io", "rpc", "func", "ufunc", "cpu" or "hold".
    pub family: String,
    /// How it was attached, e.g. "raw_tracepoint lock:contention_begin/end".
    pub method: String,
}

/// What `--by cgroup` shows for a process whose cgroup is not known.
pub const UNKNOWN_CGROUP: &str = "?";

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Process {
    pub pid: u32,
    pub comm: String,
    /// Host the process ran on, when profiles of several hosts are merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The process's cgroup v2 path (`/system.slice/sshd.service`, relative to the
    /// cgroup2 mount), when known; profiles of older versions have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    #[serde(default)]
    pub threads: Vec<Thread>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Thread {
    pub tid: u32,
    pub comm: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frame {
    /// Function name (demangled), or `0x...` when it could not be symbolized.
    pub name: String,
    /// Kernel module (`ext4`) or user object (`/usr/lib/libc.so.6`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    pub kernel: bool,
}

impl Frame {
    /// A kernel frame of the image (no module).
    pub fn kernel(name: &str) -> Frame {
        Frame {
            name: name.into(),
            module: None,
            kernel: true,
        }
    }

    /// How a frame is shown: `name [module]` for kernel modules, `name` otherwise.
    pub fn display(&self) -> String {
        match (&self.module, self.kernel) {
            (Some(module), true) => format!("{} [{}]", self.name, module),
            _ => self.name.clone(),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Stack {
    /// Indices into `Profile::frames`, leaf first.
    pub frames: Vec<u32>,
    /// The walk stopped before the outermost frame (depth limit or missing frame pointers).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// Hold times of one lock (`--hold`) by one holder: (process, acquisition stack, mode).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HoldRow {
    pub lock_addr: u64,
    /// Static lock symbol, or the address in hex.
    pub lock_name: String,
    /// `LCB_F_*` flags of the lock type and mode (`mutex`, `rwsem:W`, `spinlock`, ...).
    pub flags: u32,
    /// Process of the holder.
    pub pid: u32,
    /// Thread of the holder (holds under contention, which know it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    /// Kernel stack where the holder took the lock; `None` when it was lost.
    pub stack: Option<u32>,
    /// Hold time, acquisition to release.
    pub latency: Latency,
}

/// One aggregated lock-contention row: (process, lock, lock flags, waiter stack).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LockRow {
    pub pid: u32,
    pub lock_addr: u64,
    /// Static lock symbol (`rcu_state+0x40`), `mmap_lock`, or the address in hex.
    /// A `CompactString`: names up to 24 bytes (every address, most symbols) live in
    /// the row itself, so a million rows load without a million allocations.
    pub lock_name: CompactString,
    /// How the name was found: `task` (the waiting task's structures), `task_struct`
    /// (another task's), `runqueue`, `percpu`, `slab`, `kallsyms`, `caller` (a static
    /// lock without a symbol, by its taker), `member`, or `address` (not named); empty
    /// in profiles of older versions (docs/lock-names.md).
    #[serde(default, skip_serializing_if = "CompactString::is_empty")]
    pub lock_name_source: CompactString,
    /// `LCB_F_*` flags; the type name is derived (`lock_type_name`).
    pub flags: u32,
    /// Kernel stack of the waiter, `None` when it was lost (counted in losses).
    pub stack: Option<u32>,
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    pub min_ns: u64,
    /// Process holding the sleeping lock (mutex, writer-held rwsem) when the wait
    /// began, read from the lock's owner field; absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_pid: Option<u32>,
    /// Kernel stack where that owner was sleeping (it was off-CPU, and the off-CPU
    /// family recorded its switch-out); absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_stack: Option<u32>,
}

/// On-CPU samples of one (process, thread, kernel stack, user stack).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CpuRow {
    pub pid: u32,
    pub tid: u32,
    /// Kernel part of the stack, `None` when the sample was taken in user mode (or lost).
    pub kernel_stack: Option<u32>,
    /// User part of the stack, `None` for kernel threads (or when lost).
    pub user_stack: Option<u32>,
    pub samples: u64,
}

/// One aggregated off-CPU row: (thread, state, kernel stack, user stack).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct OffcpuRow {
    pub pid: u32,
    pub tid: u32,
    /// "D" (uninterruptible) or "S" (interruptible sleep).
    pub state: String,
    /// Wait class from the kernel frames (docs/wait-classes.md).
    pub class: String,
    /// Kernel stack, `None` when it was lost.
    pub stack: Option<u32>,
    /// User stack, `None` when not symbolized (or the thread is a kernel thread).
    #[serde(default)]
    pub ustack: Option<u32>,
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    /// Owner process of the file lock waited for (`file-lock` waits whose blocker the
    /// kernel named); absent when unknown or not a file-lock wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<u32>,
    /// Who woke these waits (`record --wakers`), most time first; the rest of the
    /// row's time had no waker seen (woken before the recording, or the entry lost).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wakers: Vec<WakerRow>,
}

/// The waits of one off-CPU row that one task woke (`record --wakers`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct WakerRow {
    /// Process and thread of the waker (0/0: an interrupt on an idle CPU).
    pub pid: u32,
    pub tid: u32,
    /// Kernel stack of the waker at the wake-up, `None` when it was lost.
    pub stack: Option<u32>,
    /// User stack of the waker, `None` when not symbolized (or a kernel thread).
    #[serde(default)]
    pub ustack: Option<u32>,
    pub count: u64,
    /// The waits' time (switch-out to switch-in of the waiter).
    pub wait_ns: u64,
    pub max_ns: u64,
    /// Woken from an interrupt (a timer, a completion): `pid` and `tid` are 0 and the
    /// stack ends at the interrupt's entry (what ran below it was only interrupted).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupt: bool,
}

/// A wait chain: the waits of one off-CPU row whose waker was itself off the CPU during
/// them (the first link), whose own waker may have been too (the second link).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ChainRow {
    /// The waiting thread and its wait (as its off-CPU row).
    pub pid: u32,
    pub tid: u32,
    pub state: String,
    pub class: String,
    pub stack: Option<u32>,
    pub count: u64,
    /// The waiter's time off the CPU in these waits.
    pub wait_ns: u64,
    /// The wakers that were waiting too, in order: the first woke the waiter.
    pub links: Vec<ChainLinkRow>,
    /// Who woke the last link (0/0: not seen, or an interrupt).
    pub last_waker_pid: u32,
    pub last_waker_tid: u32,
}

/// One link of a chain: a thread off the CPU during the wait before it, until it woke
/// that waiter.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ChainLinkRow {
    pub pid: u32,
    pub tid: u32,
    pub state: String,
    /// Wait class of its wait (docs/wait-classes.md).
    pub class: String,
    /// Kernel stack of its wait.
    pub stack: Option<u32>,
    /// The part of its wait that overlapped the wait before it, summed over the chains.
    pub wait_ns: u64,
}

/// One aggregated block-IO row: (device, operation, issuing process).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct IoRow {
    pub major: u32,
    pub minor: u32,
    /// Device name from /sys/dev/block (`loop0`), or `MAJ:MIN` when unknown.
    pub device: String,
    /// "read", "write", "flush", "discard" or "other".
    pub op: String,
    /// Process that inserted or issued the requests (may be a kernel thread).
    pub pid: u32,
    pub count: u64,
    pub bytes: u64,
    /// Issue to completion, summed over the requests.
    pub total_ns: u64,
    pub max_ns: u64,
    /// Requests whose insert was seen, and their summed time in the queue.
    #[serde(default)]
    pub queued: u64,
    #[serde(default)]
    pub queue_ns: u64,
    /// log2 histogram of issue-to-completion latency in microseconds: `hist[i]` counts
    /// requests in [2^i, 2^(i+1)) us (`hist[0]`: under 2 us).
    pub hist: Vec<u64>,
    /// The file whose pages the requests carried (none: direct IO into user memory,
    /// flushes, passthrough).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileRef>,
}

/// A file: its file system's device, inode number, and path where it was read.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileRef {
    /// The file system's device (`st_dev`), as `major`, `minor`.
    pub major: u32,
    pub minor: u32,
    pub ino: u64,
    /// Absolute path when its names reached a mount point; else the names read from
    /// the file upwards, led by `.../`; empty when none could be read.
    #[serde(default)]
    pub path: String,
}

impl FileRef {
    /// The path, or `dev MAJ:MIN ino N` when none was read.
    pub fn label(&self) -> String {
        if self.path.is_empty() {
            format!("dev {}:{} ino {}", self.major, self.minor, self.ino)
        } else {
            self.path.clone()
        }
    }
}

/// One process's calls of one kind on one file: system call entry to return.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct FileCallRow {
    pub pid: u32,
    /// "read", "write", "fsync" (fdatasync too) or "open".
    pub call: String,
    pub file: FileRef,
    pub count: u64,
    /// Bytes the reads or writes returned.
    pub bytes: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    /// log2 histogram in microseconds, as `IoRow::hist`.
    pub hist: Vec<u64>,
}

/// Pages of one file that one process dirtied (the cause of their writeback).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DirtiedRow {
    pub pid: u32,
    pub file: FileRef,
    /// Folios newly dirtied (a large folio counts once).
    pub folios: u64,
}

impl Profile {
    /// Whether `family` was recorded (attached) in this profile's run.
    pub fn recorded(&self, family: &str) -> bool {
        self.probes.iter().any(|probe| probe.family == family)
    }

    /// Every process some row refers to, once, in order.
    pub fn row_pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.locks.iter().map(|row| row.pid).collect();
        pids.extend(self.offcpu.iter().map(|row| row.pid));
        pids.extend(
            self.offcpu
                .iter()
                .flat_map(|row| row.wakers.iter().map(|waker| waker.pid)),
        );
        pids.extend(
            self.chains
                .iter()
                .flat_map(|chain| chain.links.iter().map(|link| link.pid)),
        );
        pids.extend(self.offcpu.iter().filter_map(|row| row.held_by));
        pids.extend(self.io.iter().map(|row| row.pid));
        pids.extend(self.io_dirtied.iter().map(|row| row.pid));
        pids.extend(self.file_calls.iter().map(|row| row.pid));
        pids.extend(self.rpcs.iter().map(|row| row.pid));
        pids.extend(self.funcs.iter().map(|row| row.pid));
        pids.extend(self.cpu.iter().map(|row| row.pid));
        pids.extend(self.holds.iter().map(|row| row.pid));
        pids.extend(self.waiting.iter().map(|row| row.pid));
        pids.extend(self.waiting.iter().filter_map(|row| row.owner_pid));
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    pub fn new() -> Self {
        Profile {
            format: FORMAT.to_string(),
            ..Default::default()
        }
    }

    /// Frames of a stack, leaf first.
    pub fn stack_frames(&self, stack: Option<u32>) -> Vec<&Frame> {
        frames_in(&self.stacks, &self.frames, stack).collect()
    }

    pub fn process(&self, pid: u32) -> Option<&Process> {
        self.processes.iter().find(|process| process.pid == pid)
    }

    /// The name a process is shown under: `comm` (host:comm when merged).
    pub fn process_name(&self, pid: u32) -> String {
        match self.process(pid) {
            Some(process) => match &process.host {
                Some(host) => format!("{host}:{}", process.comm),
                None => process.comm.clone(),
            },
            None => format!("pid {pid}"),
        }
    }

    /// The host a process ran on: its own (merged profiles) or the profile's.
    pub fn host_of(&self, pid: u32) -> String {
        self.process(pid)
            .and_then(|process| process.host.clone())
            .unwrap_or_else(|| self.host.clone())
    }

    /// The cgroup path of a process, [`UNKNOWN_CGROUP`] when unknown; prefixed with its
    /// host in merged profiles (`node1:/slurm/job42`), like process names.
    pub fn cgroup_of(&self, pid: u32) -> String {
        let process = self.process(pid);
        let cgroup = process
            .and_then(|process| process.cgroup.as_deref())
            .unwrap_or(UNKNOWN_CGROUP);
        match process.and_then(|process| process.host.as_deref()) {
            Some(host) => format!("{host}:{cgroup}"),
            None => cgroup.to_string(),
        }
    }

    /// True when some process's cgroup is known (profiles of older versions know none).
    pub fn knows_cgroups(&self) -> bool {
        self.processes
            .iter()
            .any(|process| process.cgroup.is_some())
    }

    /// Profiles combined by `lockpath merge` name the host of each process.
    pub fn is_merged(&self) -> bool {
        self.processes.iter().any(|process| process.host.is_some())
    }

    /// Loads and validates a profile file.
    pub fn load(path: &Path) -> Result<Profile> {
        let file = fs::File::open(path)
            .with_context(|| format!("cannot read profile {}", path.display()))?;
        // An empty file cannot be mapped; it is read (and said to be empty).
        let mappable = file.metadata().is_ok_and(|m| m.is_file() && m.len() > 0);
        let parsed = if mappable {
            // Mapped, not read: a large profile is parsed straight from the page cache,
            // without a copy the size of the file that the kernel would first zero
            // (reading a 154 MiB profile that way was 40% of `report`'s time).
            // SAFETY: the mapping is only read while `map` lives. lockpath writes profiles
            // to a temporary file and renames it, so a profile is never changed in
            // place by lockpath; a file truncated by someone else while it is parsed
            // would fault (SIGBUS), as it would for any mmap reader.
            let map = unsafe { memmap2::Mmap::map(&file) }
                .with_context(|| format!("cannot read profile {}", path.display()))?;
            Self::from_bytes(&map)
        } else {
            // A pipe or a character device (`report /dev/stdin`) cannot be mapped.
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut &file, &mut bytes)
                .with_context(|| format!("cannot read profile {}", path.display()))?;
            Self::from_bytes(&bytes)
        };
        parsed.with_context(|| format!("{} is not a usable profile", path.display()))
    }

    /// Parses and validates a profile. It goes straight into the model (no intermediate
    /// JSON tree: a profile of a million rows loads in a fraction of a second); only when
    /// that fails is the file looked at again to say why in the most useful terms.
    pub fn from_bytes(bytes: &[u8]) -> Result<Profile> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            bail!("the file is empty; record it again");
        }
        // The compact encoding (`*.lpb`, binary.rs) is told apart by its first bytes.
        let profile = if crate::binary::is_compact(bytes) {
            crate::binary::decode(bytes, Self::parse_json)?
        } else {
            Self::parse_json(bytes)?
        };
        check_format(Some(&profile.format))?;
        profile.validate()?;
        Ok(profile)
    }

    /// Parses a JSON profile, not yet validated.
    fn parse_json(bytes: &[u8]) -> Result<Profile> {
        let parsed = with_document_size(bytes.len(), || serde_json::from_slice::<Profile>(bytes));
        parsed.map_err(|err| explain_parse_error(bytes, err))
    }

    /// Checks every index, so exporters can trust them.
    fn validate(&self) -> Result<()> {
        if !(self.duration_s.is_finite() && self.duration_s >= 0.0) {
            bail!("duration_s is {}, not a duration", self.duration_s);
        }
        for (index, stack) in self.stacks.iter().enumerate() {
            if let Some(bad) = stack
                .frames
                .iter()
                .find(|&&f| f as usize >= self.frames.len())
            {
                bail!(
                    "stack {index} refers to frame {bad}, but there are {} frames",
                    self.frames.len()
                );
            }
        }
        for row in &self.locks {
            if let Some(stack) = row.stack {
                if stack as usize >= self.stacks.len() {
                    bail!(
                        "a lock row refers to stack {stack}, but there are {} stacks",
                        self.stacks.len()
                    );
                }
            }
        }
        for row in &self.offcpu {
            let wakers = row
                .wakers
                .iter()
                .flat_map(|waker| [waker.stack, waker.ustack]);
            for stack in [row.stack, row.ustack].into_iter().chain(wakers).flatten() {
                if stack as usize >= self.stacks.len() {
                    bail!(
                        "an offcpu row refers to stack {stack}, but there are {} stacks",
                        self.stacks.len()
                    );
                }
            }
        }
        let rpc_stacks = self
            .rpcs
            .iter()
            .flat_map(|row| [("an rpc", row.start_stack), ("an rpc", row.end_stack)]);
        let func_stacks = self.funcs.iter().map(|row| ("a func", row.stack));
        let hold_stacks = self
            .holds
            .iter()
            .chain(&self.contended_holds)
            .map(|row| ("a hold", row.stack));
        let owner_stacks = self
            .locks
            .iter()
            .map(|row| ("a lock owner", row.owner_stack));
        let waiting_stacks = self
            .waiting
            .iter()
            .flat_map(|row| [("a waiting", row.stack), ("a waiting", row.ustack)]);
        for (what, stack) in rpc_stacks
            .chain(func_stacks)
            .chain(hold_stacks)
            .chain(owner_stacks)
            .chain(waiting_stacks)
        {
            if let Some(stack) = stack {
                if stack as usize >= self.stacks.len() {
                    bail!(
                        "{what} row refers to stack {stack}, but there are {} stacks",
                        self.stacks.len()
                    );
                }
            }
        }
        for chain in &self.chains {
            let links = chain.links.iter().map(|link| link.stack);
            for stack in std::iter::once(chain.stack).chain(links).flatten() {
                if stack as usize >= self.stacks.len() {
                    bail!(
                        "a chain refers to stack {stack}, but there are {} stacks",
                        self.stacks.len()
                    );
                }
            }
        }
        if let Some(timeline) = &self.timeline {
            let intervals = timeline.ends_s.len();
            if let Some(bad) = timeline
                .series
                .iter()
                .find(|series| series.wait_ns.len() != intervals || series.count.len() != intervals)
            {
                bail!(
                    "timeline series {:?} has {} values, but there are {intervals} intervals",
                    bad.name,
                    bad.wait_ns.len()
                );
            }
        }
        for row in &self.cpu {
            for stack in [row.kernel_stack, row.user_stack].into_iter().flatten() {
                if stack as usize >= self.stacks.len() {
                    bail!(
                        "a cpu row refers to stack {stack}, but there are {} stacks",
                        self.stacks.len()
                    );
                }
            }
        }
        Ok(())
    }

    /// Whether a stack was cut short (depth limit or a frame without frame pointers).
    pub fn stack_truncated(&self, stack: Option<u32>) -> bool {
        stack
            .and_then(|id| self.stacks.get(id as usize))
            .map(|stack| stack.truncated)
            .unwrap_or(false)
    }

    /// Writes the profile atomically: a complete file or none (temporary file, fsync, rename).
    /// JSON, or the compact encoding (binary.rs) when the name ends in `.lpb`.
    pub fn save(&self, path: &Path) -> Result<()> {
        let compact = path
            .extension()
            .is_some_and(|extension| extension == crate::binary::EXTENSION);
        let bytes = if compact {
            crate::binary::encode(self)?
        } else {
            serde_json::to_vec(self).context("cannot serialize the profile")?
        };
        write_atomically(path, &bytes)
    }
}

/// Only the format field, to name a foreign or damaged file.
#[derive(Deserialize)]
struct FormatOnly {
    #[serde(default)]
    format: Option<serde_json::Value>,
}

fn check_format(format: Option<&str>) -> Result<()> {
    match format {
        Some(FORMAT) => Ok(()),
        Some(other) => bail!(
            "its format is {other:?}, this lockpath reads {FORMAT:?}; use the lockpath version that wrote it"
        ),
        None => bail!("no \"format\" field: not a lockpath profile"),
    }
}

fn explain_parse_error(bytes: &[u8], err: serde_json::Error) -> anyhow::Error {
    use serde_json::error::Category;
    match err.classify() {
        Category::Eof => anyhow::anyhow!("the file is truncated ({err}); record it again"),
        Category::Syntax | Category::Io => anyhow::anyhow!("not JSON ({err})"),
        Category::Data => {
            let format = serde_json::from_slice::<FormatOnly>(bytes)
                .ok()
                .and_then(|header| header.format);
            let format_text = format.as_ref().map(|value| match value.as_str() {
                Some(text) => text.to_string(),
                None => value.to_string(),
            });
            match check_format(format_text.as_deref()) {
                Err(format_error) => format_error,
                Ok(()) => anyhow::anyhow!("a {FORMAT} profile with invalid fields ({err})"),
            }
        }
    }
}

/// The temporary file `write_atomically` writes before renaming it to `path`.
fn temporary_path(path: &Path) -> Result<std::path::PathBuf> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let file_name = path
        .file_name()
        .with_context(|| format!("{} is not a file path", path.display()))?;
    Ok(dir.join(format!(
        ".{}.tmp.{}",
        file_name.to_string_lossy(),
        std::process::id()
    )))
}

/// Checks, before a long recording, that `write_atomically(path, ..)` can create its
/// temporary file: creates it and removes it.
pub fn check_writable(path: &Path) -> Result<()> {
    let tmp = temporary_path(path)?;
    fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    fs::remove_file(&tmp).with_context(|| format!("cannot remove {}", tmp.display()))
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename,
/// so a reader (or a crash) never sees a half-written file.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temporary_path(path)?;
    let result = (|| -> Result<()> {
        let mut file =
            fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        file.write_all(bytes)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        file.sync_all()
            .with_context(|| format!("cannot sync {}", tmp.display()))?;
        fs::rename(&tmp, path)
            .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// The frames of `stack` among `stacks`, whose frame indices point into `frames`, leaf
/// first: none for `None` or an unknown stack, and an unknown frame left out.
fn frames_in<'a>(
    stacks: &'a [Stack],
    frames: &'a [Frame],
    stack: Option<u32>,
) -> impl Iterator<Item = &'a Frame> + 'a {
    stack
        .and_then(|id| stacks.get(id as usize))
        .into_iter()
        .flat_map(move |stack| {
            stack
                .frames
                .iter()
                .filter_map(move |&frame| frames.get(frame as usize))
        })
}

/// Interns frames and stacks while a profile is built.
#[derive(Default)]
pub struct StackInterner {
    frame_ids: std::collections::HashMap<Frame, u32>,
    stack_ids: std::collections::HashMap<(Vec<u32>, bool), u32>,
    pub frames: Vec<Frame>,
    pub stacks: Vec<Stack>,
}

impl StackInterner {
    pub fn frame(&mut self, frame: Frame) -> u32 {
        if let Some(&id) = self.frame_ids.get(&frame) {
            return id;
        }
        let id = self.frames.len() as u32;
        self.frames.push(frame.clone());
        self.frame_ids.insert(frame, id);
        id
    }

    pub fn stack(&mut self, frames: Vec<Frame>, truncated: bool) -> u32 {
        let ids: Vec<u32> = frames.into_iter().map(|frame| self.frame(frame)).collect();
        let key = (ids, truncated);
        if let Some(&id) = self.stack_ids.get(&key) {
            return id;
        }
        let id = self.stacks.len() as u32;
        self.stacks.push(Stack {
            frames: key.0.clone(),
            truncated,
        });
        self.stack_ids.insert(key, id);
        id
    }

    /// Frames of an interned stack, leaf first (empty for `None`).
    pub fn frames_of(&self, stack: Option<u32>) -> Vec<Frame> {
        frames_in(&self.stacks, &self.frames, stack)
            .cloned()
            .collect()
    }

    /// Copies the frames and stacks so far into `profile` (live snapshots while recording).
    pub fn copy_into(&self, profile: &mut Profile) {
        profile.frames = self.frames.clone();
        profile.stacks = self.stacks.clone();
    }

    pub fn finish(self, profile: &mut Profile) {
        profile.frames = self.frames;
        profile.stacks = self.stacks;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Profile {
        let mut profile = Profile::new();
        profile.host = "node1".into();
        let mut interner = StackInterner::default();
        let frame = Frame::kernel;
        let stack = interner.stack(vec![frame("_raw_spin_lock"), frame("do_pipe2")], false);
        let again = interner.stack(vec![frame("_raw_spin_lock"), frame("do_pipe2")], false);
        assert_eq!(stack, again);
        interner.finish(&mut profile);
        profile.locks.push(LockRow {
            pid: 7,
            lock_addr: 0xffff_0000,
            lock_name: "0xffff0000".into(),
            lock_name_source: "address".into(),
            flags: 1,
            stack: Some(stack),
            count: 3,
            total_ns: 300,
            max_ns: 200,
            min_ns: 50,
            owner_pid: Some(9),
            owner_stack: Some(stack),
        });
        profile
    }

    #[test]
    fn json_round_trip_keeps_everything() {
        let profile = sample();
        let bytes = serde_json::to_vec(&profile).expect("serialize");
        let loaded = Profile::from_bytes(&bytes).expect("load");
        assert_eq!(loaded, profile);
        assert_eq!(loaded.frames.len(), 2, "frames are interned once");
    }

    #[test]
    fn truncated_file_says_truncated() {
        let bytes = serde_json::to_vec(&sample()).expect("serialize");
        let err = Profile::from_bytes(&bytes[..bytes.len() / 2]).expect_err("must fail");
        assert!(format!("{err:#}").contains("truncated"), "{err:#}");
    }

    #[test]
    fn every_truncation_is_a_clear_error() {
        assert_every_truncation_fails(&serde_json::to_vec(&sample()).expect("serialize"));
    }

    /// Every proper prefix of `bytes` fails to load with one line naming the cut.
    fn assert_every_truncation_fails(bytes: &[u8]) {
        for len in 0..bytes.len() {
            let err = Profile::from_bytes(&bytes[..len]).expect_err("a cut file must fail");
            let text = format!("{err:#}");
            assert!(
                text.contains("truncated") || text.contains("empty"),
                "cut at {len}: {text}"
            );
            assert_eq!(text.lines().count(), 1, "one line: {text}");
        }
    }

    #[test]
    fn compact_round_trip_keeps_everything() {
        let mut profile = sample();
        let mut row = profile.locks[0].clone();
        row.stack = None;
        row.owner_pid = None;
        row.owner_stack = None;
        row.lock_name = "a lock name longer than twenty-four bytes".into();
        row.lock_name_source = "".into();
        profile.locks.push(row);
        let bytes = crate::binary::encode(&profile).expect("encode");
        assert!(bytes.starts_with(crate::binary::MAGIC));
        assert_eq!(Profile::from_bytes(&bytes).expect("load"), profile);
    }

    #[test]
    fn compact_profile_of_the_synthetic_shape_loads_as_its_json() {
        let dir = std::env::temp_dir().join(format!("lockpath-compact-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("mkdir");
        let json = dir.join("p.json");
        crate::synthetic::write_lock_profile(&json, 5_000).expect("write");
        let profile = Profile::load(&json).expect("load json");
        let compact = dir.join("p.lpb");
        profile.save(&compact).expect("save compact");
        let size = |path: &Path| fs::metadata(path).expect("stat").len();
        assert!(size(&compact) < size(&json), "compact is smaller");
        assert_eq!(Profile::load(&compact).expect("load compact"), profile);
        fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn every_truncation_of_a_compact_profile_is_a_clear_error() {
        assert_every_truncation_fails(&crate::binary::encode(&sample()).expect("encode"));
    }

    #[test]
    fn any_damaged_byte_of_a_compact_profile_loads_or_is_one_clear_line() {
        let bytes = crate::binary::encode(&sample()).expect("encode");
        for at in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut damaged = bytes.clone();
                damaged[at] ^= flip;
                if let Err(err) = Profile::from_bytes(&damaged) {
                    let text = format!("{err:#}");
                    assert_eq!(text.lines().count(), 1, "byte {at}: {text}");
                }
            }
        }
    }

    #[test]
    fn bad_compact_rows_are_rejected() {
        let mut profile = sample();
        profile.locks[0].stack = Some(99);
        let bytes = crate::binary::encode(&profile).expect("encode");
        let err = Profile::from_bytes(&bytes).expect_err("bad stack");
        assert!(format!("{err:#}").contains("stack 99"), "{err:#}");
        // A name index past the names.
        let mut bytes = crate::binary::encode(&sample()).expect("encode");
        let row = bytes.len() - 72;
        bytes[row + 16..row + 20].copy_from_slice(&7u32.to_le_bytes());
        let err = Profile::from_bytes(&bytes).expect_err("bad name");
        assert!(format!("{err:#}").contains("name 7"), "{err:#}");
    }

    #[test]
    fn foreign_format_is_named() {
        let err = Profile::from_bytes(br#"{"format":"lockpath/0"}"#).expect_err("must fail");
        assert!(format!("{err:#}").contains("lockpath/0"), "{err:#}");
        let err = Profile::from_bytes(br#"{"a":1}"#).expect_err("must fail");
        assert!(
            format!("{err:#}").contains("not a lockpath profile"),
            "{err:#}"
        );
    }

    #[test]
    fn bad_index_is_rejected() {
        let mut profile = sample();
        profile.locks[0].stack = Some(99);
        let bytes = serde_json::to_vec(&profile).expect("serialize");
        assert!(Profile::from_bytes(&bytes).is_err());
    }

    #[test]
    fn atomic_write_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("lockpath-test-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("p.json");
        sample().save(&path).expect("save");
        let names: Vec<_> = fs::read_dir(&dir)
            .expect("readdir")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("p.json")]);
        assert_eq!(Profile::load(&path).expect("load"), sample());
        fs::remove_dir_all(&dir).expect("cleanup");
    }
}
