//! lockpath: probes (profiler-ebpf) -> collector (record, probes/, symbolize/) ->
//! profile and exporters (the `lockpath-profile` crate, re-exported here).

pub mod agent;
pub mod btf;
pub mod cgroups;
pub mod cli;
pub mod ebpf_object;
pub mod groups;
pub mod metrics;
pub mod probes;
pub mod record;
pub mod rotate;
pub mod symbolize;
pub mod timeline;
pub mod tracefs;

/// The profile library, under the names this crate always used.
pub use lockpath_profile::{export, histogram, kind, lock, profile, units, waitclass};

use anyhow::{Context, Result};

use cli::{Cli, Command};
use profile::Profile;

/// Runs one command; returns the process exit code.
pub fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Record(args) => record_or_agent(*args),
        Command::Stuck(args) => {
            let cli = <Cli as clap::Parser>::try_parse_from(args.record_args())
                .context("lockpath stuck: cannot form its record arguments")?;
            match cli.command {
                Command::Record(record) => record_or_agent(*record),
                _ => anyhow::bail!("lockpath stuck: its arguments are not a recording"),
            }
        }
        Command::Report(args) => report(args),
        Command::Flamegraph(args) => flamegraph(args),
        Command::Export(args) => export(args),
        Command::Diff(args) => diff(args),
        Command::Convert(args) => convert(args),
        Command::Debug(cli::DebugCommand::BlockedOn { tids }) => {
            probes::blocked_on::debug_blocked_on(&tids)
        }
        Command::Merge(args) => merge(args),
        Command::Outliers(args) => Ok(groups::run_outliers(args)),
    }
}

/// `record`: one recording, or the always-on agent with `--rotate`.
fn record_or_agent(args: cli::RecordArgs) -> Result<i32> {
    match args.rotate {
        Some(_) => agent::run(args),
        None => record::run(args),
    }
}

/// `report`: the tables of a profile, as text, CSV, JSON or one HTML page.
fn report(args: cli::ReportArgs) -> Result<i32> {
    let filter = lockpath_profile::filter::LockFilter {
        locks: args.lock.clone(),
        types: args.lock_type.clone(),
        callers: args.caller.clone(),
    };
    filter.check()?;
    let mut profile = Profile::load(&args.file)?;
    if args.timeline && profile.timeline.is_none() {
        anyhow::bail!(
            "{} has no timeline: record it with --interval DUR (e.g. --interval 1s)",
            args.file.display()
        );
    }
    filter.apply(&mut profile);
    if args.blockers {
        return groups::report_blockers(&args, &profile);
    }
    let by = match args.by {
        cli::ReportBy::Locks(by) => by,
        cli::ReportBy::File => return report_by_file(&args, &profile),
        cli::ReportBy::Job => return groups::report_by_job(&args, &profile),
    };
    let text = match args.format {
        cli::ReportFormat::Csv => export::formats::csv::render(&profile, by, args.top)?,
        cli::ReportFormat::Text if args.timeline => {
            export::formats::report::text(&profile, by, args.top)
                + &lockpath_profile::timeline::text(&profile, args.top)
        }
        cli::ReportFormat::Text => export::formats::report::text(&profile, by, args.top),
        cli::ReportFormat::Json => {
            let mut json = export::formats::report::json(&profile, by, args.top)
                .context("cannot render the JSON report")?;
            json.push('\n');
            json
        }
        cli::ReportFormat::Html => {
            let page = export::formats::html::render(&profile)?;
            let output = args
                .output
                .clone()
                .unwrap_or_else(|| args.file.with_extension("html"));
            profile::write_atomically(&output, page.as_bytes())?;
            eprintln!("lockpath: report written to {}", output.display());
            return Ok(0);
        }
    };
    write_output(args.output.as_deref(), text.as_bytes())?;
    Ok(0)
}

/// `report --by file`: the file view's tables (text) or groups (JSON) alone.
fn report_by_file(args: &cli::ReportArgs, profile: &Profile) -> Result<i32> {
    if !export::has_kind(profile, lockpath_profile::kind::Kind::File) {
        anyhow::bail!(
            "{} has no block IO or file calls by file: record with --io (and --file-calls \
             for the calls)",
            args.file.display()
        );
    }
    let text = match args.format {
        cli::ReportFormat::Text => export::tables::io::files_table(profile, args.top),
        cli::ReportFormat::Json => {
            serde_json::to_string_pretty(&export::tables::io::file_groups(profile))
                .context("cannot render the JSON report")?
                + "\n"
        }
        _ => anyhow::bail!("report --by file writes text or JSON (--format text|json)"),
    };
    write_output(
        args.output.as_deref(),
        text.trim_start_matches('\n').as_bytes(),
    )?;
    Ok(0)
}

