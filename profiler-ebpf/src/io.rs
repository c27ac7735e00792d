//! Block-IO latency from the raw tracepoints `block_rq_insert` (when present),
//! `block_rq_issue`, `block_rq_requeue`, `block_rq_merge` and `block_rq_complete`, like
//! biolatency but per device, operation and submitting process.
//!
//! Requests in flight are keyed by their `struct request` address in `IO_INFLIGHT`
//! (not by (dev, sector): flushes and passthrough commands have no sector, and two
//! requests can share one). Fields are read from the request itself at offsets taken
//! from the kernel's BTF by user space (`IO_LAYOUT`); Rust eBPF has no CO-RE.
//!
//! The target filter is applied when a request is first seen: at insert, or at issue
//! when the insert was not seen, by the task current then (the submitter; for requests
//! issued later from a kworker or the journal thread, that thread). That task stays
//! credited through requeues. A request that writes back pages a target dirtied is
//! admitted too, whoever issues it (the flusher kworker): `writeback_dirty_folio` marks
//! the files targets dirty, and counts per (file, process) who dirtied how much, so
//! user space can charge each file's writeback to its writers. Completion runs in
//! interrupt context, so it only closes requests already admitted. Nothing travels to
//! user space per event.
//!
//! A request's file is that of its first page (`rq->bio->bi_io_vec[0].bv_page->
//! mapping->host`): number, file system and up to six path components, read once per
//! file into `IO_FILES`. Requests merged across two files count for the first.
//!
//! Raw tracepoints do not filter the event for perf and other tracers (a classic
//! tracepoint program returning 0 would), and are cheaper.

use aya_ebpf::{
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_current_task, bpf_probe_read_kernel,
        bpf_probe_read_kernel_str_bytes,
    },
    macros::{map, raw_tracepoint},
    maps::HashMap,
    programs::{RawTracePointContext, TracePointContext},
};
use profiler_common::{
    io::losses::{
        IO_CALL_START_FULL, IO_CALLS_MAP_FULL, IO_CALLS_OVERFLOW_FULL, IO_DIRTIED_MAP_FULL,
        IO_DIRTIED_OVERFLOW_FULL, IO_FILES_MAP_FULL, IO_INFLIGHT_MAP_FULL, IO_MAP_FULL,
        IO_OVERFLOW_FULL, IO_STALE_REPLACED, IO_UNMATCHED_COMPLETE,
    },
    io::{
        CALL_FSYNC, CALL_OPEN, CALL_READ, CALL_WRITE, CallKey, CallStart, DirtyKey, DirtyStat,
        IO_CALL_START_ENTRIES, IO_FILE_CAUSED, IO_FILE_NO_DENTRY, IO_FILE_ROOT, IO_FILES_ENTRIES,
        IO_FLIGHT_REQUEUED, IO_HIST_SLOTS, IO_NO_OFFSET, IoFile, IoInFlight, IoKey, IoLayout,
        IoStat, SYSCALL_ARG0_OFFSET, Seen, completes, seen_again,
    },
    latency::log2_slot_of,
};

use crate::{
    shared::{
        atomic_add, count_loss, now_ns, overflow_map, remember_current_task, remember_leader,
        stats_map, update_row_or_overflow,
    },
    target::{filter_is_all, is_target},
};

/// `struct request` offsets from this kernel's BTF (see `IoLayout`); user space
/// overrides the whole value before load.
#[unsafe(no_mangle)]
static IO_LAYOUT: IoLayout = IoLayout::MAINLINE;

/// The aggregate read by user space. Size set at load time (`--map-entries`).
#[map]
pub static IO_STATS: HashMap<IoKey, IoStat> = stats_map();

/// Requests `IO_STATS` had no room for, per device, op and process, without file.
#[map]
pub static IO_OVERFLOW: HashMap<IoKey, IoStat> = overflow_map();

/// Requests inserted or issued and not yet completed, by `struct request` address.
#[map]
static IO_INFLIGHT: HashMap<u64, IoInFlight> =
    HashMap::with_max_entries(profiler_common::io::IO_INFLIGHT_ENTRIES, 0);

