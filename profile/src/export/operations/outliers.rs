//! `lockpath outliers`: which hosts (or jobs) of a fleet stand out, and what explains it.
//!
//! Every profile is read once and reduced to each unit's time per cause (each kind's
//! `View::causes`: lock wait by lock type and lock, off-CPU time by wait class, block-IO
//! time by device and operation, RPC time by operation, time in traced functions, CPU
//! time by the function on the CPU). A cause's rate is its time per second recorded.
//! Against the fleet, per cause: the median rate over all units (a unit without the
//! cause counts 0) and a robust spread, 1.4826 times the median absolute deviation but
//! at least a fifth of the median and 1 ms/s. A unit's own rate is uncertain too: its
//! events come at random, so its time varies by about the square root of the sum of
//! their squared durations (a compound Poisson process), bounded here by the rows'
//! total times their longest wait. A rate of many short waits is known closely; a
//! cause of one long wait does not stand out on that wait alone. A unit's cause stands
//! out when its excess over the median is more than `threshold` times the two
//! uncertainties combined (in quadrature; the fleet's alone is the modified z-score of
//! Iglewicz and Hoaglin, whose usual threshold is 3.5) and at least `min_excess`; a
//! unit stands out when one of its causes does. Its gap is the summed excess of its causes that stand out;
//! each of them is shown with its share of the gap and its top stacks. Causes may
//! overlap (a sleeping lock wait is off-CPU time too).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Mutex,
    },
};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::{
    export::{
        formats::escape::html as esc, formats::folded, formats::html, tables::table::most_first_f64,
    },
    jobs::Jobs,
    kind::Kind,
    profile::Profile,
    units::format_ns,
    views::{CausePart, VIEWS},
};

/// The least robust spread, as a share of the median and in ns per second.
const SPREAD_FLOOR_SHARE: f64 = 0.2;
const SPREAD_FLOOR_NS: f64 = 1e6;
/// The consistency constant that makes the median absolute deviation estimate the
/// standard deviation of normally distributed rates.
const MAD_SCALE: f64 = 1.4826;
/// Frames shown of each top stack (leaf first).
const STACK_FRAMES: usize = 12;
/// Outliers whose stacks are looked up (their profiles are read a second time).
const STACK_OUTLIERS: usize = 10;

/// What one unit of the fleet is.
#[derive(Debug, Clone)]
pub enum By {
    Host,
    Job(Jobs),
}

impl By {
    pub fn name(&self) -> &'static str {
        match self {
            By::Host => "host",
            By::Job(_) => "job",
        }
    }
}

/// The time of one cause, the events that took it, and a bound of the sum of their
/// squared durations (ns²).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Amount {
    pub ns: f64,
    pub events: u64,
    pub squares: f64,
}

impl Amount {
    fn add(&mut self, other: Amount) {
        self.ns += other.ns;
        self.events = self.events.saturating_add(other.events);
        self.squares += other.squares;
    }
}

impl Amount {
    /// Per second of `seconds` recorded: the rate, the events and the rate's own
    /// uncertainty (the square root of the bound of the squared durations).
    fn rate(&self, seconds: f64) -> Rate {
        let seconds = seconds.max(1e-3);
        (
            self.ns / seconds,
            self.events,
            self.squares.sqrt() / seconds,
        )
    }
}

/// One unit's time per cause, over every profile it is in.
#[derive(Debug, Clone, Default)]
pub struct Unit {
    /// Seconds recorded (the durations of its profiles, added).
    pub seconds: f64,
    /// Per cause key (`KIND KEY`).
    pub causes: HashMap<String, Amount>,
    /// The profiles it is in (indices into the inputs).
    pub inputs: Vec<usize>,
}

/// Every unit of the fleet, read profile by profile.
#[derive(Debug, Default)]
pub struct Fleet {
    pub units: BTreeMap<String, Unit>,
    /// The kind of each cause key.
    pub kinds: HashMap<String, Kind>,
    pub profiles: usize,
}

/// The unit of each process of a profile (`None`: in no unit).
fn units_of(profile: &Profile, by: &By) -> HashMap<u32, Option<String>> {
    profile
        .processes
        .iter()
        .map(|process| {
            let unit = match by {
                By::Host => Some(process.host.clone().unwrap_or_else(|| profile.host.clone())),
                By::Job(jobs) => process.cgroup.as_deref().and_then(|cgroup| jobs.of(cgroup)),
            };
            (process.pid, unit)
        })
        .collect()
}

