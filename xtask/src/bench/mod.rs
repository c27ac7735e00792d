//! `cargo xtask bench`: lockpath's overhead beside the tools a user would pick instead,
//! measured in the same run on the same workloads, plus the eBPF programs' own cost per
//! event, kernel map memory, lockpath's RSS and the speed of `report` + `flamegraph` on a
//! profile of one million rows. `--soak` instead records for ten minutes and checks that
//! lockpath's memory stays flat. Not a test: nothing here asserts a timing.
//!
//! Every probe family is one entry of `FAMILIES` (its record flags, the workloads it is
//! aimed at, and its peers); a family appears in the tables when the lockpath under test
//! offers its flag, so families that land later are picked up by adding one entry.

use std::{fs, path::PathBuf};

use anyhow::{bail, Context as _, Result};

use crate::{build, util};

mod big_profile;
mod families;
mod fleet;
mod hold_cost;
mod lock;
mod options;
mod overhead;
mod program_cost;
mod readme;
mod soak;

use families::wanted;
use hold_cost::hold_cost;
pub use options::Options;
use overhead::overhead_report;
use readme::{header, update_readme, HOLD_README_END, HOLD_README_START, README_END, README_START};
use soak::soak;

/// Everything a measurement needs: binaries, a scratch directory.
struct Bench {
    lockpath: PathBuf,
    bin_dir: PathBuf,
    scratch: PathBuf,
    seconds: f64,
}

pub fn bench(options: Options) -> Result<()> {
    options.check()?;
    if !util::is_root()? {
        bail!("bench: needs root (eBPF, perf, loop mounts): run `sudo cargo xtask bench`");
    }
    if options.lock_only {
        lock::check_tools()?;
    }
    let artifacts = build::build(build::Profile::Release)?;
    if !options.big_only {
        util::run(
            util::host_cargo().args(["build", "--release", "-p", "lockpath-tests", "--bins"]),
            "bench: building the workloads",
            "fix the compile errors above in tests/src/bin/",
        )?;
    }
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
        && !options.big_only
        && (options.lock_only
            || (!hold_only
                && options.peers
                && wanted(options.families.as_deref(), "lock")
                && wanted(options.workloads.as_deref(), "spinlock")));
    let result = if let Some(minutes) = options.soak_minutes {
        soak(&bench, minutes)
    } else if options.big_only {
        util::say("report + flamegraph of a synthetic profile with 1,000,000 rows");
        let big = big_profile::big_profile_table(&big_profile::big_profile_timing(&bench));
        util::say("outliers on a generated fleet of 2,000 profiles");
        Ok(big + &fleet::fleet_table(&fleet::fleet_timing(&bench)))
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
        && !options.big_only
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
    if options.readme && options.soak_minutes.is_none() && !options.big_only {
        if !hold_only && !options.lock_only {
            // docs/performance.md has its own "# Performance" heading above the markers.
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

fn format_count(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.2}M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.1}k", value / 1e3)
    } else {
        format!("{value:.1}")
    }
}

/// Appends the header of a Markdown table: the `titles` (separated by `|`) and the
/// alignment row, one letter of `align` a column: `l` left, `r` right (numbers).
fn table_header(md: &mut String, titles: &str, align: &str) {
    let titles: Vec<&str> = titles.split('|').map(str::trim).collect();
    debug_assert_eq!(titles.len(), align.len(), "one alignment letter a column");
    md.push_str(&format!("| {} |\n|", titles.join(" | ")));
    for letter in align.chars() {
        md.push_str(if letter == 'r' { "---:|" } else { "---|" });
    }
    md.push('\n');
}

const MIB: f64 = 1024.0 * 1024.0;

#[cfg(test)]
mod tests {
    use super::table_header;

    #[test]
    fn table_header_aligns_each_column_by_its_letter() {
        let mut md = String::from("### Title\n\n");
        table_header(&mut md, "step | JSON: wall time | met", "lrl");
        assert_eq!(
            md,
            "### Title\n\n| step | JSON: wall time | met |\n|---|---:|---|\n"
        );
    }
}
