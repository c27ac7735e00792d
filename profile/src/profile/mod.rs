//! The profile: one data model, saved as JSON. It is the contract between `record`
//! (on the machine being profiled) and every exporter (anywhere). See docs/profile-format.md.
//!
//! This module is the model: the profile, its rows, and what every kind of rows names
//! (`visit_row_ids`, `append_rows`); `store` loads and saves it, `interner` builds its
//! frames and stacks.

mod interner;
mod store;

use std::collections::BTreeMap;

pub use compact_str::CompactString;
use serde::{Deserialize, Serialize};

pub use interner::StackInterner;
pub use store::{check_writable, write_atomically};

use crate::presized::presized;

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
    /// these processes by their share (see `export::tables::io::charges`).
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
    /// The file whose pages the requests carried, or for direct IO the file of the read
    /// or write call that submitted them (`--file-calls`); none: flushes, passthrough,
    /// direct IO otherwise.
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

/// Loss counters by name, as a profile keeps them.
pub type Counters<'a> = Vec<(&'a String, &'a u64)>;

/// Loss counters (a profile's `losses`, or several profiles' summed) in two: those that
/// lose events, and those of a slower path the programs took that loses nothing (the
/// events are in the rows).
pub fn lost_and_kept(losses: &BTreeMap<String, u64>) -> (Counters<'_>, Counters<'_>) {
    losses
        .iter()
        .partition(|(name, _)| profiler_common::loss::loses_events(name))
}

impl Profile {
    /// Whether `family` was recorded (attached) in this profile's run.
    pub fn recorded(&self, family: &str) -> bool {
        self.probes.iter().any(|probe| probe.family == family)
    }

