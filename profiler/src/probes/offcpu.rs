//! Off-CPU waits: attach `sched:sched_switch`, drain `OFFCPU_STATS`, classify each
//! stack into a wait class (waitclass.rs).

use anyhow::{bail, Result};
use aya::{Ebpf, EbpfLoader};
use clap::Args;
use profiler_common::offcpu::{
    names, OffcpuKey, OffcpuStart, OffcpuStat, WaitPart, OFFCPU_START_ENTRIES, STATE_INTERRUPTIBLE,
    STATE_UNINTERRUPTIBLE,
};

use crate::{
    probes::{
        blocked,
        blocked_on::{BlockedOn, KernelReader, LockKind},
        filelock,
        prelude::*,
        target::Target,
    },
    profile::{Frame, OffcpuRow, WaitingRow},
    tracefs,
    waitclass::{self, Classifier},
};

pub const FAMILY: Registration = Registration {
    name: "offcpu",
    asked: |args| args.offcpu.offcpu || args.offcpu.offcpu_all,
    check: |args| options(args).map(|_| ()),
    plan: plan_family,
    maps: &[
        (names::OFFCPU_STATS, MapSize::Stats),
        (names::OFFCPU_OVERFLOW, MapSize::Overflow),
        (names::OFFCPU_START, MapSize::Fixed(OFFCPU_START_ENTRIES)),
        (
            names::FILELOCK_WAITERS,
            MapSize::Fixed(profiler_common::offcpu::FILELOCK_WAITERS_ENTRIES),
        ),
    ],
    names: names::ALL,
};

/// The off-CPU options from the flags, checked before anything is loaded.
fn options(args: &FamilyArgs) -> Result<Option<OffcpuOptions>> {
    waitclass::validate(&args.offcpu.wait_class)?;
    let offcpu = (args.offcpu.offcpu || args.offcpu.offcpu_all).then(|| OffcpuOptions {
        all_states: args.offcpu.offcpu_all,
        min_wait_ns: args.offcpu.min_wait.unwrap_or(0),
        wakers: args.offcpu.wakers,
    });
    if offcpu.is_none() && (args.offcpu.min_wait.is_some() || !args.offcpu.wait_class.is_empty()) {
        bail!(
            "--min-wait and --wait-class apply to off-CPU recording: add --offcpu or --offcpu-all"
        );
    }
    Ok(offcpu)
}

fn plan_family(args: &FamilyArgs, _ctx: &mut PlanContext) -> Result<Planned> {
    let Some(options) = options(args)? else {
        return Ok(None);
    };
    Ok(Some(Box::new(OffcpuFamily {
        globals: OffcpuGlobals::read(&options)?,
        filelock: filelock::FilelockGlobals::read(),
        options,
        classifier: Classifier::new(args.offcpu.wait_class.clone()),
        blocked: Vec::new(),
    })))
}

/// The slow path a thread queued on a lock of `kind` sleeps in.
fn slow_path_of(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Mutex => "__mutex_lock",
        LockKind::RwsemRead => "rwsem_down_read_slowpath",
        LockKind::RwsemWrite => "rwsem_down_write_slowpath",
    }
}

/// Lock holders read in addition to the blocked threads of the targets, at most.
const MAX_OWNERS_FOLLOWED: usize = 64;

/// A thread found blocked at the start, handed to the program.
struct Followed {
    thread: blocked::BlockedThread,
    /// The stack id of its wait: while its open entry has it, it is still that wait.
    kstack_id: i32,
    /// What it waits on, read from kernel memory.
    on: Option<BlockedOn>,
}

/// The off-CPU family of one recording.
struct OffcpuFamily {
    options: OffcpuOptions,
    globals: OffcpuGlobals,
    /// Offsets of the file-lock holders' program, or why it cannot run here.
    filelock: Result<filelock::FilelockGlobals>,
    classifier: Classifier,
    /// The threads found blocked at the start (handed to the program as open waits).
    blocked: Vec<Followed>,
}

