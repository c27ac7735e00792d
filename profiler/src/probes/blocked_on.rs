//! What a thread that sleeps in the kernel waits for, read from kernel memory: the
//! sleeping lock it queues on (and who owns it), or the FUSE request whose reply it
//! awaits. `/proc/TID/stack` says a thread is in `rwsem_down_write_slowpath` or
//! `request_wait_answer`; this module finds which lock or request.
//!
//! Kernel memory is read by `kread_run` (profiler-ebpf/src/kread.rs), a program that is
//! loaded but never attached: each read is one `BPF_PROG_TEST_RUN` that copies up to
//! 4 KiB with `bpf_probe_read_kernel` into a map value read back here. Every struct
//! offset comes from the kernel's BTF.
//!
//! How a thread's wait is found:
//! 0. what it waits in: the leaf frame of `/proc/TID/stack` (`request_wait_answer`),
//!    or, since that file leaves out the scheduler's functions and the sleeping locks'
//!    slow paths are among them (`__sched`), the leaf-most return address on its live
//!    kernel stack that lies in a lock's slow path (`rwsem_down_write_slowpath`,
//!    `__mutex_lock`), by `/proc/kallsyms`;
//! 1. its `task_struct`: the list of thread-group leaders (`tasks`), entered at the
//!    calling task's group leader, then the leader's threads (`signal->thread_head` /
//!    `thread_node`, or `thread_group` on older kernels);
//! 2. on the live part of its kernel stack (from the saved stack pointer to the top),
//!    the waiter structure naming it: a `mutex_waiter` or `rwsem_waiter` whose `task`
//!    is the thread, or a `wait_queue_entry` whose `private` is;
//! 3. along that waiter's list (each `next->prev` checked), the first node that is not
//!    a waiter on its task's stack: the list head inside the lock, or the FUSE
//!    request's wait queue.
//!
//! Every step is bounded, and every read that fails or check that does not hold gives
//! `None`: the answer is either verified or absent. Kernel memory changes while it is
//! read (nothing is locked), so a thread that stops waiting meanwhile also gives `None`.

use std::{
    fmt,
    os::fd::{AsFd, AsRawFd, OwnedFd},
};

use anyhow::{Context, Result};
use aya::{
    maps::{Array, MapData},
    programs::RawTracePoint,
    Ebpf,
};
use profiler_common::kread::{
    names, KreadBuf, KREAD_ARGS, KREAD_BUF_LEN, KREAD_OP_CURRENT_TASK, KREAD_OP_READ,
};

use crate::btf::Btf;
use crate::probes::blocked::tgid_of;
use crate::symbolize::kallsyms::Fields;

/// Size of a task's kernel stack (`THREAD_SIZE`: 16 KiB on x86_64 and arm64 with 4 KiB
/// pages and without KASAN). A saved stack pointer outside the first 16 KiB of
/// `task->stack` fails the checks, so a larger stack gives `None`, not a wrong answer.
const THREAD_SIZE: u64 = 16 * 1024;

/// Tasks visited at most on the list of thread-group leaders, and threads in a group.
const MAX_TASKS: usize = 1 << 17;
/// Nodes followed at most along a waiter list before its head.
const MAX_WAITERS: usize = 4096;
/// Walks of the task list tried when a node changes under the walk.
const TASK_WALK_TRIES: usize = 3;

/// `mutex.owner`'s flag bits (`MUTEX_FLAGS`), and `MUTEX_FLAG_WAITERS`: set while the
/// wait list is not empty.
const MUTEX_FLAGS: u64 = 0x07;
const MUTEX_FLAG_WAITERS: u64 = 0x01;
/// `rw_semaphore.owner`'s flag bits (`RWSEM_OWNER_FLAGS_MASK` fits in the low 3) and
/// `RWSEM_READER_OWNED`; `rw_semaphore.count`'s `RWSEM_WRITER_LOCKED` and
/// `RWSEM_FLAG_WAITERS` (set while the wait list is not empty).
const RWSEM_OWNER_FLAGS: u64 = 0x07;
const RWSEM_READER_OWNED: u64 = 0x01;
const RWSEM_WRITER_LOCKED: u64 = 0x01;
const RWSEM_FLAG_WAITERS: u64 = 0x02;
/// `TASK_COMM_LEN`.
const COMM_LEN: usize = 16;
/// `S_IFMT`, `S_IFDIR`, `S_IFREG` of `inode.i_mode`.
const S_IFMT: u16 = 0o170000;
const S_IFDIR: u16 = 0o040000;
const S_IFREG: u16 = 0o100000;
/// FUSE opcodes: 1 (`FUSE_LOOKUP`) to this, or `CUSE_INIT` (4096).
const FUSE_MAX_OPCODE: u32 = 64;
const CUSE_INIT: u32 = 4096;

/// `BPF_PROG_TEST_RUN`, the `bpf(2)` command.
const BPF_PROG_TEST_RUN: libc::c_long = 10;

/// The `test` member of `union bpf_attr` (include/uapi/linux/bpf.h) for
/// `BPF_PROG_TEST_RUN`; the kernel zero-fills the rest of the union.
#[repr(C)]
#[derive(Debug, Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