/// Hands every cause part of a profile to `each` with its unit and its cause key
/// (`KIND KEY`); parts of processes in no unit are left out. A pid the profile does not
/// list is its host's (`By::Host`).
fn each_cause(
    profile: &Profile,
    by: &By,
    units: &HashMap<u32, Option<String>>,
    mut each: impl FnMut(&str, String, Kind, &CausePart),
) {
    let fallback = match by {
        By::Host => Some(profile.host.as_str()),
        By::Job(_) => None,
    };
    for view in VIEWS {
        let mut add = |part: CausePart| {
            let unit = match units.get(&part.pid) {
                Some(unit) => unit.as_deref(),
                None => fallback,
            };
            if let Some(unit) = unit {
                each(
                    unit,
                    format!("{} {}", view.name(), part.key),
                    view.kind(),
                    &part,
                );
            }
        };
        view.causes(profile, &mut add);
    }
}

impl Fleet {
    /// Adds the units of one profile (input number `input`).
    pub fn add(&mut self, profile: &Profile, input: usize, by: &By) {
        self.profiles += 1;
        let units = units_of(profile, by);
        let mut present: BTreeSet<String> = units.values().flatten().cloned().collect();
        if matches!(by, By::Host) && !profile.is_merged() {
            present.insert(profile.host.clone());
        }
        for name in &present {
            let unit = self.units.entry(name.clone()).or_default();
            unit.seconds += profile.duration_s.max(1e-3);
            unit.inputs.push(input);
        }
        each_cause(profile, by, &units, |unit, cause, kind, part| {
            let Some(unit) = self.units.get_mut(unit) else {
                return;
            };
            if !self.kinds.contains_key(&cause) {
                self.kinds.insert(cause.clone(), kind);
            }
            unit.causes.entry(cause).or_default().add(Amount {
                ns: part.ns,
                events: part.events,
                squares: part.ns * part.longest_ns,
            });
        });
    }

    /// Adds another part of the fleet (read by another thread).
    fn absorb(&mut self, other: Fleet) {
        self.profiles += other.profiles;
        self.kinds.extend(other.kinds);
        for (name, unit) in other.units {
            let mine = self.units.entry(name).or_default();
            mine.seconds += unit.seconds;
            mine.inputs.extend(unit.inputs);
            for (cause, amount) in unit.causes {
                mine.causes.entry(cause).or_default().add(amount);
            }
        }
    }
}

/// The profiles named on the command line: files, and every `.json` and `.lpb` file of
/// a directory (a `--rotate` directory), in name order.
pub fn input_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).with_context(|| {
            format!(
                "cannot read {}: give profiles or directories of them",
                path.display()
            )
        })?;
        if !meta.is_dir() {
            files.push(path.clone());
            continue;
        }
        let mut found: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("cannot list {}", path.display()))?
            .flatten()
            .map(|entry| entry.path())
            .filter(|file| {
                let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
                !name.starts_with('.') && (name.ends_with(".json") || name.ends_with(".lpb"))
            })
            .collect();
        if found.is_empty() {
            anyhow::bail!("{} holds no profile (.json or .lpb)", path.display());
        }
        found.sort();
        files.extend(found);
    }
    Ok(files)
}

/// Reads every profile once, on every CPU, into the fleet's units.
pub fn gather(files: &[PathBuf], by: &By) -> Result<Fleet> {
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(files.len().max(1));
    let parts: Mutex<Vec<Result<Fleet>>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let mut fleet = Fleet::default();
                let result = loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(file) = files.get(index) else {
                        break Ok(fleet);
                    };
                    match Profile::load(file) {
                        Ok(profile) => fleet.add(&profile, index, by),
                        Err(err) => {
                            // The others stop at their next file.
                            next.store(files.len(), Ordering::Relaxed);
                            break Err(err);
                        }
                    }
                };
                if let Ok(mut parts) = parts.lock() {
                    parts.push(result);
                }
            });
        }
    });
    let mut fleet = Fleet::default();
    let parts = parts
        .into_inner()
        .map_err(|_| anyhow::anyhow!("a thread reading profiles failed"))?;
    for part in parts {
        fleet.absorb(part?);
    }
    Ok(fleet)
}

/// How `analyze` decides what stands out.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Robust spreads above the median.
    pub threshold: f64,
    /// Nanoseconds per second above the median.
    pub min_excess_ns: f64,
}

