//! `cargo xtask bench`: lockpath's overhead beside the tools a user would pick instead,
//! measured in the same run on the same workloads, plus the eBPF programs' own cost per
//! event, kernel map memory, lockpath's RSS and the speed of `report` + `flamegraph` on a
//! profile of one million rows. `--soak` instead records for ten minutes and checks that
//! lockpath's memory stays flat. Not a test: nothing here asserts a timing.
//!
//! Every probe family is one entry of `FAMILIES` (its record flags, the workloads it is
//! aimed at, and its peers); a family appears in the tables when the lockpath under test
//! offers its flag, so families that land later are picked up by adding one entry.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context as _, Result};

use crate::{build, util};

mod lock;

const USAGE: &str = "\
usage: cargo xtask bench [--runs N] [--seconds S] [--workloads a,b] [--families a,b]
                         [--no-peers] [--out FILE] [--readme] [--lock-cost]
                         [--soak [MINUTES]]
  --runs N         interleaved runs of every configuration (default 5, at least 5 advised)
  --seconds S      length of one workload run (default 2)
  --workloads      subset of: spinlock,rwsem,switch,cpu,io (default all)
  --families       subset of lockpath's probe families (default every one it offers);
                   `hold` is measured in the kernel lab's 6.1 guest (QEMU)
  --no-peers       skip bpftrace and perf
  --out FILE       Markdown output (default target/bench/bench.md)
  --readme         also put the tables into README.md (between the bench markers)
  --lock-cost      only the lock probe beside bpftrace and perf lock on lock-storm
                   (per-event BPF cost, spin-wait accuracy, slowdown), a few minutes;
                   a full run includes it when the lock family and peers are measured
  --soak [MIN]     instead: record system-wide under load for MIN minutes (default 10)
                   and check that lockpath's memory stays flat";

/// A probe family as the benchmark sees it.
struct Family {
    name: &'static str,
    /// `lockpath record` flags that select it; the first one is looked for in `--help`.
    flags: &'static [&'static str],
    /// Workloads the family is aimed at: peers run there, and the per-event cost is
    /// measured on the first.
    aimed_at: &'static [&'static str],
    /// A bpftrace script doing the same aggregation; `cpid` is the started command.
    bpftrace: Option<&'static str>,
    /// A perf command that records the same thing: args before `-o FILE -- CMD`.
    perf: Option<&'static [&'static str]>,
    /// Target: at most this much slower than the baseline on `aimed_at[0]`.
    target_overhead: Option<f64>,
}

const BPFTRACE_LOCK: &str = r#"
tracepoint:lock:contention_begin /pid == cpid/ { @start[tid] = nsecs; @lock[tid] = args->lock_addr; @flags[tid] = args->flags; }
tracepoint:lock:contention_end /@start[tid]/ {
  $wait = nsecs - @start[tid];
  @wait[kstack, pid, @lock[tid], @flags[tid]] = stats($wait);
  @max[kstack, pid, @lock[tid], @flags[tid]] = max($wait);
  delete(@start[tid]); delete(@lock[tid]); delete(@flags[tid]);
}
"#;

const BPFTRACE_OFFCPU: &str = r#"
tracepoint:sched:sched_switch {
  if (pid == cpid) { @start[tid] = nsecs; @stack[tid] = kstack; }
  $since = @start[args->next_pid];
  if ($since) {
    @offcpu[@stack[args->next_pid], args->next_pid] = stats(nsecs - $since);
    delete(@start[args->next_pid]); delete(@stack[args->next_pid]);
  }
}
"#;

const BPFTRACE_CPU: &str = r#"
profile:hz:99 /pid == cpid/ { @samples[kstack, ustack, pid] = count(); }
"#;

const BPFTRACE_IO: &str = r#"
tracepoint:block:block_rq_issue { @start[args->dev, args->sector] = nsecs; @stack[args->dev, args->sector] = kstack; }
tracepoint:block:block_rq_complete /@start[args->dev, args->sector]/ {
  @io[@stack[args->dev, args->sector], args->dev] = hist(nsecs - @start[args->dev, args->sector]);
  delete(@start[args->dev, args->sector]); delete(@stack[args->dev, args->sector]);
}
"#;

const FAMILIES: &[Family] = &[
    Family {
        name: "lock",
        flags: &["--lock"],
        aimed_at: &["spinlock", "rwsem"],
        bpftrace: Some(BPFTRACE_LOCK),
        perf: Some(&["lock", "record"]),
        target_overhead: Some(0.10),
    },
    Family {
        name: "offcpu",
        flags: &["--offcpu"],
        aimed_at: &["switch"],
        bpftrace: Some(BPFTRACE_OFFCPU),
        perf: Some(&["sched", "record"]),
        target_overhead: Some(0.10),
    },
    Family {
        name: "cpu",
        flags: &["--cpu"],
        aimed_at: &["cpu"],
        bpftrace: Some(BPFTRACE_CPU),
        perf: Some(&["record", "-F", "99", "-g"]),
        target_overhead: Some(0.01),
    },
    Family {
        // On-CPU sampling with frame-pointer user stacks only (no stack copies): the
        // `cpu` row above copies 64 KiB of user stack per user-mode sample (the default).
        name: "cpu-fp",
        flags: &["--cpu", "--user-stack-bytes", "0"],
        aimed_at: &["cpu"],
        bpftrace: None,
        perf: None,
        target_overhead: Some(0.01),
    },
    Family {
        // No workload here speaks FUSE: this row is the cost of the armed probes and
        // of lockpath itself; a FUSE file system workload would be its aimed-at one.
        name: "rpc",
        flags: &["--rpc", "fuse"],
        aimed_at: &[],
        bpftrace: None,
        perf: None,
        target_overhead: None,
    },
    Family {
        name: "io",
        flags: &["--io"],
        aimed_at: &["io"],
        bpftrace: Some(BPFTRACE_IO),
        perf: None,
        target_overhead: None,
    },
];