/// The kind of sleeping lock a thread waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    Mutex,
    RwsemRead,
    RwsemWrite,
}

impl LockKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Mutex => "mutex",
            LockKind::RwsemRead => "rwsem-read",
            LockKind::RwsemWrite => "rwsem-write",
        }
    }
}

/// A task named by kernel memory, checked against `/proc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRef {
    pub tid: u32,
    pub tgid: u32,
    pub comm: String,
}

/// What a sleeping thread waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockedOn {
    /// A sleeping lock: its address, kind, writer owner (`None`: no owner recorded, or
    /// readers own it) and a name when one could be verified
    /// (`i_rwsem of directory inode 1 (fuse)`, a kernel symbol).
    Lock {
        lock_addr: u64,
        kind: LockKind,
        owner: Option<TaskRef>,
        name: Option<String>,
    },
    /// The reply to a FUSE request (`struct fuse_req` at `req_addr`).
    FuseRequest {
        opcode: u32,
        unique: u64,
        req_addr: u64,
    },
}

/// One line: `lock kind=rwsem-write addr=0x... owner_tid=.. owner_tgid=.. owner_comm=..
/// name=...` (name last: it may hold spaces; `-` for an absent owner field or name), or
/// `fuse-request opcode=35 unique=.. req=0x...`.
impl fmt::Display for BlockedOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockedOn::Lock {
                lock_addr,
                kind,
                owner,
                name,
            } => {
                write!(f, "lock kind={} addr={lock_addr:#x}", kind.as_str())?;
                match owner {
                    Some(owner) => write!(
                        f,
                        " owner_tid={} owner_tgid={} owner_comm={}",
                        owner.tid,
                        owner.tgid,
                        owner.comm.replace(' ', "_")
                    )?,
                    None => write!(f, " owner_tid=- owner_tgid=- owner_comm=-")?,
                }
                write!(f, " name={}", name.as_deref().unwrap_or("-"))
            }
            BlockedOn::FuseRequest {
                opcode,
                unique,
                req_addr,
            } => write!(
                f,
                "fuse-request opcode={opcode} unique={unique} req={req_addr:#x}"
            ),
        }
    }
}

/// The wait a thread's kernel stack shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Lock(LockKind),
    Fuse,
}

/// Where the threads of a group are linked.
#[derive(Debug, Clone, Copy)]
enum ThreadList {
    /// `signal->thread_head`, each thread's `thread_node` (Linux 6.7 on, and some
    /// earlier kernels beside `thread_group`).
    Signal {
        task_signal: u64,
        signal_thread_head: u64,
        task_thread_node: u64,
    },
    /// `thread_group`, a ring through the group's tasks.
    Group { task_thread_group: u64 },
}

/// A waiter structure: where its list node and its task pointer are.
#[derive(Debug, Clone, Copy)]
struct WaiterLayout {
    list: u64,
    task: u64,
}

#[derive(Debug, Clone, Copy)]
struct FuseLayout {
    /// `fuse_req.waitq` plus `wait_queue_head.head`: from the request to its list head.
    req_wait_head: u64,
    req_opcode: u64,
    req_unique: u64,
    /// From a request to its connection (`fuse_req.fm`, `fuse_mount.fc`), and from a
    /// `/dev/fuse` file's `fuse_dev` to its connection (`fuse_dev.fc`); absent before
    /// Linux 5.10 (no `fuse_mount`).
    connection: Option<(u64, u64, u64)>,
}

/// From a task to the file behind one of its descriptors.
#[derive(Debug, Clone, Copy)]
struct FilesLayout {
    task_files: u64,
    files_fdt: u64,
    fdt_fd: u64,
    fdt_max_fds: u64,
    file_private_data: u64,
}

#[derive(Debug, Clone, Copy)]
struct InodeLayout {
    i_rwsem: u64,
    i_mode: u64,
    i_sb: u64,
    i_mapping: u64,
    i_ino: u64,
    i_data: u64,
    sb_s_type: u64,
    fs_type_name: u64,
}

/// Struct offsets from the kernel's BTF.
#[derive(Debug, Clone, Copy)]
struct Layout {
    list_next: u64,
    list_prev: u64,
    task_tasks: u64,
    task_pid: u64,
    task_tgid: u64,
    task_group_leader: u64,
    task_stack: u64,
    task_sp: u64,
    task_comm: u64,
    threads: ThreadList,
    mutex_owner: Option<u64>,
    mutex_wait_list: Option<u64>,
    mutex_waiter: Option<WaiterLayout>,
    rwsem_count: Option<u64>,
    rwsem_owner: Option<u64>,
    rwsem_wait_list: Option<u64>,
    rwsem_waiter: Option<WaiterLayout>,
    /// `rwsem_waiter.type`, and the values of `RWSEM_WAITING_FOR_READ` / `_WRITE`.
    rwsem_waiter_type: Option<(u64, u32, u32)>,
    wait_entry: Option<WaiterLayout>,
    fuse: Option<FuseLayout>,
    files: Option<FilesLayout>,
    inode: Option<InodeLayout>,
}

