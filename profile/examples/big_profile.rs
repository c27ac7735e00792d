//! `cargo run --release -p lockpath-profile --example big_profile -- [ROWS] [PATH]`: writes
//! the synthetic profile of `cargo xtask bench` (ROWS lock rows, default 1,000,000) as
//! JSON and in the compact encoding (PATH with `.lpb`), and times loading each, the text
//! report and the lock flamegraph, in this process.

use std::{path::PathBuf, time::Instant};

use lockpath_profile::{export, synthetic, GroupBy, Kind, Profile};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let rows: usize = match args.next() {
        Some(rows) => rows.parse()?,
        None => 1_000_000,
    };
    let path = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("lockpath-big-profile.json"));
    synthetic::write_lock_profile(&path, rows)?;
    let mib = |path: &PathBuf| -> anyhow::Result<f64> {
        Ok(std::fs::metadata(path)?.len() as f64 / (1024.0 * 1024.0))
    };
    let compact = path.with_extension(lockpath_profile::binary::EXTENSION);
    Profile::load(&path)?.save(&compact)?;
    println!(
        "{rows} rows: {} ({:.0} MiB), {} ({:.0} MiB)",
        path.display(),
        mib(&path)?,
        compact.display(),
        mib(&compact)?
    );
    let start = Instant::now();
    let profile = Profile::load(&path)?;
    let load_json = start.elapsed().as_secs_f64();
    drop(profile);
    let start = Instant::now();
    let profile = Profile::load(&compact)?;
    let load_compact = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let text = export::formats::report::text(&profile, GroupBy::Lock, 20);
    let report = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let svg = export::formats::flamegraph::render_svg(&profile, Kind::Lock)?;
    let flamegraph = start.elapsed().as_secs_f64();
    println!(
        "load: JSON {load_json:.3} s, compact {load_compact:.3} s; report {report:.3} s ({} bytes), flamegraph {flamegraph:.3} s ({} bytes)",
        text.len(),
        svg.len()
    );
    println!(
        "report + flamegraph as two commands: JSON {:.3} s, compact {:.3} s",
        2.0 * load_json + report + flamegraph,
        2.0 * load_compact + report + flamegraph
    );
    Ok(())
}