/// A stack of a cause, leaf first, with its time per second.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TopStack {
    pub ns_per_s: f64,
    pub frames: Vec<String>,
}

/// A cause of a unit against the fleet.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CauseExcess {
    pub cause: String,
    pub kind: String,
    pub ns_per_s: f64,
    pub median_ns_per_s: f64,
    pub excess_ns_per_s: f64,
    /// The events of the unit's time.
    pub events: u64,
    /// The excess in uncertainties (the fleet's spread and the unit's own, combined).
    pub z: f64,
    /// Of the unit's gap (the summed excess of its causes that stand out).
    pub share: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stacks: Vec<TopStack>,
}

/// One unit, ranked.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Ranked {
    pub name: String,
    pub seconds: f64,
    pub outlier: bool,
    /// The summed excess of its causes that stand out (0 when none does).
    pub gap_ns_per_s: f64,
    /// Its largest robust deviation above the median, over all causes.
    pub max_z: f64,
    /// Its causes that stand out, largest excess first.
    pub causes: Vec<CauseExcess>,
}

/// A cause over the whole fleet.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FleetCause {
    pub cause: String,
    pub kind: String,
    pub median_ns_per_s: f64,
    pub spread_ns_per_s: f64,
    /// Units with some of it.
    pub units: usize,
}

/// What `outliers` found.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Analysis {
    pub by: String,
    pub profiles: usize,
    pub units: usize,
    pub threshold: f64,
    pub min_excess_ns_per_s: f64,
    /// Units that stand out first, by gap; then the rest by their largest deviation.
    pub ranking: Vec<Ranked>,
    /// Every cause, largest median first.
    pub fleet: Vec<FleetCause>,
}

impl Analysis {
    pub fn outliers(&self) -> impl Iterator<Item = &Ranked> {
        self.ranking.iter().filter(|unit| unit.outlier)
    }
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    match values.len() % 2 {
        1 => values[middle],
        _ => (values[middle - 1] + values[middle]) / 2.0,
    }
}

/// A unit's rate of a cause (ns per second), its events, and its own uncertainty (ns
/// per second).
type Rate = (f64, u64, f64);

/// Each cause's median rate and robust spread over the units, and each unit's rates.
fn fleet_causes(fleet: &Fleet, names: &[&String]) -> (Vec<FleetCause>, Vec<HashMap<String, Rate>>) {
    let rates: Vec<HashMap<String, Rate>> = names
        .iter()
        .map(|name| {
            let unit = &fleet.units[*name];
            let seconds = unit.seconds.max(1e-3);
            unit.causes
                .iter()
                .map(|(cause, amount)| (cause.clone(), amount.rate(seconds)))
                .collect()
        })
        .collect();
    let causes: BTreeSet<&String> = rates.iter().flat_map(|unit| unit.keys()).collect();
    let mut out: Vec<FleetCause> = causes
        .into_iter()
        .map(|cause| {
            let mut values: Vec<f64> = rates
                .iter()
                .map(|unit| unit.get(cause).map_or(0.0, |rate| rate.0))
                .collect();
            let units = values.iter().filter(|value| **value > 0.0).count();
            let middle = median(&mut values);
            let mut deviations: Vec<f64> = values.iter().map(|v| (v - middle).abs()).collect();
            let mad = median(&mut deviations);
            let spread = (MAD_SCALE * mad)
                .max(SPREAD_FLOOR_SHARE * middle)
                .max(SPREAD_FLOOR_NS);
            FleetCause {
                cause: cause.clone(),
                kind: fleet
                    .kinds
                    .get(cause)
                    .map(|k| k.name())
                    .unwrap_or("")
                    .to_string(),
                median_ns_per_s: middle,
                spread_ns_per_s: spread,
                units,
            }
        })
        .collect();
    most_first_f64(
        &mut out,
        |cause| cause.median_ns_per_s,
        |a, b| a.cause.cmp(&b.cause),
    );
    (out, rates)
}

