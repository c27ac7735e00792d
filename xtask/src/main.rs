//! Developer tasks for lockpath: `cargo xtask <command>`.

mod bench;
mod build;
mod cross;
mod dist;
mod run;
mod setup;
mod test;
mod util;
mod vm;

use std::{ffi::OsString, process::ExitCode};

use anyhow::Result;
use clap::{Parser, Subcommand};

use build::Profile;

/// Developer tasks for lockpath.
#[derive(Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install rust-src (nightly) and bpf-linker 0.13.0 if missing
    Setup,
    /// Build the eBPF object and lockpath (release unless --debug)
    Build {
        /// A debug build of lockpath (the eBPF object is always built for release)
        #[arg(long)]
        debug: bool,
    },
    /// Static lockpath (x86_64 and aarch64 musl), man page, completions, .deb and .rpm
    /// into target/dist/
    Dist,
    /// Build, then run target/release/lockpath ARGS (needs root)
    Run(PassedOn),
    /// Install test tools (root), build, dist, then `cargo test --release --workspace
    /// ARGS`, then vm-test
    Test(PassedOn),
    /// Boot the lab kernels (6.12, 6.1, 5.10, 6.1-arm64, 7.3, 7.3-nomerge; all without
    /// KERNEL) in QEMU and run the guest checks of tests/vm/checks/ (root; kernels cached
    /// in target/vm/)
    VmTest {
        /// One lab kernel, by name (default: every one)
        kernel: Option<String>,
    },
    /// Overhead against bpftrace and perf, per-event cost, memory, report speed (root);
    /// --soak: 10-min memory run
    Bench(bench::Options),
}

/// Arguments passed on as they are (`run -- a b` and `run a b` alike).
#[derive(clap::Args)]
struct PassedOn {
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<OsString>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run_task(cli.task) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // `{:#}` keeps the whole context chain on one line.
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_task(task: Task) -> Result<()> {
    match task {
        Task::Setup => setup::ensure().map(|_| ()),
        Task::Build { debug } => {
            let profile = if debug {
                Profile::Debug
            } else {
                Profile::Release
            };
            build::build(profile).map(|_| ())
        }
        Task::Dist => dist::dist().map(|_| ()),
        Task::Run(passed) => run::run(passed.args),
        Task::Test(passed) => test::test(passed.args),
        Task::VmTest { kernel } => test::vm_test(kernel.as_deref()),
        Task::Bench(options) => bench::bench(options),
    }
}