/// A workload binary of the `lockpath-tests` crate and its arguments (without
/// `--seconds`); each prints `ops=N`.
struct Workload {
    name: &'static str,
    what: &'static str,
    binary: &'static str,
    args: Vec<String>,
}

fn workloads(io_dir: Option<&Path>) -> Vec<Workload> {
    let strings = |args: &[&str]| args.iter().map(|arg| arg.to_string()).collect();
    let mut list = vec![
        Workload {
            name: "spinlock",
            what: "4 threads create+close pipes",
            binary: "lock-storm",
            args: strings(&["--mode", "pipe", "--threads", "4"]),
        },
        Workload {
            name: "rwsem",
            what: "4 threads mmap+munmap",
            binary: "lock-storm",
            args: strings(&["--mode", "mmap", "--threads", "4"]),
        },
        Workload {
            name: "switch",
            what: "pipe ping-pong, 2 threads",
            binary: "ping-pong",
            args: strings(&["--pairs", "1"]),
        },
        Workload {
            name: "cpu",
            what: "2 threads xorshift, no syscalls",
            binary: "cpu-spin",
            args: strings(&["--threads", "2"]),
        },
    ];
    if let Some(dir) = io_dir {
        list.push(Workload {
            name: "io",
            what: "create+write+unlink in a 20k-file dir, ext4 on loop",
            binary: "io-create",
            args: vec![
                "--dir".into(),
                dir.display().to_string(),
                "--threads".into(),
                "2".into(),
            ],
        });
    }
    list
}

struct Options {
    runs: usize,
    seconds: f64,
    workloads: Option<Vec<String>>,
    families: Option<Vec<String>>,
    peers: bool,
    out: Option<PathBuf>,
    readme: bool,
    lock_only: bool,
    soak_minutes: Option<f64>,
}

fn parse(args: &[std::ffi::OsString]) -> Result<Options> {
    let mut options = Options {
        runs: 5,
        seconds: 2.0,
        workloads: None,
        families: None,
        peers: true,
        out: None,
        readme: false,
        lock_only: false,
        soak_minutes: None,
    };
    let args: Vec<String> = args
        .iter()
        .map(|arg| arg.to_str().map(str::to_string))
        .collect::<Option<_>>()
        .context("bench: arguments must be UTF-8")?;
    let mut index = 0;
    let value = |index: &mut usize, flag: &str| -> Result<String> {
        *index += 1;
        args.get(*index)
            .cloned()
            .ok_or_else(|| anyhow!("bench: {flag} needs a value\n{USAGE}"))
    };
    let list = |text: String| Some(text.split(',').map(str::to_string).collect());
    while index < args.len() {
        match args[index].as_str() {
            "--runs" => {
                options.runs = value(&mut index, "--runs")?
                    .parse()
                    .context("bench: --runs takes a whole number")?
            }
            "--seconds" => {
                options.seconds = value(&mut index, "--seconds")?
                    .parse()
                    .context("bench: --seconds takes a number")?
            }
            "--workloads" => options.workloads = list(value(&mut index, "--workloads")?),
            "--families" => options.families = list(value(&mut index, "--families")?),
            "--no-peers" => options.peers = false,
            "--readme" => options.readme = true,
            "--lock-cost" => options.lock_only = true,
            "--out" => options.out = Some(value(&mut index, "--out")?.into()),
            "--soak" => {
                let minutes = args
                    .get(index + 1)
                    .and_then(|next| next.parse::<f64>().ok());
                if minutes.is_some() {
                    index += 1;
                }
                options.soak_minutes = Some(minutes.unwrap_or(10.0));
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("bench: unknown argument `{other}`\n{USAGE}"),
        }
        index += 1;
    }
    if options.runs == 0 || options.seconds.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
        bail!("bench: --runs and --seconds must be positive");
    }
    Ok(options)
}

/// Everything a measurement needs: binaries, a scratch directory.
struct Bench {
    lockpath: PathBuf,
    bin_dir: PathBuf,
    scratch: PathBuf,
    seconds: f64,
}

