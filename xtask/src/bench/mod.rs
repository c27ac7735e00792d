//! `cargo xtask bench`: lockpath's overhead beside the tools a user would pick instead,
//! measured in the same run on the same workloads, plus the eBPF programs' own cost per
//! event, kernel map memory, lockpath's RSS and the speed of `report` + `flamegraph` on a
//! profile of one million rows. `--soak` instead records for ten minutes and checks that
//! lockpath's memory stays flat. Not a test: nothing here asserts a timing.
//!
//! Every probe family is one entry of `FAMILIES` (its record flags, the workloads it is
//! aimed at, and its peers); a family appears in the tables when the lockpath under test
//! offers its flag, so families that land later are picked up by adding one entry.
//!
//! families.rs: the families and workloads; overhead.rs: lockpath and its peers on the
//! same workloads (and `--hold`'s cost in the lab guest); program_cost.rs: the eBPF
//! programs' own cost and the kernel memory; big_profile.rs: report + flamegraph of a
//! million rows; soak.rs: ten minutes of memory; readme.rs: the README's tables.

use std::{fmt::Write as _, fs, path::PathBuf, process::Command};

use anyhow::{anyhow, bail, Context as _, Result};

use crate::{build, util};

mod big_profile;
mod families;
mod overhead;
mod program_cost;
mod readme;
mod soak;

use big_profile::*;
use families::*;
use overhead::*;
use program_cost::*;
use readme::*;
use soak::*;

const USAGE: &str = "\
usage: cargo xtask bench [--runs N] [--seconds S] [--workloads a,b] [--families a,b]
                         [--no-peers] [--out FILE] [--soak [MINUTES]]
  --runs N         interleaved runs of every configuration (default 5, at least 5 advised)
  --seconds S      length of one workload run (default 2)
  --workloads      subset of: spinlock,rwsem,switch,cpu,io (default all)
  --families       subset of lockpath's probe families (default every one it offers);
                   `hold` is measured in the kernel lab's 6.1 guest (QEMU)
  --no-peers       skip bpftrace and perf
  --out FILE       Markdown output (default target/bench/bench.md)
  --readme         also put the tables into README.md (between the bench markers)
  --soak [MIN]     instead: record system-wide under load for MIN minutes (default 10)
                   and check that lockpath's memory stays flat";

struct Options {
    runs: usize,
    seconds: f64,
    workloads: Option<Vec<String>>,
    families: Option<Vec<String>>,
    peers: bool,
    out: Option<PathBuf>,
    readme: bool,
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
    let result = if let Some(minutes) = options.soak_minutes {
        soak(&bench, minutes)
    } else if hold_only {
        header(&options)
    } else {
        overhead_report(&bench, &options)
    };
    let _ = fs::remove_dir_all(&scratch);
    let host_markdown = result?;
    let hold_markdown = (options.soak_minutes.is_none()
        && wanted(options.families.as_deref(), "hold"))
    .then(|| {
        util::say("cost of --hold, in the kernel lab's 6.1 guest (QEMU)");
        hold_cost(&bench, options.runs).unwrap_or_else(|err| {
            util::say(format!("--hold cost not measured: {err:#}"));
            format!("\n### Cost of `--hold`\n\nNot measured: {err:#}\n")
        })
    });
    let markdown = host_markdown.clone() + hold_markdown.as_deref().unwrap_or("");
    print!("{markdown}");
    if let Some(dir) = out.parent() {
        fs::create_dir_all(dir)
            .with_context(|| format!("bench: cannot create {}", dir.display()))?;
    }
    fs::write(&out, &markdown).with_context(|| format!("bench: cannot write {}", out.display()))?;
    util::say(format!("table written to {}", out.display()));
    if options.readme && options.soak_minutes.is_none() {
        if !hold_only {
            // The README has its own "## Performance" heading above the markers.
            let body = host_markdown
                .strip_prefix("## Performance\n\n")
                .unwrap_or(&host_markdown);
            update_readme(README_START, README_END, body)?;
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

fn header(options: &Options) -> Result<String> {
    let date = util::capture(
        Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]),
        "bench: reading the date",
        "install coreutils",
    )?;
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
    let mut md = String::new();
    let _ = writeln!(md, "## Performance\n");
    let _ = writeln!(
        md,
        "`cargo xtask bench` on {} — {nproc} CPUs ({cpu}), Linux {kernel}, load average at \
         start {load}. {} interleaved runs of {} s per configuration; throughput is the \
         workload's own ops/s, overhead = 1 - median / median of the baseline.\n",
        date.trim(),
        options.runs,
        options.seconds
    );
    Ok(md)
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
