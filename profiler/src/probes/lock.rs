//! Lock contention: attach `lock:contention_begin/end` (or, on kernels before 5.19,
//! kprobes on the contention slow paths) and drain `LOCK_STATS`. The naming rules (type
//! names as `perf lock contention` prints them, the caller frame) are the profile
//! library's (`lockpath_profile::lock`).

use anyhow::{bail, Result};
use aya::{programs::KProbe, Ebpf, EbpfLoader};
use clap::{Args, ValueEnum};
use profiler_common::{
    hold::HoldKey,
    latency::LatencyStat,
    lock::{
        names, ContendedHoldKey, LockKey, LockLayout, LockStat, LockText, LockWait, PendingRing,
        LOCK_LAST_ACQUIRER_ENTRIES, LOCK_SLEEP_DROPPED_ENTRIES, LOCK_SLEEP_WAIT_ENTRIES,
        LOCK_STACK_CACHE_ENTRIES, LOCK_TEXT_RANGES, NO_HOLD, OUTCOME_SHIFT,
    },
};

use super::virtspin::{self, SpinPath};
use crate::{
    btf::Btf,
    probes::prelude::*,
    profile::{HoldRow, LockRow, Unavailable, WaitingRow},
    tracefs,
};

pub const FAMILY: Registration = Registration {
    name: "lock",
    asked: |args| args.lock.lock,
    check: super::lockfilter::check,
    plan: plan_family,
    maps: &[
        (names::LOCK_STATS, MapSize::Stats),
        (names::LOCK_OVERFLOW, MapSize::Overflow),
        (
            names::LOCK_SLEEP_WAIT,
            MapSize::Fixed(LOCK_SLEEP_WAIT_ENTRIES),
        ),
        (names::LOCK_HOLDS, MapSize::Stats),
        (names::LOCK_HOLDS_OVERFLOW, MapSize::Overflow),
        (
            names::LOCK_LAST_ACQUIRER,
            MapSize::Fixed(LOCK_LAST_ACQUIRER_ENTRIES),
        ),
        (
            names::LOCK_STACK_CACHE,
            MapSize::Fixed(LOCK_STACK_CACHE_ENTRIES),
        ),
        (
            names::LOCK_SITE_CACHE,
            MapSize::Fixed(profiler_common::lock::LOCK_SITE_CACHE_ENTRIES),
        ),
        (
            names::LOCK_SLEEP_DROPPED,
            MapSize::Fixed(LOCK_SLEEP_DROPPED_ENTRIES),
        ),
        (
            profiler_common::lockname::names::LOCK_RQ_ADDRS,
            MapSize::Fixed(profiler_common::lockname::LOCK_RQ_ADDRS_ENTRIES),
        ),
        (
            profiler_common::lockname::names::LOCK_SLAB_NAMES,
            MapSize::Fixed(profiler_common::lockname::LOCK_SLAB_NAMES_ENTRIES),
        ),
    ],
    names: names::ALL,
};

/// The lock family of one recording: the hook method and the struct offsets.
struct LockFamily {
    method: LockMethod,
    layout: LockLayout,
    names: profiler_common::lockname::LockNameLayout,
    /// Kernel text and the lock functions' text, for the stack caches' fingerprint.
    text: LockText,
    /// `--type`, `--lock-filter`, `--caller` (probes/lockfilter.rs).
    filter: super::lockfilter::RecordFilter,
}

/// Recorded when asked for, and by default: when no other family is asked for.
fn plan_family(args: &FamilyArgs, ctx: &mut PlanContext) -> Result<Planned> {
    if !args.lock.lock && !ctx.asked.is_empty() {
        if super::lockfilter::asked(args) {
            bail!(
                "--type, --lock-filter and --caller select lock contentions, which this \
                 recording does not record: add --lock"
            );
        }
        return Ok(None);
    }
    let filter = super::lockfilter::plan(args, ctx.symbols)?;
    if let Some(note) = filter.describe() {
        eprintln!("{note}");
    }
    let text = lock_text(ctx.symbols);
    let mut exact = args.lock.lock_stacks == LockStacks::Exact;
    if !exact && text.image_end == 0 {
        eprintln!(
            "lockpath: kallsyms does not show the kernel's text: every lock contention's \
             stack is walked (as with --lock-stacks exact)"
        );
        exact = true;
    }
    Ok(Some(Box::new(LockFamily {
        method: args.lock.lock_method,
        layout: LockLayout {
            exact_stacks: u32::from(exact),
            ..layout()
        },
        text,
        names: super::lockname::layout(),
        filter,
    })))
}