pub fn bench(args: Vec<std::ffi::OsString>) -> Result<()> {
    let options = parse(&args)?;
    if !util::is_root()? {
        bail!("bench: needs root (eBPF, perf, loop mounts): run `sudo cargo xtask bench`");
    }
    if options.lock_only {
        lock::check_tools()?;
    }
    let artifacts = build::build(build::Profile::Release)?;
    util::run(
        util::host_cargo().args(["build", "--release", "-p", "lockpath-tests", "--bins"]),
        "bench: building the workloads",
        "fix the compile errors above in tests/src/bin/",
    )?;
    let target = util::target_dir()?;
    let out = options
        .out
        .clone()
        .unwrap_or_else(|| match options.soak_minutes {
            Some(_) => target.join("bench/soak.md"),
            None => target.join("bench/bench.md"),
        });
    let scratch = std::env::temp_dir().join(format!("lockpath-bench-{}", std::process::id()));
    fs::create_dir_all(&scratch)
        .with_context(|| format!("bench: cannot create {}", scratch.display()))?;
    let bench = Bench {
        lockpath: artifacts.lockpath,
        bin_dir: target.join("release"),
        scratch: scratch.clone(),
        seconds: options.seconds,
    };
    // `--families hold` alone: only the lab measurement of --hold.
    let hold_only = options
        .families
        .as_deref()
        .is_some_and(|families| families.iter().all(|family| family == "hold"));
    // The lock probe beside bpftrace and perf lock: alone with --lock-cost, else with the
    // lock family on the spinlock workload (lock-storm) when peers are measured.
    let lock_part = options.soak_minutes.is_none()
        && (options.lock_only
            || (!hold_only
                && options.peers
                && wanted(options.families.as_deref(), "lock")
                && wanted(options.workloads.as_deref(), "spinlock")));
    let result = if let Some(minutes) = options.soak_minutes {
        soak(&bench, minutes)
    } else if options.lock_only {
        Ok(String::new())
    } else if hold_only {
        header(&options)
    } else {
        overhead_report(&bench, &options)
    };
    let lock_markdown = match (&result, lock_part) {
        (Ok(_), true) => {
            util::say("lock probe beside bpftrace and perf lock on lock-storm");
            Some(lock::section(&bench, options.runs))
        }
        _ => None,
    };
    let _ = fs::remove_dir_all(&scratch);
    let host_markdown = result?;
    let hold_markdown = (options.soak_minutes.is_none()
        && !options.lock_only
        && wanted(options.families.as_deref(), "hold"))
    .then(|| {
        util::say("cost of --hold, in the kernel lab's 6.1 guest (QEMU)");
        hold_cost(&bench, options.runs).unwrap_or_else(|err| {
            util::say(format!("--hold cost not measured: {err:#}"));
            format!("\n### Cost of `--hold`\n\nNot measured: {err:#}\n")
        })
    });
    let markdown = host_markdown.clone()
        + lock_markdown.as_deref().unwrap_or("")
        + hold_markdown.as_deref().unwrap_or("");
    print!("{markdown}");
    if let Some(dir) = out.parent() {
        fs::create_dir_all(dir)
            .with_context(|| format!("bench: cannot create {}", dir.display()))?;
    }
    fs::write(&out, &markdown).with_context(|| format!("bench: cannot write {}", out.display()))?;
    util::say(format!("table written to {}", out.display()));
    if options.readme && options.soak_minutes.is_none() {
        if !hold_only && !options.lock_only {
            // The README has its own "## Performance" heading above the markers.
            let body = host_markdown
                .strip_prefix("## Performance\n\n")
                .unwrap_or(&host_markdown);
            update_readme(README_START, README_END, body)?;
        }
        if let Some(lock) = &lock_markdown {
            update_readme(lock::README_START, lock::README_END, lock)?;
        }
        if let Some(hold) = &hold_markdown {
            update_readme(
                HOLD_README_START,
                HOLD_README_END,
                hold.trim_start_matches('\n'),
            )?;
        }
    }
    Ok(())
}

const README_START: &str = "<!-- bench:start (cargo xtask bench --readme) -->";
const README_END: &str = "<!-- bench:end -->";
const HOLD_README_START: &str =
    "<!-- bench-hold:start (cargo xtask bench --families hold --readme) -->";
const HOLD_README_END: &str = "<!-- bench-hold:end -->";

/// Replaces a block of the README's performance section (between the markers; appended
/// if absent).
fn update_readme(start_marker: &str, end_marker: &str, body: &str) -> Result<()> {
    let path = util::workspace_root().join("README.md");
    let readme = fs::read_to_string(&path)
        .with_context(|| format!("bench: cannot read {}", path.display()))?;
    let section = format!("{start_marker}\n{body}{end_marker}\n");
    let updated = match (readme.find(start_marker), readme.find(end_marker)) {
        (Some(start), Some(end)) if end > start => format!(
            "{}{section}{}",
            &readme[..start],
            readme[end + end_marker.len()..].trim_start_matches('\n')
        ),
        _ => format!(
            "{}\n{section}",
            readme.trim_end_matches('\n').to_string() + "\n"
        ),
    };
    fs::write(&path, updated).with_context(|| format!("bench: cannot write {}", path.display()))?;
    util::say(format!("performance section of {} updated", path.display()));
    Ok(())
}