    /// Every process some row refers to, once, in order.
    pub fn row_pids(&mut self) -> Vec<u32> {
        let mut pids = Vec::new();
        self.visit_row_ids(&mut |row| {
            pids.extend(row.pids.iter().map(|pid| **pid));
            pids.extend(row.maybe_pids.iter().filter_map(|pid| **pid));
        });
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Every row's process and stack ids, kind by kind: what `row_pids` collects, loading
    /// checks and `merge` rewrites. A kind of rows adds its block here, and its field to
    /// `append_rows`. Thread ids are not visited: they belong to their process.
    pub fn visit_row_ids(&mut self, visit: &mut dyn FnMut(RowIds<'_, '_>)) {
        for row in &mut self.locks {
            let stacks = &mut [&mut row.stack, &mut row.owner_stack];
            let pids = &mut [&mut row.pid];
            visit(RowIds::of("a lock row", pids, stacks).naming(&mut [&mut row.owner_pid]));
        }
        for row in self.holds.iter_mut().chain(&mut self.contended_holds) {
            visit(RowIds::of(
                "a hold row",
                &mut [&mut row.pid],
                &mut [&mut row.stack],
            ));
        }
        for row in &mut self.offcpu {
            let stacks = &mut [&mut row.stack, &mut row.ustack];
            let pids = &mut [&mut row.pid];
            visit(RowIds::of("an offcpu row", pids, stacks).naming(&mut [&mut row.held_by]));
            for waker in &mut row.wakers {
                let stacks = &mut [&mut waker.stack, &mut waker.ustack];
                visit(RowIds::of(
                    "an offcpu row's waker",
                    &mut [&mut waker.pid],
                    stacks,
                ));
            }
        }
        for chain in &mut self.chains {
            let pids = &mut [&mut chain.pid, &mut chain.last_waker_pid];
            visit(RowIds::of("a chain", pids, &mut [&mut chain.stack]));
            for link in &mut chain.links {
                visit(RowIds::of(
                    "a chain's link",
                    &mut [&mut link.pid],
                    &mut [&mut link.stack],
                ));
            }
        }
        let no_stacks = || -> [&mut Option<u32>; 0] { [] };
        for row in &mut self.io {
            visit(RowIds::of(
                "an io row",
                &mut [&mut row.pid],
                &mut no_stacks(),
            ));
        }
        for row in &mut self.io_dirtied {
            visit(RowIds::of(
                "a dirtied row",
                &mut [&mut row.pid],
                &mut no_stacks(),
            ));
        }
        for row in &mut self.file_calls {
            visit(RowIds::of(
                "a file call row",
                &mut [&mut row.pid],
                &mut no_stacks(),
            ));
        }
        for row in &mut self.cpu {
            let stacks = &mut [&mut row.kernel_stack, &mut row.user_stack];
            visit(RowIds::of("a cpu row", &mut [&mut row.pid], stacks));
        }
        for row in &mut self.rpcs {
            let stacks = &mut [&mut row.start_stack, &mut row.end_stack];
            visit(RowIds::of("an rpc row", &mut [&mut row.pid], stacks));
        }
        for row in &mut self.funcs {
            visit(RowIds::of(
                "a func row",
                &mut [&mut row.pid],
                &mut [&mut row.stack],
            ));
        }
        for row in &mut self.waiting {
            let stacks = &mut [&mut row.stack, &mut row.ustack];
            let pids = &mut [&mut row.pid];
            visit(RowIds::of("a waiting row", pids, stacks).naming(&mut [&mut row.owner_pid]));
        }
    }

    /// Appends `input`'s rows of every kind (`lockpath merge`). Every field of the profile
    /// is named, so a new kind of rows does not compile until it is appended here.
    pub fn append_rows(&mut self, input: Profile) {
        let Profile {
            // The header, processes, frames and stacks: merged by `merge` itself.
            format: _,
            host: _,
            kernel: _,
            start_unix_s: _,
            duration_s: _,
            command_line: _,
            targets: _,
            probes: _,
            losses: _,
            processes: _,
            frames: _,
            stacks: _,
            // A timeline is one host's time line: a merged profile has none.
            timeline: _,
            locks,
            offcpu,
            io,
            io_dirtied,
            file_calls,
            cpu_freq_hz,
            cpu,
            rpcs,
            funcs,
            holds,
            contended_holds,
            unavailable,
            chains,
            waiting,
        } = input;
        self.locks.extend(locks);
        self.offcpu.extend(offcpu);
        self.chains.extend(chains);
        self.io.extend(io);
        self.io_dirtied.extend(io_dirtied);
        self.file_calls.extend(file_calls);
        // Hosts sampled at different rates: the highest is kept (samples stay counts).
        self.cpu_freq_hz = self.cpu_freq_hz.max(cpu_freq_hz);
        self.cpu.extend(cpu);
        self.rpcs.extend(rpcs);
        self.funcs.extend(funcs);
        self.holds.extend(holds);
        self.contended_holds.extend(contended_holds);
        self.unavailable.extend(unavailable);
        self.waiting.extend(waiting);
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

    /// Whether a stack was cut short (depth limit or a frame without frame pointers).
    pub fn stack_truncated(&self, stack: Option<u32>) -> bool {
        stack
            .and_then(|id| self.stacks.get(id as usize))
            .map(|stack| stack.truncated)
            .unwrap_or(false)
    }
}

/// The process and stack ids one row names (`Profile::visit_row_ids`).
pub struct RowIds<'r, 'a> {
    /// What the row is, for messages: "a lock row".
    pub what: &'static str,
    /// Processes it names.
    pub pids: &'r mut [&'a mut u32],
    /// Processes it names when they are known (a lock's owner).
    pub maybe_pids: &'r mut [&'a mut Option<u32>],
    /// Stacks it names (`None`: not walked).
    pub stacks: &'r mut [&'a mut Option<u32>],
}

impl<'r, 'a> RowIds<'r, 'a> {
    /// A row that names its processes `pids` and `stacks`.
    fn of(
        what: &'static str,
        pids: &'r mut [&'a mut u32],
        stacks: &'r mut [&'a mut Option<u32>],
    ) -> RowIds<'r, 'a> {
        RowIds {
            what,
            pids,
            maybe_pids: &mut [],
            stacks,
        }
    }

    /// The same row, which also names the processes `maybe_pids` when they are known.
    fn naming(self, maybe_pids: &'r mut [&'a mut Option<u32>]) -> RowIds<'r, 'a> {
        RowIds { maybe_pids, ..self }
    }
}

/// The frames of `stack` among `stacks`, whose frame indices point into `frames`, leaf
/// first: none for `None` or an unknown stack, and an unknown frame left out.
pub(super) fn frames_in<'a>(
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `row_pids` names every process a row refers to: owners and wakers too.
    #[test]
    fn row_pids_include_owners_and_wakers() {
        let mut profile = Profile::new();
        profile.locks.push(LockRow {
            pid: 7,
            owner_pid: Some(9),
            ..Default::default()
        });
        profile.offcpu.push(OffcpuRow {
            pid: 3,
            held_by: Some(4),
            wakers: vec![WakerRow {
                pid: 5,
                ..Default::default()
            }],
            ..Default::default()
        });
        assert_eq!(profile.row_pids(), [3, 4, 5, 7, 9]);
    }
}