impl Family for LockFamily {
    fn configure<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        loader.override_global(names::LOCK_LAYOUT, &self.layout, true);
        loader.override_global(names::LOCK_FILTER, &self.filter.kernel, true);
        loader.override_global(names::LOCK_TEXT, &self.text, true);
        loader.override_global(
            profiler_common::lockname::names::LOCK_NAME_LAYOUT,
            &self.names,
            true,
        );
    }

    fn attach(&mut self, ebpf: &mut Ebpf, ctx: &mut AttachContext) -> Result<Vec<ProbeUse>> {
        let mut used = attach(ebpf, self.method, ctx.symbols)?;
        if used.method.starts_with("raw_tracepoint") {
            let path = virtspin::detect(ctx.symbols, ctx.reader.as_deref_mut());
            if let Some(added) = cover_spin_path(ebpf, &path, self.method, ctx)? {
                used.method = format!("{}; {added}", used.method);
            }
        }
        if let Some(releases) = attach_releases(ebpf, &self.layout, ctx) {
            used.method = format!("{}; {releases}", used.method);
        }
        Ok(vec![used])
    }

    fn stopped(&mut self, maps: &mut MapSet) -> Result<()> {
        add_pending_ends(maps)
    }

    fn drain(&self, out: &mut Drain) -> Result<()> {
        out.profile.locks = drain(out.maps, out.stacks)?;
        // Holds are named like the waits on the same lock (`mmap_lock` is known from the
        // waiter's side only).
        let names: std::collections::HashMap<u64, String> = out
            .profile
            .locks
            .iter()
            .map(|row| (row.lock_addr, row.lock_name.to_string()))
            .collect();
        out.profile.contended_holds = drain_contended_holds(out.maps, out.stacks, &names)?;
        self.filter.apply(
            &mut out.profile.locks,
            &mut out.profile.contended_holds,
            out.stacks,
        );
        let waiting = drain_open_waits(out.maps, out.stacks, out.moment, &out.profile.locks)?;
        out.profile.waiting.extend(waiting);
        Ok(())
    }

    fn progress(&self, live: &Profile) -> Option<String> {
        progress_of(&live.locks, |row| row.count, "lock contentions")
    }
}

/// Attaches the program that ends a hold under contention at the unlock that wakes the
/// next waiter (`sched:sched_waking`), and says so; without it (or without the task
/// layout it reads the woken thread with), a sleeping lock's hold ends at the next
/// waiter's acquisition, which adds that waiter's way back to a CPU.
fn attach_releases(
    ebpf: &mut Ebpf,
    layout: &LockLayout,
    ctx: &mut AttachContext,
) -> Option<String> {
    if layout.enabled == 0 {
        return None;
    }
    match attach_raw_tracepoint(ebpf, names::LOCK_SCHED_WAKING, "sched_waking") {
        Ok(()) => Some("raw_tracepoint sched:sched_waking (releases)".into()),
        Err(err) => {
            ctx.unavailable.push(Unavailable {
                family: FAMILY.name.into(),
                what: "sched:sched_waking".into(),
                reason: format!(
                    "{err:#}; holds under contention of mutexes and rwsems end at the next \
                     waiter's acquisition (an upper bound)"
                ),
            });
            None
        }
    }
}

/// Attaches lock-contention probes with `method` (auto: tracepoints when the kernel has
/// them, else kprobes on the slow paths) and says which were used.
pub fn attach(ebpf: &mut Ebpf, method: LockMethod, symbols: &KernelSymbols) -> Result<ProbeUse> {
    let method_used = match method {
        LockMethod::Tracepoint => attach_tracepoints(ebpf)?,
        LockMethod::Kprobe => attach_kprobes(ebpf, symbols)?,
        LockMethod::Auto => {
            if has_tracepoints() {
                attach_tracepoints(ebpf)?
            } else if tracefs::kprobes_available() {
                attach_kprobes(ebpf, symbols)?
            } else {
                bail!(
                    "this kernel has neither the lock:contention_* tracepoints (Linux 5.19+) \
                     nor kprobes (CONFIG_KPROBES): lock contention cannot be recorded here"
                );
            }
        }
    };
    Ok(ProbeUse {
        family: FAMILY.name.into(),
        method: method_used,
    })
}

