//! Command-line interface: `lockpath record | report | flamegraph | export`.

pub mod values;

use std::path::PathBuf;

use clap::{
    builder::{PossibleValue, PossibleValuesParser, TypedValueParser},
    Args, Parser, Subcommand, ValueEnum,
};

pub use crate::kind::{GroupBy, Kind};
use crate::{probes::FamilyArgs, units::parse_duration_ns};
use lockpath_profile::views::VIEWS;

#[derive(Debug, Parser)]
#[command(
    name = "lockpath",
    version,
    about = "eBPF lock-contention and IO-path profiler",
    long_about = "lockpath records where a Linux client's time goes (lock contention and \
                  holds, off-CPU waits, block IO, request spans, function latency, on-CPU \
                  samples), aggregated in the kernel, into a profile file; report, flamegraph, \
                  export, diff and merge work from that file anywhere."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Record a profile (needs root, or CAP_BPF + CAP_PERFMON).
    Record(Box<RecordArgs>),
    /// What is stuck right now (needs root): a short recording of the whole system, or
    /// of -p PIDS, with off-CPU waits (including those that began before it), sleeping
    /// lock waits, FUSE requests and block IO; prints what is still waiting at its end,
    /// longest first, and whom it waits for.
    Stuck(StuckArgs),
    /// Print the tables of a profile (text, JSON or one HTML page).
    Report(ReportArgs),
    /// Render a flamegraph (SVG) from a profile.
    Flamegraph(FlamegraphArgs),
    /// Convert a profile for other tools (folded stacks, pprof, JSON tree).
    Export(ExportArgs),
    /// Compare two profiles: what grew, per second of run time.
    Diff(DiffArgs),
    /// Combine the profiles of several hosts into one.
    Merge(MergeArgs),
    /// Which hosts (or jobs) of a fleet stand out, and why: each cause's time per
    /// second against the fleet's median; exits 1 when one stands out, 0 when none
    /// does, 2 on an error.
    Outliers(OutliersArgs),
    /// Rewrite a profile: in the compact encoding when the output ends in .lpb (a profile
    /// of millions of lock rows loads several times faster), as JSON otherwise.
    Convert(ConvertArgs),
    /// Developer checks of lockpath's kernel-side helpers (not part of the interface).
    #[command(hide = true, subcommand)]
    Debug(DebugCommand),
}

impl Command {
    /// Whether it records (loads programs and runs beside the workload), as against
    /// reading profiles.
    pub fn records(&self) -> bool {
        matches!(self, Command::Record(_) | Command::Stuck(_))
    }
}

/// `lockpath debug ...`: one kernel-side helper at a time, for tests.
#[derive(Debug, Subcommand)]
pub enum DebugCommand {
    /// Print, one line per thread (`TID: ...`), what a thread sleeping in the kernel
    /// waits for (a sleeping lock and its owner, or a FUSE request), read from kernel
    /// memory; `none` when nothing is verified.
    BlockedOn {
        /// The thread ids.
        #[arg(required = true)]
        tids: Vec<u32>,
    },
}

#[derive(Debug, Args)]
pub struct StuckArgs {
    /// Only these processes (and their children); comma-separated or repeatable.
    #[arg(short = 'p', long = "pid", value_name = "PID", value_delimiter = ',')]
    pub pid: Vec<u32>,

    /// How long to watch (seconds, or e.g. 500ms, 2m).
    #[arg(short = 'd', long = "duration", value_name = "DUR", default_value = "1",
          value_parser = parse_duration)]
    pub duration: f64,

    /// Also threads in interruptible sleep (S), not only uninterruptible waits (D).
    #[arg(long)]
    pub all_states: bool,

    /// Where to write the profile.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        default_value = "lockpath-stuck.json"
    )]
    pub output: PathBuf,

    /// Rows in the table.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
}

impl StuckArgs {
    /// The `record` arguments it stands for; FUSE requests and block IO where this
    /// kernel has their tracepoints.
    pub fn record_args(&self) -> Vec<String> {
        let mut args: Vec<String> = vec!["lockpath".into(), "record".into(), "--lock".into()];
        args.push(
            if self.all_states {
                "--offcpu-all"
            } else {
                "--offcpu"
            }
            .into(),
        );
        if crate::tracefs::event_exists("fuse", "fuse_request_send") {
            args.extend(["--rpc".into(), "fuse".into()]);
        }
        if crate::tracefs::event_exists("block", "block_rq_issue") {
            args.push("--io".into());
        }
        if !self.pid.is_empty() {
            let pids: Vec<String> = self.pid.iter().map(u32::to_string).collect();
            args.extend(["-p".into(), pids.join(",")]);
        }
        args.extend([
            "-d".into(),
            self.duration.to_string(),
            "-o".into(),
            self.output.display().to_string(),
            "--top".into(),
            self.top.to_string(),
        ]);
        args
    }
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    // Each family's options, beside its code (probes/<family>.rs), in their order in
    // `record --help`; then the options of the recording as a whole.
    #[command(flatten)]
    pub families: FamilyArgs,

