//! Block IO: attach the block raw tracepoints (requests keyed by their `struct request`
//! pointer, fields read through offsets from BTF), drain `IO_STATS`, name the devices.
//! (Percentiles of the histograms: `lockpath_profile::histogram`.)

use std::collections::HashMap as StdHashMap;

use anyhow::{bail, Context, Result};
use aya::{Ebpf, EbpfLoader};
use clap::Args;
use profiler_common::io::{
    names, CallKey, DirtyKey, DirtyStat, IoFile, IoInFlight, IoKey, IoLayout, IoStat, CALL_FSYNC,
    CALL_OPEN, CALL_READ, CALL_WRITE, IO_CALL_START_ENTRIES, IO_FILES_ENTRIES, IO_FILE_NO_DENTRY,
    IO_FILE_ROOT, IO_INFLIGHT_ENTRIES, IO_NO_OFFSET, IO_NO_OP, OP_DISCARD, OP_FLUSH,
    OP_PASSTHROUGH, OP_READ, OP_WRITE, SYSCALL_ARG0_OFFSET,
};

use crate::{
    btf::Btf,
    probes::prelude::*,
    profile::{DirtiedRow, FileCallRow, FileRef, IoRow, WaitingRow},
};

pub const FAMILY: Registration = Registration {
    name: "io",
    asked: |args| args.io.io,
    check: |_| Ok(()),
    plan: plan_family,
    maps: &[
        (names::IO_STATS, MapSize::Stats),
        (names::IO_OVERFLOW, MapSize::Overflow),
        (names::IO_INFLIGHT, MapSize::Fixed(IO_INFLIGHT_ENTRIES)),
        (names::IO_FILES, MapSize::Fixed(IO_FILES_ENTRIES)),
        (names::IO_DIRTIED, MapSize::Stats),
        (names::IO_DIRTIED_OVERFLOW, MapSize::Overflow),
        (names::IO_CALLS, MapSize::Stats),
        (names::IO_CALLS_OVERFLOW, MapSize::Overflow),
        (names::IO_CALL_START, MapSize::Fixed(IO_CALL_START_ENTRIES)),
    ],
    names: names::ALL,
};

fn plan_family(args: &FamilyArgs, _ctx: &mut PlanContext) -> Result<Planned> {
    if !args.io.io {
        return Ok(None);
    }
    let globals = IoGlobals::read()?;
    let file_calls = if args.io.file_calls {
        Some(file_call_events(&globals.layout)?)
    } else {
        None
    };
    Ok(Some(Box::new(IoFamily {
        globals,
        devices: DeviceNames::scan(),
        file_calls,
    })))
}

/// The block-IO family of one recording: offsets, the device names seen, and the
/// syscall tracepoints of `--file-calls` (program, event).
struct IoFamily {
    globals: IoGlobals,
    devices: DeviceNames,
    file_calls: Option<Vec<(&'static str, String)>>,
}

impl Family for IoFamily {
    fn configure<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        self.globals.apply(loader);
    }

    fn attach(&mut self, ebpf: &mut Ebpf, _ctx: &mut AttachContext) -> Result<Vec<ProbeUse>> {
        let mut used = attach(ebpf, &self.globals)?;
        if let Some(events) = &self.file_calls {
            for (program, event) in events {
                attach_tracepoint(ebpf, program, "syscalls", event)?;
            }
            used.method.push_str(&format!(
                "; file calls: {} syscall tracepoints",
                events.len()
            ));
        }
        Ok(vec![used])
    }

    /// Devices that appeared during the run get their names too.
    fn stopped(&mut self, _maps: &mut MapSet) -> Result<()> {
        self.devices.merge(DeviceNames::scan());
        Ok(())
    }

    fn drain(&self, out: &mut Drain) -> Result<()> {
        let files = Files::read(out.maps, &self.devices)?;
        out.profile.io = drain(out.maps, &self.devices, &files)?;
        out.profile.io_dirtied = drain_dirtied(out.maps, &files)?;
        if self.file_calls.is_some() {
            out.profile.file_calls = drain_calls(out.maps, &files)?;
        }
        let waiting = drain_in_flight(out.maps, &self.devices, out.moment)?;
        out.profile.waiting.extend(waiting);
        Ok(())
    }

    fn progress(&self, live: &Profile) -> Option<String> {
        progress_of(&live.io, |row| row.count, "IO requests")
    }
}

