//! Lock names (lock family): the struct offsets the kernel side needs to tell what a
//! lock is (profiler-ebpf/src/lockname.rs), and the names of the classes it reports.
//! A lock in a slab object is named after its slab cache (`&kmalloc-512`) where the
//! kernel has `bpf_get_kmem_cache` (6.13; the call is patched in by
//! `shared::kfunc`). What the kernel side cannot tell is named from kallsyms data
//! symbols where the kernel has them, else stays an address; every row says which method named it
//! (`LockRow::lock_name_source`). A spinlock that is the `wait_lock` of a named
//! sleeping lock of the same drain (`mmap_lock`'s, under mmap_lock storms) is named
//! after it (`mmap_lock.wait_lock`), from the member's BTF offset.

use std::{
    collections::{HashMap, HashSet},
    sync::OnceLock,
};

use anyhow::Result;
use aya::maps::Array;
use profiler_common::{
    lock::{
        is_plain_spinlock, LCB_F_MUTEX, LCB_F_READ, LCB_F_RT, LCB_F_SPIN, LCB_F_WRITE,
        LOCK_CLASS_MMAP_LOCK, LOCK_CLASS_UNKNOWN, OUTCOME_SHIFT,
    },
    lockname::{
        names, LockNameLayout, SlabName, LOCK_CLASS_ALLOC_LOCK, LOCK_CLASS_CRED_GUARD,
        LOCK_CLASS_FILE_LOCK, LOCK_CLASS_FS_LOCK, LOCK_CLASS_PAGE_TABLE_LOCK, LOCK_CLASS_PI_LOCK,
        LOCK_CLASS_RQ_LOCK, LOCK_CLASS_SIGLOCK, LOCK_CLASS_SLAB, NO_OFFSET, SLAB_NAME_LEN,
    },
};

use crate::{
    btf::Btf,
    probes::shared::{kfunc::KMEM_CACHE_KFUNC, MapSet, StackResolver},
    profile::{Frame, LockRow, StackInterner},
};

/// Naming methods, as `lock_name_source` says them.
pub const SOURCE_TASK: &str = "task";
pub const SOURCE_OTHER_TASK: &str = "task_struct";
pub const SOURCE_RUNQUEUE: &str = "runqueue";
pub const SOURCE_KALLSYMS: &str = "kallsyms";
pub const SOURCE_ADDRESS: &str = "address";
/// A member of a named lock of the same drain (`mmap_lock.wait_lock`).
pub const SOURCE_MEMBER: &str = "member";
/// The slab cache the lock's object belongs to (`&kmalloc-512`), from the kernel's
/// `bpf_get_kmem_cache`.
pub const SOURCE_SLAB: &str = "slab";

/// A lock in an object of a merged slab cache (SLUB gives caches of one size and flags
/// one cache): the cache's name is any of the merged ones', so the name is the one struct
/// type among them with a lock member at the lock's offset, or the few that are, when
/// the kernel's BTF tells. A guess: the types of some merged caches are unknown.
pub const SOURCE_SLAB_MERGED: &str = "slab_merged";
/// A lock in a slab object where `/sys/kernel/slab` could not say whether its cache is
/// merged: the cache's name as the kernel has it, a guess.
pub const SOURCE_SLAB_UNCHECKED: &str = "slab_unchecked";

/// A lock in an object of a generic `kmalloc-*` cache (objects of many types), named
/// after the struct a function that takes it is passed a pointer to: a struct whose
/// size is of the cache's size class, with a lock of the lock's type at its offset in
/// the object (`&journal_s->j_state_lock`). A guess: another type of that size may be
/// the object's.
pub const SOURCE_SLAB_KMALLOC: &str = "slab_kmalloc";

/// A static lock kallsyms has no symbol for, named after the kernel function that
/// takes it (`static@chrdev_open`).
pub const SOURCE_CALLER: &str = "caller";

/// A lock in a CPU's per-CPU area, by the per-CPU variable's BTF (`timer_bases.lock:cpu1`).
pub const SOURCE_PERCPU: &str = "percpu";

/// Where the `wait_lock` spinlock sits in each kind of sleeping lock, from the kernel's
/// BTF; `None` where the kernel lacks the member (or has no BTF).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaitLockOffsets {
    pub rwsem: Option<u32>,
    pub mutex: Option<u32>,
    pub rt_mutex: Option<u32>,
}

impl WaitLockOffsets {
    pub fn from_btf(btf: &Btf) -> WaitLockOffsets {
        WaitLockOffsets {
            rwsem: btf.member_offset("rw_semaphore", "wait_lock").ok(),
            mutex: btf.member_offset("mutex", "wait_lock").ok(),
            // `struct rt_mutex_base` since 5.15, `struct rt_mutex` before.
            rt_mutex: btf
                .member_offset("rt_mutex_base", "wait_lock")
                .or_else(|_| btf.member_offset("rt_mutex", "wait_lock"))
                .ok(),
        }
    }

    /// This kernel's offsets, read once per process (by `layout()` when it parsed the
    /// BTF, else here).
    pub fn of_kernel() -> WaitLockOffsets {
        *WAIT_LOCKS.get_or_init(|| match Btf::vmlinux() {
            Ok(btf) => WaitLockOffsets::from_btf(btf),
            Err(_) => WaitLockOffsets::default(),
        })
    }

    /// Offset of `wait_lock` in a lock of type `flags` (`LCB_F_*`, outcome bits
    /// ignored), if it is a sleeping lock that has one.
    fn of_type(&self, flags: u32) -> Option<u32> {
        // `mutex:spin`: the optimistic spin on the mutex itself.
        const MUTEX_SPIN: u32 = LCB_F_MUTEX | LCB_F_SPIN;
        match flags & ((1 << OUTCOME_SHIFT) - 1) {
            LCB_F_READ | LCB_F_WRITE => self.rwsem,
            LCB_F_MUTEX | MUTEX_SPIN => self.mutex,
            LCB_F_RT => self.rt_mutex,
            _ => None,
        }
    }
}

static WAIT_LOCKS: OnceLock<WaitLockOffsets> = OnceLock::new();

/// Names the spinlocks of `rows` that are the `wait_lock` of a named sleeping lock of
/// the same rows: a spinlock row at a named rwsem's (mutex's, rt-mutex's) address plus
/// the member's offset becomes `NAME.wait_lock`, source `member`. Only spinlocks the
/// kernel side did not name are renamed (addresses, kallsyms `symbol+0x..`, names
/// after a taker and slab caches `&mm_struct`, which the member's name says better).
/// Called again once static locks are named after their takers, so a static rwsem's
/// `wait_lock` is `static@FUNCTION.wait_lock` without kallsyms as it is
/// `SYMBOL.wait_lock` with it.
pub fn name_wait_locks(rows: &mut [LockRow], offsets: &WaitLockOffsets) {
    let mut wait_locks: HashMap<u64, String> = HashMap::new();
    for row in rows.iter() {
        if matches!(
            row.lock_name_source.as_str(),
            "" | SOURCE_ADDRESS | SOURCE_MEMBER
        ) {
            continue;
        }
        if let Some(offset) = offsets.of_type(row.flags) {
            wait_locks
                .entry(row.lock_addr.wrapping_add(u64::from(offset)))
                .or_insert_with(|| format!("{}.wait_lock", row.lock_name));
        }
    }
    if wait_locks.is_empty() {
        return;
    }
    for row in rows.iter_mut() {
        let spinlock = row.flags & ((1 << OUTCOME_SHIFT) - 1) == LCB_F_SPIN;
        let unnamed = matches!(
            row.lock_name_source.as_str(),
            SOURCE_ADDRESS
                | SOURCE_CALLER
                | SOURCE_KALLSYMS
                | SOURCE_SLAB
                | SOURCE_SLAB_MERGED
                | SOURCE_SLAB_UNCHECKED
        );
        if !spinlock || !unnamed {
            continue;
        }
        if let Some(name) = wait_locks.get(&row.lock_addr) {
            row.lock_name = name.as_str().into();
            row.lock_name_source = SOURCE_MEMBER.into();
        }
    }
}