impl Layout {
    fn from_btf(btf: &Btf) -> Result<Layout> {
        let off = |name: &str, path: &str| btf.member_offset(name, path).map(u64::from);
        let opt = |name: &str, path: &str| off(name, path).ok();
        let threads = match (
            off("task_struct", "signal"),
            off("signal_struct", "thread_head"),
            off("task_struct", "thread_node"),
        ) {
            (Ok(task_signal), Ok(signal_thread_head), Ok(task_thread_node)) => ThreadList::Signal {
                task_signal,
                signal_thread_head,
                task_thread_node,
            },
            _ => ThreadList::Group {
                task_thread_group: off("task_struct", "thread_group")
                    .context("task_struct has neither thread_node nor thread_group")?,
            },
        };
        let waiter = |name: &str, list: &str, task: &str| {
            Some(WaiterLayout {
                list: opt(name, list)?,
                task: opt(name, task)?,
            })
        };
        let fuse = fuse_layout(btf).or_else(|| {
            // FUSE built as a module has its own split BTF.
            let module = Btf::from_sys_fs_with_module("fuse").ok()?;
            fuse_layout(&module)
        });
        let files = (|| {
            Some(FilesLayout {
                task_files: opt("task_struct", "files")?,
                files_fdt: opt("files_struct", "fdt")?,
                fdt_fd: opt("fdtable", "fd")?,
                fdt_max_fds: opt("fdtable", "max_fds")?,
                file_private_data: opt("file", "private_data")?,
            })
        })();
        let inode = (|| {
            Some(InodeLayout {
                i_rwsem: opt("inode", "i_rwsem")?,
                i_mode: opt("inode", "i_mode")?,
                i_sb: opt("inode", "i_sb")?,
                i_mapping: opt("inode", "i_mapping")?,
                i_ino: opt("inode", "i_ino")?,
                i_data: opt("inode", "i_data")?,
                sb_s_type: opt("super_block", "s_type")?,
                fs_type_name: opt("file_system_type", "name")?,
            })
        })();
        Ok(Layout {
            list_next: off("list_head", "next")?,
            list_prev: off("list_head", "prev")?,
            task_tasks: off("task_struct", "tasks")?,
            task_pid: off("task_struct", "pid")?,
            task_tgid: off("task_struct", "tgid")?,
            task_group_leader: off("task_struct", "group_leader")?,
            task_stack: off("task_struct", "stack")?,
            task_sp: off("task_struct", "thread.sp")
                .or_else(|_| off("task_struct", "thread.cpu_context.sp"))
                .context("task_struct has no saved stack pointer this module knows")?,
            task_comm: off("task_struct", "comm")?,
            threads,
            mutex_owner: opt("mutex", "owner"),
            mutex_wait_list: opt("mutex", "wait_list"),
            mutex_waiter: waiter("mutex_waiter", "list", "task"),
            rwsem_count: opt("rw_semaphore", "count"),
            rwsem_owner: opt("rw_semaphore", "owner"),
            rwsem_wait_list: opt("rw_semaphore", "wait_list"),
            rwsem_waiter: waiter("rwsem_waiter", "list", "task"),
            rwsem_waiter_type: (|| {
                Some((
                    opt("rwsem_waiter", "type")?,
                    btf.enum_value("RWSEM_WAITING_FOR_READ")?,
                    btf.enum_value("RWSEM_WAITING_FOR_WRITE")?,
                ))
            })(),
            wait_entry: waiter("wait_queue_entry", "entry", "private"),
            fuse,
            files,
            inode,
        })
    }
}

fn fuse_layout(btf: &Btf) -> Option<FuseLayout> {
    let off = |name: &str, path: &str| btf.member_offset(name, path).ok().map(u64::from);
    Some(FuseLayout {
        req_wait_head: off("fuse_req", "waitq")? + off("wait_queue_head", "head")?,
        req_opcode: off("fuse_req", "in.h.opcode")?,
        req_unique: off("fuse_req", "in.h.unique")?,
        connection: (|| {
            Some((
                off("fuse_req", "fm")?,
                off("fuse_mount", "fc")?,
                off("fuse_dev", "fc")?,
            ))
        })(),
    })
}

/// Reads kernel memory through the `kread_run` program, and finds what threads wait for.
pub struct KernelReader {
    prog: OwnedFd,
    buf: Array<MapData, KreadBuf>,
    sequence: u64,
    layout: Layout,
    /// The text of the functions a thread waits in, from kallsyms.
    wait_functions: Vec<WaitFunction>,
}

/// A kernel function a thread waits in: `[start, end)` and the wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WaitFunction {
    start: u64,
    end: u64,
    wait: Wait,
}