/// `flamegraph`: one SVG of a kind of a profile.
fn flamegraph(args: cli::FlamegraphArgs) -> Result<i32> {
    let profile = Profile::load(&args.file)?;
    let output = args
        .output
        .unwrap_or_else(|| args.file.with_extension("svg"));
    export::formats::flamegraph::write_svg(&profile, args.kind, &output)?;
    eprintln!("lockpath: flamegraph written to {}", output.display());
    Ok(0)
}

/// `export`: a profile in a format other tools read (folded, JSON tree, pprof).
fn export(args: cli::ExportArgs) -> Result<i32> {
    let profile = Profile::load(&args.file)?;
    let bytes = match args.format {
        cli::ExportFormat::Folded => {
            export::formats::folded::render(&profile, args.kind).into_bytes()
        }
        cli::ExportFormat::Json => export::formats::json::render(&profile, args.kind)
            .context("cannot render the JSON export")?
            .into_bytes(),
        cli::ExportFormat::Pprof => {
            use std::io::IsTerminal;
            if args.output.is_none() && std::io::stdout().is_terminal() {
                anyhow::bail!(
                    "pprof is binary: write it to a file with -o FILE.pb.gz, or redirect the output"
                );
            }
            export::formats::pprof::render(&profile, args.kind)?
        }
    };
    write_output(args.output.as_deref(), &bytes)?;
    Ok(0)
}

/// `diff`: what grew or shrank from one profile to another, with the differential
/// flamegraph.
fn diff(args: cli::DiffArgs) -> Result<i32> {
    let base = Profile::load(&args.base)?;
    let new = Profile::load(&args.new)?;
    let text = match args.format {
        cli::DiffFormat::Html => {
            let page = export::formats::html::render_diff(&base, &new, args.kind)?;
            let output = args
                .output
                .clone()
                .unwrap_or_else(|| std::path::PathBuf::from("diff.html"));
            profile::write_atomically(&output, page.as_bytes())?;
            eprintln!("lockpath: diff page written to {}", output.display());
            return Ok(0);
        }
        cli::DiffFormat::Text => export::operations::diff::text(&base, &new, args.kind, args.top),
        cli::DiffFormat::Json => {
            let mut json = export::operations::diff::json(&base, &new, args.kind)
                .context("cannot render the JSON diff")?;
            json.push('\n');
            json
        }
    };
    if let Some(output) = &args.output {
        let svg = export::formats::flamegraph::render_diff_svg(&base, &new, args.kind)?;
        profile::write_atomically(output, &svg)?;
    }
    print_stdout(&text)?;
    if let Some(output) = &args.output {
        eprintln!(
            "lockpath: differential flamegraph written to {}",
            output.display()
        );
    }
    Ok(0)
}

/// `convert`: a profile rewritten, JSON or compact by the output's extension.
fn convert(args: cli::ConvertArgs) -> Result<i32> {
    let profile = Profile::load(&args.input)?;
    profile
        .save(&args.output)
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    let encoding = match args.output.extension() {
        Some(extension) if extension == lockpath_profile::binary::EXTENSION => "compact",
        _ => "JSON",
    };
    eprintln!(
        "lockpath: {} written to {} ({encoding})",
        args.input.display(),
        args.output.display()
    );
    Ok(0)
}

/// `merge`: profiles of several hosts or periods as one.
fn merge(args: cli::MergeArgs) -> Result<i32> {
    let inputs = args
        .inputs
        .iter()
        .map(|path| Profile::load(path))
        .collect::<Result<Vec<_>>>()?;
    let merged = export::operations::merge::merge(inputs, std::env::args().collect())?;
    merged.save(&args.output).with_context(|| {
        format!(
            "cannot write the merged profile to {}",
            args.output.display()
        )
    })?;
    eprintln!(
        "lockpath: {} profiles of {} merged into {}",
        args.inputs.len(),
        merged.host,
        args.output.display()
    );
    Ok(0)
}

/// Writes to the file (atomically) or to stdout.
pub(crate) fn write_output(path: Option<&std::path::Path>, bytes: &[u8]) -> Result<()> {
    match path {
        Some(path) => profile::write_atomically(path, bytes),
        None => print_stdout_bytes(bytes),
    }
}

fn print_stdout(text: &str) -> Result<()> {
    print_stdout_bytes(text.as_bytes())
}

/// Prints to stdout; a closed pipe (`| head`) is not an error worth a message.
fn print_stdout_bytes(bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to standard output"),
    }
}