/// Ranks the fleet's units (at least three are needed to say what is usual).
pub fn analyze(fleet: &Fleet, by: &By, options: Options) -> Result<Analysis> {
    if fleet.units.len() < 3 {
        anyhow::bail!(
            "{} {}s in {} profiles: comparing needs at least 3 (give more profiles, or \
             --by {} for other units)",
            fleet.units.len(),
            by.name(),
            fleet.profiles,
            match by {
                By::Host => "job",
                By::Job(_) => "host",
            }
        );
    }
    let names: Vec<&String> = fleet.units.keys().collect();
    let (causes, rates) = fleet_causes(fleet, &names);
    let mut ranking: Vec<Ranked> = names
        .iter()
        .zip(&rates)
        .map(|(name, unit_rates)| {
            let mut max_z: f64 = 0.0;
            let mut standing: Vec<CauseExcess> = Vec::new();
            for cause in &causes {
                let (rate, events, own) = unit_rates.get(&cause.cause).copied().unwrap_or_default();
                let excess = rate - cause.median_ns_per_s;
                let z = excess / cause.spread_ns_per_s.hypot(own);
                max_z = max_z.max(z);
                if z > options.threshold && excess >= options.min_excess_ns {
                    standing.push(CauseExcess {
                        cause: cause.cause.clone(),
                        kind: cause.kind.clone(),
                        ns_per_s: rate,
                        median_ns_per_s: cause.median_ns_per_s,
                        excess_ns_per_s: excess,
                        events,
                        z,
                        share: 0.0,
                        stacks: Vec::new(),
                    });
                }
            }
            let gap: f64 = standing.iter().map(|cause| cause.excess_ns_per_s).sum();
            for cause in &mut standing {
                cause.share = cause.excess_ns_per_s / gap;
            }
            standing.sort_by(|a, b| b.excess_ns_per_s.total_cmp(&a.excess_ns_per_s));
            Ranked {
                name: (*name).clone(),
                seconds: fleet.units[*name].seconds,
                outlier: !standing.is_empty(),
                gap_ns_per_s: gap,
                max_z,
                causes: standing,
            }
        })
        .collect();
    ranking.sort_by(|a, b| {
        b.outlier
            .cmp(&a.outlier)
            .then_with(|| b.gap_ns_per_s.total_cmp(&a.gap_ns_per_s))
            .then_with(|| b.max_z.total_cmp(&a.max_z))
            .then_with(|| a.name.cmp(&b.name))
    });
    Ok(Analysis {
        by: by.name().to_string(),
        profiles: fleet.profiles,
        units: fleet.units.len(),
        threshold: options.threshold,
        min_excess_ns_per_s: options.min_excess_ns,
        ranking,
        fleet: causes,
    })
}

/// Reads the profiles of the first outliers again for the top stacks of their causes
/// that stand out.
pub fn add_stacks(
    analysis: &mut Analysis,
    fleet: &Fleet,
    files: &[PathBuf],
    by: &By,
    top: usize,
) -> Result<()> {
    if top == 0 {
        return Ok(());
    }
    // Unit -> cause -> stack (leaf first) -> ns, for the outliers' causes that stand out.
    type Stacks = HashMap<String, HashMap<Vec<String>, f64>>;
    let mut wanted: HashMap<String, (BTreeSet<String>, Stacks)> = HashMap::new();
    let mut inputs: BTreeSet<usize> = BTreeSet::new();
    for ranked in analysis.outliers().take(STACK_OUTLIERS) {
        let causes = ranked.causes.iter().map(|c| c.cause.clone()).collect();
        wanted.insert(ranked.name.clone(), (causes, HashMap::new()));
        inputs.extend(&fleet.units[&ranked.name].inputs);
    }
    // Each profile once, however many of the outliers it holds.
    for input in inputs {
        let profile = Profile::load(&files[input])?;
        let units = units_of(&profile, by);
        each_cause(&profile, by, &units, |unit, cause, _, part| {
            let Some((causes, stacks)) = wanted.get_mut(unit) else {
                return;
            };
            if !causes.contains(&cause) {
                return;
            }
            let frames: Vec<String> = profile
                .stack_frames(part.stack)
                .iter()
                .skip_while(|frame| crate::lock::is_lock_internal(&frame.name))
                .take(STACK_FRAMES)
                .map(|frame| frame.display())
                .collect();
            *stacks.entry(cause).or_default().entry(frames).or_default() += part.ns;
        });
    }
    for ranked in analysis.ranking.iter_mut().filter(|r| r.outlier) {
        let Some((_, mut stacks)) = wanted.remove(&ranked.name) else {
            continue;
        };
        let seconds = fleet.units[&ranked.name].seconds.max(1e-3);
        for cause in &mut ranked.causes {
            let Some(of_cause) = stacks.remove(&cause.cause) else {
                continue;
            };
            let mut list: Vec<TopStack> = of_cause
                .into_iter()
                .map(|(frames, ns)| TopStack {
                    ns_per_s: ns / seconds,
                    frames,
                })
                .collect();
            most_first_f64(
                &mut list,
                |stack| stack.ns_per_s,
                |a, b| a.frames.cmp(&b.frames),
            );
            list.truncate(top);
            cause.stacks = list;
        }
    }
    Ok(())
}