impl KernelReader {
    /// Loads the reader program of `ebpf` (the object lockpath loaded) and takes its
    /// buffer map out of it: call once per `Ebpf`.
    pub fn new(ebpf: &mut Ebpf) -> Result<Self> {
        let layout = Layout::from_btf(Btf::vmlinux()?)?;
        let program: &mut RawTracePoint = ebpf
            .program_mut(names::KREAD_PROG)
            .with_context(|| format!("the eBPF object has no program {}", names::KREAD_PROG))?
            .try_into()?;
        if program.fd().is_err() {
            program
                .load()
                .with_context(|| format!("cannot load {}", names::KREAD_PROG))?;
        }
        let prog = program.fd()?.as_fd().try_clone_to_owned()?;
        let map = ebpf.take_map(names::KREAD_BUF).with_context(|| {
            format!(
                "the eBPF object has no map {} (taken already?)",
                names::KREAD_BUF
            )
        })?;
        let buf = Array::try_from(map)?;
        let mut reader = KernelReader {
            prog,
            buf,
            sequence: 0,
            layout,
            wait_functions: wait_functions(),
        };
        // One run now, so a kernel that cannot test-run raw tracepoint programs (before
        // 5.10) fails here with its error rather than every answer being `None`.
        reader
            .run(KREAD_OP_CURRENT_TASK, 0, 0)
            .context("cannot run the kernel reader with BPF_PROG_TEST_RUN")?;
        Ok(reader)
    }

    /// The process serving the FUSE connection of request `req_addr` (a `struct
    /// fuse_req`): of `candidates` (processes and their descriptors open on
    /// `/dev/fuse`), the one whose descriptor's `fuse_dev` belongs to the request's
    /// connection. `None` when none can be verified.
    pub fn fuse_server_of(&mut self, req_addr: u64, candidates: &[(u32, Vec<u32>)]) -> Option<u32> {
        let (req_fm, fm_fc, dev_fc) = self.layout.fuse?.connection?;
        let files = self.layout.files?;
        let mount = self.read_u64(req_addr + req_fm)?;
        let connection = self.read_u64(mount + fm_fc)?;
        if connection == 0 {
            return None;
        }
        candidates.iter().find_map(|(pid, fds)| {
            let task = self.find_task(*pid, *pid)?;
            let table = self.read_u64(task + files.task_files)?;
            let fdt = self.read_u64(table + files.files_fdt)?;
            let array = self.read_u64(fdt + files.fdt_fd)?;
            let max_fds = self.read_u32(fdt + files.fdt_max_fds)?;
            fds.iter().filter(|&&fd| fd < max_fds).find_map(|&fd| {
                let file = self.read_u64(array + 8 * u64::from(fd))?;
                let device = self.read_u64(file + files.file_private_data)?;
                (self.read_u64(device + dev_fc)? == connection).then_some(*pid)
            })
        })
    }

    /// What thread `tid` sleeps on, judged from its kernel stack frames (function names
    /// as `/proc/TID/stack` prints them, leaf first; offsets and module names may stay).
    /// `None` when the stack shows no wait this module knows, or when any step cannot be
    /// verified.
    pub fn blocked_on(&mut self, tid: u32, stack_functions: &[&str]) -> Option<BlockedOn> {
        let tgid = tgid_of(tid)?;
        let task = self.find_task(tid, tgid)?;
        let stack = self.live_stack(task)?;
        let wait = wait_of(stack_functions).or_else(|| self.wait_on_stack(&stack))?;
        let answer = match wait {
            Wait::Lock(kind) => self.lock_wait(task, &stack, kind),
            Wait::Fuse => self.fuse_wait(task, &stack),
        }?;
        // Still the same thread: its task_struct was not freed and reused meanwhile.
        (self.read_u32(task + self.layout.task_pid)? == tid).then_some(answer)
    }

    /// The wait of the leaf-most return address on `stack` that lies in a function a
    /// thread waits in.
    fn wait_on_stack(&self, stack: &LiveStack) -> Option<Wait> {
        stack.words().find_map(|(_, word)| {
            self.wait_functions
                .iter()
                .find(|function| function.start < word && word < function.end)
                .map(|function| function.wait)
        })
    }