/// On a virtual machine whose spin waits bypass the tracepoints (`virtspin`), the spin
/// slow path's kprobe pair records them beside the tracepoints; without kprobes the
/// profile says that spinlocks are missing. Returns what was added to the method.
/// Under `--lock-method tracepoint` only the profile's note is added.
fn cover_spin_path(
    ebpf: &mut Ebpf,
    path: &SpinPath,
    method: LockMethod,
    ctx: &mut AttachContext,
) -> Result<Option<String>> {
    let why = match path {
        SpinPath::Traced { why } => {
            log::debug!("spin waits reach the lock tracepoints: {why}");
            return Ok(None);
        }
        SpinPath::Unknown => {
            eprintln!(
                "lockpath: note: on this virtual machine spinlock waits may bypass the lock \
                 tracepoints (virt_spin_lock, no paravirt spinlocks) and nothing says whether \
                 they do: no spinlock rows does not prove no spinlock contention"
            );
            return Ok(None);
        }
        SpinPath::TestAndSet { why } => why,
    };
    let (entry, ret, candidates) = SLOW_PATHS[0];
    let function = candidates
        .iter()
        .copied()
        .filter(|name| *name != "__pv_queued_spin_lock_slowpath")
        .find(|name| ctx.symbols.has_function(name));
    let missing = |reason: String| Unavailable {
        family: FAMILY.name.into(),
        what: "spinlock waits".into(),
        reason,
    };
    if method == LockMethod::Tracepoint {
        ctx.unavailable.push(missing(format!(
            "{why}: the kernel takes contended spinlocks by test-and-set without the \
             tracepoints; --lock-method auto adds the kprobe on the spin slow path"
        )));
        return Ok(None);
    }
    let Some(function) = function.filter(|_| tracefs::kprobes_available()) else {
        ctx.unavailable.push(missing(format!(
            "{why}: the kernel takes contended spinlocks by test-and-set without the \
             tracepoints, and has no kprobe for its spin slow path; spinlock contention \
             is not recorded, the other lock types are"
        )));
        return Ok(None);
    };
    let attached = (|| -> Result<()> {
        for name in [entry, ret] {
            let program: &mut KProbe = program(ebpf, name)?;
            program
                .load()
                .map_err(|err| crate::probes::shared::load_error(name, err))?;
        }
        attach_kprobe_pair(ebpf, entry, ret, function)
    })();
    if let Err(err) = attached {
        ctx.unavailable.push(missing(format!(
            "{why}: spin waits bypass the tracepoints, and the kprobe on {function} \
             failed: {err:#}"
        )));
        return Ok(None);
    }
    Ok(Some(format!(
        "kprobe+kretprobe {function} for spinlocks ({why})"
    )))
}

/// In attach order: the end first, so that no wait can be opened whose end would not be
/// seen.
const TRACEPOINTS: [&str; 2] = ["contention_end", "contention_begin"];

fn has_tracepoints() -> bool {
    TRACEPOINTS
        .iter()
        .all(|event| tracefs::event_exists("lock", event))
}

fn attach_tracepoints(ebpf: &mut Ebpf) -> Result<String> {
    for event in TRACEPOINTS.iter().rev() {
        if !tracefs::event_exists("lock", event) {
            bail!(
                "this kernel has no lock:{event} tracepoint (it arrived in Linux 5.19): \
                 use --lock-method kprobe (or auto) for the kprobe fallback"
            );
        }
    }
    let name = |event: &str| match event {
        "contention_begin" => names::LOCK_CONTENTION_BEGIN,
        _ => names::LOCK_CONTENTION_END,
    };
    // Both verified before either is attached: the begin program's verification takes
    // hundreds of milliseconds (more on a busy machine), and every end seen meanwhile
    // would be an end without its begin (a `lock_unmatched_end` loss system-wide).
    for event in TRACEPOINTS {
        load_raw_tracepoint(ebpf, name(event))?;
    }
    for event in TRACEPOINTS {
        attach_loaded_raw_tracepoint(ebpf, name(event), event)?;
    }
    Ok("raw_tracepoint lock:contention_begin/contention_end".into())
}

/// Slow paths of the kprobe fallback: (entry program, return program, candidate
/// symbols). Every candidate this kernel has is probed (only one spin variant runs, but
/// which one is chosen at boot by paravirt patching).
const SLOW_PATHS: &[(&str, &str, &[&str])] = &[
    (
        names::LOCK_KPROBE_SPIN,
        names::LOCK_KRETPROBE_SPIN,
        &[
            "queued_spin_lock_slowpath",
            "native_queued_spin_lock_slowpath",
            "__pv_queued_spin_lock_slowpath",
        ],
    ),
    (
        names::LOCK_KPROBE_MUTEX,
        names::LOCK_KRETPROBE_SLEEP,
        &[
            "__mutex_lock_slowpath",
            "__mutex_lock_killable_slowpath",
            "__mutex_lock_interruptible_slowpath",
        ],
    ),
    (
        names::LOCK_KPROBE_RWSEM_READ,
        names::LOCK_KRETPROBE_SLEEP,
        &["rwsem_down_read_slowpath"],
    ),
    (
        names::LOCK_KPROBE_RWSEM_WRITE,
        names::LOCK_KRETPROBE_SLEEP,
        &["rwsem_down_write_slowpath"],
    ),
];

