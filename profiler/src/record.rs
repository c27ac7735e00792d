//! `lockpath record`: load, attach, wait, detach, drain, write. Every program and link
//! is owned by file descriptors of this process, so they go away with it, whatever
//! the way it ends (return, error, signal, SIGKILL).

use std::{
    io::IsTerminal,
    sync::atomic::{AtomicBool, AtomicI32, Ordering},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{bail, Context, Result};
use aya::{programs::TracePoint, Ebpf, EbpfLoader};
use profiler_common::target::FILTER_PIDS;

use crate::{
    cli::RecordArgs,
    export,
    metrics::MetricsServer,
    probes::{
        self,
        shared::{MapSet, ProcessWatcher, StackResolver},
    },
    probes::{
        io::{DeviceNames, IoGlobals},
        offcpu::{OffcpuGlobals, OffcpuOptions},
    },
    profile::{ProbeUse, Profile},
    symbolize::KernelSymbols,
    target::{Child, Target},
    tracefs,
    waitclass::{self, Classifier},
};

/// The eBPF object built by `cargo xtask build` (empty when built without it).
static EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler-ebpf.o"));

static STOP: AtomicBool = AtomicBool::new(false);
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop_signal(signal: libc::c_int) {
    STOP_SIGNAL.store(signal, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
}

/// What `record` asks for, resolved from the flags.
struct Plan {
    lock: bool,
    offcpu: Option<OffcpuOptions>,
    io: bool,
    classifier: Classifier,
    rpc: probes::rpc::RpcSetup,
    funcs: Vec<String>,
    func_method: crate::cli::FuncMethod,
    ufuncs: Vec<probes::func::UserFunction>,
    /// On-CPU sampling frequency in Hz, when asked for.
    cpu: Option<u64>,
    /// `--hold`: the lock and its entry points, when the lock could be resolved.
    hold: Option<probes::hold::HoldPlan>,
    hold_method: crate::cli::FuncMethod,
    /// `--hold` is the only thing asked for: failing to attach it fails the run.
    hold_only: bool,
}

impl Plan {
    /// Families that record user stacks need the process watcher (memory-map snapshots).
    fn user_stacks(&self) -> bool {
        self.cpu.is_some() || !self.ufuncs.is_empty() || self.offcpu.is_some()
    }
}

/// The off-CPU options from the flags, checked before anything is loaded.
fn offcpu_options(args: &RecordArgs) -> Result<Option<OffcpuOptions>> {
    waitclass::validate(&args.wait_class)?;
    let offcpu = (args.offcpu || args.offcpu_all).then(|| OffcpuOptions {
        all_states: args.offcpu_all,
        min_wait_ns: args.min_wait.unwrap_or(0),
    });
    if offcpu.is_none() && (args.min_wait.is_some() || !args.wait_class.is_empty()) {
        bail!(
            "--min-wait and --wait-class apply to off-CPU recording: add --offcpu or --offcpu-all"
        );
    }
    Ok(offcpu)
}

pub fn run(args: RecordArgs) -> Result<i32> {
    // `-a -- CMD`: the whole system, for as long as CMD runs (like `perf stat -a -- CMD`).
    let target = if args.all && !args.command.is_empty() {
        Target::System
    } else if !args.command.is_empty() {
        Target::Command(args.command.clone())
    } else if !args.pid.is_empty() {
        Target::Pids(args.pid.clone())
    } else if let Some(cgroup) = &args.cgroup {
        Target::Cgroup(cgroup.clone())
    } else {
        Target::System
    };
    let offcpu = offcpu_options(&args)?;
    let rpc_plan = probes::rpc::RpcPlan::new(&args.rpc, args.span.clone())?;
    let hold_spec = args.hold.as_deref().map(probes::hold::parse).transpose()?;
    let other_family_but_hold = offcpu.is_some()
        || args.io
        || rpc_plan.any()
        || !args.func.is_empty()
        || !args.ufunc.is_empty()
        || args.cpu;
    let other_family = other_family_but_hold || hold_spec.is_some();
    let cpu = args.cpu.then_some(args.freq);

    target.validate()?;
    if let Some(freq) = cpu {
        probes::cpu::check_frequency(freq)?;
    }
    check_privileges()?;
    check_output(&args.output)?;
    if EBPF_OBJECT.is_empty() {
        bail!(
            "this lockpath was built without its eBPF programs: build it with `cargo xtask build`"
        );
    }
    tracefs::ensure_mounted()?;
    let kernel_symbols = KernelSymbols::load()?;
    let ufuncs = probes::func::validate(&args.func, &args.ufunc, &kernel_symbols)?;
    // Hooks this kernel lacks: one line each, and the run goes on without them.
    let mut unavailable = Vec::new();
    let rpc_setup = probes::rpc::resolve(&rpc_plan, &kernel_symbols, &mut unavailable)?;
    // `--hold` alone: a lock that cannot be timed is the run's error, not a note.
    let hold_only = hold_spec.is_some() && !args.lock && !other_family_but_hold;
    let hold = match hold_spec {
        Some(spec) => match probes::hold::plan(&spec, &kernel_symbols) {
            Ok(plan) => Some(plan),
            Err(reason) if hold_only => bail!("--hold {}: {reason}", spec.text),
            Err(reason) => {
                probes::hold::not_recorded(&spec.text, reason, &mut unavailable);
                None
            }
        },
        None => None,
    };
    let plan = Plan {
        // The lock family is the default when no other family is asked for.
        lock: args.lock || !other_family,
        offcpu,
        io: args.io,
        classifier: Classifier::new(args.wait_class.clone()),
        rpc: rpc_setup,
        funcs: args.func.clone(),
        func_method: args.func_method,
        ufuncs,
        cpu,
        hold,
        hold_method: args.hold_method,
        hold_only,
    };
    // Bound before anything is loaded, so a busy port fails fast.
    let metrics = match args.metrics {
        Some(addr) => Some(MetricsServer::start(
            addr,
            export::prometheus::render(&Profile::new()),
        )?),
        None => None,
    };

    // Start the command before any thread exists; it waits until the probes are attached.
    let command = (!args.command.is_empty()).then_some(&args.command);
    let mut child = match command {
        Some(command) => Some(Child::spawn(command)?),
        None => None,
    };
    let mut devices = plan.io.then(DeviceNames::scan);
    let started = start(
        &args,
        &plan,
        &target,
        child.as_ref().map(|child| child.pid),
        &kernel_symbols,
        &mut unavailable,
    )
    .and_then(|(mut ebpf, probes, func_targets, watcher)| {
        // The maps leave the object (the programs stay attached until it is dropped),
        // so they can be read live and after the detach alike.
        let mut maps = MapSet::take_all(&mut ebpf);
        let stacks = StackResolver::new(&mut maps, kernel_symbols)?;
        Ok((ebpf, probes, func_targets, maps, stacks, watcher))
    })
    .and_then(|started| {
        // A `-p` process that exited meanwhile: nothing of it could be recorded.
        target.check_alive()?;
        Ok(started)
    });
    let (ebpf, probes, func_targets, maps, mut stacks, mut watcher) = match started {
        Ok(started) => started,
        Err(err) => {
            if let Some(child) = child.as_mut() {
                child.kill();
            }
            return Err(err);
        }
    };
    install_signal_handlers();
    let start_wall = SystemTime::now();
    let start = Instant::now();
    if let (Some(child), Some(command)) = (child.as_mut(), command) {
        child.release(&command[0])?;
    }
    eprintln!(
        "lockpath: recording {} ({}); Ctrl-C to stop",
        probes
            .iter()
            .map(|probe| probe.family.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        describe_target(&target)
    );
    if let Some(metrics) = &metrics {
        eprintln!(
            "lockpath: Prometheus metrics at http://{}/metrics",
            metrics.addr
        );
    }

    // Progress goes to a terminal only; scripts and logs stay clean.
    let progress = std::io::stderr().is_terminal();
    let mut progress_shown = false;
    let mut next_refresh = Instant::now() + Duration::from_secs(1);
    let deadline = args.duration.map(Duration::from_secs_f64);
    let mut exit_code = 0;
    let mut polls = 0u64;
    loop {
        if STOP.load(Ordering::SeqCst) {
            break;
        }
        if let Some(deadline) = deadline {
            if start.elapsed() >= deadline {
                break;
            }
        }
        if let Some(child) = child.as_mut() {
            if let Some(code) = child.try_wait() {
                exit_code = code;
                break;
            }
        }
        if let Target::Pids(pids) = &target {
            polls += 1;
            // About twice a second: reading /proc for every target is not free.
            if polls.is_multiple_of(10) && !crate::target::any_target_alive(&maps, pids) {
                eprintln!("lockpath: every target process has exited; stopping");
                break;
            }
        }
        if (progress || metrics.is_some()) && Instant::now() >= next_refresh {
            next_refresh = Instant::now() + Duration::from_secs(1);
            let elapsed = start.elapsed().as_secs_f64();
            match snapshot(
                &plan,
                &func_targets,
                &maps,
                &mut stacks,
                devices.as_ref(),
                &probes,
                elapsed,
            ) {
                Ok(live) => {
                    if let Some(metrics) = &metrics {
                        metrics.update(export::prometheus::render(&live));
                    }
                    if progress {
                        eprint!("\r\x1b[K{}", progress_line(&live));
                        progress_shown = true;
                    }
                }
                Err(err) => log::warn!("cannot read the kernel maps while recording: {err:#}"),
            }
        }
        if let Target::Pids(pids) = &target {
            if pids.iter().all(|&pid| !crate::target::is_alive(pid)) {
                eprintln!("lockpath: every target process has exited; stopping");
                break;
            }
        }
        // Short sleeps while watching processes: a snapshot must beat a quick exit.
        match watcher.as_mut() {
            Some(watcher) => {
                watcher.poll(&mut stacks.user);
                std::thread::sleep(Duration::from_millis(10));
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    if progress_shown {
        eprint!("\r\x1b[K");
    }
    let duration_s = start.elapsed().as_secs_f64();

    // Events the kernel dropped before any program ran (another BPF program was
    // running on the CPU): read while the programs are still loaded.
    let program_misses = probes::shared::program_misses(&ebpf);
    // Detach first (numbers stop moving), then drain.
    drop(ebpf);
    drop(metrics);

    let mut profile = Profile::new();
    profile.host = hostname();
    profile.kernel = kernel_release();
    profile.start_unix_s = start_wall
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    profile.duration_s = duration_s;
    profile.command_line = std::env::args().collect();
    profile.targets = target.describe();
    profile.probes = probes;
    profile.unavailable = unavailable;

    // Devices that appeared during the run get their names too.
    if let Some(devices) = devices.as_mut() {
        devices.merge(DeviceNames::scan());
    }
    if let Some(watcher) = watcher {
        watcher.finish(&mut stacks.user);
    }
    drain_families(
        &plan,
        &func_targets,
        &maps,
        &mut stacks,
        devices.as_ref(),
        &mut profile,
    )?;
    stacks.interner.finish(&mut profile);
    profile.losses = probes::shared::drain_losses(&maps)?;
    profile.losses.extend(program_misses);
    profile.processes = probes::shared::drain_processes(&maps, &row_pids(&profile))?;

    if let Some(hold) = &plan.hold {
        if profile.probes.iter().any(|probe| probe.family == "hold") && profile.holds.is_empty() {
            eprintln!(
                "lockpath: --hold {}: {} was not taken (no acquisition seen in {duration_s:.1} s); \
                 check the address and the type against a report's lock and type columns",
                hold.spec, hold.lock_name
            );
        }
    }
    save_or_fall_back(&profile, &args.output)?;
    print!("{}", export::report::summary(&profile, args.top));
    eprintln!("lockpath: profile written to {}", args.output.display());
    if let Some(svg) = &args.flamegraph {
        let kind = if plan.lock {
            crate::cli::Kind::Lock
        } else if plan.cpu.is_some() {
            crate::cli::Kind::Cpu
        } else if plan.offcpu.is_some() {
            crate::cli::Kind::Offcpu
        } else if plan.io {
            crate::cli::Kind::Io
        } else {
            crate::cli::Kind::Cpu
        };
        export::flamegraph::write_svg(&profile, kind, svg)?;
        eprintln!("lockpath: flamegraph written to {}", svg.display());
    }
    if child.is_none() {
        let signal = STOP_SIGNAL.load(Ordering::SeqCst);
        if signal == libc::SIGTERM {
            exit_code = 0;
        }
    }
    Ok(exit_code)
}

/// Reads every recorded family's aggregate out of the kernel maps into `profile`.
/// A family adds its line.
fn drain_families(
    plan: &Plan,
    func_targets: &[probes::func::FuncTarget],
    maps: &MapSet,
    stacks: &mut StackResolver,
    devices: Option<&DeviceNames>,
    profile: &mut Profile,
) -> Result<()> {
    if plan.lock {
        profile.locks = probes::lock::drain(maps, stacks)?;
        profile.contended_holds = probes::lock::drain_contended_holds(maps, stacks)?;
    }
    if plan.offcpu.is_some() {
        profile.offcpu = probes::offcpu::drain(maps, stacks, &plan.classifier)?;
    }
    if let Some(devices) = devices {
        profile.io = probes::io::drain(maps, devices)?;
    }
    profile.rpcs = probes::rpc::drain(maps, stacks, &plan.rpc)?;
    profile.funcs = probes::func::drain(maps, stacks, func_targets)?;
    if let Some(freq) = plan.cpu {
        profile.cpu_freq_hz = freq;
        profile.cpu = probes::cpu::drain(maps, stacks)?;
    }
    if let Some(hold) = &plan.hold {
        profile.holds = probes::hold::drain(maps, stacks, hold)?;
    }
    Ok(())
}

/// Every process some row refers to, once.
fn row_pids(profile: &Profile) -> Vec<u32> {
    let mut pids: Vec<u32> = profile.locks.iter().map(|row| row.pid).collect();
    pids.extend(profile.offcpu.iter().map(|row| row.pid));
    pids.extend(profile.io.iter().map(|row| row.pid));
    pids.extend(profile.rpcs.iter().map(|row| row.pid));
    pids.extend(profile.funcs.iter().map(|row| row.pid));
    pids.extend(profile.cpu.iter().map(|row| row.pid));
    pids.extend(profile.holds.iter().map(|row| row.pid));
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// The numbers so far, while the programs run (for metrics and progress).
fn snapshot(
    plan: &Plan,
    func_targets: &[probes::func::FuncTarget],
    maps: &MapSet,
    stacks: &mut StackResolver,
    devices: Option<&DeviceNames>,
    probes: &[ProbeUse],
    elapsed_s: f64,
) -> Result<Profile> {
    let mut profile = Profile::new();
    profile.duration_s = elapsed_s;
    // Recorded families get their series from the first scrape on, even before events.
    profile.probes = probes.to_vec();
    drain_families(plan, func_targets, maps, stacks, devices, &mut profile)?;
    stacks.interner.copy_into(&mut profile);
    // Off-CPU and IO series are labelled by process name.
    if !profile.offcpu.is_empty() || !profile.io.is_empty() {
        profile.processes = probes::shared::drain_processes(maps, &row_pids(&profile))?;
    }
    profile.losses = probes::shared::drain_losses(maps)?;
    Ok(profile)
}

/// `lockpath: 12 s, 3456 lock contentions`. A family adds its count.
fn progress_line(live: &Profile) -> String {
    let mut parts = vec![format!("lockpath: {:.0} s", live.duration_s)];
    if !live.locks.is_empty() {
        let contentions: u64 = live.locks.iter().map(|row| row.count).sum();
        parts.push(format!("{contentions} lock contentions"));
    }
    if !live.offcpu.is_empty() {
        let waits: u64 = live.offcpu.iter().map(|row| row.count).sum();
        parts.push(format!("{waits} off-CPU waits"));
    }
    if !live.io.is_empty() {
        let requests: u64 = live.io.iter().map(|row| row.count).sum();
        parts.push(format!("{requests} IO requests"));
    }
    if !live.cpu.is_empty() {
        let samples: u64 = live.cpu.iter().map(|row| row.samples).sum();
        parts.push(format!("{samples} CPU samples"));
    }
    if !live.rpcs.is_empty() {
        let requests: u64 = live.rpcs.iter().map(|row| row.latency.count).sum();
        parts.push(format!("{requests} requests"));
    }
    if !live.funcs.is_empty() {
        let calls: u64 = live.funcs.iter().map(|row| row.latency.count).sum();
        parts.push(format!("{calls} calls"));
    }
    if !live.holds.is_empty() {
        let holds: u64 = live.holds.iter().map(|row| row.latency.count).sum();
        parts.push(format!("{holds} holds"));
    }
    let lost: u64 = live.losses.values().sum();
    if lost > 0 {
        parts.push(format!("{lost} lost"));
    }
    parts.join(", ")
}

/// What `start` hands back: the loaded object, the probes in use, the function slots
/// (`--func`/`--ufunc`) and the process watcher when user stacks are recorded.
type Started = (
    Ebpf,
    Vec<ProbeUse>,
    Vec<probes::func::FuncTarget>,
    Option<ProcessWatcher>,
);

/// Loads the object, installs the target filter and attaches the requested families.
fn start(
    args: &RecordArgs,
    plan: &Plan,
    target: &Target,
    child: Option<u32>,
    kernel_symbols: &KernelSymbols,
    unavailable: &mut Vec<crate::profile::Unavailable>,
) -> Result<Started> {
    let filter_mode = target.filter_mode();
    let fork_child_pid = tracefs::field_offset("sched", "sched_process_fork", "child_pid")?;
    let exit_group_dead =
        tracefs::field_offset("sched", "sched_process_exit", "group_dead").unwrap_or(0);
    let offcpu_globals = plan.offcpu.as_ref().map(OffcpuGlobals::read).transpose()?;
    let io_globals = if plan.io {
        Some(IoGlobals::read()?)
    } else {
        None
    };
    let lock_layout = probes::lock::layout();
    let hold_config = plan
        .hold
        .as_ref()
        .map_or(profiler_common::hold::HoldConfig::DISABLED, |hold| {
            hold.config
        });
    let mut loader = EbpfLoader::new();
    loader
        .override_global("FILTER_MODE", &filter_mode, true)
        .override_global("FORK_CHILD_PID_OFFSET", &fork_child_pid, true)
        .override_global("EXIT_GROUP_DEAD_OFFSET", &exit_group_dead, true)
        .override_global("LOCK_LAYOUT", &lock_layout, true)
        .override_global("HOLD_CONFIG", &hold_config, true)
        .map_max_entries("STACKS", args.stack_entries);
    // The object is loaded whole: the maps of the families not recorded shrink to one
    // entry each, so they cost no kernel memory (a 16k-entry hash is megabytes).
    let functions = !plan.funcs.is_empty() || !plan.ufuncs.is_empty();
    for (map, used, entries) in [
        ("LOCK_STATS", plan.lock, args.map_entries),
        ("LOCK_SLEEP_WAIT", plan.lock, 16384),
        ("LOCK_HOLDS", plan.lock, args.map_entries),
        ("LOCK_LAST_ACQUIRER", plan.lock, 16384),
        ("LOCK_STACK_CACHE", plan.lock, 16384),
        ("LOCK_SLEEP_DROPPED", plan.lock, 1024),
        ("OFFCPU_STATS", plan.offcpu.is_some(), args.map_entries),
        ("OFFCPU_START", plan.offcpu.is_some(), 65536),
        ("IO_STATS", plan.io, args.map_entries),
        ("IO_INFLIGHT", plan.io, 16384),
        ("RPC_STATS", plan.rpc.any(), args.map_entries),
        ("RPC_INFLIGHT", plan.rpc.any(), 65536),
        ("FUNC_STATS", functions, args.map_entries),
        ("FUNC_CALLS", functions, 65536),
        ("CPU_SAMPLES", plan.cpu.is_some(), args.map_entries),
        ("HOLD_STATS", plan.hold.is_some(), args.map_entries),
        ("HOLD_OPEN", plan.hold.is_some(), 16384),
        ("HOLD_PENDING", plan.hold.is_some(), 16384),
    ] {
        loader.map_max_entries(map, if used { entries } else { 1 });
    }
    if let Some(globals) = &offcpu_globals {
        globals.apply(&mut loader);
    }
    if let Some(globals) = &io_globals {
        globals.apply(&mut loader);
    }
    for (name, value) in &plan.rpc.globals {
        loader.override_global(name, value, true);
    }
    let mut ebpf = loader
        .load(EBPF_OBJECT)
        .map_err(|err| anyhow::anyhow!(explain_load_error(&err.to_string())))?;

    if filter_mode == FILTER_PIDS {
        for (name, event) in [
            ("target_fork", "sched_process_fork"),
            ("target_exit", "sched_process_exit"),
        ] {
            let program: &mut TracePoint = ebpf
                .program_mut(name)
                .with_context(|| format!("program {name} missing from the eBPF object"))?
                .try_into()
                .with_context(|| format!("program {name} is not a tracepoint"))?;
            program
                .load()
                .map_err(|err| crate::probes::shared::load_error(name, err))?;
            program
                .attach("sched", event)
                .with_context(|| format!("cannot attach to sched:{event}"))?;
        }
    }
    target.install(&mut ebpf, child)?;

    // The watcher first: a process must be noted before its first sample is counted.
    let watcher = if plan.user_stacks() {
        Some(ProcessWatcher::start(&mut ebpf)?)
    } else {
        None
    };
    let mut probes = Vec::new();
    if plan.lock {
        probes.push(probes::lock::attach(
            &mut ebpf,
            args.lock_method,
            kernel_symbols,
        )?);
    }
    if let Some(options) = &plan.offcpu {
        probes.push(probes::offcpu::attach(&mut ebpf, options)?);
    }
    if let Some(globals) = &io_globals {
        probes.push(probes::io::attach(&mut ebpf, globals)?);
    }
    probes.extend(probes::rpc::attach(&mut ebpf, &plan.rpc)?);
    let (func_probes, func_targets) = probes::func::attach(
        &mut ebpf,
        &plan.funcs,
        plan.func_method,
        &plan.ufuncs,
        unavailable,
    )?;
    probes.extend(func_probes);
    if let Some(freq) = plan.cpu {
        probes.push(probes::cpu::attach(&mut ebpf, freq)?);
    }
    if let Some(hold) = &plan.hold {
        probes.extend(probes::hold::attach(
            &mut ebpf,
            hold,
            plan.hold_method,
            plan.hold_only,
            unavailable,
        )?);
    }
    if probes.is_empty() {
        let reasons: Vec<String> = unavailable
            .iter()
            .map(|missing| format!("{} {}: {}", missing.family, missing.what, missing.reason))
            .collect();
        bail!(
            "nothing asked for can be recorded on this kernel ({})",
            reasons.join("; ")
        );
    }
    Ok((ebpf, probes, func_targets, watcher))
}

fn explain_load_error(err: &str) -> String {
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
        format!("the kernel refused to load lockpath's eBPF programs ({err}): run as root, or with CAP_BPF and CAP_PERFMON")
    } else {
        format!("cannot load lockpath's eBPF programs: {err}")
    }
}

/// Root, or CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN), checked before anything is loaded.
fn check_privileges() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return Ok(());
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    const CAP_PERFMON: u64 = 1 << 38;
    const CAP_BPF: u64 = 1 << 39;
    if effective & CAP_SYS_ADMIN != 0
        || effective & (CAP_BPF | CAP_PERFMON) == CAP_BPF | CAP_PERFMON
    {
        return Ok(());
    }
    bail!(
        "lockpath record needs root, or the capabilities CAP_BPF and CAP_PERFMON: run it with sudo"
    )
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

fn describe_target(target: &Target) -> String {
    match target {
        Target::System => "whole system".into(),
        Target::Pids(pids) => format!("pids {pids:?}"),
        Target::Cgroup(path) => format!("cgroup {}", path.display()),
        Target::Command(command) => format!("command {}", command.join(" ")),
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|release| release.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}