    /// One run of the reader; the buffer it wrote, or `None` when the read failed.
    fn run(&mut self, op: u64, address: u64, length: usize) -> Option<KreadBuf> {
        self.sequence += 1;
        let args: [u64; KREAD_ARGS] = [op, address, length as u64, self.sequence];
        let mut attr = TestRunAttr {
            prog_fd: self.prog.as_raw_fd() as u32,
            ctx_in: args.as_ptr() as u64,
            ctx_size_in: std::mem::size_of_val(&args) as u32,
            ..TestRunAttr::default()
        };
        // SAFETY: `attr` is a valid, fully initialised `bpf_attr` prefix for
        // BPF_PROG_TEST_RUN of the size passed; `ctx_in` points to `args`, alive and of
        // `ctx_size_in` bytes for the call; the kernel writes only within `attr`.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_TEST_RUN,
                &mut attr as *mut TestRunAttr,
                std::mem::size_of::<TestRunAttr>() as libc::c_uint,
            )
        };
        if ret != 0 {
            log::debug!("BPF_PROG_TEST_RUN: {}", std::io::Error::last_os_error());
            return None;
        }
        let value = self.buf.get(&0, 0).ok()?;
        (value.sequence == self.sequence && value.status == 0).then_some(value)
    }

    /// `length` bytes at `address` (up to 4 KiB per run; longer reads take several).
    fn read(&mut self, address: u64, length: usize) -> Option<Vec<u8>> {
        let mut bytes = Vec::with_capacity(length);
        while bytes.len() < length {
            let chunk = (length - bytes.len()).min(KREAD_BUF_LEN);
            let at = address.checked_add(bytes.len() as u64)?;
            let value = self.run(KREAD_OP_READ, at, chunk)?;
            bytes.extend_from_slice(&value.bytes[..chunk]);
        }
        Some(bytes)
    }

    fn read_u64(&mut self, address: u64) -> Option<u64> {
        let value = self.run(KREAD_OP_READ, address, 8)?;
        Some(u64::from_ne_bytes(value.bytes[..8].try_into().ok()?))
    }

    /// The 4 bytes at kernel `address`, or `None` when they cannot be read.
    pub(crate) fn read_u32(&mut self, address: u64) -> Option<u32> {
        let value = self.run(KREAD_OP_READ, address, 4)?;
        Some(u32::from_ne_bytes(value.bytes[..4].try_into().ok()?))
    }

    fn read_u16(&mut self, address: u64) -> Option<u16> {
        let value = self.run(KREAD_OP_READ, address, 2)?;
        Some(u16::from_ne_bytes(value.bytes[..2].try_into().ok()?))
    }

    fn current_task(&mut self) -> Option<u64> {
        let value = self.run(KREAD_OP_CURRENT_TASK, 0, 0)?;
        Some(u64::from_ne_bytes(value.bytes[..8].try_into().ok()?)).filter(|&task| task != 0)
    }

    /// `(pid, tgid)` of the task at `task`.
    fn ids(&mut self, task: u64) -> Option<(u32, u32)> {
        let pid = self.read_u32(task + self.layout.task_pid)?;
        let tgid = self.read_u32(task + self.layout.task_tgid)?;
        Some((pid, tgid))
    }

    /// The `next` of the list node at `node`, checked to point back (`next->prev ==
    /// node`).
    fn next_node(&mut self, node: u64) -> Option<u64> {
        let next = self.read_u64(node + self.layout.list_next)?;
        (next != 0 && self.read_u64(next + self.layout.list_prev)? == node).then_some(next)
    }

    /// The `task_struct` of thread `tid` of process `tgid`.
    fn find_task(&mut self, tid: u32, tgid: u32) -> Option<u64> {
        (0..TASK_WALK_TRIES).find_map(|_| {
            let leader = self.find_leader(tgid)?;
            if tid == tgid {
                return Some(leader);
            }
            self.find_thread(leader, tid)
        })
    }

    /// The group leader of process `tgid`, along the leaders' `tasks` list.
    fn find_leader(&mut self, tgid: u32) -> Option<u64> {
        let current = self.current_task()?;
        let start = self.read_u64(current + self.layout.task_group_leader)?;
        let start_node = start + self.layout.task_tasks;
        let mut node = start_node;
        for _ in 0..MAX_TASKS {
            let task = node - self.layout.task_tasks;
            let (pid, group) = self.ids(task)?;
            if pid == tgid && group == tgid {
                return Some(task);
            }
            node = self.next_node(node)?;
            if node == start_node {
                return None;
            }
        }
        None
    }

    /// Thread `tid` among the threads of `leader`.
    fn find_thread(&mut self, leader: u64, tid: u32) -> Option<u64> {
        let (head, node_offset) = match self.layout.threads {
            ThreadList::Signal {
                task_signal,
                signal_thread_head,
                task_thread_node,
            } => {
                let signal = self.read_u64(leader + task_signal)?;
                (signal.checked_add(signal_thread_head)?, task_thread_node)
            }
            ThreadList::Group { task_thread_group } => {
                (leader + task_thread_group, task_thread_group)
            }
        };
        let mut node = head;
        for _ in 0..MAX_TASKS {
            node = self.next_node(node)?;
            if node == head {
                return None;
            }
            let task = node - node_offset;
            if self.ids(task)?.0 == tid {
                return Some(task);
            }
        }
        None
    }

    /// The live part of `task`'s kernel stack, from the saved stack pointer to the top.
    fn live_stack(&mut self, task: u64) -> Option<LiveStack> {
        let stack = self.read_u64(task + self.layout.task_stack)?;
        let sp = self.read_u64(task + self.layout.task_sp)? & !7;
        let top = stack.checked_add(THREAD_SIZE)?;
        if stack == 0 || sp < stack || sp >= top {
            return None;
        }
        let bytes = self.read(sp, (top - sp) as usize)?;
        Some(LiveStack { base: sp, bytes })
    }

    /// Whether `node` is the list node of a waiter (layout `waiter`) that lies on the
    /// kernel stack of the task it names.
    fn is_waiter_on_stack(&mut self, node: u64, waiter: WaiterLayout) -> bool {
        let Some(task) = node
            .checked_sub(waiter.list)
            .and_then(|base| self.read_u64(base + waiter.task))
        else {
            return false;
        };
        if task == 0 {
            return false;
        }
        match self.read_u64(task + self.layout.task_stack) {
            Some(stack) if stack != 0 => (stack..stack.saturating_add(THREAD_SIZE)).contains(&node),
            _ => false,
        }
    }

    /// The waiters (layout `waiter`) naming `task` on its live stack whose lists hold
    /// together, each with the list head it reaches: `(node, head)`. A waiter no longer
    /// queued (its node points to itself, or to poison) reaches none.
    fn queued_waiters(
        &mut self,
        task: u64,
        stack: &LiveStack,
        waiter: WaiterLayout,
    ) -> Vec<(u64, u64)> {
        let mut found = Vec::new();
        for (at, word) in stack.words() {
            if word != task {
                continue;
            }
            // The waiter whose task pointer this would be, wholly on the live stack.
            let Some(waiter_base) = at.checked_sub(waiter.task) else {
                continue;
            };
            if waiter_base < stack.base {
                continue;
            }
            let node = waiter_base + waiter.list;
            if let Some(head) = self.list_head_of(node, waiter) {
                found.push((node, head));
            }
        }
        found
    }

    /// From the waiter node `node`, the first node along `next` that is not a waiter on
    /// its task's stack: the head of the wait list.
    fn list_head_of(&mut self, node: u64, waiter: WaiterLayout) -> Option<u64> {
        let mut at = node;
        for _ in 0..MAX_WAITERS {
            at = self.next_node(at)?;
            if at == node {
                return None;
            }
            if !self.is_waiter_on_stack(at, waiter) {
                return Some(at);
            }
        }
        None
    }

    fn lock_wait(&mut self, task: u64, stack: &LiveStack, kind: LockKind) -> Option<BlockedOn> {
        let layout = self.layout;
        let (waiter, wait_list, owner_offset) = match kind {
            LockKind::Mutex => (
                layout.mutex_waiter?,
                layout.mutex_wait_list?,
                layout.mutex_owner?,
            ),
            LockKind::RwsemRead | LockKind::RwsemWrite => (
                layout.rwsem_waiter?,
                layout.rwsem_wait_list?,
                layout.rwsem_owner?,
            ),
        };
        let queued = self.queued_waiters(task, stack, waiter);
        // One waiter, or no answer.
        let [(node, head)] = queued[..] else {
            return None;
        };
        if let (LockKind::RwsemRead | LockKind::RwsemWrite, Some((offset, read, write))) =
            (kind, layout.rwsem_waiter_type)
        {
            let expected = match kind {
                LockKind::RwsemRead => read,
                _ => write,
            };
            if self.read_u32(node - waiter.list + offset)? != expected {
                return None;
            }
        }
        let lock = head.checked_sub(wait_list)?;
        let owner_word = self.read_u64(lock + owner_offset)?;
        let owner = match kind {
            LockKind::Mutex => {
                if owner_word & MUTEX_FLAG_WAITERS == 0 {
                    return None;
                }
                owner_word & !MUTEX_FLAGS
            }
            LockKind::RwsemRead | LockKind::RwsemWrite => {
                let count = self.read_u64(lock + layout.rwsem_count?)?;
                if count & RWSEM_FLAG_WAITERS == 0 {
                    return None;
                }
                match count & RWSEM_WRITER_LOCKED != 0 && owner_word & RWSEM_READER_OWNED == 0 {
                    true => owner_word & !RWSEM_OWNER_FLAGS,
                    false => 0,
                }
            }
        };
        let owner = match owner {
            0 => None,
            owner => Some(self.task_ref(owner)?),
        };
        let name = match kind {
            LockKind::Mutex => None,
            LockKind::RwsemRead | LockKind::RwsemWrite => self.inode_rwsem_name(lock),
        }
        .or_else(|| kernel_symbol_at(lock));
        Some(BlockedOn::Lock {
            lock_addr: lock,
            kind,
            owner,
            name,
        })
    }

    fn fuse_wait(&mut self, task: u64, stack: &LiveStack) -> Option<BlockedOn> {
        let fuse = self.layout.fuse?;
        let queued = self.queued_waiters(task, stack, self.layout.wait_entry?);
        let [(_, head)] = queued[..] else {
            return None;
        };
        let req = head.checked_sub(fuse.req_wait_head)?;
        let opcode = self.read_u32(req + fuse.req_opcode)?;
        let unique = self.read_u64(req + fuse.req_unique)?;
        let plausible = (1..=FUSE_MAX_OPCODE).contains(&opcode) || opcode == CUSE_INIT;
        (plausible && unique != 0).then_some(BlockedOn::FuseRequest {
            opcode,
            unique,
            req_addr: req,
        })
    }

    /// The task at `task`, read and then checked against `/proc` (the thread exists
    /// there, in that process).
    fn task_ref(&mut self, task: u64) -> Option<TaskRef> {
        let (tid, tgid) = self.ids(task)?;
        let comm = self.read(task + self.layout.task_comm, COMM_LEN)?;
        let comm = String::from_utf8_lossy(comm.split(|&b| b == 0).next()?).into_owned();
        if tid == 0 || tgid_of(tid)? != tgid {
            return None;
        }
        Some(TaskRef { tid, tgid, comm })
    }

    /// `i_rwsem of directory inode 1 (fuse)` when the rwsem at `lock` is the `i_rwsem`
    /// of an inode: the inode's `i_mapping` is its own `i_data`, and its super block's
    /// file-system type has a name `/proc/filesystems` lists.
    fn inode_rwsem_name(&mut self, lock: u64) -> Option<String> {
        let layout = self.layout.inode?;
        let inode = lock.checked_sub(layout.i_rwsem)?;
        if self.read_u64(inode + layout.i_mapping)? != inode + layout.i_data {
            return None;
        }
        let sb = self.read_u64(inode + layout.i_sb)?;
        let fs_type = self.read_u64(sb.checked_add(layout.sb_s_type)?)?;
        let name_ptr = self.read_u64(fs_type.checked_add(layout.fs_type_name)?)?;
        let fs = self.read_c_string(name_ptr, 32)?;
        if !is_file_system(&fs) {
            return None;
        }
        let ino = self.read_u64(inode + layout.i_ino)?;
        let what = match self.read_u16(inode + layout.i_mode)? & S_IFMT {
            S_IFDIR => "directory inode",
            S_IFREG => "file inode",
            _ => "inode",
        };
        Some(format!("i_rwsem of {what} {ino} ({fs})"))
    }

    /// A NUL-terminated string of at most `max` bytes at `address` (read byte-wise near
    /// its end, so a string at the end of a mapping still reads), printable ASCII only.
    fn read_c_string(&mut self, address: u64, max: usize) -> Option<String> {
        let mut bytes = Vec::new();
        for index in 0..max as u64 {
            let byte = self
                .run(KREAD_OP_READ, address.checked_add(index)?, 1)?
                .bytes[0];
            if byte == 0 {
                return Some(String::from_utf8(bytes).ok()).flatten();
            }
            if !byte.is_ascii_graphic() {
                return None;
            }
            bytes.push(byte);
        }
        None
    }
}