/// Names the static locks of `rows` that kallsyms could not name (a kernel without data
/// symbols) after the function that takes them, as a kernel developer finds one:
/// `static@chrdev_open` is the static spinlock `chrdev_open` takes (`cdev_lock`). A
/// lock taken in several functions is named after the one with the most wait; one
/// function taking several static locks names the others `static@FUNCTION:0xADDR`.
/// `kind` says what an unnamed lock is: `Static` for an address in the kernel image's
/// data, `Slab` for a lock in a slab object of unknown type (a merged cache none of
/// whose types has a lock there), named `slab@FUNCTION` (many objects, one name).
pub fn name_static_locks(
    rows: &mut [LockRow],
    interner: &StackInterner,
    kind: impl Fn(u64) -> Option<ByCaller>,
) {
    // Lock address -> caller -> wait.
    let mut callers: HashMap<u64, HashMap<String, u64>> = HashMap::new();
    let mut slab: HashMap<u64, ()> = HashMap::new();
    for row in rows.iter() {
        if row.lock_name_source != SOURCE_ADDRESS {
            continue;
        }
        match kind(row.lock_addr) {
            None => continue,
            Some(ByCaller::Slab) => {
                slab.insert(row.lock_addr, ());
            }
            Some(ByCaller::Static) => {}
        }
        let frames = interner.frames_of(row.stack);
        let frames: Vec<&Frame> = frames.iter().collect();
        if let Some(frame) = crate::lock::caller(&frames) {
            *callers
                .entry(row.lock_addr)
                .or_default()
                .entry(frame.name.clone())
                .or_default() += row.total_ns;
        }
    }
    let mut by_wait: Vec<(u64, String, u64)> = callers
        .into_iter()
        .filter_map(|(addr, callers)| {
            let (caller, wait) = callers
                .into_iter()
                .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))?;
            Some((addr, caller, wait))
        })
        .collect();
    // The lock with the most wait keeps the plain name.
    by_wait.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut taken: std::collections::HashSet<String> = std::collections::HashSet::new();
    for (addr, caller, _) in by_wait {
        if slab.contains_key(&addr) {
            names.insert(addr, format!("slab@{caller}"));
            continue;
        }
        let mut name = format!("static@{caller}");
        if !taken.insert(name.clone()) {
            name = format!("{name}:0x{addr:x}");
        }
        names.insert(addr, name);
    }
    for row in rows.iter_mut() {
        if row.lock_name_source != SOURCE_ADDRESS {
            continue;
        }
        if let Some(name) = names.get(&row.lock_addr) {
            row.lock_name = name.as_str().into();
            row.lock_name_source = SOURCE_CALLER.into();
        }
    }
}

/// Where a lock lies in an object of a generic `kmalloc-*` cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KmallocLock {
    /// The sizes of the structs the cache holds: above the previous size class, up to
    /// the cache's (`kmalloc-2k`: 1025 to 2048 bytes).
    pub sizes: (u32, u32),
    /// The lock's offset in its object.
    pub offset: u32,
}

/// The kmalloc size classes of x86-64, in bytes.
const KMALLOC_SIZES: &[u32] = &[
    8, 16, 32, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192,
];

/// The sizes of the structs a generic kmalloc cache holds (`kmalloc-2k`,
/// `kmalloc-cg-512`, `dma-kmalloc-1k`, `kmalloc-rnd-05-192`): above the previous size
/// class, up to its own. `None` for other caches.
pub fn kmalloc_sizes(cache: &str) -> Option<(u32, u32)> {
    if !(cache.starts_with("kmalloc-") || cache.starts_with("dma-kmalloc-")) {
        return None;
    }
    let size = cache.rsplit('-').next()?;
    let size = match size.strip_suffix('k') {
        Some(kib) => kib.parse::<u32>().ok()?.checked_mul(1024)?,
        None => size.parse::<u32>().ok()?,
    };
    let index = KMALLOC_SIZES.iter().position(|&class| class == size)?;
    let below = index.checked_sub(1).map_or(0, |i| KMALLOC_SIZES[i]);
    Some((below + 1, size))
}

/// Whether a lock member of BTF type `member_type` can be a lock of type `flags`
/// (`LCB_F_*`, outcome bits ignored).
fn lock_type_fits(flags: u32, member_type: &str) -> bool {
    const MUTEX_SPIN: u32 = LCB_F_MUTEX | LCB_F_SPIN;
    const RWLOCK_READ: u32 = LCB_F_SPIN | LCB_F_READ;
    const RWLOCK_WRITE: u32 = LCB_F_SPIN | LCB_F_WRITE;
    let spinlocks = [
        "spinlock_t",
        "spinlock",
        "raw_spinlock_t",
        "raw_spinlock",
        "seqlock_t",
    ];
    match flags & ((1 << OUTCOME_SHIFT) - 1) {
        LCB_F_SPIN => spinlocks.contains(&member_type),
        RWLOCK_READ | RWLOCK_WRITE => member_type == "rwlock_t",
        LCB_F_MUTEX | MUTEX_SPIN => member_type == "mutex",
        LCB_F_READ | LCB_F_WRITE => {
            matches!(member_type, "rw_semaphore" | "percpu_rw_semaphore")
        }
        LCB_F_RT => matches!(member_type, "rt_mutex" | "rt_mutex_base"),
        _ => false,
    }
}

/// How many functions past the locking code a stack is searched for one passed the
/// object (the wait-queue code sits between a wait queue's lock and its user).
const KMALLOC_FRAMES: usize = 4;

/// Names the locks of `rows` in objects of generic `kmalloc-*` caches (`&kmalloc-2k`,
/// source `slab`) after their struct type where the functions that take them tell it:
/// in each row's stack, the nearest function past the locking code (of the first
/// `KMALLOC_FRAMES`) that has a parameter pointing to a struct of the cache's size class
/// with a lock of the row's type at the lock's offset (`lock_member_type_at`). When all
/// the rows of a lock that find one find the same `TYPE->MEMBER`, every row of the lock
/// is `&TYPE->MEMBER`, source `slab_kmalloc` (a guess); otherwise the lock keeps its
/// cache's name. A struct found so types its object (the lock's address less its
/// offset): another lock of that object none of whose functions tell is named as that
/// struct's lock member at its offset, if one of its type is there (the journal's
/// `j_list_lock`, taken in `do_get_write_access`, whose parameters are a handle and a
/// journal head, in the object whose `j_state_lock` `start_this_handle` takes). `btf` gives the functions' struct parameters and the structs' lock
/// members.
pub fn name_kmalloc_locks(
    rows: &mut [LockRow],
    interner: &StackInterner,
    kmalloc: impl Fn(u64) -> Option<KmallocLock>,
    btf: &dyn KmallocTypes,
) {
    let is_kmalloc = |row: &LockRow| {
        matches!(
            row.lock_name_source.as_str(),
            SOURCE_SLAB | SOURCE_SLAB_UNCHECKED
        ) && kmalloc(row.lock_addr).is_some()
    };
    // Each candidate row's functions past the locking code, nearest first.
    let mut takers: Vec<(usize, Vec<String>)> = Vec::new();
    for (index, row) in rows.iter().enumerate() {
        if !is_kmalloc(row) {
            continue;
        }
        let functions: Vec<String> = interner
            .frames_of(row.stack)
            .iter()
            .skip_while(|frame| crate::lock::is_lock_internal(&frame.name))
            .take(KMALLOC_FRAMES)
            .map(|frame| frame.name.clone())
            .collect();
        takers.push((index, functions));
    }
    if takers.is_empty() {
        return;
    }
    let wanted: HashSet<&str> = takers
        .iter()
        .flat_map(|(_, functions)| functions.iter().map(String::as_str))
        .collect();
    let params = btf.struct_params(&wanted);
    let mut found = typed_by_takers(rows, &takers, &params, &kmalloc, btf);
    let sibling = typed_by_object(rows, &takers, &found, &kmalloc, btf);
    found.extend(sibling);
    for row in rows.iter_mut() {
        if !is_kmalloc(row) {
            continue;
        }
        if let Some(Some(member)) = found.get(&row.lock_addr) {
            row.lock_name = format!("&{member}").into();
            row.lock_name_source = SOURCE_SLAB_KMALLOC.into();
        }
    }
}

