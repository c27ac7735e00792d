//! `cargo xtask build`: the eBPF object (nightly, bpfel-unknown-none), then
//! the `lockpath` binary with that object embedded by profiler/build.rs.
//!
//! Not aya-build, which builds the eBPF crate from the user-space crate's build script:
//! every `cargo check`, `clippy` or `test` of the workspace would then need the nightly
//! toolchain and bpf-linker, and a machine without them could not even check the host
//! code. Here the host crates build with stable alone (an empty object, which lockpath
//! reports at run time), and the toolchain recipe (`setup`) runs once, here, before the
//! object is built; `dist` builds the object again for each target architecture.

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
/// unoptimised eBPF does not pass the verifier. For this machine's architecture.
pub(crate) fn build_ebpf(tools: &setup::Tools) -> Result<PathBuf> {
    build_ebpf_for(tools, std::env::consts::ARCH)
}

/// The eBPF object for the kernels of `arch` (`x86_64`, `aarch64`): registers and
/// stack layouts differ, so each architecture's binary embeds its own object, built
/// with aya's `bpf_target_arch` cfg into `target/<arch>/` when it is not this machine's.
pub(crate) fn build_ebpf_for(tools: &setup::Tools, arch: &str) -> Result<PathBuf> {
    const STEP: &str = "build step 1/2 (eBPF object)";
    let crate_dir = util::workspace_root().join("profiler-ebpf");
    let path = util::path_with(&[tools.bin_dir.clone(), util::cargo_home()?.join("bin")])?;
    util::say(format!(
        "building the eBPF object for {arch} (cargo +nightly build --release in profiler-ebpf/)"
    ));
    let mut cmd = util::isolated("cargo");
    cmd.args(["+nightly", "build", "--release"])
        .current_dir(&crate_dir)
        .env("PATH", path);
    let mut target_dir = crate_dir.join("target");
    if arch != std::env::consts::ARCH {
        target_dir = target_dir.join(arch);
        cmd.env("CARGO_TARGET_DIR", &target_dir).env(
            "CARGO_TARGET_BPFEL_UNKNOWN_NONE_RUSTFLAGS",
            format!("--cfg bpf_target_arch=\"{arch}\""),
        );
    }
    util::run(
        &mut cmd,
        STEP,
        "fix the errors above in profiler-ebpf/; if bpf-linker is the problem run `cargo xtask setup`",
    )?;
    let obj = target_dir.join("bpfel-unknown-none/release/profiler-ebpf");
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