const KPROBE_BLACKLIST: &str = "/sys/kernel/debug/kprobes/blacklist";

fn attach_kprobes(ebpf: &mut Ebpf, symbols: &KernelSymbols) -> Result<String> {
    if !tracefs::kprobes_available() {
        bail!(
            "this kernel has no kprobes (built without CONFIG_KPROBES): the lock kprobe \
             fallback cannot run here; use --lock-method tracepoint (or auto)"
        );
    }
    let blacklist = std::fs::read_to_string(KPROBE_BLACKLIST).unwrap_or_default();
    let blacklisted = |name: &str| {
        blacklist
            .lines()
            .any(|line| line.split_whitespace().nth(1) == Some(name))
    };
    let mut attached = Vec::new();
    let mut loaded = Vec::new();
    for (entry, ret, candidates) in SLOW_PATHS {
        let present: Vec<&str> = candidates
            .iter()
            .copied()
            .filter(|name| symbols.has_function(name))
            .collect();
        let usable: Vec<&str> = present
            .iter()
            .copied()
            .filter(|name| !blacklisted(name))
            .collect();
        if usable.is_empty() {
            // One clear line; the other lock types are still recorded.
            let why = if present.is_empty() {
                format!("none of {} is in /proc/kallsyms", candidates.join(", "))
            } else {
                format!("{} is on the kprobe blacklist", present.join(", "))
            };
            eprintln!(
                "lockpath: warning: {} contention not recorded: {why}",
                slow_path_type(entry)
            );
            continue;
        }
        for name in [*entry, *ret] {
            if !loaded.contains(&name) {
                let program: &mut KProbe = program(ebpf, name)?;
                program
                    .load()
                    .map_err(|err| crate::probes::shared::load_error(name, err))?;
                loaded.push(name);
            }
        }
        for function in usable {
            attach_kprobe_pair(ebpf, entry, ret, function)?;
            attached.push(function);
        }
    }
    if attached.is_empty() {
        bail!(
            "no lock slow path of this kernel can be probed (see the warnings above): \
             lock contention cannot be recorded with kprobes here"
        );
    }
    Ok(format!("kprobe+kretprobe {}", attached.join(",")))
}

fn slow_path_type(entry: &str) -> &'static str {
    match entry {
        names::LOCK_KPROBE_SPIN => "spinlock",
        names::LOCK_KPROBE_MUTEX => "mutex",
        names::LOCK_KPROBE_RWSEM_READ => "rwsem:R",
        _ => "rwsem:W",
    }
}

/// Whether an image function is one of the lock functions a contention's stack passes
/// through between its caller and the tracepoint (or the slow path's kprobe): any of the
/// `.spinlock.text` section (`_raw_spin_lock`, `queued_spin_lock_slowpath`, ...), the
/// locking functions of `.sched.text` (`mutex_lock`, `__mutex_lock`, `down_write`,
/// `rwsem_down_write_slowpath`, rt-mutex, semaphore, ...), and the spin slow paths and
/// debug lock functions wherever they are. `lock_text` and `sched_text` are the sections.
fn is_lock_function(name: &str, addr: u64, lock_text: (u64, u64), sched_text: (u64, u64)) -> bool {
    if addr >= lock_text.0 && addr < lock_text.1 {
        return true;
    }
    let bare = name.strip_prefix("__pfx_").unwrap_or(name);
    let bare = bare.trim_start_matches('_');
    // (Not `_raw_*` outside the section: the scheduler's `_raw_spin_rq_lock_irqsave`
    // copies are a caller's wrapper, like `raw_spin_rq_lock_nested`.)
    const ANYWHERE: &[&str] = &[
        "do_raw_",
        "queued_spin_lock_slowpath",
        "queued_read_lock",
        "queued_write_lock",
        "native_queued_spin_lock_slowpath",
        "pv_queued_spin_lock_slowpath",
    ];
    if ANYWHERE.iter().any(|prefix| bare.starts_with(prefix)) {
        return true;
    }
    const SCHED_TEXT: &[&str] = &[
        "mutex_",
        "ww_mutex_",
        "down",
        "up",
        "rwsem_",
        "percpu_down",
        "percpu_rwsem",
        "rt_mutex",
        "try_to_take_rt_mutex",
        "task_blocks_on_rt_mutex",
        "remove_waiter",
        "mark_wakeup_next_waiter",
        "rwbase_",
        "ldsem_",
    ];
    addr >= sched_text.0
        && addr < sched_text.1
        && SCHED_TEXT.iter().any(|prefix| bare.starts_with(prefix))
}

