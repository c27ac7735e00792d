//! `cargo xtask test [-- CARGO_TEST_ARGS]`: test tools, build, then
//! `cargo test --release --workspace` against the freshly built binary, then the
//! lab of kernels (`vm-test`).

use std::{ffi::OsString, fs, path::PathBuf};

use anyhow::{bail, Context as _, Result};

use crate::{
    build::{self, Profile, EBPF_OBJ_ENV},
    dist, setup, util, vm,
};

/// Env var through which the test crate finds the lockpath binary.
const BIN_ENV: &str = "LOCKPATH_BIN";
/// Env vars through which the dist tests find the static binary and the packages.
const DIST_BIN_ENV: &str = "LOCKPATH_DIST_BIN";
const DIST_AARCH64_BIN_ENV: &str = "LOCKPATH_DIST_AARCH64_BIN";
const DEB_ENV: &str = "LOCKPATH_DEB";
const RPM_ENV: &str = "LOCKPATH_RPM";
/// Developers iterating on host tests may set this to 1 to leave the VMs out; CI never does.
const NO_VM_ENV: &str = "LOCKPATH_NO_VM";

pub fn test(args: Vec<OsString>) -> Result<()> {
    setup::ensure_test_tools();
    let artifacts = build::build(Profile::Release)?;
    let dist = dist::dist()?;
    let mut cmd = util::host_cargo();
    cmd.args(["test", "--release", "--workspace"])
        .args(&args)
        .env(BIN_ENV, &artifacts.lockpath)
        .env(EBPF_OBJ_ENV, &artifacts.ebpf_obj)
        .env(DIST_BIN_ENV, &dist.binary)
        .env(DIST_AARCH64_BIN_ENV, &dist.aarch64_binary)
        .env(DEB_ENV, &dist.deb)
        .env(RPM_ENV, &dist.rpm);
    util::say(format!("running {}", util::describe(&cmd)));
    util::run(&mut cmd, "test", "see the failing tests above")?;
    if std::env::var_os(NO_VM_ENV).is_some_and(|value| value == "1") {
        util::say(format!(
            "warning: {NO_VM_ENV}=1: the lab kernels (cargo xtask vm-test) were NOT tested"
        ));
        return Ok(());
    }
    let guests = [
        vm::GuestBinaries {
            arch: std::env::consts::ARCH,
            lockpath: artifacts.lockpath,
            workloads: build_workloads()?,
        },
        vm::GuestBinaries {
            arch: dist::AARCH64.arch,
            lockpath: dist.aarch64_binary,
            workloads: aarch64_workloads()?,
        },
    ];
    vm::vm_test(&guests, None)
}

/// `cargo xtask vm-test [KERNEL]`.
pub fn vm_test(only: Option<&str>) -> Result<()> {
    let mut guests = Vec::new();
    for arch in vm::arches(only) {
        let guest = if arch == std::env::consts::ARCH {
            vm::GuestBinaries {
                arch,
                lockpath: build::build(Profile::Release)?.lockpath,
                workloads: build_workloads()?,
            }
        } else {
            vm::GuestBinaries {
                arch,
                lockpath: dist::aarch64_lockpath()?,
                workloads: aarch64_workloads()?,
            }
        };
        guests.push(guest);
    }
    vm::vm_test(&guests, only)
}

/// The test workloads built statically for the arm64 guest (with symbols: the checks
/// look for their functions in stacks).
fn aarch64_workloads() -> Result<Vec<PathBuf>> {
    let dir = dist::build_static(
        &dist::AARCH64,
        "release",
        &["-p", "lockpath-tests", "--bins"],
        None,
    )?;
    workload_paths(&dir)
}

/// Builds the binaries of tests/src/bin/ and returns their paths.
pub(crate) fn build_workloads() -> Result<Vec<PathBuf>> {
    const STEP: &str = "building the test workloads";
    let mut cmd = util::host_cargo();
    cmd.args(["build", "--release", "-p", "lockpath-tests", "--bins"]);
    util::run(
        &mut cmd,
        STEP,
        "fix the compile errors above in tests/src/bin/",
    )?;
    workload_paths(&util::target_dir()?.join("release"))
}

/// The binaries of tests/src/bin/ in `dir`, all of which must exist.
fn workload_paths(dir: &std::path::Path) -> Result<Vec<PathBuf>> {
    let sources = util::workspace_root().join("tests/src/bin");
    let mut binaries = Vec::new();
    let entries =
        fs::read_dir(&sources).with_context(|| format!("cannot list {}", sources.display()))?;
    for entry in entries.filter_map(|entry| entry.ok()) {
        let path = entry.path();
        let Some(name) = path
            .file_stem()
            .filter(|_| path.extension().is_some_and(|ext| ext == "rs"))
        else {
            continue;
        };
        let binary = dir.join(name);
        if !binary.is_file() {
            bail!("{} was not built", binary.display());
        }
        binaries.push(binary);
    }
    binaries.sort();
    Ok(binaries)
}