fn per_s(ns_per_s: f64) -> String {
    format!("{}/s", format_ns(ns_per_s.max(0.0).round() as u64))
}

fn z_text(z: f64) -> String {
    format!("{z:.1}")
}

/// The text report: the units that stand out with their causes, then the ranking.
pub fn text(analysis: &Analysis, top: usize) -> String {
    let outliers: Vec<&Ranked> = analysis.outliers().collect();
    let mut out = format!(
        "{} {}s in {} profiles: {} stand{} out (a cause more than {} uncertainties and {} \
         above the fleet's median)\n",
        analysis.units,
        analysis.by,
        analysis.profiles,
        outliers.len(),
        if outliers.len() == 1 { "s" } else { "" },
        analysis.threshold,
        per_s(analysis.min_excess_ns_per_s)
    );
    for ranked in &outliers {
        out.push_str(&format!(
            "\n{} ({:.1} s recorded): {} above the fleet's median, in {} cause{}\n",
            ranked.name,
            ranked.seconds,
            per_s(ranked.gap_ns_per_s),
            ranked.causes.len(),
            if ranked.causes.len() == 1 { "" } else { "s" }
        ));
        out.push_str(&format!(
            "  {:>12} {:>12} {:>12} {:>6} {:>7}  cause\n",
            "here", "median", "excess", "share", "z"
        ));
        for cause in &ranked.causes {
            out.push_str(&format!(
                "  {:>12} {:>12} {:>12} {:>5.0}% {:>7}  {}\n",
                per_s(cause.ns_per_s),
                per_s(cause.median_ns_per_s),
                format!("+{}", per_s(cause.excess_ns_per_s)),
                cause.share * 100.0,
                z_text(cause.z),
                cause.cause
            ));
            for stack in &cause.stacks {
                out.push_str(&format!(
                    "  {:>12}   {}\n",
                    per_s(stack.ns_per_s),
                    stack.frames.join(" <- ")
                ));
            }
        }
    }
    out.push_str(&format!(
        "\n{:>4}  {:<24} {:>12} {:>7}  stands out\n",
        "rank", analysis.by, "gap", "max z"
    ));
    let shown = if top == 0 { usize::MAX } else { top };
    for (rank, ranked) in analysis.ranking.iter().take(shown).enumerate() {
        out.push_str(&format!(
            "{:>4}  {:<24} {:>12} {:>7}  {}\n",
            rank + 1,
            ranked.name,
            per_s(ranked.gap_ns_per_s),
            z_text(ranked.max_z),
            if ranked.outlier { "yes" } else { "no" }
        ));
    }
    if analysis.ranking.len() > shown {
        out.push_str(&format!(
            "  ... {} more (--top 0: all)\n",
            analysis.ranking.len() - shown
        ));
    }
    out
}

/// The JSON report (the whole analysis).
pub fn json(analysis: &Analysis) -> serde_json::Result<String> {
    serde_json::to_string_pretty(analysis)
}

/// A unit's time per cause (`report --by job`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct UnitCauses {
    pub name: String,
    pub seconds: f64,
    /// Its largest causes, largest first: (cause, ns per second).
    pub causes: Vec<(String, f64)>,
}

/// Every unit with its `top` largest causes (0: all), the unit with the most time first.
pub fn units(fleet: &Fleet, top: usize) -> Vec<UnitCauses> {
    let mut out: Vec<UnitCauses> = fleet
        .units
        .iter()
        .map(|(name, unit)| {
            let seconds = unit.seconds.max(1e-3);
            let mut causes: Vec<(String, f64)> = unit
                .causes
                .iter()
                .map(|(cause, amount)| (cause.clone(), amount.ns / seconds))
                .collect();
            most_first_f64(&mut causes, |cause| cause.1, |a, b| a.0.cmp(&b.0));
            if top > 0 {
                causes.truncate(top);
            }
            UnitCauses {
                name: name.clone(),
                seconds: unit.seconds,
                causes,
            }
        })
        .collect();
    let total = |unit: &UnitCauses| unit.causes.iter().map(|c| c.1).sum::<f64>();
    most_first_f64(&mut out, total, |a, b| a.name.cmp(&b.name));
    out
}