impl Family for OffcpuFamily {
    fn configure<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        self.globals.apply(loader);
        if let Ok(filelock) = &self.filelock {
            filelock.apply(loader);
        }
    }

    fn user_stacks(&self) -> bool {
        true
    }

    fn attach(&mut self, ebpf: &mut Ebpf, ctx: &mut AttachContext) -> Result<Vec<ProbeUse>> {
        let mut used = if self.options.wakers {
            // A kernel that refuses the program with the waker join still records the
            // waits with the plain one; the wakers family then says why it is missing.
            match attach_tracepoint(
                ebpf,
                names::OFFCPU_SCHED_SWITCH_WAKERS,
                "sched",
                "sched_switch",
            ) {
                Ok(()) => probe_use(&self.options, " with wakers"),
                Err(err) => {
                    ctx.unavailable.push(crate::profile::Unavailable {
                        family: "wakers".into(),
                        what: "off-CPU waits joined to their wakers".into(),
                        reason: format!("{err:#}; off-CPU waits are recorded without their wakers"),
                    });
                    attach(ebpf, &self.options)?
                }
            }
        } else {
            attach(ebpf, &self.options)?
        };
        match self
            .filelock
            .as_ref()
            .map_err(|err| anyhow::anyhow!("{err:#}"))
            .and_then(|globals| filelock::attach(ebpf, globals))
        {
            Ok(method) => used.method.push_str(&format!("; {method}")),
            Err(err) => ctx
                .unavailable
                .push(filelock::unavailable(FAMILY.name, &err)),
        }
        Ok(vec![used])
    }

    fn started(
        &mut self,
        maps: &MapSet,
        stacks: &mut StackResolver,
        target: &Target,
        reader: Option<&mut KernelReader>,
    ) {
        let states = match self.options.all_states {
            true => STATE_UNINTERRUPTIBLE | STATE_INTERRUPTIBLE,
            false => STATE_UNINTERRUPTIBLE,
        };
        let began = std::time::Instant::now();
        let mut found = blocked::scan(
            states,
            &|tgid| target.admits_existing(tgid, maps),
            &mut stacks.user,
        );
        let scanned = found.len();
        // What each waits on, and the holders of their locks, followed from their
        // waiters whatever their state and target (up to three links).
        let mut on = std::collections::HashMap::new();
        if let Some(reader) = reader {
            let (mut next, mut owners) = (0, 0);
            while next < found.len() {
                let tid = found[next].tid;
                let frames: Vec<&str> =
                    found[next].kernel.iter().map(|f| f.name.as_str()).collect();
                if let Some(waits_on) = reader.blocked_on(tid, &frames) {
                    let holder = match &waits_on {
                        BlockedOn::Lock {
                            owner: Some(owner), ..
                        } => Some((owner.tgid, owner.tid)),
                        _ => None,
                    };
                    // /proc/TID/stack leaves out the lock's slow path (a `__sched`
                    // function); the kernel reader found the thread queued on the lock.
                    if let BlockedOn::Lock { kind, .. } = &waits_on {
                        found[next]
                            .kernel
                            .insert(0, Frame::kernel(slow_path_of(*kind)));
                    }
                    on.insert(tid, waits_on);
                    if let Some((owner_tgid, owner_tid)) = holder {
                        let known = found.iter().any(|thread| thread.tid == owner_tid);
                        if !known && owners < MAX_OWNERS_FOLLOWED {
                            owners += 1;
                            found.extend(blocked::read(owner_tgid, owner_tid, &mut stacks.user));
                        }
                    }
                }
                next += 1;
            }
        }
        match hand_over(found, maps, stacks) {
            Ok(kept) => {
                self.blocked = kept
                    .into_iter()
                    .map(|(thread, kstack_id)| Followed {
                        on: on.remove(&thread.tid),
                        thread,
                        kstack_id,
                    })
                    .collect()
            }
            Err(err) => {
                log::warn!("cannot follow the waits that began before the recording: {err:#}")
            }
        }
        log::info!(
            "{scanned} threads blocked at the start, {} followed ({:.1} ms)",
            self.blocked.len(),
            began.elapsed().as_secs_f64() * 1e3
        );
    }

    fn drain(&self, out: &mut Drain) -> Result<()> {
        let mut rows = drain(out.maps, out.stacks, &self.classifier)?;
        let waiting = drain_open_waits(
            out.maps,
            out.stacks,
            &self.classifier,
            self.options.min_wait_ns,
            out.moment,
            &mut rows,
        )?;
        rows.sort_by_key(|row| std::cmp::Reverse(row.total_ns));
        out.profile.offcpu = rows;
        out.profile.waiting.extend(waiting);
        let still = self.still_waiting_on(out.maps, out.stacks, out.moment)?;
        out.profile.waiting.extend(still);
        Ok(())
    }

    fn progress(&self, live: &Profile) -> Option<String> {
        progress_of(&live.offcpu, |row| row.count, "off-CPU waits")
    }
}

/// What `record --offcpu` asks for.
#[derive(Debug, Clone, Default)]
pub struct OffcpuOptions {
    /// Also voluntary sleeps (S), not only uninterruptible waits (D).
    pub all_states: bool,
    /// Waits shorter than this are dropped in the kernel.
    pub min_wait_ns: u64,
    /// `--wakers`: the program that also joins each wait to its waker (wakers.rs).
    pub wakers: bool,
}