/// Files seen in requests or dirtied, by `struct inode` address: number, file system
/// and name, and whether a target dirtied them.
#[map]
static IO_FILES: HashMap<u64, IoFile> = HashMap::with_max_entries(IO_FILES_ENTRIES, 0);

/// Folios dirtied per (inode, process): who caused a file's writeback. Size set at load
/// time (`--map-entries`).
#[map]
pub static IO_DIRTIED: HashMap<DirtyKey, DirtyStat> = stats_map();

/// Folios `IO_DIRTIED` had no room for, per process, without file.
#[map]
pub static IO_DIRTIED_OVERFLOW: HashMap<DirtyKey, DirtyStat> = overflow_map();

/// Timed file calls (`--file-calls`) by (process, call, file). Size set at load time.
#[map]
pub static IO_CALLS: HashMap<CallKey, IoStat> = stats_map();

/// Calls `IO_CALLS` had no room for, per process and call, without file.
#[map]
pub static IO_CALLS_OVERFLOW: HashMap<CallKey, IoStat> = overflow_map();

/// File calls in progress, by thread id.
#[map]
static IO_CALL_START: HashMap<u32, CallStart> = HashMap::with_max_entries(IO_CALL_START_ENTRIES, 0);

/// Reads one field of the load-time layout; volatile so the compiler does not fold the
/// defaults above into the program (user space rewrites them before load).
macro_rules! layout {
    ($field:ident) => {
        // SAFETY: reading a field of a load-time global.
        unsafe { core::ptr::read_volatile(&raw const IO_LAYOUT.$field) }
    };
}

#[inline(always)]
fn read_u32(addr: u64) -> u32 {
    // SAFETY: bpf_probe_read_kernel checks the address; a bad one yields an error.
    unsafe { bpf_probe_read_kernel(addr as *const u32) }.unwrap_or(0)
}

#[inline(always)]
fn read_u64(addr: u64) -> u64 {
    // SAFETY: as in `read_u32`.
    unsafe { bpf_probe_read_kernel(addr as *const u64) }.unwrap_or(0)
}

/// The disk's `dev_t`, through the pointer chain of this kernel (6.x: `rq->q->disk->
/// part0->bd_dev`; 5.10: `rq->rq_disk->part0.__dev.devt`). 0 when a pointer is NULL
/// (a passthrough queue without a disk). Unrolled: the verifier wants no loop here.
#[inline(always)]
fn read_dev(rq: u64) -> u32 {
    let hops = layout!(dev_hops);
    let offsets = layout!(dev_offsets);
    let mut addr = rq;
    if hops > 0 {
        addr = read_u64(addr + offsets[0] as u64);
        if addr == 0 {
            return 0;
        }
    }
    if hops > 1 {
        addr = read_u64(addr + offsets[1] as u64);
        if addr == 0 {
            return 0;
        }
    }
    if hops > 2 {
        addr = read_u64(addr + offsets[2] as u64);
        if addr == 0 {
            return 0;
        }
    }
    let last = match hops {
        0 => offsets[0],
        1 => offsets[1],
        2 => offsets[2],
        _ => offsets[3],
    };
    read_u32(addr + last as u64)
}

/// The request's allocation time, 0 when unknown (the kernel stamps it only when
/// iostats, an IO scheduler or blk stats need it).
#[inline(always)]
fn read_alloc_ns(rq: u64) -> u64 {
    let offset = layout!(start_time_ns);
    if offset == IO_NO_OFFSET {
        return 0;
    }
    read_u64(rq + offset as u64)
}

/// What a request looks like now: device, operation, data length and file.
#[inline(always)]
fn describe(rq: u64, open: &mut IoInFlight) {
    // SAFETY: reading the whole load-time global for its `op_of`.
    let layout = unsafe { core::ptr::read_volatile(&IO_LAYOUT) };
    open.dev = read_dev(rq);
    open.op = layout.op_of(read_u32(rq + layout.cmd_flags as u64));
    open.bytes = read_u32(rq + layout.data_len as u64);
    if open.bytes != 0 {
        let inode = request_inode(rq);
        // No page of a file: direct IO (charged to the file of the submitter's call,
        // when known here), a swap page, ... What an earlier look found stays, and is
        // not looked for again.
        let file = if inode != 0 {
            Some(file_of(inode))
        } else if open.ino == 0 {
            direct_io_file(open.tgid)
        } else {
            None
        };
        if let Some((file_dev, ino)) = file {
            open.file_dev = file_dev;
            open.ino = ino;
        }
    }
}

