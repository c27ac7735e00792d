//! Speed of `report` + `flamegraph` on a synthetic profile of one million rows.

use std::{
    fmt::Write as _,
    fs,
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::Result;

use super::{program_cost::wait_usage, Bench, MIB};

pub(super) struct BigProfile {
    pub(super) rows: usize,
    pub(super) file_mib: f64,
    /// (wall, CPU) seconds.
    pub(super) report_s: Result<(f64, f64), String>,
    pub(super) flamegraph_s: Result<(f64, f64), String>,
}

pub(super) fn big_profile_timing(bench: &Bench) -> BigProfile {
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

pub(super) fn big_profile_table(big: &BigProfile) -> String {
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