/// Load-time globals of the off-CPU program: record offsets (from the format file) and
/// the options. Returned as (name, value) so the loader sets them before load.
pub struct OffcpuGlobals {
    prev_pid: u32,
    prev_state: u32,
    next_pid: u32,
    states: u32,
    min_ns: u64,
}

impl OffcpuGlobals {
    pub fn read(options: &OffcpuOptions) -> Result<Self> {
        let field = |name: &str| tracefs::field_offset("sched", "sched_switch", name);
        Ok(OffcpuGlobals {
            prev_pid: field("prev_pid")?,
            prev_state: field("prev_state")?,
            next_pid: field("next_pid")?,
            states: if options.all_states {
                STATE_UNINTERRUPTIBLE | STATE_INTERRUPTIBLE
            } else {
                STATE_UNINTERRUPTIBLE
            },
            min_ns: options.min_wait_ns,
        })
    }

    pub fn apply<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        loader
            .override_global(names::SWITCH_PREV_PID_OFFSET, &self.prev_pid, true)
            .override_global(names::SWITCH_PREV_STATE_OFFSET, &self.prev_state, true)
            .override_global(names::SWITCH_NEXT_PID_OFFSET, &self.next_pid, true)
            .override_global(names::OFFCPU_STATES, &self.states, true)
            .override_global(names::OFFCPU_MIN_NS, &self.min_ns, true);
    }
}

pub fn attach(ebpf: &mut Ebpf, options: &OffcpuOptions) -> Result<ProbeUse> {
    attach_tracepoint(ebpf, names::OFFCPU_SCHED_SWITCH, "sched", "sched_switch")?;
    Ok(probe_use(options, ""))
}

fn probe_use(options: &OffcpuOptions, with: &str) -> ProbeUse {
    let states = if options.all_states { "D+S" } else { "D" };
    ProbeUse {
        family: FAMILY.name.into(),
        method: format!(
            "tracepoint sched:sched_switch{with} (states {states}, min wait {} ns)",
            options.min_wait_ns
        ),
    }
}

pub fn drain(
    maps: &MapSet,
    stacks: &mut StackResolver,
    classifier: &Classifier,
) -> Result<Vec<OffcpuRow>> {
    let mut rows = Vec::new();
    // With the waits the full map had no room for: rows of their threads, no stacks.
    for (key, stat) in maps.entries_with_overflow::<OffcpuKey, OffcpuStat>(
        names::OFFCPU_STATS,
        names::OFFCPU_OVERFLOW,
    )? {
        let stack = stacks.kernel_stack(key.kstack_id);
        let frames = stacks.interner.frames_of(stack);
        let class = classifier.classify(&frames.iter().collect::<Vec<_>>());
        rows.push(OffcpuRow {
            pid: key.tgid,
            tid: key.tid,
            state: state_name(key.state).into(),
            class,
            stack,
            ustack: stacks.user_stack(key.tgid, key.ustack_id),
            count: stat.count,
            total_ns: stat.total_ns,
            max_ns: stat.max_ns,
            held_by: (key.holder_tgid != 0).then_some(key.holder_tgid),
            wakers: Vec::new(),
        });
    }
    rows.sort_by_key(|row| std::cmp::Reverse(row.total_ns));
    Ok(rows)
}