/// The file of a direct read or write that the current thread is timing (`--file-calls`)
/// when it submits the request itself (a thread of `tgid`, the request's submitter, in
/// the read or write call of an `O_DIRECT` descriptor); `None` otherwise, as when the
/// request is issued later from another context.
#[inline(always)]
fn direct_io_file(tgid: u32) -> Option<(u32, u64)> {
    let o_direct = layout!(o_direct);
    if o_direct == 0 {
        return None;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if (pid_tgid >> 32) as u32 != tgid {
        return None;
    }
    let call = IO_CALL_START.get_ptr(pid_tgid as u32)?;
    // SAFETY: element of a hash map from a successful lookup; copied at once.
    let call = unsafe { *call };
    if call.call != CALL_READ && call.call != CALL_WRITE {
        return None;
    }
    let (file, inode) = fd_file(call.fd);
    if inode == 0 || read_u32(file + layout!(file_f_flags) as u64) & o_direct == 0 {
        return None;
    }
    Some(file_of(inode))
}

/// The inode whose page cache holds the request's first page, or 0 (no data, or a
/// page of no file: direct IO into user memory, a swap page).
#[inline(always)]
fn request_inode(rq: u64) -> u64 {
    let rq_bio = layout!(rq_bio);
    if rq_bio == IO_NO_OFFSET {
        return 0;
    }
    let bio = read_u64(rq + rq_bio as u64);
    if bio == 0 {
        return 0;
    }
    let vecs = read_u64(bio + layout!(bio_io_vec) as u64);
    if vecs == 0 {
        return 0;
    }
    page_inode(read_u64(vecs + layout!(bv_page) as u64))
}

/// The inode of a page-cache page (through its head page for a tail page of a large
/// folio, where the kernel has `compound_head`), or 0 for an anonymous or movable page,
/// or none.
#[inline(always)]
fn page_inode(page: u64) -> u64 {
    if page == 0 {
        return 0;
    }
    let compound_head = layout!(page_compound_head);
    let head = if compound_head == IO_NO_OFFSET {
        0
    } else {
        read_u64(page + compound_head as u64)
    };
    let page = if head & 1 != 0 { head - 1 } else { page };
    let mapping = read_u64(page + layout!(page_mapping) as u64);
    // PAGE_MAPPING_ANON and PAGE_MAPPING_MOVABLE are tagged in the low bits.
    if mapping == 0 || mapping & 3 != 0 {
        return 0;
    }
    read_u64(mapping + layout!(mapping_host) as u64)
}

/// (file system `dev_t`, inode number) of `inode`, entered in `IO_FILES` with its name
/// the first time; (0, 0) for none.
#[inline(always)]
fn file_of(inode: u64) -> (u32, u64) {
    match file_entry(inode) {
        // SAFETY: element of a hash map from a successful lookup or insert.
        Some(file) => unsafe { ((*file).dev, (*file).ino) },
        None => (0, 0),
    }
}

/// The `IO_FILES` entry of `inode`, made (number, file system, name) when missing or
/// when the address now holds another inode.
#[inline(always)]
fn file_entry(inode: u64) -> Option<*mut IoFile> {
    if inode == 0 {
        return None;
    }
    let ino = read_u64(inode + layout!(inode_ino) as u64);
    if let Some(known) = IO_FILES.get_ptr_mut(inode) {
        // SAFETY: element of a hash map from a successful lookup.
        if unsafe { (*known).ino } == ino {
            return Some(known);
        }
    }
    let sb = read_u64(inode + layout!(inode_sb) as u64);
    if sb == 0 {
        return None;
    }
    let fresh = IoFile {
        ino,
        dev: read_u32(sb + layout!(sb_dev) as u64),
        ..IoFile::default()
    };
    if IO_FILES.insert(inode, fresh, 0).is_err() {
        count_loss(IO_FILES_MAP_FULL);
        return None;
    }
    let file = IO_FILES.get_ptr_mut(inode)?;
    // SAFETY: element of a hash map just inserted; filled in place (the names do not
    // fit on the BPF stack twice).
    unsafe { read_names(inode, &mut *file) };
    Some(file)
}

/// The file's name and its parents' from its first dentry upwards, as far as
/// `IO_NAME_PARTS` go; `IO_FILE_ROOT` when the file system's root was reached. Racy
/// like any read of the dentry tree without its locks: a rename may show either name.
#[inline(always)]
fn read_names(inode: u64, file: &mut IoFile) {
    let inode_dentry = layout!(inode_dentry);
    if inode_dentry == IO_NO_OFFSET {
        return;
    }
    let alias = read_u64(inode + inode_dentry as u64);
    if alias == 0 {
        file.flags |= IO_FILE_NO_DENTRY;
        return;
    }
    let mut dentry = alias - layout!(dentry_alias) as u64;
    let parent_offset = layout!(dentry_parent) as u64;
    let name_offset = layout!(dentry_name) as u64;
    for part in file.names.iter_mut() {
        let name = read_u64(dentry + name_offset);
        if name == 0 {
            return;
        }
        // SAFETY: bpf_probe_read_kernel_str checks the address; a bad one is an error.
        let _ = unsafe { bpf_probe_read_kernel_str_bytes(name as *const u8, part) };
        let parent = read_u64(dentry + parent_offset);
        if parent == dentry || parent == 0 {
            file.flags |= IO_FILE_ROOT;
            return;
        }
        dentry = parent;
    }
}

/// `writeback_dirty_folio(folio, mapping)` (`writeback_dirty_page` before 5.17), in
/// the context of the task that dirtied it: the file's writeback will be this process's
/// IO, whoever issues it. Another process that dirties a file a target dirtied is
/// counted too, so that the file's writeback is shared among its writers by share.
pub fn on_dirty(mapping: u64) {
    if mapping == 0 {
        return;
    }
    let inode = read_u64(mapping + layout!(mapping_host) as u64);
    let target = is_target();
    if !target {
        match IO_FILES.get_ptr(inode) {
            // SAFETY: element of a hash map from a successful lookup.
            Some(file) if unsafe { (*file).flags } & IO_FILE_CAUSED != 0 => {}
            _ => return,
        }
    }
    let Some(file) = file_entry(inode) else {
        return;
    };
    // SAFETY: element of a hash map from a successful lookup or insert.
    let (dev, ino) = unsafe {
        if target {
            (*file).flags |= IO_FILE_CAUSED;
        }
        ((*file).dev, (*file).ino)
    };
    let key = DirtyKey {
        inode,
        tgid: (bpf_get_current_pid_tgid() >> 32) as u32,
        _pad: 0,
    };
    let first = DirtyStat {
        folios: 0,
        ino,
        dev,
        _pad: 0,
    };
    update_row_or_overflow(
        (&IO_DIRTIED, &IO_DIRTIED_OVERFLOW),
        &key,
        DirtyKey::overflow,
        (&first, &DirtyStat::default()),
        (IO_DIRTIED_MAP_FULL, IO_DIRTIED_OVERFLOW_FULL),
        true,
        |row| {
            // SAFETY: `row` points into a map value valid for this program run; several CPUs
            // may add to one row.
            unsafe {
                atomic_add(&raw mut (*row).folios, 1);
            }
        },
    );
    remember_process_leader();
}

/// A worker thread of a process (an io_uring worker) doing its IO: the process is
/// named after its leader, not after the worker.
#[inline(always)]
fn remember_process_leader() {
    let pid_tgid = bpf_get_current_pid_tgid();
    let group_leader = layout!(task_group_leader);
    if pid_tgid as u32 == (pid_tgid >> 32) as u32 || group_leader == IO_NO_OFFSET {
        return;
    }
    // SAFETY: helper without arguments; the task is only read through probe reads.
    let task = unsafe { bpf_get_current_task() };
    let leader = read_u64(task + group_leader as u64);
    if leader == 0 {
        return;
    }
    let comm_addr = leader + layout!(task_comm) as u64;
    // SAFETY: bpf_probe_read_kernel checks the address; a bad one yields an error.
    let comm = unsafe { bpf_probe_read_kernel(comm_addr as *const [u8; 16]) };
    if let Ok(comm) = comm {
        remember_leader(comm);
    }
}

/// Whether a target dirtied pages of the request's file: its writeback is the target's.
#[inline(always)]
fn caused_by_target(rq: u64) -> bool {
    let inode = request_inode(rq);
    if inode == 0 {
        return false;
    }
    match IO_FILES.get_ptr(inode) {
        // SAFETY: element of a hash map from a successful lookup.
        Some(file) => unsafe { (*file).flags & IO_FILE_CAUSED != 0 },
        None => false,
    }
}

/// The open entry at `rq` when this event continues its request (a requeued request
/// back in the queue, or an inserted one issued), else `None`. An entry this event does
/// not continue is stale (its completion was missed): counted, and `stale` set.
#[inline(always)]
fn continued(rq: u64, is_issue: bool, stale: &mut bool) -> Option<*mut IoInFlight> {
    let open = IO_INFLIGHT.get_ptr_mut(rq)?;
    // SAFETY: element of a hash map from a successful lookup.
    if seen_again(unsafe { &*open }, read_alloc_ns(rq), is_issue) == Seen::Continue {
        return Some(open);
    }
    count_loss(IO_STALE_REPLACED);
    *stale = true;
    None
}

/// `block_rq_insert`: the request `rq` enters the scheduler's queue.
pub fn on_rq_insert(rq: u64) {
    let now = now_ns();
    let mut stale = false;
    if continued(rq, false, &mut stale).is_some() {
        // Back in the queue after a requeue: same request, same submitter.
        return;
    }
    start(rq, now, 0, stale);
}

/// `block_rq_issue`: the request `rq` goes to the driver.
pub fn on_rq_issue(rq: u64) {
    let now = now_ns();
    let mut stale = false;
    let Some(open) = continued(rq, true, &mut stale) else {
        start(rq, 0, now, stale);
        return;
    };
    // SAFETY: element of a hash map from a successful lookup; a request is issued on one
    // CPU at a time.
    unsafe {
        let requeued = (*open).flags & IO_FLIGHT_REQUEUED != 0;
        (*open).issue_ns = now;
        (*open).flags &= !IO_FLIGHT_REQUEUED;
        if !requeued {
            // First issue: merges may have grown it since the insert. After a requeue
            // the request keeps the size of its first issue.
            describe(rq, &mut *open);
        }
    }
}

/// A request seen for the first time: admitted when the current task is a target, or
/// when it writes back a file a target dirtied. A stale entry at its address is dropped
/// either way, so no other process's request inherits it.
#[inline(always)]
fn start(rq: u64, insert_ns: u64, issue_ns: u64, stale: bool) {
    if !is_target() && !caused_by_target(rq) {
        if stale {
            let _ = IO_INFLIGHT.remove(rq);
        }
        return;
    }
    admit(rq, insert_ns, issue_ns);
}

#[inline(always)]
fn admit(rq: u64, insert_ns: u64, issue_ns: u64) {
    let mut open = IoInFlight {
        start_ns: if insert_ns != 0 { insert_ns } else { issue_ns },
        insert_ns,
        issue_ns,
        tgid: (bpf_get_current_pid_tgid() >> 32) as u32,
        ..IoInFlight::default()
    };
    describe(rq, &mut open);
    // Replaces a stale entry at the same address (counted by the caller).
    if IO_INFLIGHT.insert(rq, open, 0).is_err() {
        count_loss(IO_INFLIGHT_MAP_FULL);
        return;
    }
    remember_current_task();
    remember_process_leader();
}

/// `block_rq_requeue`: the driver gave the request back; it will
/// be inserted and issued again and is counted once, at its final completion. Its next
/// issue restarts the device clock (the time back in the queue is queue time).
pub fn on_rq_requeue(rq: u64) {
    if let Some(open) = IO_INFLIGHT.get_ptr_mut(rq) {
        // SAFETY: element of a hash map from a successful lookup.
        unsafe {
            (*open).flags |= IO_FLIGHT_REQUEUED;
            (*open).issue_ns = 0;
        }
    }
}

/// `block_rq_merge`: `rq` was merged into another queued request and is freed; its
/// data is counted with the request it joined.
pub fn on_rq_merge(rq: u64) {
    let _ = IO_INFLIGHT.remove(rq);
}

/// `block_rq_complete(rq, error, nr_bytes)` (interrupt context). Traced before the
/// kernel updates the request, so `__data_len` is what remained before this completion.
pub fn on_rq_complete(rq: u64, nr_bytes: u32) {
    let now = now_ns();
    let Some(open) = IO_INFLIGHT.get_ptr(rq) else {
        // Issued before the recording, or by a task outside the targets (not a loss
        // then). A completion without data and without a start is the submitter's side
        // of a flush (the device flush is its own request, counted as such) or the
        // second completion of a FUA write on a device without FUA: not a loss either.
        if filter_is_all() && nr_bytes != 0 {
            count_loss(IO_UNMATCHED_COMPLETE);
        }
        return;
    };
    if !completes(nr_bytes, read_u32(rq + layout!(data_len) as u64)) {
        // A partial completion: the request stays open until its last bytes.
        return;
    }
    // SAFETY: element of a hash map from a successful lookup; copied at once.
    let open = unsafe { *open };
    let _ = IO_INFLIGHT.remove(rq);
    if open.issue_ns == 0 || now < open.issue_ns {
        // Ended without a seen issue (failed in the queue): not a latency.
        count_loss(IO_UNMATCHED_COMPLETE);
        return;
    }
    let key = IoKey {
        dev: open.dev,
        op: open.op,
        tgid: open.tgid,
        file_dev: open.file_dev,
        ino: open.ino,
    };
    let queue_ns = if open.insert_ns != 0 && open.issue_ns >= open.insert_ns {
        Some(open.issue_ns - open.insert_ns)
    } else {
        None
    };
    add_request(
        (&IO_STATS, &IO_OVERFLOW),
        &key,
        IoKey::overflow,
        (IO_MAP_FULL, IO_OVERFLOW_FULL),
        open.bytes as u64,
        now - open.issue_ns,
        queue_ns,
    );
}

/// The value new rows start from; a global, so its 304 bytes are not built on the BPF
/// stack for every completion.
static EMPTY_IO_STAT: IoStat = IoStat::EMPTY;

/// Adds one request (or timed call) of `bytes` and `latency_ns` to its row of the
/// family's map, or of its overflow map under `overflow(key)` when the map is full.
#[inline(always)]
fn add_request<K>(
    maps: (&HashMap<K, IoStat>, &HashMap<K, IoStat>),
    key: &K,
    overflow: impl FnOnce(&K) -> K,
    loss_slots: (u32, u32),
    bytes: u64,
    latency_ns: u64,
    queue_ns: Option<u64>,
) {
    update_row_or_overflow(
        maps,
        key,
        overflow,
        (&EMPTY_IO_STAT, &EMPTY_IO_STAT),
        loss_slots,
        false,
        |stat| {
            // Through the stack, volatile: the compiler then cannot prove slot < IO_HIST_SLOTS
            // and drop the bounds check below, which the verifier needs to see (6.1's verifier
            // lost the bound of the masked index: "math between map_value pointer and register
            // with unbounded min value").
            let slot = log2_slot_of::<IO_HIST_SLOTS>(latency_ns / 1000);
            // SAFETY: reading a local just written.
            let slot = unsafe { core::ptr::read_volatile(&slot) };
            // SAFETY: `stat` points into a map value valid for this program run; counters are
            // atomic (completions of one key run on several CPUs), max is best effort; the
            // bucket index is checked.
            unsafe {
                atomic_add(&raw mut (*stat).count, 1);
                atomic_add(&raw mut (*stat).bytes, bytes);
                atomic_add(&raw mut (*stat).total_ns, latency_ns);
                if latency_ns > (*stat).max_ns {
                    (*stat).max_ns = latency_ns;
                }
                if let Some(queue_ns) = queue_ns {
                    atomic_add(&raw mut (*stat).queued, 1);
                    atomic_add(&raw mut (*stat).queue_ns, queue_ns);
                }
                // Checked index without a panic path.
                if let Some(bucket) = (*stat).hist.get_mut(slot) {
                    atomic_add(bucket, 1);
                }
            }
        },
    );
}

/// A timed call (`--file-calls`) begins: a read, write or fsync of `fd`, or an open
/// (`fd` -1, its descriptor comes with the return).
pub fn on_call_enter(call: u32, fd: i64) {
    if !is_target() {
        return;
    }
    let start = CallStart {
        start_ns: now_ns(),
        fd,
        call,
        _pad: 0,
    };
    let tid = bpf_get_current_pid_tgid() as u32;
    if IO_CALL_START.insert(tid, start, 0).is_err() {
        count_loss(IO_CALL_START_FULL);
    }
}

/// A timed call returns `ret`: its time goes to (process, call, file) when the
/// descriptor is a regular file's.
pub fn on_call_exit(ret: i64) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let Some(start) = IO_CALL_START.get_ptr(tid) else {
        return;
    };
    // SAFETY: element of a hash map from a successful lookup; copied at once.
    let start = unsafe { *start };
    let _ = IO_CALL_START.remove(tid);
    let now = now_ns();
    if now < start.start_ns {
        return;
    }
    let fd = if start.call == CALL_OPEN {
        ret
    } else {
        start.fd
    };
    let (file_dev, ino) = file_of(fd_inode(fd));
    if file_dev == 0 && ino == 0 {
        return;
    }
    let bytes = match start.call {
        CALL_READ | CALL_WRITE if ret > 0 => ret as u64,
        _ => 0,
    };
    let key = CallKey {
        tgid: (pid_tgid >> 32) as u32,
        call: start.call,
        file_dev,
        _pad: 0,
        ino,
    };
    add_request(
        (&IO_CALLS, &IO_CALLS_OVERFLOW),
        &key,
        CallKey::overflow,
        (IO_CALLS_MAP_FULL, IO_CALLS_OVERFLOW_FULL),
        bytes,
        now - start.start_ns,
        None,
    );
    remember_current_task();
    remember_process_leader();
}