fn overhead_report(bench: &Bench, options: &Options) -> Result<String> {
    let families = available_families(&bench.lockpath, options.families.as_deref())?;
    util::say(format!(
        "families offered by lockpath: {}",
        families
            .iter()
            .map(|f| f.name)
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let io_fs = match wanted(options.workloads.as_deref(), "io") {
        true => match LoopExt4::mount(&bench.scratch) {
            Ok(fs) => Some(fs),
            Err(err) => {
                util::say(format!("io workload skipped: {err:#}"));
                None
            }
        },
        false => None,
    };
    let io_dir = io_fs.as_ref().map(|fs| fs.mount_point.join("big"));
    let workloads: Vec<Workload> = workloads(io_dir.as_deref())
        .into_iter()
        .filter(|workload| wanted(options.workloads.as_deref(), workload.name))
        .collect();

    let mut md = header(options)?;
    let mut overheads: Vec<OverheadRow> = Vec::new();
    for workload in &workloads {
        let configs = configurations(workload, &families, options.peers);
        let results = measure_interleaved(bench, workload, &configs, options.runs)?;
        overheads.extend(results);
    }
    md.push_str(&overhead_table(&workloads, &overheads));
    drop(io_fs);

    let mut costs = Vec::new();
    for family in &families {
        let workload = family
            .aimed_at
            .iter()
            .find_map(|name| workloads.iter().find(|w| w.name == *name))
            .or_else(|| workloads.first());
        let Some(workload) = workload else { continue };
        util::say(format!(
            "per-event cost, map memory and RSS of `{}` on {}",
            family.name, workload.name
        ));
        match program_costs(bench, family, workload) {
            Ok(cost) => costs.push(cost),
            Err(err) => util::say(format!("{}: cost measurement failed: {err:#}", family.name)),
        }
    }
    md.push_str(&cost_tables(&costs));

    util::say("report + flamegraph of a synthetic profile with 1,000,000 rows");
    let big = big_profile_timing(bench);
    md.push_str(&big_profile_table(&big));
    md.push_str(&targets_table(&families, &overheads, &costs, &big));
    Ok(md)
}

/// Configurations of tests/vm/bench/hold-cost.sh, in table order: (key, what it is).
const HOLD_CONFIGS: &[(&str, &str)] = &[
    ("pipe/none", "pipe round (write + read 1 byte): no lockpath"),
    (
        "pipe/lock",
        "pipe round: `--lock` (contention tracepoints), for comparison",
    ),
    (
        "pipe/hold-mutex-fentry",
        "pipe round: `--hold mutex:X`, fexit/fentry",
    ),
    (
        "pipe/hold-mutex-kprobe",
        "pipe round: `--hold mutex:X`, kprobes",
    ),
    ("mmap/none", "mmap + munmap of a page: no lockpath"),
    ("mmap/lock", "mmap + munmap: `--lock`, for comparison"),
    (
        "mmap/hold-rwsem-fentry",
        "mmap + munmap: `--hold rwsem:X`, fexit/fentry",
    ),
    (
        "mmap/hold-rwsem-kprobe",
        "mmap + munmap: `--hold rwsem:X`, kprobes",
    ),
];

/// The cost of `--hold` on every other lock of the system: this host's kernel has
/// neither fentry nor kprobes, so it is measured in the lab's 6.1 guest, where the
/// workloads time themselves (ns per operation) with and without lockpath attached.
fn hold_cost(bench: &Bench, runs: usize) -> Result<String> {
    let binaries = crate::vm::GuestBinaries {
        lockpath: bench.lockpath.clone(),
        workloads: crate::test::build_workloads()?,
    };
    let (guest, values) = crate::vm::bench(&binaries, "hold-cost", runs)?;
    let mut md = format!(
        "\n### Cost of `--hold` ({guest}; {runs} interleaved runs, median)\n\n\
         X is an address no lock has: every lock operation of the type pays the hook and one \
         compare, as every other lock of a production system does. TCG emulates the CPU, so \
         the nanoseconds are many times a real machine's; the ratios are the result.\n\n\
         | operation and lockpath | ns per operation | vs no lockpath |\n|---|---:|---:|\n"
    );
    for (key, what) in HOLD_CONFIGS {
        let Some(ns) = values.get(*key).and_then(|runs| median(runs)) else {
            md.push_str(&format!("| {what} | not measured | |\n"));
            continue;
        };
        let base_key = format!("{}/none", key.split('/').next().unwrap_or(""));
        let ratio = values
            .get(&base_key)
            .and_then(|runs| median(runs))
            .filter(|base| *base > 0.0)
            .map(|base| format!("{:+.1}%", (ns / base - 1.0) * 100.0))
            .unwrap_or_default();
        md.push_str(&format!("| {what} | {ns:.0} | {ratio} |\n"));
    }
    Ok(md)
}

fn wanted(filter: Option<&[String]>, name: &str) -> bool {
    filter.is_none_or(|names| names.iter().any(|n| n == name))
}

/// Families whose flag appears in `lockpath record --help`.
fn available_families(lockpath: &Path, filter: Option<&[String]>) -> Result<Vec<&'static Family>> {
    let help = util::capture(
        Command::new(lockpath).args(["record", "--help"]),
        "bench: asking lockpath for its probe families",
        "build lockpath with `cargo xtask build`",
    )?;
    let offered = |flag: &str| {
        help.split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '[')
            .any(|word| word == flag)
    };
    let families: Vec<&Family> = FAMILIES
        .iter()
        .filter(|family| offered(family.flags[0]) && wanted(filter, family.name))
        .collect();
    if families.is_empty() {
        bail!("bench: lockpath offers none of the requested probe families");
    }
    Ok(families)
}