impl OffcpuFamily {
    /// What the threads found blocked at the start wait on, while they are still in
    /// that wait (their open entry still has the stack id they were handed over with):
    /// a lock and its holder, or a FUSE request and its server, since the wait began.
    fn still_waiting_on(
        &self,
        maps: &MapSet,
        stacks: &mut StackResolver,
        moment: DrainMoment,
    ) -> Result<Vec<WaitingRow>> {
        if self.blocked.iter().all(|followed| followed.on.is_none()) {
            return Ok(Vec::new());
        }
        let open = maps.hash_map::<u32, OffcpuStart>(names::OFFCPU_START)?;
        let mut rows = Vec::new();
        for followed in &self.blocked {
            let (thread, Some(on)) = (&followed.thread, &followed.on) else {
                continue;
            };
            let still = open
                .get(&thread.tid, 0)
                .is_ok_and(|entry| entry.kstack_id == followed.kstack_id);
            if !still || thread.since_ns > moment.now_ns {
                continue;
            }
            let mut row = WaitingRow {
                pid: thread.tgid,
                tid: thread.tid,
                since_ns: thread.since_ns,
                age_ns: moment.now_ns - thread.since_ns,
                counted_ns: 0,
                before_start: true,
                stack: stacks.kernel_stack(followed.kstack_id),
                ..Default::default()
            };
            match on {
                BlockedOn::Lock {
                    lock_addr,
                    kind,
                    owner,
                    name,
                } => {
                    row.kind = "lock".into();
                    row.class = match kind {
                        LockKind::Mutex => "mutex",
                        LockKind::RwsemRead => "rwsem:R",
                        LockKind::RwsemWrite => "rwsem:W",
                    }
                    .into();
                    row.what = name.clone().unwrap_or_else(|| stacks.lock_name(*lock_addr));
                    row.lock_addr = Some(*lock_addr);
                    row.owner_pid = owner.as_ref().map(|owner| owner.tgid);
                    row.owner_tid = owner.as_ref().map(|owner| owner.tid);
                }
                BlockedOn::FuseRequest {
                    opcode, req_addr, ..
                } => {
                    row.kind = "rpc".into();
                    row.class = format!("FUSE {}", super::rpc::fuse_opcode_name(*opcode));
                    row.request = Some(*req_addr);
                }
            }
            rows.push(row);
        }
        Ok(rows)
    }
}

/// Hands the threads found blocked to the off-CPU program: each gets an `OFFCPU_START`
/// entry with its own start and stacks, counted from now, unless the program has an
/// entry for it already (it ran and left the CPU again since the scan). A thread that
/// ran between the scan and the hand-over has its entry taken back. Returns the threads
/// followed.
fn hand_over(
    found: Vec<blocked::BlockedThread>,
    maps: &MapSet,
    stacks: &mut StackResolver,
) -> Result<Vec<(blocked::BlockedThread, i32)>> {
    use crate::probes::shared::bpfsys::{remove_entry, write_entry, BPF_NOEXIST};
    let start_map = maps.get(names::OFFCPU_START)?;
    let tasks = maps.get(profiler_common::shared::names::TASKS)?;
    let counted_from_ns = super::monotonic_ns();
    let mut kept = Vec::new();
    for thread in found {
        let kstack_id = stacks.add_scanned_kernel(thread.kernel.clone());
        let ustack_id = match thread.user.0.is_empty() {
            true => -1,
            false => stacks.add_scanned_user(thread.user.0.clone(), thread.user.1),
        };
        let entry = OffcpuStart {
            start_ns: thread.since_ns,
            tgid: thread.tgid,
            kstack_id,
            ustack_id,
            state: thread.state,
            holder_tgid: 0,
            _pad: 0,
            counted_from_ns,
        };
        if !write_entry(start_map, &thread.tid, &entry, BPF_NOEXIST)? {
            continue;
        }
        if !blocked::still_blocked(&thread) {
            remove_entry(start_map, &thread.tid, |open: &OffcpuStart| {
                open.start_ns == entry.start_ns && open.kstack_id == kstack_id
            })?;
            continue;
        }
        // Its name, as the programs note the threads they see.
        let comm = std::fs::read(format!("/proc/{}/task/{}/comm", thread.tgid, thread.tid))
            .unwrap_or_default();
        let mut info = profiler_common::target::TaskInfo {
            tgid: thread.tgid,
            _pad: 0,
            comm: [0; 16],
            cgroup_id: 0,
        };
        let len = comm.len().min(15);
        info.comm[..len].copy_from_slice(&comm[..len]);
        if let Some(end) = info.comm.iter().position(|&byte| byte == b'\n') {
            info.comm[end] = 0;
        }
        write_entry(tasks, &thread.tid, &info, BPF_NOEXIST)?;
        kept.push((thread, kstack_id));
    }
    Ok(kept)
}