/// Load-time layout of the IO programs, from the kernel's BTF, and which of the optional
/// raw tracepoints this kernel has.
pub struct IoGlobals {
    layout: IoLayout,
    /// (program, raw tracepoint) to attach, in order (the completion first, so no
    /// request is admitted that could not be closed).
    events: Vec<(&'static str, &'static str)>,
    /// Why requests have no file or writeback no cause on this kernel, if so.
    pub without_cause: Option<String>,
}

/// The system calls `--file-calls` times: (program, the syscalls it enters, kind).
const CALL_SYSCALLS: [(&str, &[&str]); 4] = [
    (
        names::IO_CALL_READ,
        &["read", "pread64", "readv", "preadv", "preadv2"],
    ),
    (
        names::IO_CALL_WRITE,
        &["write", "pwrite64", "writev", "pwritev", "pwritev2"],
    ),
    (names::IO_CALL_FSYNC, &["fsync", "fdatasync"]),
    (names::IO_CALL_OPEN, &["open", "openat", "openat2", "creat"]),
];

/// The syscall tracepoints of `--file-calls` on this kernel, each `sys_enter_X` with its
/// program then its `sys_exit_X`; an error when the kernel has none, or no way from a
/// descriptor to its file.
fn file_call_events(layout: &IoLayout) -> Result<Vec<(&'static str, String)>> {
    use crate::tracefs::field_offset;
    if layout.task_files == IO_NO_OFFSET {
        bail!("--file-calls: no way from a file descriptor to its file in this kernel's BTF");
    }
    let mut events = Vec::new();
    for (program, syscalls) in CALL_SYSCALLS {
        for syscall in syscalls {
            let (enter, exit) = (
                format!("sys_enter_{syscall}"),
                format!("sys_exit_{syscall}"),
            );
            // A syscall this kernel or architecture does not have (arm64 has no open).
            let (Ok(_), Ok(ret)) = (
                field_offset("syscalls", &enter, "__syscall_nr"),
                field_offset("syscalls", &exit, "ret"),
            ) else {
                continue;
            };
            let fd = match program {
                names::IO_CALL_OPEN => SYSCALL_ARG0_OFFSET,
                _ => field_offset("syscalls", &enter, "fd")?,
            };
            if (fd, ret) != (SYSCALL_ARG0_OFFSET, SYSCALL_ARG0_OFFSET) {
                bail!("--file-calls: syscalls:{enter} has an unexpected record layout");
            }
            events.push((program, enter));
            events.push((names::IO_CALL_EXIT, exit));
        }
    }
    if events.is_empty() {
        bail!(
            "--file-calls needs the syscall tracepoints (syscalls:sys_enter_read, ...), and \
             this kernel has none (CONFIG_FTRACE_SYSCALLS)"
        );
    }
    Ok(events)
}

/// What `CALL_*` is called in a profile.
pub fn call_name(call: u32) -> &'static str {
    match call {
        CALL_READ => "read",
        CALL_WRITE => "write",
        CALL_FSYNC => "fsync",
        CALL_OPEN => "open",
        _ => "other",
    }
}

/// The file of the rows of timed calls a full `IO_CALLS` had no room for.
pub const CALLS_MAP_FULL: &str = "[calls map full]";

/// Timed file calls (`IO_CALLS`), one row per (process, call, file).
pub fn drain_calls(maps: &MapSet, files: &Files) -> Result<Vec<FileCallRow>> {
    let mut rows = Vec::new();
    for (key, stat) in
        maps.entries_with_overflow::<CallKey, IoStat>(names::IO_CALLS, names::IO_CALLS_OVERFLOW)?
    {
        // No file: a row of the calls the full map had no room for.
        let file = files.get(key.file_dev, key.ino).unwrap_or_else(|| FileRef {
            path: CALLS_MAP_FULL.into(),
            ..FileRef::default()
        });
        let hist = lockpath_profile::histogram::trimmed(&stat.hist);
        rows.push(FileCallRow {
            pid: key.tgid,
            call: call_name(key.call).into(),
            file,
            count: stat.count,
            bytes: stat.bytes,
            total_ns: stat.total_ns,
            max_ns: stat.max_ns,
            hist,
        });
    }
    rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.pid.cmp(&b.pid)));
    Ok(rows)
}

/// The raw tracepoints where a task dirties a page of a file, newest first; the
/// mapping is argument 1 of each.
const DIRTY_EVENTS: [&str; 2] = ["writeback_dirty_folio", "writeback_dirty_page"];

