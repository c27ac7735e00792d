//! The commands on groups of processes (hosts, jobs, cgroups): `outliers`, `report
//! --by job` and `report --blockers`, from the profile crate's analyses.

use std::path::PathBuf;

use anyhow::{Context, Result};
use lockpath_profile::{
    export::{
        operations::outliers::{self, By, Options},
        tables::blockers::{self, Group},
    },
    jobs::Jobs,
    kind::Kind,
    profile::{self, Profile},
};

use crate::cli;

/// Runs `outliers`: 1 when a unit stands out, 0 when none does, 2 on an error (said in
/// one line), so that scripts can tell them apart.
pub fn run_outliers(args: cli::OutliersArgs) -> i32 {
    match find(&args) {
        Ok(found) => i32::from(found),
        Err(err) => {
            eprintln!("lockpath: error: {err:#}");
            2
        }
    }
}

fn find(args: &cli::OutliersArgs) -> Result<bool> {
    let by = match args.by {
        cli::OutliersBy::Host => By::Host,
        cli::OutliersBy::Job => By::Job(Jobs::new(&args.job_pattern)?),
    };
    if matches!(by, By::Host) && !args.job_pattern.is_empty() {
        anyhow::bail!("--job-pattern names jobs: add --by job");
    }
    let files = outliers::input_files(&args.inputs)?;
    let fleet = outliers::gather(&files, &by)?;
    let options = Options {
        threshold: args.threshold,
        min_excess_ns: args.min_excess as f64,
    };
    let mut analysis = outliers::analyze(&fleet, &by, options)?;
    outliers::add_stacks(&mut analysis, &fleet, &files, &by, args.stacks)?;
    let found = analysis.outliers().next().is_some();
    let text = match args.format {
        cli::OutliersFormat::Text => outliers::text(&analysis, args.top),
        cli::OutliersFormat::Json => {
            outliers::json(&analysis).context("cannot render the JSON report")? + "\n"
        }
        cli::OutliersFormat::Html => {
            // The first outlier against the fleet's median, in the kind of its first cause.
            let first = analysis.outliers().next().and_then(|first| {
                let kind = Kind::from_name(&first.causes.first()?.kind)?;
                Some((first.name.clone(), kind))
            });
            let flame = match (&by, first) {
                (By::Host, Some((host, kind))) => {
                    let lines = outliers::median_diff_lines(&fleet, &files, &host, kind)?;
                    Some((kind, lines))
                }
                _ => None,
            };
            let page = outliers::html(
                &analysis,
                &fleet,
                flame
                    .as_ref()
                    .map(|(kind, lines)| (*kind, lines.as_slice())),
                args.top,
            )?;
            let output = args
                .output
                .clone()
                .unwrap_or_else(|| PathBuf::from("outliers.html"));
            profile::write_atomically(&output, page.as_bytes())?;
            eprintln!("lockpath: outliers page written to {}", output.display());
            return Ok(found);
        }
    };
    crate::write_output(args.output.as_deref(), text.as_bytes())?;
    Ok(found)
}

/// `report --by job`: each job's time per cause, text or JSON.
pub fn report_by_job(args: &cli::ReportArgs, profile: &Profile) -> Result<i32> {
    let by = By::Job(Jobs::new(&args.job_pattern)?);
    let mut fleet = outliers::Fleet::default();
    fleet.add(profile, 0, &by);
    if fleet.units.is_empty() {
        anyhow::bail!(
            "{}: no process is in a job (no cgroup path matches the Slurm, Kubernetes, \
             container or systemd patterns): name jobs with --job-pattern REGEX",
            args.file.display()
        );
    }
    let text = match args.format {
        cli::ReportFormat::Text => outliers::units_text(&fleet, args.top),
        cli::ReportFormat::Json => {
            serde_json::to_string_pretty(&outliers::units(&fleet, args.top))
                .context("cannot render the JSON report")?
                + "\n"
        }
        _ => anyhow::bail!("report --by job writes text or JSON (--format text|json)"),
    };
    crate::write_output(args.output.as_deref(), text.as_bytes())?;
    Ok(0)
}

/// `report --blockers`: who waited on whom, by process, or by the groups of `--by`
/// (cgroup, job, host); text, JSON or one HTML page.
pub fn report_blockers(args: &cli::ReportArgs, profile: &Profile) -> Result<i32> {
    use lockpath_profile::kind::GroupBy;
    let group = match args.by {
        cli::ReportBy::Job => Group::Job(Jobs::new(&args.job_pattern)?),
        cli::ReportBy::Locks(GroupBy::Cgroup) => Group::Cgroup,
        cli::ReportBy::Locks(GroupBy::Host) => Group::Host,
        _ => Group::Process,
    };
    let text = match args.format {
        cli::ReportFormat::Text => blockers::text(profile, &group, args.top),
        cli::ReportFormat::Json => {
            let report = serde_json::json!({
                "by": group.name(),
                "duration_s": profile.duration_s,
                "blockers": blockers::blockers(profile, &group),
            });
            serde_json::to_string_pretty(&report).context("cannot render the JSON report")? + "\n"
        }
        cli::ReportFormat::Html => {
            let output = args
                .output
                .clone()
                .unwrap_or_else(|| args.file.with_extension("blockers.html"));
            profile::write_atomically(&output, blockers::html(profile, &group).as_bytes())?;
            eprintln!(
                "lockpath: who waited on whom written to {}",
                output.display()
            );
            return Ok(0);
        }
        cli::ReportFormat::Csv => {
            anyhow::bail!("report --blockers writes text, JSON or HTML (--format text|json|html)")
        }
    };
    crate::write_output(args.output.as_deref(), text.as_bytes())?;
    Ok(0)
}