/// Kernel text and the lock functions' ranges for `LOCK_TEXT`, from kallsyms; all zero
/// when kallsyms does not show the image's text. With more lock-function ranges than
/// `LOCK_TEXT_RANGES`, the nearest are joined.
pub fn lock_text(symbols: &KernelSymbols) -> LockText {
    let Some((image_start, image_end)) = symbols.image_text() else {
        return LockText::default();
    };
    let section = |start: &str, end: &str| -> (u64, u64) {
        match (
            symbols.find_function(start, None),
            symbols.find_function(end, None),
        ) {
            (Some(start), Some(end)) if end.addr > start.addr => (start.addr, end.addr),
            _ => (0, 0),
        }
    };
    let lock_text = section("__lock_text_start", "__lock_text_end");
    let sched_text = section("__sched_text_start", "__sched_text_end");
    let mut runs = symbols
        .function_runs(|symbol| is_lock_function(&symbol.name, symbol.addr, lock_text, sched_text));
    // Too many ranges: the two nearest neighbours are joined, the few functions between
    // them counted as lock functions (a caller among them is then skipped like one;
    // dropping a range instead would leave its lock functions as call-path words, and
    // a stack whose only lock frame is one of them would have no fingerprint at all).
    while runs.len() > LOCK_TEXT_RANGES {
        let nearest = (1..runs.len())
            .min_by_key(|&index| runs[index].0.saturating_sub(runs[index - 1].1))
            .unwrap_or(1);
        runs[nearest - 1].1 = runs[nearest].1;
        runs.remove(nearest);
    }
    let mut internal = [[0u64; 2]; LOCK_TEXT_RANGES];
    for (slot, (start, end)) in internal.iter_mut().zip(runs) {
        *slot = [start, end];
    }
    let (modules_start, modules_end) = symbols.modules_text().unwrap_or((0, 0));
    LockText {
        image_start,
        image_end,
        modules_start,
        modules_end,
        internal,
    }
}

/// The size of a task's kernel stack (`THREAD_SIZE`), which tells the spin programs an
/// interrupt's stack from the task's: 16 KiB on x86_64 and arm64, twice that with KASAN
/// (whose functions the BTF then lists), at least a page on arm64 (64 KiB pages). 0
/// (unknown: a spin wait found open is then taken to go on) on other architectures.
fn thread_size(btf: &Btf) -> u32 {
    let kasan = btf.function_id("kasan_report").is_some();
    let base: u32 = 16 << 10;
    let base = if kasan { base * 2 } else { base };
    if cfg!(target_arch = "x86_64") {
        base
    } else if cfg!(target_arch = "aarch64") {
        // SAFETY: sysconf only reads a system value.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        base.max(u32::try_from(page).unwrap_or(0))
    } else {
        0
    }
}

/// Struct offsets from the kernel's BTF that let the lock programs name `mmap_lock` and
/// read the owner of a contended mutex or rwsem. Without BTF both are off (`enabled` 0)
/// and lock contention is recorded as before.
pub fn layout() -> LockLayout {
    let read = || -> Result<LockLayout> {
        let btf = Btf::vmlinux()?;
        Ok(LockLayout {
            enabled: 1,
            task_mm: btf.member_offset("task_struct", "mm")?,
            task_pid: btf.member_offset("task_struct", "pid")?,
            task_tgid: btf.member_offset("task_struct", "tgid")?,
            task_comm: btf.member_offset("task_struct", "comm")?,
            mm_mmap_lock: btf.member_offset("mm_struct", "mmap_lock")?,
            mutex_owner: btf.member_offset("mutex", "owner")?,
            rwsem_owner: btf.member_offset("rw_semaphore", "owner")?,
            exact_stacks: 0,
            task_stack: btf.member_offset("task_struct", "stack")?,
            thread_size: thread_size(btf),
            rwsem_count: btf.member_offset("rw_semaphore", "count")?,
        })
    };
    match read() {
        Ok(layout) => layout,
        Err(err) => {
            log::warn!("lock owners and mmap_lock names are off: {err:#}");
            LockLayout::default()
        }
    }
}

/// Adds the finished contentions the CPUs' rings still hold (`LOCK_PENDING`: the end
/// program leaves each for the next begin on its CPU) to the aggregate, as that begin
/// would have. Once the programs are detached, nothing else will.
pub fn add_pending_ends(maps: &mut MapSet) -> Result<()> {
    for ring in maps.per_cpu::<PendingRing>(names::LOCK_PENDING)? {
        for end in ring.pending() {
            let wait_ns = end.wait_ns;
            let added = maps.add_to_row(
                (names::LOCK_STATS, names::LOCK_OVERFLOW),
                (end.key, end.key.overflow()),
                LockStat::one(wait_ns),
                |stat: &mut LockStat| *stat = stat.with(wait_ns),
            )?;
            let hold_ns = end.hold_ns;
            let hold_added = hold_ns == NO_HOLD
                || maps.add_to_row(
                    (names::LOCK_HOLDS, names::LOCK_HOLDS_OVERFLOW),
                    (end.hold, end.hold.overflow()),
                    LatencyStat::EMPTY.with(hold_ns),
                    |stat: &mut LatencyStat| *stat = stat.with(hold_ns),
                )?;
            // Counted as the programs count them when both maps are full.
            if !added {
                maps.count_loss(profiler_common::lock::losses::LOCK_OVERFLOW_FULL)?;
            }
            if !hold_added {
                maps.count_loss(profiler_common::lock::losses::LOCK_HOLD_OVERFLOW_FULL)?;
            }
        }
    }
    Ok(())
}

