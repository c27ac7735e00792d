//! `cargo xtask bench`'s command line.

use std::path::PathBuf;

use anyhow::{bail, Result};

/// Overhead against bpftrace and perf, per-event cost, memory, report speed (root).
#[derive(Debug, clap::Args)]
pub struct Options {
    /// Interleaved runs of every configuration (at least 5 advised)
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub(super) runs: usize,
    /// Length of one workload run, in seconds
    #[arg(long, default_value_t = 2.0, value_name = "S")]
    pub(super) seconds: f64,
    /// Subset of: spinlock,rwsem,switch,cpu,io (default all)
    #[arg(long, value_delimiter = ',', value_name = "a,b")]
    pub(super) workloads: Option<Vec<String>>,
    /// Subset of lockpath's probe families (default every one it offers); `hold` is
    /// measured in the kernel lab's 6.1 guest (QEMU)
    #[arg(long, value_delimiter = ',', value_name = "a,b")]
    pub(super) families: Option<Vec<String>>,
    /// Skip bpftrace and perf
    #[arg(long = "no-peers", action = clap::ArgAction::SetFalse)]
    pub(super) peers: bool,
    /// Markdown output (default target/bench/bench.md)
    #[arg(long, value_name = "FILE")]
    pub(super) out: Option<PathBuf>,
    /// Also put the tables into docs/performance.md (between the bench markers)
    #[arg(long)]
    pub(super) readme: bool,
    /// Only the lock probe beside bpftrace and perf lock on lock-storm (per-event BPF
    /// cost, spin-wait accuracy, slowdown), a few minutes; a full run includes it when
    /// the lock family and peers are measured
    #[arg(long = "lock-cost")]
    pub(super) lock_only: bool,
    /// Instead: record system-wide under load for MIN minutes (default 10) and check
    /// that lockpath's memory stays flat
    #[arg(long = "soak", value_name = "MIN", num_args = 0..=1, default_missing_value = "10")]
    pub(super) soak_minutes: Option<f64>,
    /// Instead: only the read side: `report` + `flamegraph` of a 1,000,000-row profile,
    /// JSON and compact, and `outliers` on 2,000 generated profiles (a few minutes;
    /// printed and written to --out, not docs/performance.md)
    #[arg(long = "big-profile")]
    pub(super) big_only: bool,
}

impl Options {
    /// What clap cannot say: runs and seconds above zero.
    pub(super) fn check(&self) -> Result<()> {
        if self.runs == 0 || self.seconds.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            bail!("bench: --runs and --seconds must be positive");
        }
        Ok(())
    }
}
