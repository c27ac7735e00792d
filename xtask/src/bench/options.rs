//! `cargo xtask bench`'s command line.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context as _, Result};

pub(super) const USAGE: &str = "\
usage: cargo xtask bench [--runs N] [--seconds S] [--workloads a,b] [--families a,b]
                         [--no-peers] [--out FILE] [--readme] [--lock-cost]
                         [--soak [MINUTES]] [--big-profile]
  --runs N         interleaved runs of every configuration (default 5, at least 5 advised)
  --seconds S      length of one workload run (default 2)
  --workloads      subset of: spinlock,rwsem,switch,cpu,io (default all)
  --families       subset of lockpath's probe families (default every one it offers);
                   `hold` is measured in the kernel lab's 6.1 guest (QEMU)
  --no-peers       skip bpftrace and perf
  --out FILE       Markdown output (default target/bench/bench.md)
  --readme         also put the tables into docs/performance.md (between the bench markers)
  --lock-cost      only the lock probe beside bpftrace and perf lock on lock-storm
                   (per-event BPF cost, spin-wait accuracy, slowdown), a few minutes;
                   a full run includes it when the lock family and peers are measured
  --soak [MIN]     instead: record system-wide under load for MIN minutes (default 10)
                   and check that lockpath's memory stays flat
  --big-profile    instead: only the read side: `report` + `flamegraph` of a 1,000,000-row
                   profile, JSON and compact, and `outliers` on 2,000 generated profiles (a
                   few minutes; printed and written to --out, not docs/performance.md)";

pub(super) struct Options {
    pub(super) runs: usize,
    pub(super) seconds: f64,
    pub(super) workloads: Option<Vec<String>>,
    pub(super) families: Option<Vec<String>>,
    pub(super) peers: bool,
    pub(super) out: Option<PathBuf>,
    pub(super) readme: bool,
    pub(super) lock_only: bool,
    pub(super) soak_minutes: Option<f64>,
    pub(super) big_only: bool,
}

pub(super) fn parse(args: &[std::ffi::OsString]) -> Result<Options> {
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
        big_only: false,
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
            "--big-profile" => options.big_only = true,
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