/// One way of running a workload.
#[derive(Clone)]
enum Config {
    Baseline,
    Lockpath(&'static Family),
    Bpftrace(&'static Family),
    Perf(&'static Family),
}

impl Config {
    fn label(&self) -> String {
        match self {
            Config::Baseline => "baseline (alone)".into(),
            Config::Lockpath(family) => format!("lockpath {}", family.flags.join(" ")),
            Config::Bpftrace(family) => format!("bpftrace ({})", family.name),
            Config::Perf(family) => format!("perf {}", family.perf.unwrap_or(&[]).join(" ")),
        }
    }
}

fn configurations(workload: &Workload, families: &[&'static Family], peers: bool) -> Vec<Config> {
    let mut configs = vec![Config::Baseline];
    for family in families {
        configs.push(Config::Lockpath(family));
    }
    if peers {
        for family in families {
            if !family.aimed_at.contains(&workload.name) {
                continue;
            }
            if family.bpftrace.is_some() && util::find_in_path("bpftrace").is_some() {
                configs.push(Config::Bpftrace(family));
            }
            if family.perf.is_some() && util::find_in_path("perf").is_some() {
                configs.push(Config::Perf(family));
            }
        }
    }
    configs
}

struct OverheadRow {
    workload: &'static str,
    config: String,
    family: Option<&'static str>,
    is_lockpath: bool,
    ops_per_s: Vec<f64>,
    error: Option<String>,
}

impl OverheadRow {
    fn median(&self) -> Option<f64> {
        median(&self.ops_per_s)
    }
}

fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let mid = sorted.len() / 2;
    Some(if sorted.len().is_multiple_of(2) {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    })
}

/// Runs every configuration `runs` times, interleaved (A B C A B C ...), so that a
/// change of machine load hits all of them alike.
fn measure_interleaved(
    bench: &Bench,
    workload: &Workload,
    configs: &[Config],
    runs: usize,
) -> Result<Vec<OverheadRow>> {
    let mut rows: Vec<OverheadRow> = configs
        .iter()
        .map(|config| OverheadRow {
            workload: workload.name,
            config: config.label(),
            family: match config {
                Config::Baseline => None,
                Config::Lockpath(f) | Config::Bpftrace(f) | Config::Perf(f) => Some(f.name),
            },
            is_lockpath: matches!(config, Config::Lockpath(_)),
            ops_per_s: Vec::new(),
            error: None,
        })
        .collect();
    for round in 0..runs {
        util::say(format!(
            "{}: round {}/{runs} ({} configurations)",
            workload.name,
            round + 1,
            configs.len()
        ));
        for (config, row) in configs.iter().zip(rows.iter_mut()) {
            if row.error.is_some() {
                continue;
            }
            match run_once(bench, workload, config) {
                Ok(ops) => row.ops_per_s.push(ops as f64 / bench.seconds),
                Err(err) => {
                    util::say(format!("{} / {}: {err:#}", workload.name, row.config));
                    row.error = Some(format!("{err:#}"));
                }
            }
        }
    }
    Ok(rows)
}

fn workload_command(bench: &Bench, workload: &Workload) -> Vec<String> {
    let mut command = vec![bench.bin_dir.join(workload.binary).display().to_string()];
    command.extend(workload.args.iter().cloned());
    command.push("--seconds".into());
    command.push(bench.seconds.to_string());
    command
}

/// One run; returns the workload's own `ops=N`.
fn run_once(bench: &Bench, workload: &Workload, config: &Config) -> Result<u64> {
    let command = workload_command(bench, workload);
    let output_file = bench.scratch.join("run.out");
    let mut cmd = match config {
        Config::Baseline => {
            let mut cmd = Command::new(&command[0]);
            cmd.args(&command[1..]);
            cmd
        }
        Config::Lockpath(family) => {
            let mut cmd = Command::new(&bench.lockpath);
            cmd.arg("record")
                .args(family.flags)
                .arg("-o")
                .arg(&output_file)
                .arg("--top")
                .arg("1")
                .arg("--")
                .args(&command);
            cmd
        }
        Config::Bpftrace(family) => {
            let mut cmd = Command::new("bpftrace");
            cmd.arg("-e")
                .arg(family.bpftrace.unwrap_or_default())
                .arg("-o")
                .arg(&output_file)
                .arg("-c")
                .arg(command.join(" "));
            cmd
        }
        Config::Perf(family) => {
            let mut cmd = Command::new("perf");
            cmd.args(family.perf.unwrap_or_default())
                .arg("-o")
                .arg(&output_file)
                .arg("--")
                .args(&command);
            cmd
        }
    };
    let output = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot start {}", util::describe(&cmd)))?;
    let _ = fs::remove_file(&output_file);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let ops = stdout
        .lines()
        .find_map(|line| line.trim().strip_prefix("ops="))
        .and_then(|ops| ops.parse().ok());
    match ops {
        Some(ops) if output.status.success() => Ok(ops),
        _ => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let reason = stderr
                .lines()
                .rev()
                .find(|line| !line.trim().is_empty())
                .unwrap_or("no error output");
            bail!("failed ({}): {reason}", output.status)
        }
    }
}

fn header(options: &Options) -> Result<String> {
    let mut md = String::new();
    let _ = writeln!(md, "## Performance\n");
    let _ = writeln!(
        md,
        "{} Throughput is the workload's own ops/s, overhead = 1 - median / median of the \
         baseline.\n",
        run_context(options.runs, options.seconds)
    );
    Ok(md)
}

/// When and where the benchmark ran, and how many runs of what length.
fn run_context(runs: usize, seconds: f64) -> String {
    let date = util::capture(
        Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]),
        "bench: reading the date",
        "install coreutils",
    )
    .map(|date| date.trim().to_string())
    .unwrap_or_else(|_| "an unknown date".into());
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_string())
        .unwrap_or_default();
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load = fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    format!(
        "`cargo xtask bench` on {date} — {nproc} CPUs ({cpu}), Linux {kernel}, load average at \
         start {load}. {runs} interleaved runs of {seconds} s per configuration."
    )
}

fn overhead_table(workloads: &[Workload], rows: &[OverheadRow]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "### Overhead\n");
    let _ = writeln!(
        md,
        "| workload | run under | median ops/s | spread (min-max) | vs baseline | overhead |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|");
    for workload in workloads {
        let group: Vec<&OverheadRow> = rows
            .iter()
            .filter(|r| r.workload == workload.name)
            .collect();
        let baseline = group.first().and_then(|row| row.median());
        for row in group {
            let name = format!("{} ({})", workload.name, workload.what);
            if let Some(error) = &row.error {
                let short: String = error.chars().take(80).collect();
                let _ = writeln!(md, "| {name} | {} | failed: {short} | | | |", row.config);
                continue;
            }
            let Some(median) = row.median() else { continue };
            let min = row.ops_per_s.iter().copied().fold(f64::INFINITY, f64::min);
            let max = row.ops_per_s.iter().copied().fold(0.0, f64::max);
            let (ratio, overhead) = match baseline {
                Some(base) if base > 0.0 => (
                    format!("{:.3}", median / base),
                    format!("{:+.1}%", (1.0 - median / base) * 100.0),
                ),
                _ => (String::new(), String::new()),
            };
            let _ = writeln!(
                md,
                "| {name} | {} | {} | {:.0}% | {ratio} | {overhead} |",
                row.config,
                format_count(median),
                (max - min) / median * 100.0
            );
        }
    }
    md.push('\n');
    md
}

fn format_count(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.2}M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.1}k", value / 1e3)
    } else {
        format!("{value:.1}")
    }
}

struct ProgramCost {
    name: String,
    run_cnt: u64,
    run_time_ns: u64,
}

struct FamilyCost {
    family: &'static str,
    workload: &'static str,
    programs: Vec<ProgramCost>,
    map_memlock: u64,
    map_count: usize,
    max_rss_kib: u64,
}

