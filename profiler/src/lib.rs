//! lockpath: probes (profiler-ebpf) -> collector (record, probes/, symbolize/) ->
//! profile (profile.rs) -> exporters (export/).

pub mod btf;
pub mod cli;
pub mod export;
pub mod probes;
pub mod profile;
pub mod record;
pub mod symbolize;
pub mod target;
pub mod tracefs;
pub mod units;

use anyhow::{Context, Result};

use cli::{Cli, Command};
use profile::Profile;

/// Runs one command; returns the process exit code.
pub fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Record(args) => record::run(args),
        Command::Report(args) => {
            let profile = Profile::load(&args.file)?;
            let text = match args.format {
                cli::ReportFormat::Text => {
                    let mut text = export::report::summary_header(&profile);
                    text.push_str(&export::report::lock_table(&profile, args.by, args.top));
                    text.push_str(&export::report::losses(&profile));
                    text
                }
                cli::ReportFormat::Json => {
                    let mut json = export::report::json(&profile, args.by, args.top)
                        .context("cannot render the JSON report")?;
                    json.push('\n');
                    json
                }
            };
            print_stdout(&text)?;
            Ok(0)
        }
        Command::Flamegraph(args) => {
            let profile = Profile::load(&args.file)?;
            let output = args
                .output
                .unwrap_or_else(|| args.file.with_extension("svg"));
            export::flamegraph::write_svg(&profile, args.kind, &output)?;
            eprintln!("lockpath: flamegraph written to {}", output.display());
            Ok(0)
        }
        Command::Export(args) => {
            let profile = Profile::load(&args.file)?;
            let text = match args.format {
                cli::ExportFormat::Folded => export::folded::render(&profile, args.kind),
            };
            match args.output {
                Some(path) => profile::write_atomically(&path, text.as_bytes())?,
                None => print_stdout(&text)?,
            }
            Ok(0)
        }
    }
}

/// Prints to stdout; a closed pipe (`| head`) is not an error worth a message.
fn print_stdout(text: &str) -> Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to standard output"),
    }
}