/// Off-CPU waits that had not ended at the drain (`OFFCPU_START`). The part of each
/// inside the profile joins the row of its key (a row of count 0 when the key has no
/// ended wait: `count` counts the waits that ended), so the rows hold all the off-CPU
/// time of the profile's span; each wait of `WAITING_MIN_NS` or more is also a row of
/// `waiting`. When a period ends while the programs run, each open wait counts into
/// the next period from the boundary on (its entry's `counted_from_ns` moves there).
fn drain_open_waits(
    maps: &MapSet,
    stacks: &mut StackResolver,
    classifier: &Classifier,
    min_wait_ns: u64,
    moment: DrainMoment,
    rows: &mut Vec<OffcpuRow>,
) -> Result<Vec<WaitingRow>> {
    type RowKey = (u32, u32, String, Option<u32>, Option<u32>, Option<u32>);
    let key_of = |row: &OffcpuRow| -> RowKey {
        (
            row.pid,
            row.tid,
            row.state.clone(),
            row.stack,
            row.ustack,
            row.held_by,
        )
    };
    let mut index: std::collections::HashMap<RowKey, usize> = rows
        .iter()
        .enumerate()
        .map(|(at, row)| (key_of(row), at))
        .collect();
    let mut waiting = Vec::new();
    let start_map = maps.get(names::OFFCPU_START)?;
    for (tid, start) in maps.entries::<u32, OffcpuStart>(names::OFFCPU_START)? {
        // Opened after this drain's clock was read: the next drain's.
        if start.start_ns > moment.now_ns {
            continue;
        }
        let part = WaitPart::of(start.start_ns, start.counted_from_ns, moment.now_ns);
        if part.whole_ns < min_wait_ns {
            continue;
        }
        let stack = stacks.kernel_stack(start.kstack_id);
        let ustack = stacks.user_stack(start.tgid, start.ustack_id);
        let row = OffcpuRow {
            pid: start.tgid,
            tid,
            state: state_name(start.state).into(),
            class: String::new(),
            stack,
            ustack,
            count: 0,
            total_ns: 0,
            max_ns: 0,
            held_by: (start.holder_tgid != 0).then_some(start.holder_tgid),
            wakers: Vec::new(),
        };
        let at = *index.entry(key_of(&row)).or_insert_with(|| {
            let frames = stacks.interner.frames_of(stack);
            let mut row = row.clone();
            row.class = classifier.classify(&frames.iter().collect::<Vec<_>>());
            rows.push(row);
            rows.len() - 1
        });
        let kept = &mut rows[at];
        kept.total_ns = kept.total_ns.saturating_add(part.counted_ns);
        kept.max_ns = kept.max_ns.max(part.whole_ns);
        if part.whole_ns >= super::shared::inprogress::WAITING_MIN_NS {
            waiting.push(WaitingRow {
                kind: "offcpu".into(),
                pid: start.tgid,
                tid,
                since_ns: start.start_ns,
                age_ns: part.whole_ns,
                counted_ns: part.counted_ns,
                before_start: stacks.is_scanned(start.kstack_id),
                state: kept.state.clone(),
                class: kept.class.clone(),
                what: String::new(),
                stack,
                ustack,
                owner_pid: kept.held_by,
                ..Default::default()
            });
        }
        if moment.ends_period {
            // The wait's time from here on is the next period's. A wait that ends
            // between the read above and this write is counted whole by its program
            // (its entry is gone: nothing is written); one that ends within the
            // write itself may count this period's part twice (a window of
            // nanoseconds, against a period of seconds).
            let moved = OffcpuStart {
                counted_from_ns: moment.now_ns,
                ..start
            };
            crate::probes::shared::bpfsys::write_entry(
                start_map,
                &tid,
                &moved,
                crate::probes::shared::bpfsys::BPF_EXIST,
            )?;
        }
    }
    Ok(waiting)
}

fn state_name(state: u32) -> &'static str {
    match state {
        STATE_UNINTERRUPTIBLE => "D",
        STATE_INTERRUPTIBLE => "S",
        _ => "?",
    }
}

// `record`'s options of the off-CPU families: the waits (`--offcpu`, `--offcpu-all`), who
// ended them (`--wakers`), which are kept and how they are classified.

#[derive(Debug, Args)]
pub struct OffcpuArgs {
    /// Record off-CPU waits in D state (buffer, page, block IO, journal, most lock
    /// sleeps), by process, stack and wait class.
    #[arg(long)]
    pub offcpu: bool,

    /// Off-CPU waits in S state (voluntary sleeps) too; implies --offcpu.
    #[arg(long)]
    pub offcpu_all: bool,

    /// Who woke each off-CPU wait (with --offcpu or --offcpu-all): the waker's process,
    /// thread and stacks from sched:sched_waking, aggregated in the kernel per (waiter
    /// stack, waker stack); the report's "woken by" lines and `--kind offwake`.
    #[arg(long)]
    pub wakers: bool,

    /// Drop off-CPU waits shorter than this, in the kernel (e.g. 100us, 2ms).
    #[arg(long, value_name = "DUR", value_parser = crate::units::parse_duration_ns)]
    pub min_wait: Option<u64>,

    /// Add a wait class: off-CPU stacks with a frame matching FRAME_PATTERN (`*` is a
    /// wildcard) get class NAME; before the built-in rules; repeatable.
    #[arg(long, value_name = "NAME=FRAME_PATTERN", value_parser = waitclass::parse_rule)]
    pub wait_class: Vec<waitclass::Rule>,
}