/// Restores `kernel.bpf_stats_enabled` to its value before the benchmark.
struct BpfStats {
    before: String,
}

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    fn enable() -> Result<BpfStats> {
        let before = fs::read_to_string(BPF_STATS)
            .with_context(|| format!("cannot read {BPF_STATS}"))?
            .trim()
            .to_string();
        fs::write(BPF_STATS, "1").with_context(|| format!("cannot write {BPF_STATS}"))?;
        Ok(BpfStats { before })
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        if let Err(err) = fs::write(BPF_STATS, &self.before) {
            util::say(format!(
                "cannot restore {BPF_STATS} to {}: {err}",
                self.before
            ));
        }
    }
}

/// Records system-wide at default sizes while the workload runs; reads the programs'
/// run counters, the maps' memlock, and lockpath's peak RSS when it exits.
fn program_costs(
    bench: &Bench,
    family: &'static Family,
    workload: &Workload,
) -> Result<FamilyCost> {
    let stats = BpfStats::enable()?;
    let profile = bench.scratch.join("cost.json");
    let mut child = Command::new(&bench.lockpath)
        .arg("record")
        .args(family.flags)
        .args(["-a", "--top", "1", "-o"])
        .arg(&profile)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start lockpath")?;
    let pid = child.id();
    let loaded = wait_for_programs(pid);
    let measured = loaded.and_then(|()| {
        // Let every attach finish before the workload starts.
        std::thread::sleep(Duration::from_millis(300));
        let (programs, maps) = held_objects(pid);
        if programs.is_empty() {
            bail!("lockpath holds no program");
        }
        let map_memlock = maps.values().sum();
        let command = workload_command(bench, workload);
        util::capture(
            Command::new(&command[0]).args(&command[1..]),
            "bench: workload",
            "see the workload's error",
        )?;
        let costs = bpftool_costs(&programs)?;
        Ok((costs, map_memlock, maps.len()))
    });
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let max_rss_kib = wait_rusage(pid)?;
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        use std::io::Read as _;
        let _ = pipe.read_to_string(&mut stderr);
    }
    let _ = fs::remove_file(&profile);
    drop(stats);
    let (programs, map_memlock, map_count) =
        measured.with_context(|| format!("lockpath said: {}", stderr.trim()))?;
    Ok(FamilyCost {
        family: family.name,
        workload: workload.name,
        programs,
        map_memlock,
        map_count,
        max_rss_kib,
    })
}

fn wait_for_programs(pid: u32) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while held_objects(pid).0.is_empty() {
        if Instant::now() > deadline {
            bail!("lockpath loaded no program within 30 s");
        }
        if !Path::new(&format!("/proc/{pid}")).exists() {
            bail!("lockpath exited before loading its programs");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The numeric fields of each of a process's `/proc/PID/fdinfo` entries (`prog_id`,
/// `run_time_ns`, `map_id`, `memlock`, ...), one map per file descriptor.
pub(crate) fn fdinfo_fields(pid: u32) -> Vec<BTreeMap<String, u64>> {
    let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| fs::read_to_string(entry.path()).ok())
        .map(|info| {
            info.lines()
                .filter_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    Some((name.trim().to_string(), value.trim().parse().ok()?))
                })
                .collect()
        })
        .collect()
}

/// Program ids and map ids (with their memlock bytes) that a process holds.
fn held_objects(pid: u32) -> (Vec<u64>, BTreeMap<u64, u64>) {
    let mut programs = Vec::new();
    let mut maps = BTreeMap::new();
    for fields in fdinfo_fields(pid) {
        if let Some(&id) = fields.get("prog_id") {
            if !programs.contains(&id) {
                programs.push(id);
            }
        }
        if let (Some(&id), Some(&memlock)) = (fields.get("map_id"), fields.get("memlock")) {
            maps.insert(id, memlock);
        }
    }
    (programs, maps)
}

fn bpftool_costs(ids: &[u64]) -> Result<Vec<ProgramCost>> {
    let json = util::capture(
        Command::new("bpftool").args(["-j", "prog", "show"]),
        "bench: bpftool prog show",
        "install bpftool",
    )?;
    let programs: serde_json::Value =
        serde_json::from_str(&json).context("bpftool printed invalid JSON")?;
    // Program names stop at 15 characters; the raw tracepoint a link attaches to says more.
    let links = util::capture(
        Command::new("bpftool").args(["-j", "link", "show"]),
        "bench: bpftool link show",
        "install bpftool",
    )
    .ok()
    .and_then(|json| serde_json::from_str::<serde_json::Value>(&json).ok())
    .unwrap_or_default();
    let attached_to = |id: u64| {
        links
            .as_array()
            .into_iter()
            .flatten()
            .find(|link| link["prog_id"].as_u64() == Some(id))
            .and_then(|link| link["tp_name"].as_str().map(str::to_string))
    };
    let mut costs = Vec::new();
    for program in programs.as_array().into_iter().flatten() {
        let Some(id) = program["id"].as_u64() else {
            continue;
        };
        if !ids.contains(&id) {
            continue;
        }
        let name = program["name"].as_str().unwrap_or("?");
        costs.push(ProgramCost {
            name: match attached_to(id) {
                Some(tracepoint) => format!("{name} ({tracepoint})"),
                None => name.to_string(),
            },
            run_cnt: program["run_cnt"].as_u64().unwrap_or(0),
            run_time_ns: program["run_time_ns"].as_u64().unwrap_or(0),
        });
    }
    costs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(costs)
}

/// Waits for a child and returns its peak RSS (KiB) from the kernel's rusage.
fn wait_rusage(pid: u32) -> Result<u64> {
    Ok(wait_usage(pid)?.max_rss_kib)
}

struct Usage {
    max_rss_kib: u64,
    cpu_s: f64,
    success: bool,
}