/// The inode of the current thread's descriptor `fd` when it is a regular file's, or 0.
#[inline(always)]
fn fd_inode(fd: i64) -> u64 {
    fd_file(fd).1
}

/// The file and inode of the current thread's descriptor `fd` when it is a regular
/// file's, or (0, 0).
#[inline(always)]
fn fd_file(fd: i64) -> (u64, u64) {
    let task_files = layout!(task_files);
    if !(0..=i32::MAX as i64).contains(&fd) || task_files == IO_NO_OFFSET {
        return (0, 0);
    }
    // SAFETY: helper without arguments; the task is only read through probe reads.
    let task = unsafe { bpf_get_current_task() };
    let files = read_u64(task + task_files as u64);
    if files == 0 {
        return (0, 0);
    }
    let table = read_u64(files + layout!(files_fdt) as u64);
    if table == 0 || fd as u64 >= read_u32(table + layout!(fdt_max_fds) as u64) as u64 {
        return (0, 0);
    }
    let array = read_u64(table + layout!(fdt_fd) as u64);
    if array == 0 {
        return (0, 0);
    }
    let file = read_u64(array + 8 * fd as u64);
    if file == 0 {
        return (0, 0);
    }
    let inode = read_u64(file + layout!(file_inode) as u64);
    // S_IFMT, S_IFREG.
    if inode == 0 || read_u32(inode + layout!(inode_mode) as u64) & 0o170000 != 0o100000 {
        return (0, 0);
    }
    (file, inode)
}

