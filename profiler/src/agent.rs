//! `lockpath record --rotate DUR -o DIR`: always on. Loads and attaches like a one-off
//! recording, then, every period, empties the kernel's aggregation maps into a profile
//! of its own (rotate.rs), written atomically into DIR as `HOST-STARTTIME.json`, until
//! SIGTERM or Ctrl-C (the period in progress is written, then everything detaches), the
//! duration, or the command's exit. SIGHUP ends the period in progress early and goes
//! on. Signals and the period timer run on a tokio runtime; `--metrics` serves counters
//! that only grow (export/operations/fleet.rs): the finished periods, plus a reading of the period
//! in progress every few seconds.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::{Duration, Instant, SystemTime},
};

use anyhow::{bail, Context, Result};
use tokio::{
    signal::unix::{signal, Signal, SignalKind},
    time::MissedTickBehavior,
};

use crate::{
    cli::RecordArgs,
    export::operations::fleet::FleetCounters,
    metrics::MetricsServer,
    probes::target::{Child, Target},
    probes::{self, shared::MapSet, Recorded},
    profile::{Profile, Unavailable},
    record,
    rotate::{difference, Staging},
    units,
};

/// How often `--metrics` adds a reading of the period in progress.
const METRICS_REFRESH: Duration = Duration::from_secs(5);

/// Checks the output directory: created when missing, writable, not a file.
fn output_dir(args: &RecordArgs) -> Result<PathBuf> {
    let dir = args.output.clone();
    if dir.as_os_str() == "lockpath.json" && !dir.is_dir() {
        bail!("--rotate writes one profile per period into a directory: give it with -o DIR");
    }
    if dir.exists() && !dir.is_dir() {
        bail!(
            "--rotate needs a directory for -o, and {} is a file: give a directory",
            dir.display()
        );
    }
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the output directory {}", dir.display()))?;
    crate::profile::check_writable(&dir.join("probe.json")).with_context(|| {
        format!(
            "cannot write profiles into {}: choose a writable directory with -o",
            dir.display()
        )
    })?;
    Ok(dir)
}

pub fn run(args: RecordArgs) -> Result<i32> {
    let period = args.rotate.context("--rotate without a period")?;
    if args.interval.is_some() {
        // Each period empties the maps the timeline diffs against.
        bail!("--interval cannot be combined with --rotate: each period's profile is already one interval of the run (use a shorter --rotate period)");
    }
    // Signals are caught from the start: one that comes while the probes load stops the
    // agent as soon as it runs (and a period, however short, is written).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime for signals and timers")?;
    let signals = {
        let _context = runtime.enter();
        StopSignals::catch()?
    };
    let target = record::target_of(&args);
    let asked = record::check_arguments(&args, &target)?;
    let dir = output_dir(&args)?;
    let mut counters = FleetCounters::new(args.metrics_top as usize);
    let first_page = || counters.render_with(None);
    let started = record::plan_and_start(&args, &asked, &target, first_page)?;
    let (session, mut child) = (started.session, started.child);
    let staging = Staging::new(&session.maps, &started.families)?;
    let mut agent = Agent {
        host: args.host.clone().unwrap_or_else(record::hostname),
        dir,
        keep: args.keep,
        families: started.families,
        ebpf: Some(session.ebpf),
        probes: session.probes,
        maps: session.maps,
        stacks: session.stacks,
        watcher: session.watcher,
        reader: session.reader,
        staging,
        target,
        unavailable: started.unavailable,
        losses_before: BTreeMap::new(),
        misses_before: BTreeMap::new(),
        period_wall: SystemTime::now(),
        period_start: Instant::now(),
        periods: 0,
        counters: started.metrics.as_ref().map(|_| {
            std::mem::replace(&mut counters, FleetCounters::new(args.metrics_top as usize))
        }),
        metrics: started.metrics,
    };
    let outcome = runtime.block_on(agent.run(&args, period, signals, child.as_mut()));
    // Whatever ended the run: the period in progress is written, then all detaches.
    let last = agent.finish();
    drop(agent);
    match (outcome, last) {
        (Ok(code), Ok(())) => Ok(code),
        (Err(err), _) | (Ok(_), Err(err)) => Err(err),
    }
}