/// Reads the aggregate out of the kernel.
pub fn drain(maps: &MapSet, stacks: &mut StackResolver) -> Result<Vec<LockRow>> {
    let namer = super::lockname::LockNamer::new(maps)?;
    let mut rows = Vec::new();
    for (key, stat) in maps.entries::<LockKey, LockStat>(names::LOCK_STATS)? {
        let (lock_name, source) = namer.name(key.lock_class, key.lock_addr, key.flags, stacks);
        rows.push(LockRow {
            pid: key.tgid,
            lock_addr: key.lock_addr,
            lock_name: lock_name.into(),
            lock_name_source: source.into(),
            flags: key.flags | key.outcome << OUTCOME_SHIFT,
            stack: stacks.kernel_stack(key.kstack_id),
            count: stat.count,
            total_ns: stat.total_ns,
            max_ns: stat.max_ns,
            min_ns: stat.min_ns,
            owner_pid: (key.owner_tgid != 0).then_some(key.owner_tgid),
            owner_stack: stacks.kernel_stack(key.owner_kstack_id),
        });
    }
    super::lockname::name_wait_locks(&mut rows, &super::lockname::WaitLockOffsets::of_kernel());
    super::lockname::name_static_locks(&mut rows, &stacks.interner, |addr| {
        use super::lockname::ByCaller;
        if stacks.is_static(addr) {
            Some(ByCaller::Static)
        } else if namer.slab_by_caller(addr) {
            Some(ByCaller::Slab)
        } else {
            None
        }
    });
    // The wait_locks of the sleeping locks just named after their takers.
    super::lockname::name_wait_locks(&mut rows, &super::lockname::WaitLockOffsets::of_kernel());
    if let Some(btf) = namer.btf() {
        super::lockname::name_kmalloc_locks(
            &mut rows,
            &stacks.interner,
            |addr| namer.kmalloc_lock(addr),
            btf,
        );
    }
    // Contentions the full map had no room for: a row per process and lock type.
    for (key, stat) in maps.entries::<LockKey, LockStat>(names::LOCK_OVERFLOW)? {
        rows.push(LockRow {
            pid: key.tgid,
            lock_name: STATS_MAP_FULL.into(),
            flags: key.flags | key.outcome << OUTCOME_SHIFT,
            count: stat.count,
            total_ns: stat.total_ns,
            max_ns: stat.max_ns,
            min_ns: stat.min_ns,
            ..LockRow::default()
        });
    }
    rows.sort_by_key(|row| std::cmp::Reverse(row.total_ns));
    Ok(rows)
}

/// The lock name of the rows of contentions a full `LOCK_STATS` had no room for.
pub const STATS_MAP_FULL: &str = "[stats map full]";

/// The sleeping lock waits still open at the drain (`LOCK_SLEEP_WAIT`), each with the
/// lock's holder when the wait began. A lock is named like the rows name it (a static
/// lock after its taker, ...), else as the namer does. Their time enters the lock rows
/// when they end.
fn drain_open_waits(
    maps: &MapSet,
    stacks: &mut StackResolver,
    moment: DrainMoment,
    rows: &[LockRow],
) -> Result<Vec<WaitingRow>> {
    use super::{blocked::tgid_of, shared::inprogress::drain_listed};
    let namer = super::lockname::LockNamer::new(maps)?;
    let start_ns = |wait: &LockWait| wait.start_ns;
    let row = |tid: u32, wait: LockWait, age_ns| {
        let name = match rows.iter().find(|row| row.lock_addr == wait.lock_addr) {
            Some(row) => row.lock_name.to_string(),
            None => {
                namer
                    .name(wait.lock_class, wait.lock_addr, wait.flags, stacks)
                    .0
            }
        };
        Some(WaitingRow {
            kind: "lock".into(),
            pid: tgid_of(tid).unwrap_or(tid),
            tid,
            since_ns: wait.start_ns,
            age_ns,
            counted_ns: 0,
            class: crate::lock::lock_type_name(wait.flags).into(),
            what: name,
            stack: stacks.kernel_stack(wait.kstack_id),
            lock_addr: Some(wait.lock_addr),
            // The holder's thread is read from kernel memory after the drain
            // (`owners::resolve_lock_owners`); the program keeps only its process.
            owner_pid: (wait.owner_tgid != 0).then_some(wait.owner_tgid),
            ..Default::default()
        })
    };
    drain_listed(maps, names::LOCK_SLEEP_WAIT, moment, start_ns, row)
}