// Timed file calls (`--file-calls`): `syscalls:sys_enter_*` of reads, writes, fsyncs and
// opens, one program per kind of call attached to each such syscall this kernel has, and
// one program on all their `sys_exit_*`.
crate::classic_tracepoint!(
    /// `sys_enter_read`, `pread64`, `readv`, `preadv`, `preadv2`.
    io_call_read,
    "tracepoint/syscalls/sys_enter_read",
    |ctx: &TracePointContext| on_call_enter(CALL_READ, syscall_arg0(ctx))
);
crate::classic_tracepoint!(
    /// `sys_enter_write`, `pwrite64`, `writev`, `pwritev`, `pwritev2`.
    io_call_write,
    "tracepoint/syscalls/sys_enter_write",
    |ctx: &TracePointContext| on_call_enter(CALL_WRITE, syscall_arg0(ctx))
);
crate::classic_tracepoint!(
    /// `sys_enter_fsync`, `fdatasync`.
    io_call_fsync,
    "tracepoint/syscalls/sys_enter_fsync",
    |ctx: &TracePointContext| on_call_enter(CALL_FSYNC, syscall_arg0(ctx))
);
crate::classic_tracepoint!(
    /// `sys_enter_openat`, `open`, `openat2`, `creat`.
    io_call_open,
    "tracepoint/syscalls/sys_enter_openat",
    |_: &TracePointContext| on_call_enter(CALL_OPEN, -1)
);
crate::classic_tracepoint!(
    /// `sys_exit_*` of all of them: the return value.
    io_call_exit,
    "tracepoint/syscalls/sys_exit_read",
    |ctx: &TracePointContext| on_call_exit(syscall_arg0(ctx))
);