/// SIGTERM and SIGINT stop the agent; SIGHUP ends a period early.
struct StopSignals {
    terminate: Signal,
    interrupt: Signal,
    hangup: Signal,
}

impl StopSignals {
    /// Must run inside the tokio runtime.
    fn catch() -> Result<Self> {
        Ok(Self {
            terminate: signal(SignalKind::terminate()).context("cannot catch SIGTERM")?,
            interrupt: signal(SignalKind::interrupt()).context("cannot catch SIGINT")?,
            hangup: signal(SignalKind::hangup()).context("cannot catch SIGHUP")?,
        })
    }
}

struct Agent {
    host: String,
    dir: PathBuf,
    keep: Option<u32>,
    families: Vec<Recorded>,
    /// `None` once detached (every program and link closed).
    ebpf: Option<aya::Ebpf>,
    probes: Vec<crate::profile::ProbeUse>,
    maps: MapSet,
    stacks: crate::probes::shared::StackResolver,
    watcher: Option<crate::probes::shared::ProcessWatcher>,
    /// Reads kernel memory (who serves a request in flight).
    reader: Option<probes::blocked_on::KernelReader>,
    staging: Staging,
    target: Target,
    unavailable: Vec<Unavailable>,
    /// Cumulative kernel counters at the end of the previous period.
    losses_before: BTreeMap<String, u64>,
    misses_before: BTreeMap<String, u64>,
    period_wall: SystemTime,
    period_start: Instant,
    periods: u64,
    counters: Option<FleetCounters>,
    metrics: Option<MetricsServer>,
}

impl Agent {
    /// Periods until a stop; returns the exit code (the command's, when there is one).
    async fn run(
        &mut self,
        args: &RecordArgs,
        period: Duration,
        signals: StopSignals,
        mut child: Option<&mut Child>,
    ) -> Result<i32> {
        let StopSignals {
            mut terminate,
            mut interrupt,
            mut hangup,
        } = signals;
        if let (Some(child), Some(program)) = (child.as_mut(), args.command.first()) {
            child.release(program)?;
        }
        self.announce(period);
        let started = Instant::now();
        let deadline = args.duration.map(Duration::from_secs_f64);
        self.begin_period();
        let mut rotation = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        rotation.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // The period in progress joins the counters every few seconds (a reading costs
        // a drain of the maps); finished periods join at once.
        let mut metrics_refresh = tokio::time::interval(METRICS_REFRESH);
        metrics_refresh.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // Short polls while watching processes: a snapshot must beat a quick exit.
        let watch = self.watcher.is_some();
        let mut poll = tokio::time::interval(Duration::from_millis(if watch { 10 } else { 100 }));
        let mut polls = 0u64;
        let mut cgroups = crate::probes::target::CgroupTracker::new(&self.target);
        loop {
            tokio::select! {
                _ = terminate.recv() => return Ok(0),
                _ = interrupt.recv() => return Ok(0),
                _ = hangup.recv() => {
                    self.close_period()?;
                    rotation.reset();
                }
                _ = rotation.tick() => self.close_period()?,
                _ = metrics_refresh.tick(), if self.metrics.is_some() => self.refresh_metrics(),
                _ = poll.tick() => {
                    polls += 1;
                    if let Some(cgroups) = cgroups.as_mut() {
                        cgroups.poll(&mut self.maps);
                    }
                    if deadline.is_some_and(|limit| started.elapsed() >= limit) {
                        return Ok(0);
                    }
                    if let Some(code) = child.as_mut().and_then(|child| child.try_wait()) {
                        return Ok(code);
                    }
                    if let Some(watcher) = self.watcher.as_mut() {
                        watcher.poll(&mut self.stacks.user);
                        for family in &self.families {
                            family.poll(&mut self.stacks.user);
                        }
                    }
                    if let Target::Pids(pids) = &self.target {
                        if polls.is_multiple_of(5)
                            && !crate::probes::target::any_target_alive(&self.maps, pids)
                        {
                            eprintln!("lockpath: every target process has exited; stopping");
                            return Ok(0);
                        }
                    }
                }
            }
        }
    }