/// A kmalloc lock's rows, each with its functions past the locking code.
type Takers = [(usize, Vec<String>)];

/// Lock address -> the `TYPE->MEMBER` its rows' takers found (None: rows that
/// disagree); locks none of whose rows found one are not listed.
fn typed_by_takers(
    rows: &[LockRow],
    takers: &Takers,
    params: &HashMap<String, Vec<(String, u32)>>,
    kmalloc: &dyn Fn(u64) -> Option<KmallocLock>,
    btf: &dyn KmallocTypes,
) -> HashMap<u64, Option<String>> {
    let mut found: HashMap<u64, Option<String>> = HashMap::new();
    for (index, functions) in takers {
        let row = &rows[*index];
        let Some(lock) = kmalloc(row.lock_addr) else {
            continue;
        };
        let (low, high) = lock.sizes;
        let mut members: Vec<String> = Vec::new();
        for function in functions {
            for (name, size) in params.get(function).map_or(&[][..], Vec::as_slice) {
                if *size < low || *size > high {
                    continue;
                }
                let Some((path, member_type)) = btf.lock_member(name, lock.offset) else {
                    continue;
                };
                if lock_type_fits(row.flags, &member_type) {
                    members.push(format!("{name}->{path}"));
                }
            }
            if !members.is_empty() {
                break;
            }
        }
        members.sort_unstable();
        members.dedup();
        let member = match members.len() {
            0 => continue,
            1 => members.pop(),
            _ => None,
        };
        match found.entry(row.lock_addr) {
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(member);
            }
            std::collections::hash_map::Entry::Occupied(mut entry) => {
                if *entry.get() != member {
                    entry.insert(None);
                }
            }
        }
    }
    found
}

/// The locks no taker typed, in an object another lock of which was typed: that
/// struct's lock member at their offset, if one of their type is there.
fn typed_by_object(
    rows: &[LockRow],
    takers: &Takers,
    found: &HashMap<u64, Option<String>>,
    kmalloc: &dyn Fn(u64) -> Option<KmallocLock>,
    btf: &dyn KmallocTypes,
) -> HashMap<u64, Option<String>> {
    // An object typed by one of its locks types its other locks: object start -> its
    // struct, where its typed locks agree.
    let mut objects: HashMap<u64, Option<String>> = HashMap::new();
    for (addr, member) in found {
        let (Some(member), Some(lock)) = (member, kmalloc(*addr)) else {
            continue;
        };
        let Some((name, _)) = member.split_once("->") else {
            continue;
        };
        let start = addr.wrapping_sub(u64::from(lock.offset));
        let entry = objects
            .entry(start)
            .or_insert_with(|| Some(name.to_string()));
        if entry.as_deref() != Some(name) {
            *entry = None;
        }
    }
    let mut sibling: HashMap<u64, Option<String>> = HashMap::new();
    for (index, _) in takers {
        let row = &rows[*index];
        let Some(lock) = kmalloc(row.lock_addr) else {
            continue;
        };
        if found.contains_key(&row.lock_addr) {
            continue;
        }
        let start = row.lock_addr.wrapping_sub(u64::from(lock.offset));
        let Some(Some(name)) = objects.get(&start) else {
            continue;
        };
        let member = btf
            .lock_member(name, lock.offset)
            .filter(|(_, member_type)| lock_type_fits(row.flags, member_type))
            .map(|(path, _)| format!("{name}->{path}"));
        // Rows of one lock that disagree (one's type does not fit) leave it unnamed.
        let entry = sibling
            .entry(row.lock_addr)
            .or_insert_with(|| member.clone());
        if *entry != member {
            *entry = None;
        }
    }
    sibling
}

/// What naming a kmalloc object's lock needs of the kernel's BTF (a trait, so tests
/// give their own types).
pub trait KmallocTypes {
    /// For each of `functions`, the structs its parameters point to: (name, size).
    fn struct_params(&self, functions: &HashSet<&str>) -> HashMap<String, Vec<(String, u32)>>;
    /// The lock member at `offset` of `struct name` and its type name.
    fn lock_member(&self, name: &str, offset: u32) -> Option<(String, String)>;
}

impl KmallocTypes for Btf {
    fn struct_params(&self, functions: &HashSet<&str>) -> HashMap<String, Vec<(String, u32)>> {
        self.struct_pointer_params(functions)
    }

    fn lock_member(&self, name: &str, offset: u32) -> Option<(String, String)> {
        self.lock_member_type_at(name, offset)
    }
}

/// What an unnamed lock is, for naming it after its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByCaller {
    /// A static lock of the kernel image.
    Static,
    /// A lock in a slab object of unknown type.
    Slab,
}

/// Offsets from the kernel's BTF; members a kernel lacks are `NO_OFFSET` (their check
/// is skipped). Without BTF, naming is off.
pub fn layout() -> LockNameLayout {
    let btf = match Btf::vmlinux() {
        Ok(btf) => btf,
        Err(err) => {
            log::warn!("lock names from the kernel's structures are off: {err:#}");
            return LockNameLayout::OFF;
        }
    };
    let _ = WAIT_LOCKS.set(WaitLockOffsets::from_btf(btf));
    let member = |name: &str, path: &str| btf.member_offset(name, path).unwrap_or(NO_OFFSET);
    let pointer =
        |name: &str, path: &str| btf.member_pointer_offset(name, path).unwrap_or(NO_OFFSET);
    // The runqueue lock is `__lock` since 5.14, `lock` before.
    let rq_lock = btf
        .member_offset("rq", "__lock")
        .or_else(|_| btf.member_offset("rq", "lock"))
        .unwrap_or(NO_OFFSET);
    LockNameLayout {
        enabled: 1,
        task_mm: pointer("task_struct", "mm"),
        task_files: pointer("task_struct", "files"),
        task_sighand: pointer("task_struct", "sighand"),
        task_fs: pointer("task_struct", "fs"),
        task_signal: pointer("task_struct", "signal"),
        task_pi_lock: member("task_struct", "pi_lock"),
        task_alloc_lock: member("task_struct", "alloc_lock"),
        task_group_leader: pointer("task_struct", "group_leader"),
        task_tgid: member("task_struct", "tgid"),
        task_se_cfs_rq: pointer("task_struct", "se.cfs_rq"),
        mm_mmap_lock: member("mm_struct", "mmap_lock"),
        mm_page_table_lock: member("mm_struct", "page_table_lock"),
        files_file_lock: member("files_struct", "file_lock"),
        sighand_siglock: member("sighand_struct", "siglock"),
        fs_lock: member("fs_struct", "lock"),
        signal_cred_guard: member("signal_struct", "cred_guard_mutex"),
        cfs_rq_rq: pointer("cfs_rq", "rq"),
        rq_lock,
        // Only where the stand-in call becomes the kfunc (`kfunc::KMEM_CACHE`).
        kmem_cache_name: match btf.function_id(KMEM_CACHE_KFUNC) {
            Some(_) => pointer("kmem_cache", "name"),
            None => NO_OFFSET,
        },
        kmem_cache_size: member("kmem_cache", "size"),
        kmem_cache_red_left_pad: member("kmem_cache", "red_left_pad"),
        kmem_cache_oo: member("kmem_cache", "oo"),
    }
}