/// (struct, member).
type Member = (&'static str, &'static str);

/// Chains to the disk's `dev_t` from a `struct request`, newest kernels first: each is
/// (struct, member) pointer hops, then the final (struct, member) `dev_t`.
const DEV_CHAINS: [(&[Member], Member); 3] = [
    // 5.15+: rq->q->disk->part0->bd_dev (the tracepoints' disk_devt(rq->q->disk)).
    (
        &[
            ("request", "q"),
            ("request_queue", "disk"),
            ("gendisk", "part0"),
        ],
        ("block_device", "bd_dev"),
    ),
    // 5.11 - 5.14: rq->rq_disk->part0->bd_dev.
    (
        &[("request", "rq_disk"), ("gendisk", "part0")],
        ("block_device", "bd_dev"),
    ),
    // 5.10 and older: rq->rq_disk->part0.__dev.devt (part0 embedded).
    (&[("request", "rq_disk")], ("gendisk", "part0.__dev.devt")),
];

/// ((program reading rq from argument 0, program reading it from argument 1), raw
/// tracepoint, required), in attach order.
type Programs = (&'static str, &'static str);
const EVENTS: [(Programs, &str, bool); 5] = [
    ((names::IO_RQ_COMPLETE, ""), "block_rq_complete", true),
    (
        (names::IO_RQ_MERGE, names::IO_RQ_MERGE_Q),
        "block_rq_merge",
        false,
    ),
    (
        (names::IO_RQ_REQUEUE, names::IO_RQ_REQUEUE_Q),
        "block_rq_requeue",
        false,
    ),
    (
        (names::IO_RQ_INSERT, names::IO_RQ_INSERT_Q),
        "block_rq_insert",
        false,
    ),
    (
        (names::IO_RQ_ISSUE, names::IO_RQ_ISSUE_Q),
        "block_rq_issue",
        true,
    ),
];

impl IoGlobals {
    /// Reads the layout from /sys/kernel/btf/vmlinux. Without BTF there is no safe way
    /// to read `struct request`: a clear error rather than guessed offsets.
    pub fn read() -> Result<Self> {
        let btf = Btf::vmlinux().context(
            "--io reads the kernel's struct request at offsets from its BTF, and this kernel has none",
        )?;
        Self::from_btf(btf).context("--io: cannot read the block layer's layout from kernel BTF")
    }

    pub fn from_btf(btf: &Btf) -> Result<Self> {
        let mut layout = IoLayout {
            cmd_flags: btf.member_offset("request", "cmd_flags")?,
            data_len: btf.member_offset("request", "__data_len")?,
            start_time_ns: btf
                .member_offset("request", "start_time_ns")
                .unwrap_or(IO_NO_OFFSET),
            // The optional chains (a request's file, a file's names, a descriptor's
            // file, a thread's leader) start absent (`IO_NO_OFFSET`): the programs then
            // skip them rather than follow offset 0.
            ..IoLayout::MAINLINE
        };
        let mut errors = Vec::new();
        let mut found = false;
        for (hops, last) in DEV_CHAINS {
            match dev_chain(btf, hops, last) {
                Ok(offsets) => {
                    layout.dev_hops = hops.len() as u32;
                    layout.dev_offsets = offsets;
                    found = true;
                    break;
                }
                Err(err) => errors.push(format!("{err:#}")),
            }
        }
        if !found {
            bail!(
                "no known way from struct request to its disk's dev_t: {}",
                errors.join("; ")
            );
        }
        // REQ_OP_BITS is the first flag bit (__REQ_FAILFAST_DEV); 8 since 4.10.
        let op_bits = btf.enum_value("__REQ_FAILFAST_DEV").unwrap_or(8);
        layout.op_mask = (1u32 << op_bits.min(31)) - 1;
        let op = |name: &str| btf.enum_value(name).unwrap_or(IO_NO_OP);
        layout.op_read = op("REQ_OP_READ");
        layout.op_write = op("REQ_OP_WRITE");
        layout.op_flush = op("REQ_OP_FLUSH");
        layout.op_discard = op("REQ_OP_DISCARD");
        layout.op_secure_erase = op("REQ_OP_SECURE_ERASE");
        // SCSI_IN/OUT: passthrough before 5.11 (merged into DRV_IN/OUT later).
        layout.op_passthrough = [
            op("REQ_OP_DRV_IN"),
            op("REQ_OP_DRV_OUT"),
            op("REQ_OP_SCSI_IN"),
            op("REQ_OP_SCSI_OUT"),
        ];
        if layout.op_read == IO_NO_OP || layout.op_write == IO_NO_OP {
            bail!("kernel BTF has no REQ_OP_READ/REQ_OP_WRITE");
        }

        let mut without_cause = file_layout(btf, &mut layout)
            .err()
            .map(|err| format!("block requests have no file: {err:#}"));
        let mut events = Vec::new();
        for (program, event, required) in EVENTS {
            let rq = match btf.raw_tracepoint_arg(event, "request") {
                Ok(index) => index,
                Err(_) if !required => continue,
                Err(err) => return Err(err),
            };
            let program = match (event, rq) {
                // (rq, error, nr_bytes): the program reads arguments 0 and 2.
                ("block_rq_complete", 0) => {
                    let args = btf.raw_tracepoint_args(event)?;
                    if args.len() != 3 {
                        bail!("raw tracepoint {event}: unexpected arguments {args:?}");
                    }
                    program.0
                }
                ("block_rq_complete", _) => {
                    bail!("raw tracepoint {event}: struct request is argument {rq}")
                }
                (_, 0) => program.0,
                // Before 5.11: (struct request_queue *q, struct request *rq).
                (_, 1) => program.1,
                _ => bail!("raw tracepoint {event}: struct request is argument {rq}"),
            };
            events.push((program, event));
        }
        if without_cause.is_none() {
            match dirty_event(btf) {
                Ok(event) => events.push((names::IO_DIRTY, event)),
                Err(err) => without_cause = Some(format!("{err:#}")),
            }
        }
        Ok(IoGlobals {
            layout,
            events,
            without_cause,
        })
    }