/// The live part of a task's kernel stack: its bytes from address `base` up.
struct LiveStack {
    base: u64,
    bytes: Vec<u8>,
}

impl LiveStack {
    /// Each aligned word, leaf first, with its address.
    fn words(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.bytes
            .chunks_exact(8)
            .enumerate()
            .filter_map(|(index, word)| {
                let word = u64::from_ne_bytes(word.try_into().ok()?);
                Some((self.base + 8 * index as u64, word))
            })
    }
}

/// The functions a thread waits in (by `wait_of_function`), with their extent, from
/// `/proc/kallsyms` (empty where it shows no addresses).
fn wait_functions() -> Vec<WaitFunction> {
    let Ok(symbols) = std::fs::read_to_string("/proc/kallsyms") else {
        return Vec::new();
    };
    let mut starts = Vec::new();
    let mut waits = Vec::new();
    for line in symbols.lines() {
        let Some(symbol) = Fields::parse(line) else {
            continue;
        };
        if !matches!(symbol.kind, "t" | "T") || symbol.addr == 0 {
            continue;
        }
        starts.push(symbol.addr);
        if let Some(wait) = wait_of_function(function_name(symbol.name)) {
            waits.push((symbol.addr, wait));
        }
    }
    starts.sort_unstable();
    waits
        .into_iter()
        .filter_map(|(start, wait)| {
            let next = starts.partition_point(|&address| address <= start);
            let end = *starts.get(next)?;
            Some(WaitFunction { start, end, wait })
        })
        .collect()
}