/// The text of [`units`].
pub fn units_text(fleet: &Fleet, top: usize) -> String {
    let mut out = String::new();
    for unit in units(fleet, top) {
        out.push_str(&format!(
            "{} ({:.1} s recorded):
",
            unit.name, unit.seconds
        ));
        for (cause, ns_per_s) in &unit.causes {
            out.push_str(&format!("  {:>12}  {cause}\n", per_s(*ns_per_s)));
        }
    }
    out
}

/// The per-second folded stacks of one kind for each host of the profile, the root
/// frame (the process) without its host; only stacks in `only` when given.
fn host_stacks(
    profile: &Profile,
    kind: Kind,
    only: Option<&HashMap<String, f64>>,
    out: &mut HashMap<String, HashMap<String, f64>>,
) {
    let (index, _) = kind.view().flame_value();
    let merged = profile.is_merged();
    for sample in folded::samples(profile, kind) {
        let mut frames = sample.frames;
        let host = match merged {
            true => {
                let Some(root) = frames.first_mut() else {
                    continue;
                };
                let Some((host, comm)) = root.split_once(':') else {
                    continue;
                };
                let host = host.to_string();
                *root = comm.to_string();
                host
            }
            false => profile.host.clone(),
        };
        let stack = frames.join(";");
        if only.is_some_and(|only| !only.contains_key(&stack)) {
            continue;
        }
        let value = sample.values.get(index).copied().unwrap_or(0) as f64;
        *out.entry(host).or_default().entry(stack).or_default() += value;
    }
}

/// Differential folded lines of an outlier host against the fleet's median, for one
/// kind: each of the outlier's stacks, `stack MEDIAN OUTLIER` per second of run.
pub fn median_diff_lines(
    fleet: &Fleet,
    files: &[PathBuf],
    host: &str,
    kind: Kind,
) -> Result<Vec<String>> {
    let load = |path: &Path| Profile::load(path);
    let per_second = |values: &mut HashMap<String, f64>, seconds: f64| {
        values
            .values_mut()
            .for_each(|value| *value /= seconds.max(1e-3));
    };
    let unit = &fleet.units[host];
    let mut mine: HashMap<String, HashMap<String, f64>> = HashMap::new();
    for input in &unit.inputs {
        host_stacks(&load(&files[*input])?, kind, None, &mut mine);
    }
    let mut outlier = mine.remove(host).unwrap_or_default();
    per_second(&mut outlier, unit.seconds);
    let mut others: HashMap<String, HashMap<String, f64>> = HashMap::new();
    for file in files {
        host_stacks(&load(file)?, kind, Some(&outlier), &mut others);
    }
    let mut lines: Vec<String> = Vec::new();
    for (stack, value) in &outlier {
        let mut values: Vec<f64> = fleet
            .units
            .iter()
            .map(|(name, unit)| {
                let ns = others
                    .get(name)
                    .and_then(|s| s.get(stack))
                    .copied()
                    .unwrap_or(0.0);
                ns / unit.seconds.max(1e-3)
            })
            .collect();
        let middle = median(&mut values);
        lines.push(format!(
            "{stack} {} {}",
            middle.round() as u64,
            value.round() as u64
        ));
    }
    lines.sort();
    Ok(lines)
}