/// A syscall tracepoint's first argument (`sys_enter_*`) or return value (`sys_exit_*`).
#[inline(always)]
fn syscall_arg0(ctx: &TracePointContext) -> i64 {
    // SAFETY: the offset is that of every syscall tracepoint's record (user space checks
    // it against the format files); the read is checked.
    unsafe { ctx.read_at::<i64>(SYSCALL_ARG0_OFFSET as usize) }.unwrap_or(-1)
}

// Block IO: raw tracepoints, so the request pointer is the key and perf still sees
// the events. A raw tracepoint program may only read as many arguments as the
// tracepoint has (checked at attach), so each event that took `(q, rq)` before 5.11
// has a second program reading `rq` from argument 1 (`_q`); user space attaches the
// one this kernel's BTF calls for, and insert, requeue and merge only where they exist.
macro_rules! io_request_event {
    ($($program:ident, $program_q:ident, $event:literal, $handler:path;)*) => {
        $(
            #[raw_tracepoint(tracepoint = $event)]
            pub fn $program(ctx: RawTracePointContext) -> i32 {
                $handler(ctx.arg::<u64>(0));
                0
            }

            #[raw_tracepoint(tracepoint = $event)]
            pub fn $program_q(ctx: RawTracePointContext) -> i32 {
                $handler(ctx.arg::<u64>(1));
                0
            }
        )*
    };
}

io_request_event! {
    io_rq_insert, io_rq_insert_q, "block_rq_insert", on_rq_insert;
    io_rq_issue, io_rq_issue_q, "block_rq_issue", on_rq_issue;
    io_rq_requeue, io_rq_requeue_q, "block_rq_requeue", on_rq_requeue;
    io_rq_merge, io_rq_merge_q, "block_rq_merge", on_rq_merge;
}

/// `block_rq_complete(struct request *rq, error, unsigned int nr_bytes)` on every kernel
/// lockpath supports (interrupt context).
#[raw_tracepoint(tracepoint = "block_rq_complete")]
pub fn io_rq_complete(ctx: RawTracePointContext) -> i32 {
    on_rq_complete(ctx.arg::<u64>(0), ctx.arg::<u64>(2) as u32);
    0
}

/// `writeback_dirty_folio(struct folio *folio, struct address_space *mapping)`, or
/// `writeback_dirty_page(struct page *page, ...)` before 5.17 (user space attaches the
/// one this kernel has): a task dirtied a page of a file.
#[raw_tracepoint(tracepoint = "writeback_dirty_folio")]
pub fn io_dirty(ctx: RawTracePointContext) -> i32 {
    on_dirty(ctx.arg::<u64>(1));
    0
}