/// Names the locks of one drain: the kernel side's classes, the runqueue locks it
/// noted, kallsyms data symbols, else the address.
pub struct LockNamer {
    /// Runqueue lock address -> CPU.
    rq_locks: HashMap<u64, u32>,
    /// Each CPU's per-CPU area (derived from its runqueue lock), for the other per-CPU
    /// locks; empty without BTF.
    percpu_bases: Vec<(u32, u64)>,
    /// The kernel's BTF, which names the per-CPU variables.
    btf: Option<&'static Btf>,
    /// Lock address -> its name from the slab cache of its object, and the source;
    /// `None` for a lock of a merged cache whose candidate types have no lock there
    /// (named after its caller).
    slab_caches: HashMap<u64, Option<(String, &'static str)>>,
    /// Lock address -> where it lies in an object of a generic `kmalloc-*` cache.
    kmalloc: HashMap<u64, KmallocLock>,
}

impl LockNamer {
    pub fn new(maps: &MapSet) -> Result<LockNamer> {
        let mut rq_locks = HashMap::new();
        let array: Array<_, u64> = Array::try_from(maps.get(names::LOCK_RQ_ADDRS)?)?;
        for (cpu, addr) in array.iter().enumerate() {
            let addr = addr?;
            if addr != 0 {
                rq_locks.insert(addr, cpu as u32);
            }
        }
        let btf = Btf::vmlinux().ok();
        let percpu_bases = btf.map_or_else(Vec::new, |btf| percpu_bases(btf, &rq_locks));
        let mut slab_caches = HashMap::new();
        let mut kmalloc = HashMap::new();
        let mut aliases: Option<SlabAliases> = None;
        for (addr, slab) in maps.entries::<u64, SlabName>(names::LOCK_SLAB_NAMES)? {
            let end = slab
                .name
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(SLAB_NAME_LEN);
            let cache = String::from_utf8_lossy(&slab.name[..end]).into_owned();
            if !cache.is_empty() {
                let aliases = aliases.get_or_insert_with(|| SlabAliases::read(SLAB_SYSFS));
                slab_caches.insert(addr, slab_lock_name(&cache, slab.offset, btf, aliases));
                if let (Some(sizes), false) = (kmalloc_sizes(&cache), slab.offset == NO_OFFSET) {
                    kmalloc.insert(
                        addr,
                        KmallocLock {
                            sizes,
                            offset: slab.offset,
                        },
                    );
                }
            }
        }
        Ok(LockNamer {
            rq_locks,
            percpu_bases,
            btf,
            slab_caches,
            kmalloc,
        })
    }

    /// (name, source) of the lock at `addr` of kernel class `class`, contended with
    /// `flags` (its type).
    pub fn name(
        &self,
        class: u32,
        addr: u64,
        flags: u32,
        stacks: &StackResolver,
    ) -> (String, &'static str) {
        if class == LOCK_CLASS_SLAB {
            match self.slab_caches.get(&addr) {
                Some(Some((name, source))) => return (name.clone(), source),
                // Named after its caller once the rows are drained.
                Some(None) => return (format!("0x{addr:x}"), SOURCE_ADDRESS),
                None => {}
            }
        }
        let class = checked_class(class, stacks.is_static(addr), flags);
        if let Some(name) = class_name(class) {
            let source = if class == LOCK_CLASS_PI_LOCK || class == LOCK_CLASS_ALLOC_LOCK {
                SOURCE_OTHER_TASK
            } else if class == LOCK_CLASS_RQ_LOCK {
                SOURCE_RUNQUEUE
            } else {
                SOURCE_TASK
            };
            if class == LOCK_CLASS_RQ_LOCK {
                if let Some(cpu) = self.rq_locks.get(&addr) {
                    return (format!("rq_lock:cpu{cpu}"), source);
                }
            }
            return (name.to_string(), source);
        }
        if let Some(cpu) = self.rq_locks.get(&addr) {
            return (format!("rq_lock:cpu{cpu}"), SOURCE_RUNQUEUE);
        }
        if let Some(name) = self.percpu_name(addr) {
            return (name, SOURCE_PERCPU);
        }
        let name = stacks.lock_name(addr);
        let source = if name.starts_with("0x") {
            SOURCE_ADDRESS
        } else {
            SOURCE_KALLSYMS
        };
        (name, source)
    }
}

impl LockNamer {
    /// Whether the lock at `addr` lies in a slab object of unknown type, to be named
    /// after its caller.
    pub fn slab_by_caller(&self, addr: u64) -> bool {
        matches!(self.slab_caches.get(&addr), Some(None))
    }

    /// Where the lock at `addr` lies in an object of a generic `kmalloc-*` cache.
    pub fn kmalloc_lock(&self, addr: u64) -> Option<KmallocLock> {
        self.kmalloc.get(&addr).copied()
    }

    /// The kernel's BTF, when it could be read.
    pub fn btf(&self) -> Option<&'static Btf> {
        self.btf
    }

    /// `VARIABLE.MEMBER:cpuN` for a lock in CPU N's per-CPU area (`timer_bases.lock`).
    fn percpu_name(&self, addr: u64) -> Option<String> {
        let btf = self.btf?;
        self.percpu_bases.iter().find_map(|&(cpu, base)| {
            let offset = u32::try_from(addr.checked_sub(base)?).ok()?;
            let name = btf.percpu_lock_at(offset)?;
            Some(format!("{name}:cpu{cpu}"))
        })
    }
}

/// Each CPU's per-CPU area base: its runqueue lock's address minus where that lock lies
/// in the area (the `runqueues` variable's offset plus `rq.__lock`'s), from BTF.
fn percpu_bases(btf: &Btf, rq_locks: &HashMap<u64, u32>) -> Vec<(u32, u64)> {
    let Some(runqueues) = btf.percpu_offset("runqueues") else {
        return Vec::new();
    };
    let Ok(lock) = btf
        .member_offset("rq", "__lock")
        .or_else(|_| btf.member_offset("rq", "lock"))
    else {
        return Vec::new();
    };
    let within = u64::from(runqueues) + u64::from(lock);
    rq_locks
        .iter()
        .filter_map(|(&addr, &cpu)| Some((cpu, addr.checked_sub(within)?)))
        .collect()
}