/// The HTML page: the ranking, a unit × cause heat map (each cell's colour is how far
/// it stands out), each outlier's causes with their stacks and, given, the first
/// outlier's differential flamegraph against the fleet's median.
pub fn html(
    analysis: &Analysis,
    fleet: &Fleet,
    flame: Option<(Kind, &[String])>,
    top: usize,
) -> Result<String> {
    let mut out = html::page_head(&format!(
        "lockpath outliers — {} {}s in {} profiles",
        analysis.units, analysis.by, analysis.profiles
    ));
    out.push_str(&format!(
        "<p>A cause stands out when it is more than {} uncertainties (the fleet's robust \
         spread and the unit's own counting noise) and {} above the fleet's median; {} \
         {}s do.</p>\n",
        analysis.threshold,
        esc(&per_s(analysis.min_excess_ns_per_s)),
        analysis.outliers().count(),
        analysis.by
    ));
    let shown = if top == 0 { usize::MAX } else { top };
    let rows: Vec<Vec<String>> = analysis
        .ranking
        .iter()
        .take(shown)
        .enumerate()
        .map(|(rank, r)| {
            vec![
                (rank + 1).to_string(),
                r.name.clone(),
                per_s(r.gap_ns_per_s),
                z_text(r.max_z),
                if r.outlier { "yes" } else { "no" }.to_string(),
                r.causes
                    .first()
                    .map(|c| c.cause.clone())
                    .unwrap_or_default(),
            ]
        })
        .collect();
    out.push_str("<h2>Ranking</h2>\n");
    out.push_str(&html::table(
        &[
            "rank",
            analysis.by.as_str(),
            "gap",
            "max z",
            "stands out",
            "first cause",
        ],
        &[true, false, true, true, false, false],
        &rows,
    ));
    out.push_str(&heat_map(analysis, fleet, shown));
    for ranked in analysis.outliers().take(shown) {
        out.push_str(&outlier_section(ranked));
    }
    if let Some((kind, lines)) = flame {
        if let Some(first) = analysis.outliers().next() {
            let view = kind.view();
            let title = format!(
                "{} against the fleet's median — {}",
                first.name,
                kind.name()
            );
            let svg = crate::export::formats::flamegraph::render_lines(
                lines,
                view,
                title,
                None,
                view.diff_flame_labels(),
            )?;
            out.push_str(&format!(
                "<h2>{} against the fleet's median ({}; red: more than the median)</h2>\n",
                esc(&first.name),
                kind.name()
            ));
            out.push_str(&html::flamegraph_frame(&svg, "differential flamegraph"));
        }
    }
    out.push_str(&html::page_end());
    Ok(out)
}

/// An outlier's causes that stand out, with their top stack.
fn outlier_section(ranked: &Ranked) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "<h2>{} — {} above the fleet's median</h2>\n",
        esc(&ranked.name),
        esc(&per_s(ranked.gap_ns_per_s))
    ));
    let rows: Vec<Vec<String>> = ranked
        .causes
        .iter()
        .map(|c| {
            let stack = c
                .stacks
                .first()
                .map(|s| s.frames.join(" ← "))
                .unwrap_or_default();
            vec![
                c.cause.clone(),
                per_s(c.ns_per_s),
                per_s(c.median_ns_per_s),
                per_s(c.excess_ns_per_s),
                format!("{:.0}%", c.share * 100.0),
                z_text(c.z),
                stack,
            ]
        })
        .collect();
    out.push_str(&html::table(
        &[
            "cause",
            "here",
            "median",
            "excess",
            "share",
            "z",
            "top stack",
        ],
        &[false, true, true, true, true, true, false],
        &rows,
    ));
    out
}