/// Whether `/proc/filesystems` lists `name`.
fn is_file_system(name: &str) -> bool {
    std::fs::read_to_string("/proc/filesystems").is_ok_and(|list| {
        list.lines()
            .any(|line| line.split_whitespace().last() == Some(name))
    })
}

/// The kernel data symbol that starts exactly at `address` (`cgroup_mutex`), from
/// `/proc/kallsyms`.
fn kernel_symbol_at(address: u64) -> Option<String> {
    let symbols = std::fs::read_to_string("/proc/kallsyms").ok()?;
    symbols.lines().find_map(|line| {
        let symbol = Fields::parse(line)?;
        let data = matches!(symbol.kind, "b" | "B" | "d" | "D" | "r" | "R");
        (symbol.addr == address && address != 0 && data).then(|| symbol.name.to_string())
    })
}

/// A frame as `/proc/TID/stack` prints it (`[<0>] __mutex_lock.constprop.0+0x1/0x2
/// [mod]`), or a bare name, reduced to the function's name (`__mutex_lock`).
fn function_name(frame: &str) -> &str {
    let frame = frame.trim();
    let frame = match frame.strip_prefix("[<") {
        Some(rest) => rest.split_once("] ").map_or(rest, |(_, name)| name),
        None => frame,
    };
    let name = frame.split(['+', ' ']).next().unwrap_or(frame);
    // Compiler clones: `.constprop.0`, `.isra.0`, `.part.0`, `.cold`.
    name.split('.').next().unwrap_or(name)
}

/// The wait of a function a thread waits in (its name without clone suffixes).
fn wait_of_function(name: &str) -> Option<Wait> {
    Some(match name {
        "rwsem_down_read_slowpath" => Wait::Lock(LockKind::RwsemRead),
        "rwsem_down_write_slowpath" => Wait::Lock(LockKind::RwsemWrite),
        "__mutex_lock" | "__mutex_lock_common" | "__ww_mutex_lock" => Wait::Lock(LockKind::Mutex),
        "request_wait_answer" => Wait::Fuse,
        _ => return None,
    })
}