    fn announce(&self, period: Duration) {
        eprintln!(
            "lockpath: always on: recording {} ({}), one profile every {} s into {}; \
             SIGHUP ends a period early, SIGTERM or Ctrl-C stops",
            self.probes
                .iter()
                .map(|probe| probe.family.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            record::describe_target(&self.target),
            period.as_secs_f64(),
            self.dir.display()
        );
        if let Some(metrics) = &self.metrics {
            eprintln!(
                "lockpath: Prometheus metrics at http://{}/metrics",
                metrics.addr
            );
        }
    }

    fn begin_period(&mut self) {
        self.period_wall = SystemTime::now();
        self.period_start = Instant::now();
    }

    /// Ends the period in progress: its profile is drained, written and counted; a
    /// failed write is reported and the agent goes on (the next period may succeed).
    fn close_period(&mut self) -> Result<()> {
        let misses = self
            .ebpf
            .as_ref()
            .map(probes::shared::program_misses)
            .unwrap_or_default();
        self.write_period(misses)
    }

    /// Drains the period (programs still running, or detached for the last one) into a
    /// profile and writes it.
    fn write_period(&mut self, misses: BTreeMap<String, u64>) -> Result<()> {
        let duration_s = self.period_start.elapsed().as_secs_f64();
        let start_wall = self.period_wall;
        self.begin_period();
        let profile = self.drain_period(start_wall, duration_s, misses)?;
        if let Some(counters) = self.counters.as_mut() {
            counters.add_period(&profile);
        }
        self.periods += 1;
        let path = self.period_path(profile.start_unix_s);
        match profile.save(&path) {
            Ok(()) => {
                eprintln!(
                    "lockpath: period {} ({:.1} s{}) written to {}",
                    self.periods,
                    profile.duration_s,
                    self.families
                        .iter()
                        .filter_map(|family| family.progress(&profile))
                        .map(|part| format!(", {part}"))
                        .collect::<String>(),
                    path.display()
                );
                self.prune();
            }
            Err(err) => eprintln!(
                "lockpath: cannot write period {} to {} ({err:#}); going on",
                self.periods,
                path.display()
            ),
        }
        self.refresh_metrics();
        Ok(())
    }

    fn drain_period(
        &mut self,
        start_wall: SystemTime,
        duration_s: f64,
        misses: BTreeMap<String, u64>,
    ) -> Result<Profile> {
        let mut profile =
            record::new_profile(self.host.clone(), &self.target, start_wall, duration_s);
        profile.probes = self.probes.clone();
        profile.unavailable = self.unavailable.clone();
        // Stacks walked from now on go to the other stack map (the period's rows find
        // theirs in either map, or in the copy of the one emptied for reuse).
        if self.ebpf.is_some() {
            if let Err(err) = self.stacks.next_generation() {
                eprintln!("lockpath: {err:#}; the next period walks into the same stack map");
            }
        }
        let families = &self.families;
        let stacks = &mut self.stacks;
        let reader = self.reader.as_mut();
        // What the programs sent per event so far belongs to this period.
        for family in families {
            family.poll(&mut stacks.user);
        }
        // While the programs run, waits in progress are split at this boundary.
        let moment = probes::DrainMoment::now(self.ebpf.is_some());
        self.staging.drain_period(&mut self.maps, |maps| {
            record::drain_families(families, maps, stacks, &mut profile, moment, reader)
        })?;
        for family in families {
            family.new_period();
        }
        stacks.take_period().finish(&mut profile);
        let losses = probes::shared::drain_losses(&self.maps)?;
        profile.losses = difference(&losses, &self.losses_before);
        self.losses_before = losses;
        let missed = difference(&misses, &self.misses_before);
        for (cause, count) in missed {
            *profile.losses.entry(cause).or_default() += count;
        }
        self.misses_before = misses;
        profile.processes = probes::shared::drain_processes(&self.maps, &profile.row_pids())?;
        crate::rotate::forget_exited(&mut self.maps);
        crate::rotate::forget_idle_slab_names(&self.maps, &profile);
        Ok(profile)
    }

    /// `DIR/HOST-20261203T081240Z.json`; `-2`, `-3`... when a period starts within the
    /// same second as the previous one (SIGHUP right after a period end).
    fn period_path(&self, start_unix_s: u64) -> PathBuf {
        let stem = format!("{}-{}", self.host, units::compact_utc(start_unix_s));
        let mut path = self.dir.join(format!("{stem}.json"));
        let mut index = 2;
        while path.exists() {
            path = self.dir.join(format!("{stem}-{index}.json"));
            index += 1;
        }
        path
    }

    /// `--keep N`: removes this host's oldest profiles beyond N.
    fn prune(&self) {
        let Some(keep) = self.keep else { return };
        let mut ours = period_files(&self.dir, &self.host);
        if ours.len() <= keep as usize {
            return;
        }
        ours.sort();
        let extra = ours.len() - keep as usize;
        for old in ours.into_iter().take(extra) {
            if let Err(err) = std::fs::remove_file(&old) {
                eprintln!(
                    "lockpath: cannot remove {} ({err}); going on",
                    old.display()
                );
            }
        }
    }

    /// The counters of the finished periods plus a reading of the period in progress
    /// (the kernel maps read, not emptied).
    fn refresh_metrics(&mut self) {
        let (Some(metrics), Some(counters)) = (self.metrics.as_ref(), self.counters.as_mut())
        else {
            return;
        };
        let live = match self.ebpf.is_some() {
            true => {
                let mut live = Profile::new();
                live.duration_s = self.period_start.elapsed().as_secs_f64();
                let read = record::drain_families(
                    &self.families,
                    &self.maps,
                    &mut self.stacks,
                    &mut live,
                    probes::DrainMoment::now(false),
                    self.reader.as_mut(),
                )
                .and_then(|()| {
                    self.stacks.interner.copy_into(&mut live);
                    live.processes = probes::shared::drain_processes(&self.maps, &live.row_pids())?;
                    let losses = probes::shared::drain_losses(&self.maps)?;
                    live.losses = difference(&losses, &self.losses_before);
                    Ok(())
                });
                match read {
                    Ok(()) => Some(live),
                    Err(err) => {
                        log::warn!("cannot read the kernel maps for the metrics: {err:#}");
                        None
                    }
                }
            }
            false => None,
        };
        metrics.update(counters.render_with(live.as_ref()));
    }

    /// The last period: detach (the numbers stop moving), then drain and write it.
    fn finish(&mut self) -> Result<()> {
        let Some(ebpf) = self.ebpf.take() else {
            return Ok(());
        };
        let misses = probes::shared::program_misses(&ebpf);
        // Detaching closes every program and link; the maps stay readable.
        drop(ebpf);
        for family in self.families.iter_mut() {
            family.stopped(&mut self.maps)?;
        }
        if let Some(watcher) = self.watcher.take() {
            watcher.finish(&mut self.stacks.user);
        }
        let result = self.write_period(misses);
        if let Some(metrics) = self.metrics.take() {
            drop(metrics);
        }
        result
    }
}

/// This host's period profiles in `dir` (not the temporary files of a write).
fn period_files(dir: &Path, host: &str) -> Vec<PathBuf> {
    let prefix = format!("{host}-");
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.path())
                .filter(|path| {
                    path.file_name()
                        .and_then(|name| name.to_str())
                        .is_some_and(|name| name.starts_with(&prefix) && name.ends_with(".json"))
                })
                .collect()
        })
        .unwrap_or_default()
}
