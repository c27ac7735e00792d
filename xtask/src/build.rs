//! `cargo xtask build`: the eBPF object (nightly, bpfel-unknown-none), then
//! the `lockpath` binary with that object embedded by profiler/build.rs.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::{setup, util};

/// Env var through which profiler/build.rs finds the eBPF object.
pub const EBPF_OBJ_ENV: &str = "LOCKPATH_EBPF_OBJ";

#[derive(Clone, Copy)]
pub enum Profile {
    Release,
    Debug,
}

impl Profile {
    fn dir(self) -> &'static str {
        match self {
            Profile::Release => "release",
            Profile::Debug => "debug",
        }
    }
}

pub struct Artifacts {
    pub ebpf_obj: PathBuf,
    pub lockpath: PathBuf,
}

pub fn build(profile: Profile) -> Result<Artifacts> {
    let tools = setup::ensure()?;
    let ebpf_obj = build_ebpf(&tools)?;
    let lockpath = build_lockpath(profile, &ebpf_obj)?;
    util::say(format!(
        "built {} (eBPF object {})",
        lockpath.display(),
        ebpf_obj.display()
    ));
    Ok(Artifacts { ebpf_obj, lockpath })
}

/// `cargo +nightly build --release` inside profiler-ebpf/ (its own workspace;
/// target and build-std come from its .cargo/config.toml). Always release:
/// unoptimised eBPF does not pass the verifier.
pub(crate) fn build_ebpf(tools: &setup::Tools) -> Result<PathBuf> {
    const STEP: &str = "build step 1/2 (eBPF object)";
    let crate_dir = util::workspace_root().join("profiler-ebpf");
    let path = util::path_with(&[tools.bin_dir.clone(), util::cargo_home()?.join("bin")])?;
    util::say("building the eBPF object (cargo +nightly build --release in profiler-ebpf/)");
    util::run(
        util::isolated("cargo")
            .args(["+nightly", "build", "--release"])
            .current_dir(&crate_dir)
            .env("PATH", path),
        STEP,
        "fix the errors above in profiler-ebpf/; if bpf-linker is the problem run `cargo xtask setup`",
    )?;
    let obj = crate_dir.join("target/bpfel-unknown-none/release/profiler-ebpf");
    if !obj.is_file() {
        bail!(
            "{STEP}: cargo succeeded but {} does not exist; check the [[bin]] name and target in profiler-ebpf/",
            obj.display()
        );
    }
    Ok(obj)
}

/// `cargo build [--release] -p profiler` with the cargo running xtask.
fn build_lockpath(profile: Profile, ebpf_obj: &Path) -> Result<PathBuf> {
    const STEP: &str = "build step 2/2 (lockpath)";
    let mut cmd = util::host_cargo();
    cmd.arg("build");
    if let Profile::Release = profile {
        cmd.arg("--release");
    }
    // The workloads of lockpath-tests are built too: the README's run command and the
    // benchmark profile them.
    cmd.args(["-p", "profiler", "-p", "lockpath-tests", "--bins"])
        .env(EBPF_OBJ_ENV, ebpf_obj);
    util::say(format!("building lockpath ({})", profile.dir()));
    util::run(&mut cmd, STEP, "fix the compile errors above in profiler/")?;
    let lockpath = util::target_dir()?.join(profile.dir()).join("lockpath");
    if !lockpath.is_file() {
        bail!(
            "{STEP}: cargo succeeded but {} does not exist; is [[bin]] `lockpath` still in profiler/Cargo.toml?",
            lockpath.display()
        );
    }
    Ok(lockpath)
}