/// Slab caches of one struct type whose cache is not named after it.
const CACHE_TYPES: &[(&str, &str)] = &[
    ("filp", "file"),
    ("file_lock_ctx", "file_lock_context"),
    ("file_lock_cache", "file_lock"),
    ("file_lease_cache", "file_lease"),
    ("vm_area_struct", "vm_area_struct"),
    ("anon_vma_chain", "anon_vma_chain"),
    ("dentry", "dentry"),
    ("bdev_cache", "bdev_inode"),
    ("radix_tree_node", "radix_tree_node"),
    ("eventpoll_epi", "epitem"),
    ("eventpoll_pwq", "eppoll_entry"),
    ("pid", "pid"),
    ("uid_cache", "user_struct"),
    ("kernfs_node_cache", "kernfs_node"),
    ("biovec-max", "bio_vec"),
    ("sigqueue", "sigqueue"),
    ("files_cache", "files_struct"),
    ("sighand_cache", "sighand_struct"),
    ("signal_cache", "signal_struct"),
    ("fs_cache", "fs_struct"),
    ("inode_cache", "inode"),
    ("ext4_inode_cache", "ext4_inode_info"),
    ("shmem_inode_cache", "shmem_inode_info"),
    ("proc_inode_cache", "proc_inode"),
    ("sock_inode_cache", "socket_alloc"),
    ("fuse_inode", "fuse_inode"),
    ("nfs_inode_cache", "nfs_inode"),
    ("cred_jar", "cred"),
];

/// The struct type the objects of slab cache `cache` have, by the table above or a
/// struct named like the cache (`mm_struct`).
fn cache_type(cache: &str) -> &str {
    CACHE_TYPES
        .iter()
        .find(|(name, _)| *name == cache)
        .map_or(cache, |(_, ty)| ty)
}

/// Where SLUB says which caches it merged: `/sys/kernel/slab`.
pub const SLAB_SYSFS: &str = "/sys/kernel/slab";

/// Which slab caches SLUB merged. A cache that may be merged is a symbolic link to its
/// merged cache (`file_lock_ctx -> :0000056`), one that may not is a directory; caches
/// linked to one target share their objects.
#[derive(Debug, Default)]
pub struct SlabAliases {
    /// False when the directory could not be read: no cache is known unmerged.
    known: bool,
    /// Cache name -> the link's target, for caches that may be merged.
    target: HashMap<String, String>,
    /// Link target -> every cache name linked to it, sorted.
    members: HashMap<String, Vec<String>>,
}

impl SlabAliases {
    /// Reads the caches and their links under `dir`.
    pub fn read(dir: &str) -> SlabAliases {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return SlabAliases::default();
        };
        let mut aliases = SlabAliases {
            known: true,
            ..SlabAliases::default()
        };
        for entry in entries.flatten() {
            let Ok(link) = std::fs::read_link(entry.path()) else {
                continue;
            };
            let name = entry.file_name().to_string_lossy().into_owned();
            let target = link.to_string_lossy().into_owned();
            aliases
                .members
                .entry(target.clone())
                .or_default()
                .push(name.clone());
            aliases.target.insert(name, target);
        }
        for names in aliases.members.values_mut() {
            names.sort_unstable();
        }
        aliases
    }

    /// Whether SLUB merged `cache`, and with which caches.
    pub fn merged_with(&self, cache: &str) -> Merging<'_> {
        if !self.known {
            return Merging::Unknown;
        }
        match self
            .target
            .get(cache)
            .and_then(|target| self.members.get(target))
            .filter(|names| names.len() > 1)
        {
            Some(names) => Merging::With(names),
            None => Merging::Alone,
        }
    }
}

/// Whether a slab cache is merged with others.
#[derive(Debug, PartialEq, Eq)]
pub enum Merging<'a> {
    /// The kernel did not say (no `/sys/kernel/slab`).
    Unknown,
    /// Its objects are its own.
    Alone,
    /// Merged: the names of every cache sharing its objects, itself included, sorted.
    With(&'a [String]),
}

/// The lock member at `offset` in the objects of cache `cache`: `TYPE->MEMBER`.
/// `Err` when BTF has no struct for the cache (its type is unknown), `Ok(None)` when
/// the struct has no lock there.
fn cache_lock_member(cache: &str, offset: u32, btf: &Btf) -> Result<Option<String>, ()> {
    let struct_name = cache_type(cache);
    if !btf.has_struct(struct_name) {
        return Err(());
    }
    Ok(btf
        .lock_member_at(struct_name, offset)
        .map(|member| format!("{struct_name}->{member}")))
}

/// How many candidate types a merged cache's name lists before it says `...`.
const MERGED_SHOWN: usize = 3;

/// The name and source of a lock at `offset` in an object of slab cache `cache`:
/// - a cache SLUB did not merge: `&TYPE->MEMBER` where the cache holds one struct type
///   (by the table above, or a struct named like the cache) and its BTF has a lock
///   member there (`&file->f_pos_lock`); else `&CACHE` (`&kmalloc-1k`); source `slab`;
/// - a merged cache (`cache` is the name of whichever came first): the caches merged
///   with it, narrowed to the struct types with a lock member at that offset: one
///   (`&file_lock_context->flc_lock`) or several (`&{a->x|b->y}`), source
///   `slab_merged`; none, `None` (named after its caller);
/// - where `/sys/kernel/slab` says nothing: as for an unmerged cache, source
///   `slab_unchecked`.
pub fn slab_lock_name(
    cache: &str,
    offset: u32,
    btf: Option<&Btf>,
    aliases: &SlabAliases,
) -> Option<(String, &'static str)> {
    let member = |cache: &str| match (offset, btf) {
        (NO_OFFSET, _) | (_, None) => None,
        (offset, Some(btf)) => cache_lock_member(cache, offset, btf).ok().flatten(),
    };
    let single = |source| {
        Some(match member(cache) {
            Some(member) => (format!("&{member}"), source),
            None => (format!("&{cache}"), source),
        })
    };
    let merged = match aliases.merged_with(cache) {
        Merging::Unknown => return single(SOURCE_SLAB_UNCHECKED),
        Merging::Alone => return single(SOURCE_SLAB),
        Merging::With(merged) => merged,
    };
    let (Some(btf), false) = (btf, offset == NO_OFFSET) else {
        return None;
    };
    let mut found: Vec<String> = merged
        .iter()
        .filter_map(|cache| cache_lock_member(cache, offset, btf).ok().flatten())
        .collect();
    found.sort_unstable();
    found.dedup();
    match found.len() {
        0 => None,
        1 => Some((format!("&{}", found[0]), SOURCE_SLAB_MERGED)),
        n => {
            let mut shown = found[..n.min(MERGED_SHOWN)].join("|");
            if n > MERGED_SHOWN {
                shown.push_str("|...");
            }
            Some((format!("&{{{shown}}}"), SOURCE_SLAB_MERGED))
        }
    }
}

/// The kernel side's class of a lock contended with `flags`, unless it cannot be: a
/// task's member (`pi_lock`, `alloc_lock`: spinlocks) is never in the kernel image's
/// data, nor a sleeping lock or a rwlock (the kernel side found something that looked
/// like a task around it).
pub fn checked_class(class: u32, in_image: bool, flags: u32) -> u32 {
    let task_member = class == LOCK_CLASS_PI_LOCK || class == LOCK_CLASS_ALLOC_LOCK;
    if task_member && (in_image || !is_plain_spinlock(flags)) {
        LOCK_CLASS_UNKNOWN
    } else {
        class
    }
}