    pub fn apply<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        loader.override_global(names::IO_LAYOUT, &self.layout, true);
    }
}

/// The offsets from a request to its first page's file, and from the file to its names
/// (`IoLayout::rq_bio` ... `dentry_name`). Without the names a file keeps its number.
fn file_layout(btf: &Btf, layout: &mut IoLayout) -> Result<()> {
    let mut file = IoLayout {
        rq_bio: btf.member_pointer_offset("request", "bio")?,
        bio_io_vec: btf.member_pointer_offset("bio", "bi_io_vec")?,
        bv_page: btf.member_pointer_offset("bio_vec", "bv_page")?,
        // 7.x encodes a tail page's head differently (`compound_info`); a bio's first
        // page is its folio's head page anyway (`bio_add_folio`).
        page_compound_head: btf
            .member_offset("page", "compound_head")
            .unwrap_or(IO_NO_OFFSET),
        page_mapping: btf.member_pointer_offset("page", "mapping")?,
        mapping_host: btf.member_pointer_offset("address_space", "host")?,
        inode_ino: btf.member_offset("inode", "i_ino")?,
        inode_sb: btf.member_pointer_offset("inode", "i_sb")?,
        sb_dev: btf.member_offset("super_block", "s_dev")?,
        ..*layout
    };
    let names = (|| -> Result<[u32; 4]> {
        Ok([
            btf.member_offset("inode", "i_dentry")?,
            // 7.x: the alias list node is no longer in the `d_u` union.
            btf.member_offset("dentry", "d_u.d_alias")
                .or_else(|_| btf.member_offset("dentry", "d_alias"))?,
            btf.member_pointer_offset("dentry", "d_parent")?,
            btf.member_offset("dentry", "d_name.name")?,
        ])
    })();
    match names {
        Ok([inode_dentry, dentry_alias, dentry_parent, dentry_name]) => {
            file.inode_dentry = inode_dentry;
            file.dentry_alias = dentry_alias;
            file.dentry_parent = dentry_parent;
            file.dentry_name = dentry_name;
        }
        Err(err) => log::warn!("--io: files are shown by number only: {err:#}"),
    }
    if let (Ok(leader), Ok(comm)) = (
        btf.member_pointer_offset("task_struct", "group_leader"),
        btf.member_offset("task_struct", "comm"),
    ) {
        file.task_group_leader = leader;
        file.task_comm = comm;
    }
    let descriptors = (|| -> Result<[u32; 6]> {
        Ok([
            btf.member_pointer_offset("task_struct", "files")?,
            btf.member_pointer_offset("files_struct", "fdt")?,
            btf.member_offset("fdtable", "max_fds")?,
            btf.member_pointer_offset("fdtable", "fd")?,
            btf.member_pointer_offset("file", "f_inode")?,
            btf.member_offset("inode", "i_mode")?,
        ])
    })();
    if let Ok([task_files, files_fdt, fdt_max_fds, fdt_fd, file_inode, inode_mode]) = descriptors {
        file.task_files = task_files;
        file.files_fdt = files_fdt;
        file.fdt_max_fds = fdt_max_fds;
        file.fdt_fd = fdt_fd;
        file.file_inode = file_inode;
        file.inode_mode = inode_mode;
        if let Ok(f_flags) = btf.member_offset("file", "f_flags") {
            file.file_f_flags = f_flags;
            file.o_direct = libc::O_DIRECT as u32;
        }
    }
    *layout = file;
    Ok(())
}