/// Units × causes: the outliers' causes and the fleet's largest, each cell the unit's
/// rate, coloured by its robust deviation above the median.
fn heat_map(analysis: &Analysis, fleet: &Fleet, shown: usize) -> String {
    let mut columns: Vec<&FleetCause> = Vec::new();
    let standing: BTreeSet<&str> = analysis
        .outliers()
        .flat_map(|r| r.causes.iter().map(|c| c.cause.as_str()))
        .collect();
    for cause in &analysis.fleet {
        if standing.contains(cause.cause.as_str()) || columns.len() < 8 {
            columns.push(cause);
        }
    }
    columns.truncate(24);
    let mut out = String::from(
        "<h2>Heat map (time per second; the redder, the further above the fleet's median)</h2>\n\
         <table class=\"heat\">\n<thead><tr><th></th>",
    );
    for cause in &columns {
        out.push_str(&format!("<th>{}</th>", esc(&cause.cause)));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for ranked in analysis.ranking.iter().take(shown) {
        let unit = &fleet.units[&ranked.name];
        out.push_str(&format!("<tr><td>{}</td>", esc(&ranked.name)));
        for cause in &columns {
            let amount = unit.causes.get(&cause.cause).copied().unwrap_or_default();
            let (rate, _, own) = amount.rate(unit.seconds);
            let z = (rate - cause.median_ns_per_s) / cause.spread_ns_per_s.hypot(own);
            let heat = (z / (2.0 * analysis.threshold)).clamp(0.0, 1.0);
            let other = (255.0 * (1.0 - heat)).round() as u8;
            out.push_str(&format!(
                "<td class=\"n\" style=\"background:rgb(255,{other},{other})\" title=\"z {}\">{}</td>",
                z_text(z),
                esc(&per_s(rate))
            ));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{LockRow, OffcpuRow, Process};

    /// A host's profile: one mutex storm of `wait_ms` per second on `f_pos_lock`, and
    /// `extra` (lock name, ms per second) on top.
    fn host(name: &str, wait_ms: u64, extra: Option<(&str, u64)>) -> Profile {
        let mut profile = Profile::new();
        profile.host = name.into();
        profile.duration_s = 2.0;
        profile.processes.push(Process {
            pid: 7,
            comm: "ior".into(),
            cgroup: Some(format!("/system.slice/slurmstepd.scope/job_{name}/step_0")),
            ..Default::default()
        });
        let lock = |lock: &str, ms: u64| LockRow {
            pid: 7,
            lock_name: lock.into(),
            flags: profiler_common::lock::LCB_F_MUTEX,
            count: 1000,
            total_ns: ms * 2_000_000,
            max_ns: ms * 20_000,
            ..Default::default()
        };
        profile.locks.push(lock("f_pos_lock", wait_ms));
        if let Some((name, ms)) = extra {
            profile.locks.push(lock(name, ms));
        }
        profile.offcpu.push(OffcpuRow {
            pid: 7,
            tid: 7,
            class: "lock".into(),
            count: 500,
            total_ns: wait_ms * 2_000_000,
            ..Default::default()
        });
        profile
    }

    fn fleet_of(profiles: &[Profile], by: &By) -> Fleet {
        let mut fleet = Fleet::default();
        for (index, profile) in profiles.iter().enumerate() {
            fleet.add(profile, index, by);
        }
        fleet
    }

    const OPTIONS: Options = Options {
        threshold: 3.5,
        min_excess_ns: 1e7,
    };

    #[test]
    fn the_host_with_an_extra_cause_stands_out_by_it() {
        let mut profiles: Vec<Profile> = (0..7)
            .map(|i| host(&format!("n{i}"), 400 + i * 10, None))
            .collect();
        profiles.push(host("n7", 410, Some(("i_rwsem", 300))));
        let fleet = fleet_of(&profiles, &By::Host);
        let analysis = analyze(&fleet, &By::Host, OPTIONS).expect("8 hosts");
        let outliers: Vec<&Ranked> = analysis.outliers().collect();
        assert_eq!(outliers.len(), 1, "{}", text(&analysis, 20));
        assert_eq!(outliers[0].name, "n7");
        let first = &outliers[0].causes[0];
        assert_eq!(first.cause, "lock mutex i_rwsem");
        assert!((first.excess_ns_per_s - 3e8).abs() < 1.0);
        assert!((first.share - 1.0).abs() < 1e-9);
        let page = html(&analysis, &fleet, None, 20).expect("html");
        assert!(page.contains("class=\"heat\""));
    }

    #[test]
    fn a_usual_spread_is_not_an_outlier_and_too_few_hosts_is_an_error() {
        // Rates 25% apart: within the spread floor.
        let profiles: Vec<Profile> = (0..8)
            .map(|i| host(&format!("n{i}"), 400 + (i % 2) * 100, None))
            .collect();
        let analysis = analyze(&fleet_of(&profiles, &By::Host), &By::Host, OPTIONS).expect("8");
        assert_eq!(analysis.outliers().count(), 0, "{}", text(&analysis, 20));
        // One long wait on one host: its rate is as uncertain as it is large.
        let mut profiles = profiles;
        let mut incident = host("n7", 400, Some(("rcu_state", 500)));
        incident.locks[1].count = 1;
        incident.locks[1].max_ns = incident.locks[1].total_ns;
        profiles[7] = incident;
        let analysis = analyze(&fleet_of(&profiles, &By::Host), &By::Host, OPTIONS).expect("8");
        assert_eq!(analysis.outliers().count(), 0, "{}", text(&analysis, 20));
        let error = analyze(&fleet_of(&profiles[..2], &By::Host), &By::Host, OPTIONS)
            .expect_err("two hosts");
        assert!(error.to_string().contains("at least 3"), "{error}");
    }

    #[test]
    fn jobs_are_units_across_hosts() {
        let profiles: Vec<Profile> = (0..4)
            .map(|i| host(&format!("{i}"), 100 + 200 * (i / 3), None))
            .collect();
        let by = By::Job(Jobs::new(&[]).expect("jobs"));
        let analysis = analyze(&fleet_of(&profiles, &by), &by, OPTIONS).expect("4 jobs");
        assert_eq!(analysis.by, "job");
        assert_eq!(analysis.ranking[0].name, "job 3");
        assert!(analysis.ranking[0].outlier);
    }
}