/// Waits for a child; its peak RSS and CPU time (user + system) from wait4.
fn wait_usage(pid: u32) -> Result<Usage> {
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid out-parameter for wait4.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child with valid out-pointers.
    let rc = unsafe { libc::wait4(pid as i32, &mut status, 0, &mut usage) };
    if rc < 0 {
        bail!("wait4 failed: {}", std::io::Error::last_os_error());
    }
    let seconds = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    Ok(Usage {
        max_rss_kib: usage.ru_maxrss as u64,
        cpu_s: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        success: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
    })
}

fn cost_tables(costs: &[FamilyCost]) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "### eBPF programs' own cost (kernel.bpf_stats_enabled=1)\n"
    );
    let _ = writeln!(
        md,
        "| family | workload | program | runs | total | per event |"
    );
    let _ = writeln!(md, "|---|---|---|---:|---:|---:|");
    for cost in costs {
        for program in &cost.programs {
            let per_event = if program.run_cnt > 0 {
                format!(
                    "{:.0} ns",
                    program.run_time_ns as f64 / program.run_cnt as f64
                )
            } else {
                "-".into()
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {:.1} ms | {per_event} |",
                cost.family,
                cost.workload,
                program.name,
                program.run_cnt,
                program.run_time_ns as f64 / 1e6
            );
        }
    }
    let _ = writeln!(md, "\n### Memory (system-wide recording, default sizes)\n");
    let _ = writeln!(
        md,
        "| family | kernel maps | map memory (memlock) | lockpath max RSS |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|");
    for cost in costs {
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} MiB | {:.1} MiB |",
            cost.family,
            cost.map_count,
            cost.map_memlock as f64 / MIB,
            cost.max_rss_kib as f64 / 1024.0
        );
    }
    md.push('\n');
    md
}

const MIB: f64 = 1024.0 * 1024.0;

struct BigProfile {
    rows: usize,
    file_mib: f64,
    /// (wall, CPU) seconds.
    report_s: Result<(f64, f64), String>,
    flamegraph_s: Result<(f64, f64), String>,
}

fn big_profile_timing(bench: &Bench) -> BigProfile {
    const ROWS: usize = 1_000_000;
    let path = bench.scratch.join("big.json");
    let svg = bench.scratch.join("big.svg");
    let written = lockpath_profile::synthetic::write_lock_profile(&path, ROWS);
    let file_mib = fs::metadata(&path).map_or(0.0, |m| m.len() as f64 / MIB);
    // Wall time, and CPU time (which the other builds on a busy machine do not inflate).
    let time = |args: &[&std::ffi::OsStr]| -> Result<(f64, f64), String> {
        written.as_ref().map_err(|err| format!("{err:#}"))?;
        let start = Instant::now();
        let child = Command::new(&bench.lockpath)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|err| err.to_string())?;
        let usage = wait_usage(child.id()).map_err(|err| format!("{err:#}"))?;
        if !usage.success {
            return Err(format!("lockpath {:?} failed", args));
        }
        Ok((start.elapsed().as_secs_f64(), usage.cpu_s))
    };
    let report_s = time(&["report".as_ref(), path.as_os_str()]);
    let flamegraph_s = time(&[
        "flamegraph".as_ref(),
        path.as_os_str(),
        "-o".as_ref(),
        svg.as_os_str(),
    ]);
    let _ = fs::remove_file(&path);
    let _ = fs::remove_file(&svg);
    BigProfile {
        rows: ROWS,
        file_mib,
        report_s,
        flamegraph_s,
    }
}

fn big_profile_table(big: &BigProfile) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "### report + flamegraph of {} rows ({:.0} MiB profile)\n",
        big.rows, big.file_mib
    );
    let _ = writeln!(md, "| step | wall time | CPU time |");
    let _ = writeln!(md, "|---|---:|---:|");
    let show = |r: &Result<(f64, f64), String>| match r {
        Ok((wall, cpu)) => format!("{wall:.2} s | {cpu:.2} s"),
        Err(e) => format!("failed: {} |", e.chars().take(80).collect::<String>()),
    };
    let _ = writeln!(md, "| lockpath report | {} |", show(&big.report_s));
    let _ = writeln!(md, "| lockpath flamegraph | {} |", show(&big.flamegraph_s));
    if let (Ok(a), Ok(b)) = (&big.report_s, &big.flamegraph_s) {
        let _ = writeln!(md, "| both | {:.2} s | {:.2} s |", a.0 + b.0, a.1 + b.1);
    }
    md.push('\n');
    md
}

fn targets_table(
    families: &[&'static Family],
    overheads: &[OverheadRow],
    costs: &[FamilyCost],
    big: &BigProfile,
) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "### Targets\n");
    let _ = writeln!(md, "| target | measured | met |");
    let _ = writeln!(md, "|---|---:|---|");
    let verdict = |ok: bool| if ok { "yes" } else { "**no**" };
    for family in families {
        let (Some(limit), Some(workload)) = (family.target_overhead, family.aimed_at.first())
        else {
            continue;
        };
        let baseline = overheads
            .iter()
            .find(|r| r.workload == *workload && r.family.is_none())
            .and_then(OverheadRow::median);
        let ours = overheads
            .iter()
            .find(|r| r.workload == *workload && r.is_lockpath && r.family == Some(family.name))
            .and_then(OverheadRow::median);
        if let (Some(base), Some(ours)) = (baseline, ours) {
            let overhead = 1.0 - ours / base;
            let _ = writeln!(
                md,
                "| {} probe on {workload}: overhead <= {:.0}% | {:+.1}% | {} |",
                family.name,
                limit * 100.0,
                overhead * 100.0,
                verdict(overhead <= limit)
            );
        }
    }
    if let Some(worst) = costs.iter().max_by_key(|c| c.map_memlock) {
        let mib = worst.map_memlock as f64 / MIB;
        let _ = writeln!(
            md,
            "| kernel map memory at defaults <= 64 MiB | {mib:.1} MiB ({}) | {} |",
            worst.family,
            verdict(mib <= 64.0)
        );
    }
    if let Some(worst) = costs.iter().max_by_key(|c| c.max_rss_kib) {
        let mib = worst.max_rss_kib as f64 / 1024.0;
        let _ = writeln!(
            md,
            "| lockpath RSS <= 100 MiB | {mib:.1} MiB ({}) | {} |",
            worst.family,
            verdict(mib <= 100.0)
        );
    }
    if let (Ok(a), Ok(b)) = (&big.report_s, &big.flamegraph_s) {
        let _ = writeln!(
            md,
            "| report + flamegraph of 1M rows < 2 s | {:.2} s wall, {:.2} s CPU | {} |",
            a.0 + b.0,
            a.1 + b.1,
            verdict(a.0 + b.0 < 2.0)
        );
    }
    md.push('\n');
    md
}