    /// Keep the lock and off-CPU wait time per interval of this length (e.g. 500ms, 1s)
    /// for every lock, wait class and process: the profile's timeline, `report
    /// --timeline`, and charts in the HTML report. A lock wait counts in the interval it ended
    /// in; off-CPU time in the intervals it passed in.
    #[arg(long, value_name = "DUR", value_parser = parse_interval)]
    pub interval: Option<u64>,

    /// Profile the whole system (the default when no target is given); with `-- CMD`,
    /// the whole system while CMD runs.
    #[arg(short = 'a', long = "all", conflicts_with_all = ["pid", "cgroup"])]
    pub all: bool,

    /// Profile these running processes (all their threads and children); repeatable,
    /// or comma-separated.
    #[arg(short = 'p', long = "pid", value_name = "PID", value_delimiter = ',')]
    pub pid: Vec<u32>,

    /// Profile the processes of this cgroup v2 directory and its sub-cgroups, those made
    /// while recording too (a Slurm job: seen within half a second).
    #[arg(long, value_name = "PATH", conflicts_with = "pid")]
    pub cgroup: Option<PathBuf>,

    /// Stop after this long (seconds, or e.g. 10m, 1h30m; default: until Ctrl-C, or until
    /// CMD exits).
    #[arg(short = 'd', long = "duration", value_name = "DUR", value_parser = parse_duration)]
    pub duration: Option<f64>,

    /// Where to write the profile (JSON), atomically.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        default_value = "lockpath.json"
    )]
    pub output: PathBuf,

    /// Also write a flamegraph of the recording to this SVG file.
    #[arg(long, value_name = "SVG")]
    pub flamegraph: Option<PathBuf>,

    /// Rows in the end-of-run table.
    #[arg(long, default_value_t = 20)]
    pub top: usize,

    /// The host's name in the profile (default: the kernel's host name), e.g. when the
    /// nodes of a cluster run in containers that share one name.
    #[arg(long, value_name = "NAME", value_parser = parse_host)]
    pub host: Option<String>,

    /// Entries of each aggregation map (more: fewer drops on huge runs, more kernel memory).
    #[arg(long, value_name = "N", default_value_t = 16384, value_parser = clap::value_parser!(u32).range(1..))]
    pub map_entries: u32,

    /// Entries of the stack-trace map.
    #[arg(long, value_name = "N", default_value_t = profiler_common::shared::STACKS_ENTRIES, value_parser = clap::value_parser!(u32).range(1..=i64::from(profiler_common::shared::STACKS_MAX_ENTRIES)))]
    pub stack_entries: u32,

    /// Serve Prometheus metrics at this address while recording (PORT alone: 127.0.0.1:PORT).
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_metrics_addr)]
    pub metrics: Option<std::net::SocketAddr>,

    /// Always on: record until stopped (SIGTERM, Ctrl-C), writing one complete profile
    /// per period DUR (e.g. 30s, 10m, 1h) into the directory given with -o, named
    /// HOST-STARTTIME.json; the kernel maps are emptied every period, so memory stays
    /// flat. SIGHUP ends the current period early (its profile is written) and goes on.
    #[arg(long, value_name = "DUR", value_parser = values::parse_period,
          conflicts_with = "flamegraph")]
    pub rotate: Option<std::time::Duration>,

    /// With --rotate: keep only the newest N profiles of this host in the directory.
    #[arg(long, value_name = "N", requires = "rotate",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub keep: Option<u32>,

    /// With --rotate --metrics: label sets per metric with a series of their own (the
    /// first seen, most wait first); the rest add into one series labelled `other`.
    #[arg(long, value_name = "N", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub metrics_top: u32,

    /// Command to start and profile, with its children; recording stops when it exits
    /// and lockpath exits with its status.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `--host`: a name that fits in a file name (`--rotate` names its files after it).
fn parse_host(text: &str) -> Result<String, String> {
    let fits = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    match !text.is_empty() && text.len() <= 64 && text.chars().all(fits) {
        true => Ok(text.to_string()),
        false => Err(format!(
            "{text:?}: a host name is 1 to 64 letters, digits, '-', '_' or '.'"
        )),
    }
}

/// `-d`: seconds, or any duration of the one grammar (`10m`, `1h30m`).
fn parse_duration(text: &str) -> Result<f64, String> {
    let duration = crate::units::parse_duration(text)?;
    if duration.is_zero() {
        return Err(format!("{text:?}: the duration must be longer than 0"));
    }
    Ok(duration.as_secs_f64())
}