/// The raw tracepoint where this kernel marks a file's page dirty, with the mapping as
/// argument 1 (what `io_dirty` reads).
fn dirty_event(btf: &Btf) -> Result<&'static str> {
    let mut errors = Vec::new();
    for event in DIRTY_EVENTS {
        match btf.raw_tracepoint_arg(event, "address_space") {
            Ok(1) => return Ok(event),
            Ok(index) => errors.push(format!("{event}: the mapping is argument {index}")),
            Err(err) => errors.push(format!("{err:#}")),
        }
    }
    bail!(
        "writeback is charged to the thread that issues it (no dirty-page tracepoint: {})",
        errors.join("; ")
    )
}

/// Offsets of one pointer chain, or why this kernel does not have it.
fn dev_chain(btf: &Btf, hops: &[Member], last: Member) -> Result<[u32; 4]> {
    let mut offsets = [0u32; 4];
    for (index, (name, member)) in hops.iter().enumerate() {
        offsets[index] = btf.member_pointer_offset(name, member)?;
    }
    offsets[hops.len()] = btf.member_offset(last.0, last.1)?;
    Ok(offsets)
}

pub fn attach(ebpf: &mut Ebpf, globals: &IoGlobals) -> Result<ProbeUse> {
    for (name, event) in &globals.events {
        attach_raw_tracepoint(ebpf, name, event)?;
    }
    if let Some(why) = &globals.without_cause {
        eprintln!("lockpath: --io: {why}");
    }
    Ok(ProbeUse {
        family: "io".into(),
        method: format!(
            "raw_tracepoint {}, key = struct request pointer",
            globals
                .events
                .iter()
                .map(|(_, event)| *event)
                .collect::<Vec<_>>()
                .join("/")
        ),
    })
}

/// Names of block devices by (major, minor), from /sys/dev/block. Taken at the start
/// and again at the end of a run, so a device that vanished mid-run keeps its name.
#[derive(Debug, Default, Clone)]
pub struct DeviceNames {
    names: StdHashMap<(u32, u32), String>,
}

impl DeviceNames {
    pub fn scan() -> Self {
        let mut names = StdHashMap::new();
        if let Ok(entries) = std::fs::read_dir("/sys/dev/block") {
            for entry in entries.flatten() {
                let file_name = entry.file_name();
                let Some((major, minor)) = file_name
                    .to_str()
                    .and_then(|text| text.split_once(':'))
                    .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
                else {
                    continue;
                };
                // The link points at .../block/<disk>[/<partition>]: its last component.
                if let Some(name) = std::fs::read_link(entry.path())
                    .ok()
                    .and_then(|target| target.file_name().map(|n| n.to_string_lossy().into_owned()))
                {
                    names.insert((major, minor), name);
                }
            }
        }
        DeviceNames { names }
    }

    /// Adds names from `later` that this scan does not have (devices that appeared).
    pub fn merge(&mut self, later: DeviceNames) {
        for (dev, name) in later.names {
            self.names.entry(dev).or_insert(name);
        }
    }

    /// The name of a device this scan found.
    pub fn known(&self, major: u32, minor: u32) -> Option<&str> {
        self.names.get(&(major, minor)).map(String::as_str)
    }

    /// The name of a device, or its number when this scan did not find it.
    pub fn name(&self, major: u32, minor: u32) -> String {
        self.known(major, minor)
            .map_or_else(|| format!("{major}:{minor}"), str::to_owned)
    }
}

/// The kernel's `dev_t` in tracepoints: major << 20 | minor.
pub fn split_dev(dev: u32) -> (u32, u32) {
    (dev >> 20, dev & ((1 << 20) - 1))
}