/// The name of a kernel-side class, `None` for `LOCK_CLASS_UNKNOWN`.
pub fn class_name(class: u32) -> Option<&'static str> {
    Some(match class {
        LOCK_CLASS_UNKNOWN => return None,
        LOCK_CLASS_MMAP_LOCK => "mmap_lock",
        LOCK_CLASS_PAGE_TABLE_LOCK => "page_table_lock",
        LOCK_CLASS_FILE_LOCK => "file_lock",
        LOCK_CLASS_SIGLOCK => "siglock",
        LOCK_CLASS_FS_LOCK => "fs_lock",
        LOCK_CLASS_PI_LOCK => "pi_lock",
        LOCK_CLASS_ALLOC_LOCK => "alloc_lock",
        LOCK_CLASS_RQ_LOCK => "rq_lock",
        LOCK_CLASS_CRED_GUARD => "cred_guard_mutex",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_has_a_distinct_name() {
        let names: Vec<&str> = (0..16).filter_map(class_name).collect();
        assert_eq!(names.len(), 9);
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
    }

    /// rw_semaphore: count, owner, osq, then wait_lock (x86-64, 6.x); mutex: owner, then
    /// wait_lock.
    const OFFSETS: WaitLockOffsets = WaitLockOffsets {
        rwsem: Some(20),
        mutex: Some(8),
        rt_mutex: None,
    };

    /// The id of a kernel stack of these frames, leaf first.
    fn kernel_stack(interner: &mut StackInterner, names: &[&str]) -> Option<u32> {
        let frames = names.iter().map(|name| Frame::kernel(name)).collect();
        Some(interner.stack(frames, false))
    }

    /// Each row's lock name and how it was named.
    fn names_of(rows: &[LockRow]) -> Vec<(&str, &str)> {
        rows.iter()
            .map(|row| (row.lock_name.as_str(), row.lock_name_source.as_str()))
            .collect()
    }

    fn row(addr: u64, name: &str, source: &str, flags: u32) -> LockRow {
        LockRow {
            pid: 1,
            lock_addr: addr,
            lock_name: name.into(),
            lock_name_source: source.into(),
            flags,
            count: 1,
            total_ns: 1,
            max_ns: 1,
            min_ns: 1,
            ..Default::default()
        }
    }

    #[test]
    fn wait_lock_of_a_named_sleeping_lock_is_named_after_it() {
        let mmap = 0xffff_8881_0000_1000u64;
        let cred = 0xffff_8881_0000_2000u64;
        let mut rows = vec![
            row(mmap, "mmap_lock", SOURCE_TASK, LCB_F_WRITE),
            row(mmap, "mmap_lock", SOURCE_TASK, LCB_F_READ),
            // The wait_lock, unnamed by the kernel side: named after its rwsem.
            row(
                mmap + 20,
                &format!("{:#x}", mmap + 20),
                SOURCE_ADDRESS,
                LCB_F_SPIN,
            ),
            // One past it: not the member.
            row(
                mmap + 24,
                &format!("{:#x}", mmap + 24),
                SOURCE_ADDRESS,
                LCB_F_SPIN,
            ),
            // At the member's address but not a spinlock: left alone.
            row(mmap + 20, "0xother", SOURCE_ADDRESS, LCB_F_WRITE),
            // A mutex's wait_lock that kallsyms named by symbol and offset, with an
            // outcome in the mutex row's flags (ignored for the type).
            row(
                cred,
                "cred_guard_mutex",
                SOURCE_TASK,
                LCB_F_MUTEX | 1 << OUTCOME_SHIFT,
            ),
            row(cred + 8, "some_struct+0x8", SOURCE_KALLSYMS, LCB_F_SPIN),
        ];
        name_wait_locks(&mut rows, &OFFSETS);
        let names = names_of(&rows);
        assert_eq!(names[2], ("mmap_lock.wait_lock", SOURCE_MEMBER));
        assert_eq!(names[3].1, SOURCE_ADDRESS, "{names:?}");
        assert_eq!(names[4], ("0xother", SOURCE_ADDRESS));
        assert_eq!(names[6], ("cred_guard_mutex.wait_lock", SOURCE_MEMBER));
    }

    #[test]
    fn static_locks_without_a_symbol_are_named_after_their_taker() {
        let mut interner = StackInterner::default();
        let mut stack = |names: &[&str]| kernel_stack(&mut interner, names);
        let open = stack(&["queued_spin_lock_slowpath", "_raw_spin_lock", "chrdev_open"]);
        let other = stack(&["_raw_spin_lock", "cdev_put"]);
        let flock = stack(&[
            "percpu_down_write",
            "flock_lock_inode",
            "locks_lock_inode_wait",
        ]);
        let heap = stack(&["_raw_spin_lock", "pipe_write"]);
        let cdev = 0xffff_ffff_83c1_ab40u64;
        let second = 0xffff_ffff_83c1_ab80u64;
        let rwsem = 0xffff_ffff_8315_8b80u64;
        let on = |addr: u64, stack: Option<u32>, wait: u64| LockRow {
            stack,
            total_ns: wait,
            ..row(addr, &format!("{addr:#x}"), SOURCE_ADDRESS, LCB_F_SPIN)
        };
        let mut rows = vec![
            on(cdev, open, 300),
            on(cdev, other, 100),
            on(rwsem, flock, 50),
            // A second static lock taken in chrdev_open, with less wait.
            on(second, open, 10),
            // Not in the image: stays an address.
            on(0xffff_8881_0000_1000, heap, 500),
            // Named already: left alone.
            row(cdev + 8, "jiffies_lock", SOURCE_KALLSYMS, LCB_F_SPIN),
            // Locks in objects of a merged cache of no known type: one name per
            // function, whatever the object.
            on(0xffff_8881_0000_2000, flock, 20),
            on(0xffff_8881_0000_3000, flock, 20),
        ];
        name_static_locks(&mut rows, &interner, |addr| {
            if addr >= 0xffff_ffff_8000_0000 {
                Some(ByCaller::Static)
            } else if addr >= 0xffff_8881_0000_2000 {
                Some(ByCaller::Slab)
            } else {
                None
            }
        });
        let names = names_of(&rows);
        assert_eq!(
            names,
            [
                ("static@chrdev_open", SOURCE_CALLER),
                ("static@chrdev_open", SOURCE_CALLER),
                ("static@flock_lock_inode", SOURCE_CALLER),
                ("static@chrdev_open:0xffffffff83c1ab80", SOURCE_CALLER),
                ("0xffff888100001000", SOURCE_ADDRESS),
                ("jiffies_lock", SOURCE_KALLSYMS),
                ("slab@flock_lock_inode", SOURCE_CALLER),
                ("slab@flock_lock_inode", SOURCE_CALLER),
            ]
        );
    }

    #[test]
    fn wait_lock_needs_a_named_lock_and_its_offset() {
        let base = 0xffff_8881_0000_1000u64;
        let none = WaitLockOffsets::default();
        // The spinlock's name while nothing names it after its lock.
        let unnamed = ("0xffff888100001014", SOURCE_ADDRESS);
        // (the lock at `base`, the spinlock 20 bytes on, the offsets) -> the spinlock's
        // name and source afterwards.
        let cases = [
            // The rwsem itself is not named: its wait_lock stays an address.
            (
                ("0xffff888100001000", SOURCE_ADDRESS, LCB_F_WRITE),
                unnamed,
                &OFFSETS,
                unnamed,
            ),
            // A spinlock the kernel side named (another task's pi_lock) keeps its name.
            (
                ("mmap_lock", SOURCE_TASK, LCB_F_WRITE),
                ("pi_lock", SOURCE_OTHER_TASK),
                &OFFSETS,
                ("pi_lock", SOURCE_OTHER_TASK),
            ),
            // A spinlock is no sleeping lock: nothing is named after it.
            (
                ("rq_lock:cpu0", SOURCE_RUNQUEUE, LCB_F_SPIN),
                unnamed,
                &OFFSETS,
                unnamed,
            ),
            // A kernel without the member (no BTF): nothing renamed.
            (
                ("mmap_lock", SOURCE_TASK, LCB_F_WRITE),
                unnamed,
                &none,
                unnamed,
            ),
            // A slab-named rwsem names its wait_lock, which the member says better
            // than the cache.
            (
                ("&inode->i_rwsem", SOURCE_SLAB, LCB_F_WRITE),
                ("&inode_cache", SOURCE_SLAB),
                &OFFSETS,
                ("&inode->i_rwsem.wait_lock", SOURCE_MEMBER),
            ),
        ];
        for ((lock, lock_source, flags), (spin, spin_source), offsets, expected) in cases {
            let mut rows = vec![
                row(base, lock, lock_source, flags),
                row(base + 20, spin, spin_source, LCB_F_SPIN),
            ];
            name_wait_locks(&mut rows, offsets);
            assert_eq!(names_of(&rows)[1], expected, "{lock} ({lock_source})");
        }
    }

    #[test]
    fn percpu_locks_are_found_from_a_runqueue_lock() {
        let Ok(btf) = Btf::vmlinux() else {
            eprintln!("SKIP: no kernel BTF here");
            return;
        };
        let offset = |var: &str| u64::from(btf.percpu_offset(var).expect(var));
        let member = |ty: &str, path: &str| u64::from(btf.member_offset(ty, path).expect(path));
        // CPU 3's per-CPU area at a made-up base: its runqueue lock, as the kernel side
        // notes it, places every other per-CPU variable.
        let base = 0xffff_8880_7fd8_0000u64;
        let rq_lock = base + offset("runqueues") + member("rq", "__lock");
        let namer = LockNamer {
            rq_locks: HashMap::from([(rq_lock, 3)]),
            percpu_bases: percpu_bases(btf, &HashMap::from([(rq_lock, 3)])),
            btf: Some(btf),
            slab_caches: HashMap::new(),
            kmalloc: HashMap::new(),
        };
        let hrtimer = base + offset("hrtimer_bases") + member("hrtimer_cpu_base", "lock");
        assert_eq!(
            namer.percpu_name(hrtimer).as_deref(),
            Some("hrtimer_bases.lock:cpu3")
        );
        assert_eq!(namer.percpu_name(hrtimer + 1), None);
        assert_eq!(namer.percpu_name(base - 8), None);
    }

    #[test]
    fn task_members_are_spinlocks_never_in_image_data() {
        // A spinlock's (class, in the image's data) -> the class kept.
        for (class, in_image, kept) in [
            (LOCK_CLASS_ALLOC_LOCK, true, LOCK_CLASS_UNKNOWN),
            (LOCK_CLASS_PI_LOCK, true, LOCK_CLASS_UNKNOWN),
            (LOCK_CLASS_PI_LOCK, false, LOCK_CLASS_PI_LOCK),
            // A static runqueue lock is one (`runqueues` of a kernel without per-CPU
            // areas elsewhere): only task members are checked.
            (LOCK_CLASS_RQ_LOCK, true, LOCK_CLASS_RQ_LOCK),
        ] {
            assert_eq!(
                checked_class(class, in_image, LCB_F_SPIN),
                kept,
                "class {class}, in the image: {in_image}"
            );
        }
        // A sleeping lock or a rwlock is never a task's spinlock member.
        for flags in [
            LCB_F_WRITE,
            LCB_F_READ,
            LCB_F_MUTEX,
            LCB_F_SPIN | LCB_F_WRITE,
        ] {
            assert_eq!(
                checked_class(LOCK_CLASS_ALLOC_LOCK, false, flags),
                LOCK_CLASS_UNKNOWN
            );
        }
    }

    /// A made-up `/sys/kernel/slab` (removed on drop): `links` are (cache, target)
    /// symbolic links, `dirs` caches that may not be merged.
    struct FakeSlabSysfs(std::path::PathBuf);

    impl Drop for FakeSlabSysfs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn slab_sysfs(links: &[(&str, &str)], dirs: &[&str]) -> (FakeSlabSysfs, SlabAliases) {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "lockpath-slab-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("temporary directory");
        let fake = FakeSlabSysfs(dir.clone());
        for name in dirs {
            std::fs::create_dir(dir.join(name)).expect("cache directory");
        }
        for (name, target) in links {
            std::os::unix::fs::symlink(target, dir.join(name)).expect("link");
        }
        let aliases = SlabAliases::read(&dir.to_string_lossy());
        (fake, aliases)
    }

    #[test]
    fn slab_aliases_say_which_caches_are_merged() {
        let (_dir, aliases) = slab_sysfs(
            &[
                ("file_lock_ctx", ":0000056"),
                ("ftrace_event_field", ":0000056"),
                ("lonely", ":0000088"),
            ],
            &[":0000056", ":0000088", "filp"],
        );
        let names = [
            "file_lock_ctx".to_string(),
            "ftrace_event_field".to_string(),
        ];
        assert_eq!(
            aliases.merged_with("ftrace_event_field"),
            Merging::With(&names[..])
        );
        // Mergeable but merged with nothing, or not mergeable: its own cache.
        assert_eq!(aliases.merged_with("lonely"), Merging::Alone);
        assert_eq!(aliases.merged_with("filp"), Merging::Alone);
        assert_eq!(
            SlabAliases::read("/nonexistent").merged_with("filp"),
            Merging::Unknown
        );
    }

    #[test]
    fn merged_caches_are_named_by_the_types_with_a_lock_there() {
        let Ok(btf) = Btf::vmlinux() else {
            eprintln!("SKIP: no kernel BTF here");
            return;
        };
        let Ok(flc_lock) = btf.member_offset("file_lock_context", "flc_lock") else {
            eprintln!("SKIP: no file_lock_context.flc_lock in this kernel's BTF");
            return;
        };
        let f_pos_lock = btf.member_offset("file", "f_pos_lock").expect("f_pos_lock");
        let (_dir, aliases) = slab_sysfs(
            &[
                ("file_lock_ctx", ":0000056"),
                ("ftrace_event_field", ":0000056"),
                // A cache whose type BTF does not know cannot be ruled out, nor named.
                ("some_module_cache", ":0000056"),
            ],
            &[":0000056", "filp"],
        );
        // The cache was named after the first of the merged ones, an unrelated struct
        // without a lock: the lock context's lock, the only one there, marked a guess.
        assert_eq!(
            slab_lock_name("ftrace_event_field", flc_lock, Some(btf), &aliases),
            Some((
                "&file_lock_context->flc_lock".to_string(),
                SOURCE_SLAB_MERGED
            ))
        );
        // No candidate type has a lock at that offset: named after its caller.
        assert_eq!(
            slab_lock_name("ftrace_event_field", flc_lock + 1, Some(btf), &aliases),
            None
        );
        // Without BTF nothing narrows the candidates.
        assert_eq!(
            slab_lock_name("ftrace_event_field", flc_lock, None, &aliases),
            None
        );
        // A cache that is not merged keeps its name and type.
        assert_eq!(
            slab_lock_name("filp", f_pos_lock, Some(btf), &aliases),
            Some(("&file->f_pos_lock".to_string(), SOURCE_SLAB))
        );
        // Where sysfs says nothing: the same name, as a guess.
        let unknown = SlabAliases::default();
        assert_eq!(
            slab_lock_name("filp", f_pos_lock, Some(btf), &unknown),
            Some(("&file->f_pos_lock".to_string(), SOURCE_SLAB_UNCHECKED))
        );
    }

    #[test]
    fn merged_caches_with_several_candidates_say_so() {
        let Ok(btf) = Btf::vmlinux() else {
            eprintln!("SKIP: no kernel BTF here");
            return;
        };
        // Two types with a spinlock first (`flc_lock`, `siglock` on 6.x), merged by a
        // made-up sysfs: the name lists both.
        let (Ok(0), Ok(0)) = (
            btf.member_offset("file_lock_context", "flc_lock"),
            btf.member_offset("sighand_struct", "siglock"),
        ) else {
            eprintln!("SKIP: flc_lock and siglock are not both first in this kernel");
            return;
        };
        let (_dir, aliases) =
            slab_sysfs(&[("file_lock_ctx", ":x"), ("sighand_cache", ":x")], &[":x"]);
        assert_eq!(
            slab_lock_name("sighand_cache", 0, Some(btf), &aliases),
            Some((
                "&{file_lock_context->flc_lock|sighand_struct->siglock}".to_string(),
                SOURCE_SLAB_MERGED
            ))
        );
    }

    #[test]
    fn wait_lock_offsets_on_this_kernel() {
        if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            eprintln!("no kernel BTF here");
            return;
        }
        let offsets = WaitLockOffsets::of_kernel();
        // Both follow at least one 8-byte member (count/owner, owner).
        assert!(
            offsets.rwsem.is_some_and(|offset| offset >= 8),
            "{offsets:?}"
        );
        assert!(
            offsets.mutex.is_some_and(|offset| offset >= 8),
            "{offsets:?}"
        );
    }

    #[test]
    fn layout_on_this_kernel() {
        if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            eprintln!("no kernel BTF here");
            return;
        }
        let layout = layout();
        assert_eq!(layout.enabled, 1);
        for offset in [
            layout.task_mm,
            layout.task_files,
            layout.task_pi_lock,
            layout.files_file_lock,
            layout.mm_mmap_lock,
        ] {
            assert_ne!(offset, NO_OFFSET, "{layout:?}");
        }
    }

    struct FakeTypes;

    impl KmallocTypes for FakeTypes {
        fn struct_params(&self, functions: &HashSet<&str>) -> HashMap<String, Vec<(String, u32)>> {
            let known: [(&str, &[(&str, u32)]); 4] = [
                (
                    "start_this_handle",
                    &[("journal_s", 1408), ("jbd2_journal_handle", 56)],
                ),
                ("jbd2_log_wait_commit", &[("journal_s", 1408)]),
                ("do_get_write_access", &[("jbd2_journal_handle", 56)]),
                // Too small for kmalloc-2k.
                ("small_taker", &[("small", 512)]),
            ];
            known
                .iter()
                .filter(|(name, _)| functions.contains(name))
                .map(|(name, params)| {
                    let params = params.iter().map(|(ty, size)| (ty.to_string(), *size));
                    (name.to_string(), params.collect())
                })
                .collect()
        }

        fn lock_member(&self, name: &str, offset: u32) -> Option<(String, String)> {
            let (path, ty) = match (name, offset) {
                ("journal_s", 0x40) => ("j_state_lock", "rwlock_t"),
                ("journal_s", 0x118) => ("j_checkpoint_mutex", "mutex"),
                ("journal_s", 0x60) => ("j_wait_done_commit.lock", "spinlock_t"),
                ("journal_s", 0x80) => ("j_list_lock", "spinlock_t"),
                ("small", 0x40) => ("lock", "rwlock_t"),
                _ => return None,
            };
            Some((path.to_string(), ty.to_string()))
        }
    }

    #[test]
    fn kmalloc_locks_are_typed_by_the_functions_that_take_them() {
        assert_eq!(kmalloc_sizes("kmalloc-2k"), Some((1025, 2048)));
        assert_eq!(kmalloc_sizes("kmalloc-cg-192"), Some((129, 192)));
        assert_eq!(kmalloc_sizes("dma-kmalloc-8"), Some((1, 8)));
        assert_eq!(kmalloc_sizes("kmalloc-rnd-05-1k"), Some((513, 1024)));
        assert_eq!(kmalloc_sizes("filp"), None);
        let mut interner = StackInterner::default();
        let mut stack = |names: &[&str]| kernel_stack(&mut interner, names);
        let object = 0xffff_8881_0000_0000u64;
        let rwlock_read = LCB_F_SPIN | LCB_F_READ;
        let slab = |addr: u64, flags: u32, stack: Option<u32>| LockRow {
            stack,
            ..row(addr, "&kmalloc-2k", SOURCE_SLAB, flags)
        };
        let mut rows = vec![
            // j_state_lock, by start_this_handle's journal.
            slab(
                object + 0x40,
                rwlock_read,
                stack(&["queued_read_lock_slowpath", "start_this_handle"]),
            ),
            // A wait queue's lock: the wait-queue code first, then its user.
            slab(
                object + 0x60,
                LCB_F_SPIN,
                stack(&[
                    "_raw_spin_lock_irqsave",
                    "prepare_to_wait_event",
                    "jbd2_log_wait_commit",
                ]),
            ),
            // No journal among its parameters: typed by its object's other locks.
            slab(
                object + 0x80,
                LCB_F_SPIN,
                stack(&["_raw_spin_lock", "do_get_write_access"]),
            ),
            // A mutex where the struct has a rwlock: not named.
            slab(
                object + 0x2000 + 0x40,
                LCB_F_MUTEX,
                stack(&["__mutex_lock", "start_this_handle"]),
            ),
            // A struct too small for the cache: not named.
            slab(
                object + 0x4000 + 0x40,
                rwlock_read,
                stack(&["queued_read_lock_slowpath", "small_taker"]),
            ),
        ];
        let kmalloc = |addr: u64| {
            Some(KmallocLock {
                sizes: (1025, 2048),
                offset: ((addr - object) % 0x2000) as u32,
            })
        };
        name_kmalloc_locks(&mut rows, &interner, kmalloc, &FakeTypes);
        let names = names_of(&rows);
        assert_eq!(
            names,
            [
                ("&journal_s->j_state_lock", SOURCE_SLAB_KMALLOC),
                ("&journal_s->j_wait_done_commit.lock", SOURCE_SLAB_KMALLOC),
                ("&journal_s->j_list_lock", SOURCE_SLAB_KMALLOC),
                ("&kmalloc-2k", SOURCE_SLAB),
                ("&kmalloc-2k", SOURCE_SLAB),
            ]
        );
    }

    #[test]
    fn wait_lock_of_a_static_lock_named_after_its_taker() {
        let rwsem = 0xffff_ffff_8300_0100u64;
        let mut rows = vec![
            row(rwsem, "static@flock_lock_inode", SOURCE_CALLER, LCB_F_WRITE),
            row(
                rwsem + 20,
                "static@percpu_down_write",
                SOURCE_CALLER,
                LCB_F_SPIN,
            ),
        ];
        name_wait_locks(&mut rows, &OFFSETS);
        assert_eq!(rows[1].lock_name, "static@flock_lock_inode.wait_lock");
        assert_eq!(rows[1].lock_name_source, SOURCE_MEMBER);
    }
}