/// Reads the holds under contention out of the kernel.
pub fn drain_contended_holds(
    maps: &MapSet,
    stacks: &mut StackResolver,
    names: &std::collections::HashMap<u64, String>,
) -> Result<Vec<HoldRow>> {
    use super::hold::{drain_hold_map, HeldLock};
    let split = |key: &ContendedHoldKey, stacks: &mut StackResolver| {
        // Lock 0: a row of the holds the full map had no room for.
        let name = match (key.lock_addr, names.get(&key.lock_addr)) {
            (0, _) => STATS_MAP_FULL.into(),
            (_, Some(name)) => name.clone(),
            (_, None) => stacks.lock_name(key.lock_addr),
        };
        let acquired = HoldKey {
            tgid: key.tgid,
            kstack_id: key.kstack_id,
            flags: key.flags,
            _pad: 0,
        };
        let lock = HeldLock {
            addr: key.lock_addr,
            name,
            tid: (key.lock_addr != 0).then_some(key.tid),
        };
        (acquired, lock)
    };
    let holds = (names::LOCK_HOLDS, names::LOCK_HOLDS_OVERFLOW);
    drain_hold_map(maps, stacks, holds, split)
}

// `record`'s options of the lock family: contention, how it is hooked, and which
// contentions are kept.

#[derive(Debug, Args)]
pub struct LockArgs {
    /// Record lock contention (spinlocks, rwlocks, mutexes, rwsems); the default when no
    /// other family is asked for.
    #[arg(long)]
    pub lock: bool,

    /// How lock contention is hooked: `auto` uses the lock:contention_* tracepoints
    /// (Linux 5.19+) and falls back to kprobes on the contention slow paths; the other
    /// values force one method (for tests of the fallback).
    #[arg(long, value_enum, value_name = "METHOD", default_value_t = LockMethod::Auto)]
    pub lock_method: LockMethod,

    /// How a contention's kernel stack is found: `cached` (default) walks it once per
    /// lock and call path every 100 ms and reuses the walk in between (about 0.6 us per
    /// contention instead of 3 or more); `exact` walks every contention's stack, for
    /// checking what the cache attributes.
    #[arg(long, value_enum, value_name = "HOW", default_value_t = LockStacks::Cached)]
    pub lock_stacks: LockStacks,

    /// Record only the contentions on this lock (repeatable; like perf's -L). ADDR (a
    /// report's lock column) and a static lock's kernel symbol are checked in the
    /// kernel, before any other work (up to 8 addresses); a name known only after the
    /// fact (mmap_lock, siglock, rq_lock:cpu3, NAME.wait_lock, static@FUNCTION, ...) is
    /// kept when the maps are drained. Not `--lock`: on record that selects the lock
    /// family (`report --lock` filters a recorded profile).
    #[arg(long = "lock-filter", value_name = "NAME|ADDR")]
    pub lock_filter: Vec<String>,

    /// Record only the contentions on locks of this type (repeatable; like perf's -Y):
    /// spinlock, rwlock, mutex, rwsem, rwsem:W, ... as reports name them. Checked in
    /// the kernel, before any other work.
    #[arg(long = "type", value_name = "TYPE")]
    pub lock_type: Vec<String>,