pub fn op_name(op: u32) -> &'static str {
    match op {
        OP_READ => "read",
        OP_WRITE => "write",
        OP_FLUSH => "flush",
        OP_DISCARD => "discard",
        OP_PASSTHROUGH => "passthrough",
        _ => "other",
    }
}

/// The block requests still in flight at the drain (`IO_INFLIGHT`), as waits in
/// progress of the processes that submitted them (the thread is not known: `tid` is
/// the process's id). Their time enters the IO rows when they complete.
fn drain_in_flight(
    maps: &MapSet,
    devices: &DeviceNames,
    moment: DrainMoment,
) -> Result<Vec<WaitingRow>> {
    use super::shared::inprogress::drain_listed;
    let start_ns = |request: &IoInFlight| request.start_ns;
    let row = |_: u64, request: IoInFlight, age_ns| {
        let (major, minor) = split_dev(request.dev);
        let state = match request.issue_ns {
            0 => "queued",
            _ => "issued",
        };
        Some(WaitingRow {
            kind: "io".into(),
            pid: request.tgid,
            tid: request.tgid,
            since_ns: request.start_ns,
            age_ns,
            counted_ns: 0,
            class: op_name(request.op).into(),
            what: format!(
                "{} ({state}, {} bytes)",
                devices.name(major, minor),
                request.bytes
            ),
            ..Default::default()
        })
    };
    drain_listed(maps, names::IO_INFLIGHT, moment, start_ns, row)
}

/// The files the programs saw, by (file system `dev_t`, inode number), with their paths.
pub struct Files {
    by_number: StdHashMap<(u32, u64), String>,
}

impl Files {
    pub fn read(maps: &MapSet, devices: &DeviceNames) -> Result<Self> {
        let mounts = Mounts::read();
        let mut by_number = StdHashMap::new();
        for (_, file) in maps.entries::<u64, IoFile>(names::IO_FILES)? {
            let path = path_of(&file, &mounts, devices);
            let known: &mut String = by_number.entry((file.dev, file.ino)).or_default();
            if known.is_empty() {
                *known = path;
            }
        }
        Ok(Files { by_number })
    }

    /// The reference of file (`dev`, `ino`); `None` for (0, 0), no file. (A block
    /// device's own inode has number 0 before 6.x, on a file system of its own.)
    pub fn get(&self, dev: u32, ino: u64) -> Option<FileRef> {
        if dev == 0 && ino == 0 {
            return None;
        }
        let (major, minor) = split_dev(dev);
        Some(FileRef {
            major,
            minor,
            ino,
            path: self.by_number.get(&(dev, ino)).cloned().unwrap_or_default(),
        })
    }
}

/// Mount points of file systems by device, from /proc/self/mountinfo: where the root
/// of each file system is mounted (the first such mount).
#[derive(Debug, Default)]
pub struct Mounts {
    roots: StdHashMap<(u32, u32), String>,
}

impl Mounts {
    pub fn read() -> Self {
        Self::parse(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
    }

    /// `ID PARENT MAJ:MIN ROOT MOUNTPOINT ...` per line; octal escapes in the mount
    /// point (`\040` for a space) are decoded.
    pub fn parse(text: &str) -> Self {
        let mut roots = StdHashMap::new();
        for line in text.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let [_, _, dev, root, mount_point, ..] = fields.as_slice() else {
                continue;
            };
            let Some((major, minor)) = dev
                .split_once(':')
                .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            else {
                continue;
            };
            if *root == "/" {
                roots
                    .entry((major, minor))
                    .or_insert_with(|| unescape_octal(mount_point));
            }
        }
        Mounts { roots }
    }
}