/// An ext4 file system on a loop device, mounted in a unique directory; unmounted and
/// deleted on drop.
struct LoopExt4 {
    image: PathBuf,
    mount_point: PathBuf,
}

impl LoopExt4 {
    fn mount(scratch: &Path) -> Result<LoopExt4> {
        let image = scratch.join("ext4.img");
        let mount_point = scratch.join("mnt");
        fs::create_dir_all(&mount_point)?;
        let file = fs::File::create(&image)?;
        file.set_len(512 * 1024 * 1024)?;
        drop(file);
        util::capture(
            Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image),
            "bench: mkfs.ext4",
            "install e2fsprogs",
        )?;
        util::capture(
            Command::new("mount")
                .args(["-o", "loop"])
                .arg(&image)
                .arg(&mount_point),
            "bench: mounting the ext4 image",
            "the io workload needs loop devices (modprobe loop)",
        )?;
        Ok(LoopExt4 { image, mount_point })
    }
}

impl Drop for LoopExt4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount_point).status();
        let _ = fs::remove_file(&self.image);
    }
}

/// `--soak`: records system-wide with every family for `minutes` under a lock storm and a
/// ping-pong, sampling lockpath's RSS and its maps' memlock every 10 s.
fn soak(bench: &Bench, minutes: f64) -> Result<String> {
    let families = available_families(&bench.lockpath, None)?;
    let profile = bench.scratch.join("soak.json");
    let mut record = Command::new(&bench.lockpath);
    record.arg("record");
    for family in &families {
        record.args(family.flags);
    }
    let mut child = record
        .args(["-a", "--top", "1", "-o"])
        .arg(&profile)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start lockpath")?;
    let pid = child.id();
    wait_for_programs(pid)?;
    let total = Duration::from_secs_f64(minutes * 60.0);
    let storm = Command::new(bench.bin_dir.join("lock-storm"))
        .args(["--mode", "both", "--threads", "4", "--seconds"])
        .arg(total.as_secs_f64().to_string())
        .stdout(Stdio::null())
        .spawn();
    let pong = Command::new(bench.bin_dir.join("ping-pong"))
        .args(["--seconds"])
        .arg(total.as_secs_f64().to_string())
        .stdout(Stdio::null())
        .spawn();
    let start = Instant::now();
    let mut samples: Vec<(f64, u64, u64)> = Vec::new();
    while start.elapsed() < total {
        let rss = vm_kib(pid, "VmRSS:");
        let memlock = held_objects(pid).1.values().sum::<u64>();
        samples.push((start.elapsed().as_secs_f64(), rss, memlock));
        util::say(format!(
            "soak {:.0}/{:.0} s: RSS {rss} KiB, maps {:.1} MiB",
            start.elapsed().as_secs_f64(),
            total.as_secs_f64(),
            memlock as f64 / MIB
        ));
        std::thread::sleep(Duration::from_secs(10).min(total.saturating_sub(start.elapsed())));
    }
    for workload in [storm, pong].into_iter().flatten() {
        let _ = workload.wait_with_output();
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let max_rss_kib = wait_rusage(pid)?;
    let _ = child.stdout.take();
    let profile_ok = fs::metadata(&profile).is_ok_and(|m| m.len() > 0);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## Soak: {minutes} min system-wide, all families, under load\n"
    );
    let _ = writeln!(md, "| t (s) | lockpath RSS | map memory |");
    let _ = writeln!(md, "|---:|---:|---:|");
    for (t, rss, memlock) in &samples {
        let _ = writeln!(
            md,
            "| {t:.0} | {:.1} MiB | {:.1} MiB |",
            *rss as f64 / 1024.0,
            *memlock as f64 / MIB
        );
    }
    // Flat: once settled (maps fill, symbol tables load: the first minute, or the first
    // sixth of a short run), RSS grows < 10%.
    let settle_s = (total.as_secs_f64() / 6.0).min(60.0);
    let settled: Vec<u64> = samples
        .iter()
        .filter(|s| s.0 >= settle_s)
        .map(|s| s.1)
        .collect();
    let growth = match (settled.first(), settled.last()) {
        (Some(&first), Some(&last)) if first > 0 => (last as f64 - first as f64) / first as f64,
        _ => 0.0,
    };
    let _ = writeln!(
        md,
        "\nRSS growth after the first {settle_s:.0} s: {:+.1}% ({}); peak RSS {:.1} MiB (includes the final drain); profile written: {}\n",
        growth * 100.0,
        if growth < 0.10 { "flat" } else { "**growing**" },
        max_rss_kib as f64 / 1024.0,
        if profile_ok { "yes" } else { "**no**" }
    );
    Ok(md)
}

fn vm_kib(pid: u32, field: &str) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}