/// `--interval`: nanoseconds of a duration of the one grammar, longer than 0.
fn parse_interval(text: &str) -> Result<u64, String> {
    match parse_duration_ns(text)? {
        0 => Err(format!("{text:?}: the interval must be longer than 0")),
        ns => Ok(ns),
    }
}

/// `PORT` or `ADDR:PORT`; a bare port binds to loopback only.
fn parse_metrics_addr(text: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse()
        .map_err(|_| format!("{text:?} is not PORT or ADDRESS:PORT (e.g. 127.0.0.1:9464)"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    Text,
    Json,
    /// One self-contained page with tables and flamegraphs (needs -o, or writes FILE.html).
    Html,
    /// The lock table as CSV (the JSON report's numbers, one row per group).
    Csv,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Profile file written by `lockpath record`.
    pub file: PathBuf,
    /// How the lock table groups its rows. `cgroup` groups by each process's cgroup v2
    /// path as recorded (`?` when unknown: profiles of older versions, a cgroup removed
    /// before the recording or its `--rotate` period ended); the JSON report then names
    /// each row's cgroup.
    /// `file`: only the tables by file (block IO with who caused it, and the file calls
    /// of `record --io --file-calls`), text or JSON.
    #[arg(long, value_parser = report_by_parser(), default_value = "lock")]
    pub by: ReportBy,
    /// Rows to show (0: all).
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
    /// Also the timeline (`record --interval`): wait time per interval for every lock,
    /// wait class and process (text format).
    #[arg(long)]
    pub timeline: bool,
    /// Output file (default: standard output; for html: FILE with .html).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Only the waits on this lock: a name (`mmap_lock`, a static lock's symbol) or an
    /// address as the lock column prints it; repeatable.
    #[arg(long = "lock", value_name = "NAME|ADDR")]
    pub lock: Vec<String>,
    /// Only locks of this type (spinlock, mutex, rwsem, rwsem:W, ...); repeatable.
    #[arg(long = "type", value_name = "TYPE")]
    pub lock_type: Vec<String>,
    /// Only waits whose stack has a frame containing PATTERN (`*` is a wildcard);
    /// repeatable.
    #[arg(long = "caller", value_name = "PATTERN")]
    pub caller: Vec<String>,
    /// With --by job: a regular expression on cgroup paths whose first group (or whole
    /// match) names a job, tried before the built-in patterns; repeatable.
    #[arg(long = "job-pattern", value_name = "REGEX")]
    pub job_pattern: Vec<String>,
    /// Who waited on whom: the waits whose holder is known (lock owners at the wait's
    /// start, file-lock holders), summed per waiter and holder process, or per cgroup,
    /// job or host with --by cgroup|job|host (text, JSON, or HTML to -o, default
    /// FILE.blockers.html).
    #[arg(long)]
    pub blockers: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutliersBy {
    /// Each host (a profile's host, or each host of a merged profile).
    Host,
    /// Each job, from the processes' cgroup paths (see --job-pattern).
    Job,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutliersFormat {
    Text,
    Json,
    /// One self-contained page: the ranking, a heat map of units by causes, each
    /// outlier's causes, and the first outlier's differential flamegraph against the
    /// fleet's median (written to -o, default outliers.html).
    Html,
}

#[derive(Debug, Args)]
pub struct OutliersArgs {
    /// Profiles, directories of profiles (every .json and .lpb file in them, e.g. of
    /// `record --rotate`), or merged profiles; the periods of one host add up.
    #[arg(required = true, value_name = "PROFILE|DIR")]
    pub inputs: Vec<PathBuf>,
    /// What a unit of the fleet is.
    #[arg(long, value_enum, default_value_t = OutliersBy::Host)]
    pub by: OutliersBy,
    /// With --by job: a regular expression on cgroup paths whose first group (or whole
    /// match) names a job, tried before the built-in patterns; repeatable.
    #[arg(long = "job-pattern", value_name = "REGEX")]
    pub job_pattern: Vec<String>,
    /// A cause stands out above this many uncertainties over the fleet's median (the
    /// fleet's robust spread, 1.4826 x the median absolute deviation but at least a fifth
    /// of the median, and the noise of the unit's own rate, from its waits' durations,
    /// combined)...
    #[arg(long, default_value_t = 3.5, value_parser = parse_threshold)]
    pub threshold: f64,
    /// ...and at least this much time per second above it (e.g. 10ms: 10 ms per second).
    #[arg(long, value_name = "DUR", default_value = "10ms", value_parser = parse_duration_ns)]
    pub min_excess: u64,
    /// Top stacks shown per cause that stands out.
    #[arg(long, default_value_t = 3)]
    pub stacks: usize,
    /// Units in the ranking (0: all).
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    #[arg(long, value_enum, default_value_t = OutliersFormat::Text)]
    pub format: OutliersFormat,
    /// Output file (default: standard output; for html: outliers.html).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `--threshold`: a positive number of robust spreads.
fn parse_threshold(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() && value > 0.0 => Ok(value),
        _ => Err(format!(
            "{text:?}: give a number of spreads above 0, e.g. 3.5"
        )),
    }
}

/// `--kind`: the names and meanings of the kinds' views.
fn kind_parser() -> impl TypedValueParser<Value = Kind> {
    PossibleValuesParser::new(
        VIEWS
            .iter()
            .map(|view| PossibleValue::new(view.name()).help(view.about())),
    )
    .try_map(|name| Kind::from_name(&name).ok_or("unknown kind"))
}

/// How `report` groups: the lock table by a `GroupBy`, or the tables by file alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportBy {
    Locks(GroupBy),
    File,
    Job,
}

/// `report --by`: the names of `GroupBy`, and `file`.
fn report_by_parser() -> impl TypedValueParser<Value = ReportBy> {
    let file = PossibleValue::new("file").help(
        "Only the tables by file: block IO read and written with who caused it, and the \
         timed file calls (text and JSON)",
    );
    let job = PossibleValue::new("job").help(
        "Only each job's time per cause (jobs from cgroup paths: Slurm, Kubernetes pods, \
         containers, systemd services, or --job-pattern; text and JSON)",
    );
    PossibleValuesParser::new(
        GroupBy::ALL
            .iter()
            .map(|by| PossibleValue::new(by.name()).help(by.about()))
            .chain([file, job]),
    )
    .try_map(|name| match name.as_str() {
        "file" => Ok(ReportBy::File),
        "job" => Ok(ReportBy::Job),
        _ => GroupBy::from_name(&name)
            .map(ReportBy::Locks)
            .ok_or("unknown grouping"),
    })
}

#[derive(Debug, Args)]
pub struct FlamegraphArgs {
    pub file: PathBuf,
    #[arg(long, value_parser = kind_parser(), default_value = "lock")]
    pub kind: Kind,
    /// Output SVG (default: FILE with .svg instead of .json, of the kind).
    #[arg(short = 'o', long = "output", value_name = "SVG")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// `frame;frame;frame value` lines, root first, for inferno and flamegraph.pl.
    Folded,
    /// Gzipped protobuf for `go tool pprof`, Pyroscope, Parca.
    Pprof,
    /// A tree of frames with every value (d3-flame-graph input).
    Json,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    pub file: PathBuf,
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    #[arg(long, value_parser = kind_parser(), default_value = "lock")]
    pub kind: Kind,
    /// Output file (default: standard output).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DiffFormat {
    Text,
    Json,
    /// One self-contained page: the tables and the differential flamegraph (written to
    /// -o, default diff.html).
    Html,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The reference profile (e.g. the fast client).
    pub base: PathBuf,
    /// The profile compared with it (e.g. the slow client).
    pub new: PathBuf,
    #[arg(long, value_parser = kind_parser(), default_value = "lock")]
    pub kind: Kind,
    /// Also write a differential flamegraph (red grew, blue shrank) to this SVG file;
    /// with --format html, the page (default diff.html).
    #[arg(short = 'o', long = "output", value_name = "SVG")]
    pub output: Option<PathBuf>,
    /// Rows per table (0: all).
    #[arg(long, default_value_t = 15)]
    pub top: usize,
    #[arg(long, value_enum, default_value_t = DiffFormat::Text)]
    pub format: DiffFormat,
}

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// The profile to read (JSON or compact).
    pub input: PathBuf,
    /// The profile to write: compact when the name ends in .lpb, JSON otherwise.
    #[arg(short = 'o', long = "output", value_name = "FILE", required = true)]
    pub output: PathBuf,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Profiles to combine (two or more), e.g. one per host.
    #[arg(required = true, num_args = 2..)]
    pub inputs: Vec<PathBuf>,
    /// The combined profile.
    #[arg(short = 'o', long = "output", value_name = "FILE", required = true)]
    pub output: PathBuf,
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn stuck_is_a_short_recording_of_waits() {
        let Command::Stuck(stuck) =
            Cli::try_parse_from(["lockpath", "stuck", "-p", "5,6", "--all-states"])
                .expect("stuck parses")
                .command
        else {
            panic!("not stuck");
        };
        let Command::Record(record) = Cli::try_parse_from(stuck.record_args())
            .expect("its record arguments parse")
            .command
        else {
            panic!("not a recording");
        };
        assert!(record.families.lock.lock && record.families.offcpu.offcpu_all);
        assert_eq!(record.pid, vec![5, 6]);
        assert_eq!(record.duration, Some(1.0));
        assert_eq!(record.output, PathBuf::from("lockpath-stuck.json"));
    }
}