/// `\040`-style escapes of /proc's mount tables decoded.
fn unescape_octal(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let escape = bytes
            .get(index + 1..index + 4)
            .filter(|_| bytes[index] == b'\\');
        match escape
            .and_then(|digits| u8::from_str_radix(std::str::from_utf8(digits).ok()?, 8).ok())
        {
            Some(byte) => {
                out.push(byte);
                index += 4;
            }
            None => {
                out.push(bytes[index]);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A file's path from the names its programs read (its own first): absolute under its
/// file system's mount point when they reached the root, else led by `.../`. A file of
/// a pseudo file system without names says so: the block devices' own page cache, where
/// file systems keep metadata and the journal, and raw reads and writes of a device go:
/// an inode without a dentry on a file system without a device, or (kernels that open
/// block devices as files, with a dentry named "") one whose inode number is a block
/// device's number, as the kernel numbers a block device's inode.
pub fn path_of(file: &IoFile, mounts: &Mounts, devices: &DeviceNames) -> String {
    let mut parts: Vec<String> = file
        .names
        .iter()
        .map(|name| {
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            String::from_utf8_lossy(&name[..end]).into_owned()
        })
        .take_while(|name| !name.is_empty())
        .collect();
    let (major, minor) = split_dev(file.dev);
    if parts.is_empty() {
        if major != 0 {
            return String::new();
        }
        let device = u32::try_from(file.ino)
            .ok()
            .map(split_dev)
            .and_then(|(major, minor)| devices.known(major, minor));
        return match device {
            Some(device) => format!("[block device page cache: {device}]"),
            None if file.flags & IO_FILE_NO_DENTRY != 0 => "[block device page cache]".into(),
            None => String::new(),
        };
    }
    let reached_root = file.flags & IO_FILE_ROOT != 0;
    if reached_root {
        // The root's own name ("/").
        parts.pop();
    }
    parts.reverse();
    let below = parts.join("/");
    match (reached_root, mounts.roots.get(&(major, minor))) {
        (true, Some(mount_point)) => {
            format!("{}/{below}", mount_point.trim_end_matches('/'))
        }
        (true, None) => format!("{major}:{minor}:/{below}"),
        (false, _) => format!(".../{below}"),
    }
}

/// The file of the rows of dirtied folios a full `IO_DIRTIED` had no room for.
pub const DIRTIED_MAP_FULL: &str = "[dirtied map full]";

/// Who dirtied which file (`IO_DIRTIED`), one row per (file, process).
pub fn drain_dirtied(maps: &MapSet, files: &Files) -> Result<Vec<DirtiedRow>> {
    let mut rows = Vec::new();
    for (key, stat) in maps.entries_with_overflow::<DirtyKey, DirtyStat>(
        names::IO_DIRTIED,
        names::IO_DIRTIED_OVERFLOW,
    )? {
        let file = match files.get(stat.dev, stat.ino) {
            Some(file) => file,
            // No file in the key: a row of the folios the full map had no room for.
            None if key.inode == 0 => FileRef {
                path: DIRTIED_MAP_FULL.into(),
                ..FileRef::default()
            },
            // A file whose name was never recorded: left out, not called a full map.
            None => continue,
        };
        rows.push(DirtiedRow {
            pid: key.tgid,
            file,
            folios: stat.folios,
        });
    }
    rows.sort_by(|a, b| b.folios.cmp(&a.folios).then(a.pid.cmp(&b.pid)));
    Ok(rows)
}

pub fn drain(maps: &MapSet, devices: &DeviceNames, files: &Files) -> Result<Vec<IoRow>> {
    let mut rows = Vec::new();
    for (key, stat) in
        maps.entries_with_overflow::<IoKey, IoStat>(names::IO_STATS, names::IO_OVERFLOW)?
    {
        let (major, minor) = split_dev(key.dev);
        let hist = lockpath_profile::histogram::trimmed(&stat.hist);
        rows.push(IoRow {
            major,
            minor,
            device: devices.name(major, minor),
            op: op_name(key.op).into(),
            pid: key.tgid,
            count: stat.count,
            bytes: stat.bytes,
            total_ns: stat.total_ns,
            max_ns: stat.max_ns,
            queued: stat.queued,
            queue_ns: stat.queue_ns,
            hist,
            file: files.get(key.file_dev, key.ino),
        });
    }
    rows.sort_by(|a, b| {
        (a.major, a.minor, &a.op, std::cmp::Reverse(a.count)).cmp(&(
            b.major,
            b.minor,
            &b.op,
            std::cmp::Reverse(b.count),
        ))
    });
    Ok(rows)
}

// `record`'s option of the block-IO family.

#[derive(Debug, Args)]
pub struct IoArgs {
    /// Record block-IO requests: latency histograms per device, operation, process and
    /// file, and whose writes caused them (a writer's writeback is its own).
    #[arg(long)]
    pub io: bool,
    /// With --io: also time the read, write, fsync and open calls of the targets per
    /// file and process (system-call tracepoints; on any file system, FUSE and network
    /// file systems included), and charge their direct (O_DIRECT) requests to their
    /// files. Costs a hash lookup on those calls of every process.
    #[arg(long, requires = "io")]
    pub file_calls: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_t_split() {
        assert_eq!(split_dev((7 << 20) | 3), (7, 3));
        assert_eq!(split_dev((259 << 20) | 1), (259, 1));
    }

    /// The IO layout of this machine's kernel and its raw tracepoints, or `None` (and a
    /// line saying why the test skips).
    fn this_kernel() -> Option<(IoGlobals, Vec<&'static str>)> {
        let Ok(btf) = Btf::from_sys_fs() else {
            eprintln!("SKIP: no /sys/kernel/btf/vmlinux here");
            return None;
        };
        let globals = IoGlobals::from_btf(&btf).expect("layout");
        let events = globals.events.iter().map(|(_, event)| *event).collect();
        Some((globals, events))
    }

    #[test]
    fn this_kernel_s_request_layout() {
        let Some((globals, events)) = this_kernel() else {
            return;
        };
        let layout = globals.layout;
        assert!(layout.dev_hops >= 1, "{layout:?}");
        assert_eq!(layout.op_flush, 2);
        assert_ne!(layout.start_time_ns, IO_NO_OFFSET);
        assert_eq!(
            events.first(),
            Some(&"block_rq_complete"),
            "completion first"
        );
        assert!(events.contains(&"block_rq_issue"), "{events:?}");
    }

    fn named(parts: &[&str], dev: u32, flags: u32) -> IoFile {
        let mut file = IoFile {
            ino: 12,
            dev,
            flags,
            ..IoFile::default()
        };
        for (slot, part) in file.names.iter_mut().zip(parts) {
            slot[..part.len()].copy_from_slice(part.as_bytes());
        }
        file
    }

    #[test]
    fn paths_from_names_and_mount_points() {
        let mounts = Mounts::parse(
            "36 25 7:3 / /tmp/a\\040b rw,noatime - ext4 /dev/loop3 rw\n\
             37 25 7:3 /sub /bind rw - ext4 /dev/loop3 rw\n",
        );
        let dev = (7 << 20) | 3;
        let mut devices = DeviceNames::default();
        devices.names.insert((254, 1), "vda1".into());
        let path_of = |file: &IoFile, mounts: &Mounts| path_of(file, mounts, &devices);
        assert_eq!(
            path_of(&named(&["f", "dir", "/"], dev, IO_FILE_ROOT), &mounts),
            "/tmp/a b/dir/f"
        );
        assert_eq!(
            path_of(&named(&["f", "d1", "d2"], dev, 0), &mounts),
            ".../d2/d1/f"
        );
        assert_eq!(
            path_of(&named(&["f", "/"], (8 << 20) | 1, IO_FILE_ROOT), &mounts),
            "8:1:/f"
        );
        assert_eq!(
            path_of(&named(&[], 5, IO_FILE_NO_DENTRY), &mounts),
            "[block device page cache]"
        );
        // A block device opened as a file: a root dentry named "", the inode numbered
        // like its device (254:1).
        let bdev = IoFile {
            ino: (254 << 20) | 1,
            ..named(&[], 5, IO_FILE_ROOT)
        };
        assert_eq!(path_of(&bdev, &mounts), "[block device page cache: vda1]");
        // Names not read (no layout for them): a number, not a guess; so is a nameless
        // inode whose number is no device's.
        assert_eq!(path_of(&named(&[], 5, 0), &mounts), "");
        assert_eq!(path_of(&named(&[], 5, IO_FILE_ROOT), &mounts), "");
        assert_eq!(path_of(&named(&[], dev, 0), &mounts), "");
        let on_a_device = IoFile {
            ino: (254 << 20) | 1,
            ..named(&[], dev, IO_FILE_ROOT)
        };
        assert_eq!(path_of(&on_a_device, &mounts), "");
    }

    #[test]
    fn this_kernel_s_file_layout() {
        let Some((globals, events)) = this_kernel() else {
            return;
        };
        assert_eq!(globals.without_cause, None);
        assert_ne!(globals.layout.rq_bio, IO_NO_OFFSET);
        assert_ne!(globals.layout.inode_dentry, IO_NO_OFFSET);
        assert!(events.contains(&"writeback_dirty_folio"), "{events:?}");
    }

    #[test]
    fn device_names_fall_back_to_numbers() {
        let names = DeviceNames::default();
        assert_eq!(names.name(7, 42), "7:42");
    }
}
