//! `lockpath record`: load, attach, wait, detach, drain, write. Every program and link
//! is owned by file descriptors of this process, so they go away with it, whatever
//! the way it ends (return, error, signal, SIGKILL).

use profiler_common::shared::SPARE_IDS_PER_SLOT_DEFAULT;
use std::{
    io::IsTerminal,
    sync::atomic::{AtomicBool, AtomicI32, Ordering},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{bail, Context, Result};
use aya::{Ebpf, EbpfLoader};
use profiler_common::{
    shared::names as shared_names,
    target::{names as target_names, FILTER_PIDS},
};

use crate::{
    cli::{Kind, RecordArgs},
    ebpf_object::check_loadable,
    export,
    metrics::MetricsServer,
    probes::target::{Child, Target},
    probes::{
        self,
        shared::{attach_tracepoint, MapSet, ProcessWatcher, StackResolver},
        AttachContext, MapSize, PlanContext, Recorded, FAMILIES,
    },
    profile::{ProbeUse, Profile, Unavailable},
    symbolize::KernelSymbols,
    tracefs,
};

static STOP: AtomicBool = AtomicBool::new(false);
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop_signal(signal: libc::c_int) {
    STOP_SIGNAL.store(signal, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
}

/// The families this recording asks for, checked: the arguments of each (bad input
/// fails before anything else) and the target.
pub(crate) fn check_arguments(args: &RecordArgs, target: &Target) -> Result<Vec<&'static str>> {
    for family in FAMILIES {
        (family.check)(&args.families)?;
    }
    target.validate()?;
    let asked: Vec<&'static str> = FAMILIES
        .iter()
        .filter(|family| (family.asked)(&args.families))
        .map(|family| family.name)
        .collect();
    crate::timeline::check(args, &asked)?;
    Ok(asked)
}

/// The families of this run. Hooks this kernel lacks are one line each in
/// `unavailable`, and the run goes on without them.
fn plan_families(
    args: &RecordArgs,
    asked: &[&'static str],
    symbols: &KernelSymbols,
    unavailable: &mut Vec<Unavailable>,
) -> Result<Vec<Recorded>> {
    let mut ctx = PlanContext {
        symbols,
        unavailable,
        asked,
    };
    let mut families = Vec::new();
    for registration in FAMILIES {
        if let Some(family) = (registration.plan)(&args.families, &mut ctx)? {
            families.push(Recorded::new(registration, family));
        }
    }
    Ok(families)
}

/// `-a -- CMD`: the whole system, for as long as CMD runs (like `perf stat -a -- CMD`).
pub(crate) fn target_of(args: &RecordArgs) -> Target {
    if args.all && !args.command.is_empty() {
        Target::System
    } else if !args.command.is_empty() {
        Target::Command(args.command.clone())
    } else if !args.pid.is_empty() {
        Target::Pids(args.pid.clone())
    } else if let Some(cgroup) = &args.cgroup {
        Target::Cgroup(cgroup.clone())
    } else {
        Target::System
    }
}

pub fn run(args: RecordArgs) -> Result<i32> {
    // First of all: a Ctrl-C or SIGTERM while the probes load must not kill the
    // process; it ends the recording as soon as it starts, and the profile is written.
    install_signal_handlers();
    let target = target_of(&args);
    let asked = check_arguments(&args, &target)?;
    check_output(&args.output)?;
    let first_page = || export::formats::prometheus::render(&Profile::new());
    let Started {
        mut families,
        unavailable,
        metrics,
        mut session,
        mut child,
    } = plan_and_start(&args, &asked, &target, first_page)?;
    let start_wall = SystemTime::now();
    if let Some(child) = child.as_mut() {
        child.release(&args.command[0])?;
    }
    announce(&session, &target, metrics.as_ref());
    let mut timeline = args.interval.map(crate::timeline::Recorder::new);
    let (exit_code, duration_s) = record(
        &args,
        &target,
        child.as_mut(),
        &families,
        &mut session,
        metrics.as_ref(),
        timeline.as_mut(),
    );

    drop(metrics);
    let mut profile = collect(
        session,
        &mut families,
        &target,
        start_wall,
        duration_s,
        unavailable,
    )?;
    if let Some(host) = &args.host {
        profile.host = host.clone();
    }
    if let Some(timeline) = timeline {
        timeline.finish(&mut profile);
    }
    for family in &families {
        family.finish(&profile);
    }
    write_outputs(&args, &families, &profile)?;
    if child.is_none() && STOP_SIGNAL.load(Ordering::SeqCst) == libc::SIGTERM {
        return Ok(0);
    }
    Ok(exit_code)
}

/// Detaches (the numbers stop moving), then drains every family and what they share
/// into the profile.
fn collect(
    session: Session,
    families: &mut [Recorded],
    target: &Target,
    start_wall: SystemTime,
    duration_s: f64,
    unavailable: Vec<Unavailable>,
) -> Result<Profile> {
    let Session {
        ebpf,
        probes,
        mut maps,
        mut stacks,
        watcher,
        mut reader,
    } = session;
    // Events the kernel dropped before any program ran (another BPF program was
    // running on the CPU): read while the programs are still loaded.
    let program_misses = probes::shared::program_misses(&ebpf);
    // Detach first (numbers stop moving), then drain.
    drop(ebpf);
    for family in families.iter_mut() {
        family.stopped(&mut maps)?;
    }
    if let Some(watcher) = watcher {
        watcher.finish(&mut stacks.user);
    }
    for family in families.iter() {
        family.poll(&mut stacks.user);
    }
    let mut profile = new_profile(hostname(), target, start_wall, duration_s);
    profile.probes = probes;
    profile.unavailable = unavailable;
    drain_families(
        families,
        &maps,
        &mut stacks,
        &mut profile,
        probes::DrainMoment::now(false),
        reader.as_mut(),
    )?;
    stacks.interner.finish(&mut profile);
    profile.losses = probes::shared::drain_losses(&maps)?;
    profile.losses.extend(program_misses);
    profile.processes = probes::shared::drain_processes(&maps, &profile.row_pids())?;
    Ok(profile)
}

/// An empty profile of the recording of `target` on this host and kernel by this
/// command line, over `duration_s` seconds from `start_wall`.
pub(crate) fn new_profile(
    host: String,
    target: &Target,
    start_wall: SystemTime,
    duration_s: f64,
) -> Profile {
    let mut profile = Profile::new();
    profile.host = host;
    profile.kernel = kernel_release();
    profile.start_unix_s = start_wall
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    profile.duration_s = duration_s;
    profile.command_line = std::env::args().collect();
    profile.targets = target.describe();
    profile
}

/// What is loaded and attached while recording.
pub(crate) struct Session {
    pub(crate) ebpf: Ebpf,
    pub(crate) probes: Vec<ProbeUse>,
    /// Taken out of the object: readable live and after the detach alike.
    pub(crate) maps: MapSet,
    pub(crate) stacks: StackResolver,
    /// Snapshots processes whose user stacks are recorded.
    pub(crate) watcher: Option<ProcessWatcher>,
    /// Reads kernel memory (what a blocked thread waits on, who serves a request).
    pub(crate) reader: Option<probes::blocked_on::KernelReader>,
}

/// The first line of a recording (what, of whom) and where the metrics are.
fn announce(session: &Session, target: &Target, metrics: Option<&MetricsServer>) {
    eprintln!(
        "lockpath: recording {} ({}); Ctrl-C to stop",
        session
            .probes
            .iter()
            .map(|probe| probe.family.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        describe_target(target)
    );
    if let Some(metrics) = metrics {
        eprintln!(
            "lockpath: Prometheus metrics at http://{}/metrics",
            metrics.addr
        );
    }
}

/// Records until the duration ends, a signal comes, the command exits or every target
/// process is gone; shows progress and serves metrics meanwhile. Returns the exit code
/// (the command's) and the seconds recorded.
fn record(
    args: &RecordArgs,
    target: &Target,
    mut child: Option<&mut Child>,
    families: &[Recorded],
    session: &mut Session,
    metrics: Option<&MetricsServer>,
    mut timeline: Option<&mut crate::timeline::Recorder>,
) -> (i32, f64) {
    let start = Instant::now();
    // Progress goes to a terminal only; scripts and logs stay clean.
    let progress = std::io::stderr().is_terminal();
    let mut progress_shown = false;
    let mut next_refresh = Instant::now() + Duration::from_secs(1);
    let deadline = args.duration.map(Duration::from_secs_f64);
    let mut exit_code = 0;
    let mut polls = 0u64;
    let mut cgroups = crate::probes::target::CgroupTracker::new(target);
    loop {
        if STOP.load(Ordering::SeqCst) || deadline.is_some_and(|d| start.elapsed() >= d) {
            break;
        }
        if let Some(code) = child.as_mut().and_then(|child| child.try_wait()) {
            exit_code = code;
            break;
        }
        polls += 1;
        if let Some(cgroups) = cgroups.as_mut() {
            cgroups.poll(&mut session.maps);
        }
        // About twice a second (reading /proc for every target is not free): the given
        // processes and every child the kernel follows for them.
        if let Target::Pids(pids) = target {
            if polls.is_multiple_of(10)
                && !crate::probes::target::any_target_alive(&session.maps, pids)
            {
                eprintln!("lockpath: every target process has exited; stopping");
                break;
            }
        }
        if (progress || metrics.is_some()) && Instant::now() >= next_refresh {
            next_refresh = Instant::now() + Duration::from_secs(1);
            match snapshot(families, session, start.elapsed().as_secs_f64()) {
                Ok(live) => {
                    if let Some(metrics) = metrics {
                        metrics.update(export::formats::prometheus::render(&live));
                    }
                    if progress {
                        eprint!("\r\x1b[K{}", progress_line(families, &live));
                        progress_shown = true;
                    }
                }
                Err(err) => log::warn!("cannot read the kernel maps while recording: {err:#}"),
            }
        }
        if let Some(timeline) = timeline.as_deref_mut() {
            if timeline.due(start.elapsed()) {
                match snapshot(families, session, start.elapsed().as_secs_f64()) {
                    Ok(live) => timeline.sample(&live),
                    Err(err) => log::warn!("cannot read the kernel maps for the timeline: {err:#}"),
                }
            }
        }
        // Short sleeps while watching processes: a snapshot must beat a quick exit.
        match session.watcher.as_mut() {
            Some(watcher) => {
                watcher.poll(&mut session.stacks.user);
                for family in families {
                    family.poll(&mut session.stacks.user);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    if progress_shown {
        eprint!("\r\x1b[K");
    }
    (exit_code, start.elapsed().as_secs_f64())
}

/// Writes the profile, prints the summary and draws the flamegraph when asked.
fn write_outputs(args: &RecordArgs, families: &[Recorded], profile: &Profile) -> Result<()> {
    save_or_fall_back(profile, &args.output)?;
    print!("{}", export::formats::report::summary(profile, args.top));
    eprintln!("lockpath: profile written to {}", args.output.display());
    if let Some(svg) = &args.flamegraph {
        let kind = FLAMEGRAPH_PREFERENCE
            .into_iter()
            .find(|(family, _)| families.iter().any(|recorded| recorded.name == *family))
            .map_or(Kind::Cpu, |(_, kind)| kind);
        export::formats::flamegraph::write_svg(profile, kind, svg)?;
        eprintln!("lockpath: flamegraph written to {}", svg.display());
    }
    Ok(())
}

/// The flamegraph of `record --flamegraph`: the kind of the first of these families that
/// was recorded (on-CPU samples when none was). The other families draw none.
const FLAMEGRAPH_PREFERENCE: [(&str, Kind); 4] = [
    ("lock", Kind::Lock),
    ("cpu", Kind::Cpu),
    ("offcpu", Kind::Offcpu),
    ("io", Kind::Io),
];

/// Reads every recorded family's aggregate out of the kernel maps into `profile`.
pub(crate) fn drain_families(
    families: &[Recorded],
    maps: &MapSet,
    stacks: &mut StackResolver,
    profile: &mut Profile,
    moment: probes::DrainMoment,
    reader: Option<&mut probes::blocked_on::KernelReader>,
) -> Result<()> {
    let mut out = probes::Drain {
        maps,
        stacks,
        profile,
        moment,
    };
    for family in families {
        family.drain(&mut out)?;
    }
    let mut reader = reader;
    probes::owners::resolve_lock_owners(reader.as_deref_mut(), &mut profile.waiting);
    probes::owners::name_fuse_servers(reader, &mut profile.waiting);
    Ok(())
}

/// The numbers so far, while the programs run (for metrics and progress).
fn snapshot(families: &[Recorded], session: &mut Session, elapsed_s: f64) -> Result<Profile> {
    let mut profile = Profile::new();
    profile.duration_s = elapsed_s;
    // Recorded families get their series from the first scrape on, even before events.
    profile.probes = session.probes.clone();
    drain_families(
        families,
        &session.maps,
        &mut session.stacks,
        &mut profile,
        probes::DrainMoment::now(false),
        session.reader.as_mut(),
    )?;
    session.stacks.interner.copy_into(&mut profile);
    // Off-CPU and IO series are labelled by process name.
    if !profile.offcpu.is_empty() || !profile.io.is_empty() {
        profile.processes = probes::shared::drain_processes(&session.maps, &profile.row_pids())?;
    }
    profile.losses = probes::shared::drain_losses(&session.maps)?;
    Ok(profile)
}

/// `lockpath: 12 s, 3456 lock contentions`: each family adds its count.
fn progress_line(families: &[Recorded], live: &Profile) -> String {
    let mut parts = vec![format!("lockpath: {:.0} s", live.duration_s)];
    parts.extend(families.iter().filter_map(|family| family.progress(live)));
    let lost: u64 = live
        .losses
        .iter()
        .filter(|(name, _)| profiler_common::loss::loses_events(name))
        .map(|(_, count)| count)
        .sum();
    if lost > 0 {
        parts.push(format!("{lost} lost"));
    }
    parts.join(", ")
}

/// Sizes the maps (those of the families not recorded shrink to one entry each: a
/// 16k-entry hash is megabytes) and sets the load-time globals.
fn configure<'a>(
    loader: &mut EbpfLoader<'a>,
    args: &RecordArgs,
    families: &'a [Recorded],
    globals: &'a TargetGlobals,
) {
    loader
        .override_global(target_names::FILTER_MODE, &globals.filter_mode, true)
        .override_global(
            target_names::FORK_CHILD_PID_OFFSET,
            &globals.fork_child_pid,
            true,
        )
        .override_global(
            target_names::EXIT_GROUP_DEAD_OFFSET,
            &globals.exit_group_dead,
            true,
        )
        .override_global(
            shared_names::SPARE_IDS_PER_SLOT,
            &globals.spare_ids_per_slot,
            true,
        )
        .override_global(
            shared_names::TASK_RENAME_PID_OFFSET,
            &globals.rename_pid,
            true,
        )
        .override_global(
            shared_names::TASK_RENAME_NEWCOMM_OFFSET,
            &globals.rename_newcomm,
            true,
        )
        .map_max_entries(shared_names::STACKS, args.stack_entries)
        .map_max_entries(
            shared_names::STACKS_SPARE,
            profiler_common::shared::spare_entries(args.stack_entries),
        )
        // Periods walk stacks into two maps by turns (see StackResolver::next_generation).
        .map_max_entries(
            shared_names::STACKS_ODD,
            match args.rotate {
                Some(_) => args.stack_entries,
                None => 1,
            },
        );
    for registration in FAMILIES {
        let recorded = families.iter().any(|f| f.name == registration.name);
        for &(map, size) in registration.maps {
            let entries = match (recorded, size) {
                (false, _) => 1,
                (true, MapSize::Stats) => args.map_entries,
                (true, MapSize::Fixed(entries)) => entries,
                (true, MapSize::Overflow) => profiler_common::shared::OVERFLOW_ENTRIES,
            };
            loader.map_max_entries(map, entries);
        }
    }
    for family in families {
        family.configure(loader);
    }
}

/// Load-time globals of the target filter.
struct TargetGlobals {
    filter_mode: u32,
    fork_child_pid: u32,
    exit_group_dead: u32,
    spare_ids_per_slot: u32,
    /// `task:task_rename`'s fields (`rename_pid` 0: none, the current thread is renamed;
    /// `rename_newcomm` 0: the event is not followed).
    rename_pid: u32,
    rename_newcomm: u32,
}

/// A recording whose probes are attached: its families, the hooks this kernel lacks,
/// the `--metrics` server, what is loaded, and the command it runs (held until
/// released).
pub(crate) struct Started {
    pub(crate) families: Vec<Recorded>,
    pub(crate) unavailable: Vec<Unavailable>,
    pub(crate) metrics: Option<MetricsServer>,
    pub(crate) session: Session,
    pub(crate) child: Option<Child>,
}

/// Checks that the object can be loaded, plans the families, binds the `--metrics`
/// port before anything is loaded (a busy port fails fast; it serves `first_page`
/// until the first reading), then starts the command and attaches.
pub(crate) fn plan_and_start(
    args: &RecordArgs,
    asked: &[&'static str],
    target: &Target,
    first_page: impl FnOnce() -> String,
) -> Result<Started> {
    check_loadable()?;
    let kernel_symbols = KernelSymbols::load()?;
    let mut unavailable = Vec::new();
    let mut families = plan_families(args, asked, &kernel_symbols, &mut unavailable)?;
    let metrics = args
        .metrics
        .map(|addr| MetricsServer::start(addr, first_page()))
        .transpose()?;
    let (session, child) = start_with_command(
        args,
        &mut families,
        target,
        kernel_symbols,
        &mut unavailable,
    )?;
    Ok(Started {
        families,
        unavailable,
        metrics,
        session,
        child,
    })
}

/// Loads the object, installs the target filter and attaches the planned families.
/// Starts the command (`-- CMD`, held until the probes are attached), then loads and
/// attaches; on an error the command is killed before it ran.
fn start_with_command(
    args: &RecordArgs,
    families: &mut [Recorded],
    target: &Target,
    kernel_symbols: KernelSymbols,
    unavailable: &mut Vec<Unavailable>,
) -> Result<(Session, Option<Child>)> {
    // Start the command before any thread exists; it waits until the probes are attached.
    let mut child = match args.command.is_empty() {
        false => Some(Child::spawn(&args.command)?),
        true => None,
    };
    let child_pid = child.as_ref().map(|child| child.pid);
    let started = start(
        args,
        families,
        target,
        child_pid,
        kernel_symbols,
        unavailable,
    )
    .and_then(|session| {
        // A `-p` process that exited meanwhile: nothing of it could be recorded.
        target.check_alive()?;
        Ok(session)
    });
    match started {
        Ok(session) => Ok((session, child)),
        Err(err) => {
            if let Some(child) = child.as_mut() {
                child.kill();
            }
            Err(err)
        }
    }
}

fn start(
    args: &RecordArgs,
    families: &mut [Recorded],
    target: &Target,
    child: Option<u32>,
    kernel_symbols: KernelSymbols,
    unavailable: &mut Vec<Unavailable>,
) -> Result<Session> {
    let globals = target_globals(target)?;
    let mut loader = EbpfLoader::new();
    configure(&mut loader, args, families, &globals);
    let mut ebpf = probes::shared::load_object(&mut loader)?;
    drop(loader);

    let watcher = attach_shared(&mut ebpf, families, target, &globals, child)?;
    // Kernel memory is read by a program of the object run on demand (it takes its
    // buffer map out first): what threads blocked before the recording wait on, and
    // whether a virtual machine's spinlocks bypass the lock tracepoints.
    let wants_reader = families.iter().any(|family| {
        family.name == "offcpu"
            || (family.name == "lock" && probes::virtspin::wants_reader(&kernel_symbols))
    });
    let mut reader = match wants_reader {
        true => probes::blocked_on::KernelReader::new(&mut ebpf)
            .map_err(|err| log::info!("kernel memory cannot be read: {err:#}"))
            .ok(),
        false => None,
    };
    let mut ctx = AttachContext {
        symbols: &kernel_symbols,
        unavailable,
        reader: reader.as_mut(),
    };
    let mut probes = Vec::new();
    for family in families.iter_mut() {
        probes.extend(family.attach(&mut ebpf, &mut ctx)?);
    }
    if probes.is_empty() {
        let reasons: Vec<String> = ctx
            .unavailable
            .iter()
            .map(|missing| format!("{} {}: {}", missing.family, missing.what, missing.reason))
            .collect();
        bail!(
            "nothing asked for can be recorded on this kernel ({})",
            reasons.join("; ")
        );
    }
    // The maps leave the object (the programs stay attached until it is dropped), so
    // they can be read live and after the detach alike.
    let mut maps = MapSet::take_all(&mut ebpf);
    // The symbols again, now that this recording's own programs are loaded: a stack's
    // leaf frame is the program that took it, and an address the first reading did not
    // know resolves to the symbol before it (kernel text, or another tool's program),
    // which the tracing machinery would not be stripped after.
    let kernel_symbols = KernelSymbols::load().unwrap_or(kernel_symbols);
    let mut stacks = StackResolver::new(&mut maps, kernel_symbols)?;
    for family in families.iter_mut() {
        family.started(&maps, &mut stacks, target, reader.as_mut());
    }
    Ok(Session {
        ebpf,
        probes,
        maps,
        stacks,
        watcher,
        reader,
    })
}

/// The target filter's load-time globals: how processes are chosen, and the offsets of
/// the tracepoint fields its programs read.
fn target_globals(target: &Target) -> Result<TargetGlobals> {
    let rename_fields = tracefs::event_fields("task", "task_rename").unwrap_or_default();
    let rename_field = |name: &str| {
        rename_fields
            .iter()
            .find(|field| field.name == name)
            .map_or(0, |field| field.offset)
    };
    Ok(TargetGlobals {
        filter_mode: target.filter_mode(),
        fork_child_pid: tracefs::field_offset("sched", "sched_process_fork", "child_pid")?,
        exit_group_dead: tracefs::field_offset("sched", "sched_process_exit", "group_dead")
            .unwrap_or(0),
        spare_ids_per_slot: aya::util::nr_cpus().map_or(SPARE_IDS_PER_SLOT_DEFAULT, |cpus| {
            profiler_common::shared::spare_ids_per_slot(cpus as u32)
        }),
        rename_pid: rename_field("pid"),
        rename_newcomm: rename_field("newcomm"),
    })
}

/// Attaches the programs every recording shares: the target filter's fork and exit
/// hooks, the process watcher (or the exec hook), the rename and cgroup-move hooks.
/// Returns the watcher, when a family records user stacks.
fn attach_shared(
    ebpf: &mut Ebpf,
    families: &[Recorded],
    target: &Target,
    globals: &TargetGlobals,
    child: Option<u32>,
) -> Result<Option<ProcessWatcher>> {
    if globals.filter_mode == FILTER_PIDS {
        attach_tracepoint(
            ebpf,
            target_names::TARGET_FORK,
            "sched",
            "sched_process_fork",
        )?;
        attach_tracepoint(
            ebpf,
            target_names::TARGET_EXIT,
            "sched",
            "sched_process_exit",
        )?;
    }
    target.install(ebpf, child)?;

    // The watcher first: a process must be noted before its first sample is counted.
    let watcher = match families.iter().any(|family| family.user_stacks()) {
        true => Some(ProcessWatcher::start(ebpf)?),
        false => {
            // The exec hook also renames a thread first seen before its exec (the
            // command lockpath starts is first seen under lockpath's own name); without
            // it a process can keep its launcher's name. Only names depend on it.
            if let Err(err) = attach_tracepoint(
                ebpf,
                profiler_common::shared::names::PROCESSES_EXEC,
                "sched",
                "sched_process_exec",
            ) {
                log::warn!("processes that exec while recorded may keep their old name: {err:#}");
            }
            None
        }
    };
    // A thread renamed while recorded takes its new name (the lock programs name a
    // thread once). Only names depend on it.
    let lost_renames = "threads renamed while recorded may keep their old name";
    if globals.rename_newcomm == 0 {
        log::warn!("{lost_renames}: this kernel has no task:task_rename with a newcomm field");
    } else if let Err(err) =
        attach_tracepoint(ebpf, shared_names::TASKS_RENAME, "task", "task_rename")
    {
        log::warn!("{lost_renames}: {err:#}");
    }
    // A thread moved to another cgroup while recorded is named again (the lock programs
    // name a thread once), so `--by cgroup` charges it to the cgroup it is in.
    if let Err(err) = attach_tracepoint(
        ebpf,
        shared_names::TASKS_CGROUP_MOVE,
        "cgroup",
        "cgroup_attach_task",
    ) {
        log::warn!(
            "threads moved to another cgroup while recorded may keep their old cgroup: {err:#}"
        );
    }
    Ok(watcher)
}

/// Fails before recording when the profile could not be written at the end.
fn check_output(path: &std::path::Path) -> Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        bail!(
            "cannot write the profile to {}: directory {} does not exist",
            path.display(),
            dir.display()
        );
    }
    if path.is_dir() {
        bail!(
            "cannot write the profile to {}: it is a directory",
            path.display()
        );
    }
    // Create and remove the temporary file the final write goes through: a read-only
    // directory (or /proc) fails now, before anything is loaded, not after the run.
    crate::profile::check_writable(path).with_context(|| {
        format!(
            "cannot write the profile to {}: choose a writable place with -o",
            path.display()
        )
    })
}

/// Writes the profile; when that fails at the end of a run (disk full, directory
/// removed), the recording is not lost: it goes to a fallback file, and the error says
/// where.
fn save_or_fall_back(profile: &Profile, output: &std::path::Path) -> Result<()> {
    let Err(err) = profile.save(output) else {
        return Ok(());
    };
    let name = format!(
        "lockpath-{}-{}-{}.json",
        profile.host,
        profile.start_unix_s,
        std::process::id()
    );
    for dir in [std::env::temp_dir(), std::path::PathBuf::from(".")] {
        let fallback = dir.join(&name);
        if profile.save(&fallback).is_ok() {
            bail!(
                "cannot write the profile to {} ({err:#}); the recording was saved to {} instead",
                output.display(),
                fallback.display()
            );
        }
    }
    Err(err.context(format!(
        "cannot write the profile to {}, nor to a fallback file in {} or the current directory",
        output.display(),
        std::env::temp_dir().display()
    )))
}

fn install_signal_handlers() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installing a handler that only stores to atomics (async-signal-safe).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop_signal as *const () as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

pub(crate) fn describe_target(target: &Target) -> String {
    match target {
        Target::System => "whole system".into(),
        Target::Pids(pids) => format!("pids {pids:?}"),
        Target::Cgroup(path) => format!("cgroup {}", path.display()),
        Target::Command(command) => format!("command {}", command.join(" ")),
    }
}

pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

pub(crate) fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|release| release.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every map, program and global name of profiler-common names a symbol of the built
    /// eBPF object (its Rust static or function), and every family's sized map is one
    /// of them.
    #[test]
    fn every_name_is_in_the_ebpf_object() {
        use crate::ebpf_object::EBPF_OBJECT;
        use object::{Object, ObjectSymbol};
        if EBPF_OBJECT.is_empty() {
            // `cargo test` without `cargo xtask build`: no object to read (CI builds it).
            eprintln!("every_name_is_in_the_ebpf_object: built without the eBPF object");
            return;
        }
        let file = object::File::parse(EBPF_OBJECT).expect("the eBPF object is ELF");
        let symbols: std::collections::HashSet<&str> =
            file.symbols().filter_map(|s| s.name().ok()).collect();
        // What every family shares, and each family's names.
        let shared = [
            profiler_common::shared::names::ALL,
            profiler_common::target::names::ALL,
            profiler_common::kread::names::ALL,
        ];
        let families: Vec<&[&str]> = shared
            .into_iter()
            .chain(FAMILIES.iter().map(|family| family.names))
            .collect();
        let mut missing = Vec::new();
        for name in families.iter().copied().flatten() {
            let symbol = match name.ends_with('_') {
                true => format!("{name}0"),
                false => name.to_string(),
            };
            if !symbols.contains(symbol.as_str()) {
                missing.push(symbol);
            }
        }
        for family in FAMILIES {
            for (map, _) in family.maps {
                if !families.iter().any(|names| names.contains(map)) {
                    missing.push(format!(
                        "{map} (a map of {} not in names::ALL)",
                        family.name
                    ));
                }
            }
        }
        assert!(missing.is_empty(), "not in the eBPF object: {missing:?}");
    }
}