    /// Keep only the contentions whose kernel stack has a frame containing PATTERN (`*`
    /// is a wildcard; repeatable; like perf's -S). Not in the kernel (it needs symbolized
    /// stacks): applied when the maps are drained, so the profile holds only matching
    /// rows.
    #[arg(long = "caller", value_name = "PATTERN")]
    pub caller: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LockMethod {
    /// Tracepoints when the kernel has them, else kprobes.
    Auto,
    /// lock:contention_begin/end (raw tracepoints).
    Tracepoint,
    /// kprobes/kretprobes on the spinlock, mutex and rwsem slow paths.
    Kprobe,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LockStacks {
    /// One walk per lock and call path every 100 ms, reused in between.
    Cached,
    /// A walk for every contention (costs about 3 us or more each).
    Exact,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Part of a 6.18 x86_64 kallsyms: the lock functions of `.sched.text` between the
    /// scheduler's and the timers', and the `.spinlock.text` section.
    const SAMPLE: &str = "\
ffffffff81000000 T _stext
ffffffff813ea4b0 T __traceiter_contention_begin
ffffffff8170e6c0 T fdget_pos
ffffffff816dc920 T ksys_read
ffffffff82247b40 T __sched_text_start
ffffffff82247be0 T __schedule
ffffffff82248b50 T schedule
ffffffff82249cd0 T wait_for_completion
ffffffff82249f60 t __pfx___mutex_unlock_slowpath.isra.0
ffffffff82249f70 t __mutex_unlock_slowpath.isra.0
ffffffff8224b210 t __mutex_lock.constprop.0
ffffffff8224bd40 t __mutex_lock_slowpath
ffffffff8224bd60 T mutex_lock
ffffffff8224cd30 t rwsem_down_write_slowpath
ffffffff8224d450 T down_write
ffffffff8224fb70 T __pfx_do_nanosleep
ffffffff8224fb80 T do_nanosleep
ffffffff822502f0 T ldsem_down_read
ffffffff82250862 T __sched_text_end
ffffffff82250870 T __lock_text_start
ffffffff82250f90 T _raw_spin_lock
ffffffff82251230 T native_queued_spin_lock_slowpath
ffffffff822522f1 T __lock_text_end
ffffffff82252300 T __cpuidle_text_start
ffffffff82259b00 T _etext
ffffffffc0201000 t ext4_file_read_iter\t[ext4]
ffffffffc0208000 t bpf_prog_1234_lock_contention\t[bpf]
";

    #[test]
    fn lock_functions_are_internal_and_their_callers_are_not() {
        let symbols = KernelSymbols::parse(SAMPLE);
        let text = lock_text(&symbols);
        assert_eq!(
            (text.image_start, text.image_end),
            (0xffffffff81000000, 0xffffffff82259b00)
        );
        assert_eq!(
            (text.modules_start, text.modules_end),
            (0xffffffffc0201000, 0xffffffffc0202000)
        );
        let internal = |addr: u64| {
            text.internal
                .iter()
                .any(|[start, end]| addr >= *start && addr < *end)
        };
        for addr in [
            0xffffffff8224b210 + 0x200, // __mutex_lock
            0xffffffff8224bd60 + 0x10,  // mutex_lock
            0xffffffff8224d450 + 0x20,  // down_write
            0xffffffff822502f0 + 0x30,  // ldsem_down_read
            0xffffffff82250f90 + 0x10,  // _raw_spin_lock
            0xffffffff82251230 + 0x100, // native_queued_spin_lock_slowpath
        ] {
            assert!(internal(addr), "{addr:x} is a lock function's");
        }
        for addr in [
            0xffffffff8170e6c0 + 0x40, // fdget_pos
            0xffffffff816dc920 + 0x40, // ksys_read
            0xffffffff82247be0 + 0x40, // __schedule
            0xffffffff82249cd0 + 0x40, // wait_for_completion
            0xffffffff8224fb80 + 0x40, // do_nanosleep
            0xffffffff82252300 + 0x40, // past the lock text
        ] {
            assert!(!internal(addr), "{addr:x} is a caller's");
        }
    }

    /// More lock-function ranges than the global holds: the nearest are joined, so that
    /// every lock function stays covered.
    #[test]
    fn too_many_lock_ranges_are_joined_not_dropped() {
        let mut text =
            String::from("ffffffff81000000 T _stext\nffffffff82000000 T __sched_text_start\n");
        let mut mutexes = Vec::new();
        for index in 0..20u64 {
            // A locking function, then a scheduler one; the gaps grow with the index.
            let at = 0xffffffff82000000 + index * index * 0x100 + index * 0x1000;
            text.push_str(&format!("{at:x} T mutex_lock_{index}\n"));
            text.push_str(&format!("{:x} T schedule_{index}\n", at + 0x80));
            mutexes.push(at + 0x10);
        }
        text.push_str("ffffffff82100000 T __sched_text_end\nffffffff82200000 T _etext\n");
        let lock = lock_text(&KernelSymbols::parse(&text));
        let covered = |addr: u64| {
            lock.internal
                .iter()
                .any(|[start, end]| addr >= *start && addr < *end)
        };
        assert!(mutexes.iter().all(|addr| covered(*addr)));
        assert!(lock.internal.iter().all(|[start, end]| end > start));
        // The widest gaps (between the last functions) stay out.
        assert!(!covered(
            0xffffffff82000000 + 19 * 19 * 0x100 + 19 * 0x1000 - 0x10
        ));
    }

    #[test]
    fn no_kernel_text_no_fingerprint() {
        let symbols = KernelSymbols::parse("ffffffff81001000 T do_pipe2\n");
        assert_eq!(lock_text(&symbols), LockText::default());
    }
}
