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

use std::{env, ffi::OsString, process::ExitCode};

use anyhow::{bail, Result};

use build::Profile;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  setup              install rust-src (nightly) and bpf-linker 0.13.0 if missing
  build [--debug]    build the eBPF object and lockpath (release unless --debug)
  dist               static lockpath (x86_64 and aarch64 musl), man page,
                     completions, .deb and .rpm into target/dist/
  run [-- ARGS]      build, then run target/release/lockpath ARGS (needs root)
  test [-- ARGS]     install test tools (root), build, dist, then
                     `cargo test --release --workspace ARGS`, then vm-test
  vm-test [KERNEL]   boot the lab kernels (6.12, 6.1, 5.10, 6.1-arm64) in QEMU and run the guest
                     checks of tests/vm/checks/ (root; kernels cached in target/vm/)
  bench [FLAGS]      overhead against bpftrace and perf, per-event cost, memory,
                     report speed (root; `cargo xtask bench --help`); --soak: 10-min memory run";

fn main() -> ExitCode {
    match try_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // `{:#}` keeps the whole context chain on one line.
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn try_main() -> Result<()> {
    let mut args = env::args_os().skip(1);
    let Some(command) = args.next() else {
        eprintln!("{USAGE}");
        bail!("no command given");
    };
    let rest: Vec<OsString> = args.collect();
    match command.to_string_lossy().as_ref() {
        "setup" => {
            no_args("setup", &rest)?;
            setup::ensure().map(|_| ())
        }
        "build" => {
            let profile = match rest.iter().map(|arg| arg.to_str()).collect::<Vec<_>>()[..] {
                [] => Profile::Release,
                [Some("--debug")] => Profile::Debug,
                _ => bail!(
                    "build: unexpected arguments {rest:?}; usage: cargo xtask build [--debug]"
                ),
            };
            build::build(profile).map(|_| ())
        }
        "dist" => {
            no_args("dist", &rest)?;
            dist::dist().map(|_| ())
        }
        "run" => run::run(after_dashes(rest)),
        "test" => test::test(after_dashes(rest)),
        "bench" => bench::bench(rest),
        "vm-test" => {
            let only = match rest.iter().map(|arg| arg.to_str()).collect::<Vec<_>>()[..] {
                [] => None,
                [Some(name)] => Some(name.to_string()),
                _ => bail!(
                    "vm-test: unexpected arguments {rest:?}; usage: cargo xtask vm-test [6.12|6.1|5.10|6.1-arm64]"
                ),
            };
            test::vm_test(only.as_deref())
        }
        "help" | "-h" | "--help" => {
            println!("{USAGE}");
            Ok(())
        }
        other => {
            eprintln!("{USAGE}");
            bail!("unknown command `{other}`")
        }
    }
}

fn no_args(command: &str, rest: &[OsString]) -> Result<()> {
    if !rest.is_empty() {
        bail!("{command}: takes no arguments, got {rest:?}");
    }
    Ok(())
}

/// `run -- a b` and `run a b` both mean `a b`.
fn after_dashes(mut rest: Vec<OsString>) -> Vec<OsString> {
    if rest.first().is_some_and(|arg| arg == "--") {
        rest.remove(0);
    }
    rest
}