/// The wait the leaf frames of a kernel stack show: the first frame, leaf first, that is
/// not the scheduler's, when it is a function a thread waits in. (`/proc/TID/stack`
/// leaves out `__sched` functions, the locks' slow paths among them: there the leaf
/// frame is the lock's caller, and the live stack tells.)
fn wait_of(stack_functions: &[&str]) -> Option<Wait> {
    let name = stack_functions
        .iter()
        .map(|frame| function_name(frame))
        .find(|name| !(name.contains("schedule") || name.starts_with("__switch_to")))?;
    wait_of_function(name)
}

/// The kernel stack of thread `tid` as `/proc/TID/stack` prints it, one frame a line.
pub fn kernel_stack(tid: u32) -> Result<Vec<String>> {
    let path = format!("/proc/{tid}/stack");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    Ok(text.lines().map(str::to_string).collect())
}

/// `lockpath debug blocked-on TID...`: loads the eBPF object with its maps at one entry
/// each, and prints what each thread waits for, one line each: `TID: ANSWER` (`none`
/// when nothing is verified, the thread gone included).
pub fn debug_blocked_on(tids: &[u32]) -> Result<i32> {
    crate::ebpf_object::check_privileges()?;
    let mut loader = aya::EbpfLoader::new();
    loader.map_max_entries(profiler_common::shared::names::STACKS, 1);
    loader.map_max_entries(profiler_common::shared::names::STACKS_ODD, 1);
    loader.map_max_entries(profiler_common::shared::names::STACKS_SPARE, 1);
    for family in crate::probes::FAMILIES {
        for &(map, _) in family.maps {
            loader.map_max_entries(map, 1);
        }
    }
    let mut ebpf = crate::probes::shared::load_object(&mut loader)?;
    let mut reader = KernelReader::new(&mut ebpf)?;
    for &tid in tids {
        let stack = kernel_stack(tid).unwrap_or_default();
        let frames: Vec<&str> = stack.iter().map(String::as_str).collect();
        match reader.blocked_on(tid, &frames) {
            Some(answer) => println!("{tid}: {answer}"),
            None => println!("{tid}: none"),
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_run_attr_has_the_uapi_layout() {
        // `test` of union bpf_attr: ctx_in at 48, flags at 64, batch_size at 72.
        assert_eq!(std::mem::size_of::<TestRunAttr>(), 80);
        assert_eq!(std::mem::offset_of!(TestRunAttr, data_in), 16);
        assert_eq!(std::mem::offset_of!(TestRunAttr, repeat), 32);
        assert_eq!(std::mem::offset_of!(TestRunAttr, ctx_size_in), 40);
        assert_eq!(std::mem::offset_of!(TestRunAttr, ctx_in), 48);
        assert_eq!(std::mem::offset_of!(TestRunAttr, flags), 64);
        assert_eq!(std::mem::offset_of!(TestRunAttr, batch_size), 72);
    }

    #[test]
    fn frames_reduce_to_function_names() {
        assert_eq!(
            function_name("[<0>] __mutex_lock.constprop.0+0x2b4/0x8f0"),
            "__mutex_lock"
        );
        assert_eq!(
            function_name("[<0>] request_wait_answer+0x12a/0x2a0 [fuse]"),
            "request_wait_answer"
        );
        assert_eq!(
            function_name("rwsem_down_write_slowpath"),
            "rwsem_down_write_slowpath"
        );
    }

    #[test]
    fn the_leaf_frames_decide_the_wait() {
        assert_eq!(
            wait_of(&[
                "rwsem_down_write_slowpath+0x1/0x2",
                "down_write",
                "open_last_lookups"
            ]),
            Some(Wait::Lock(LockKind::RwsemWrite))
        );
        assert_eq!(
            wait_of(&["schedule", "rwsem_down_read_slowpath", "down_read"]),
            Some(Wait::Lock(LockKind::RwsemRead))
        );
        assert_eq!(
            wait_of(&["schedule_preempt_disabled", "__mutex_lock.constprop.0"]),
            Some(Wait::Lock(LockKind::Mutex))
        );
        assert_eq!(
            wait_of(&["request_wait_answer", "__fuse_simple_request"]),
            Some(Wait::Fuse)
        );
        // A wait elsewhere, even with a lock's slow path further up, is not a lock wait.
        assert_eq!(wait_of(&["pipe_read", "__mutex_lock"]), None);
        assert_eq!(wait_of(&["path_openat", "do_filp_open"]), None);
        assert_eq!(wait_of(&[]), None);
    }

    #[test]
    fn answers_print_on_one_line() {
        let lock = BlockedOn::Lock {
            lock_addr: 0xffff_8880_0000_1098,
            kind: LockKind::RwsemWrite,
            owner: Some(TaskRef {
                tid: 12,
                tgid: 10,
                comm: "fuse workload".into(),
            }),
            name: Some("i_rwsem of directory inode 1 (fuse)".into()),
        };
        assert_eq!(
            lock.to_string(),
            "lock kind=rwsem-write addr=0xffff888000001098 owner_tid=12 owner_tgid=10 \
             owner_comm=fuse_workload name=i_rwsem of directory inode 1 (fuse)"
        );
        let fuse = BlockedOn::FuseRequest {
            opcode: 35,
            unique: 8,
            req_addr: 0x10,
        };
        assert_eq!(fuse.to_string(), "fuse-request opcode=35 unique=8 req=0x10");
    }
}
