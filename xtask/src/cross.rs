//! Building for aarch64 on an x86_64 machine: Debian's arm64 packages (downloaded, never
//! installed: the host's dpkg architectures are not touched) and a C compiler for the
//! static aarch64 binary's C dependencies (mimalloc, liblzma): Debian's aarch64 cross gcc
//! with the headers and specs of Debian's arm64 musl-dev, as musl-gcc does on x86_64.

use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{anyhow, bail, Context as _, Result};

use crate::{setup, util};

/// apt options that make arm64 packages visible for one command.
const WITH_ARM64: &[&str] = &[
    "-o",
    "APT::Architectures::=amd64",
    "-o",
    "APT::Architectures::=arm64",
    "-o",
    "DPkg::Lock::Timeout=300",
];

/// `dir/<package>_*_arm64.deb`, downloaded once (kept beside other debs, so `package`
/// must not also be downloaded there for the host).
pub fn arm64_deb(package: &str, dir: &Path) -> Result<PathBuf> {
    if let Some(deb) = cached_deb(dir, package) {
        return Ok(deb);
    }
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    if !util::is_root().unwrap_or(false) {
        bail!(
            "{package} (arm64) is not cached in {} and downloading it needs root (apt-get); rerun as root",
            dir.display()
        );
    }
    // Every time: a plain `apt-get update` in between (installing a host tool) drops
    // the arm64 lists again.
    util::run(
        Command::new("apt-get")
            .args(WITH_ARM64)
            .args(["update", "-q"]),
        "apt-get update (arm64 lists)",
        "check network access to deb.debian.org and rerun",
    )?;
    util::say(format!("downloading {package} (arm64)"));
    util::run(
        Command::new("apt-get")
            .args(WITH_ARM64)
            .args(["download", "-q", &format!("{package}:arm64")])
            .current_dir(dir),
        "apt-get download (arm64)",
        "check network access to deb.debian.org and rerun",
    )?;
    cached_deb(dir, package).ok_or_else(|| {
        anyhow!(
            "apt-get download succeeded but no {package}_*_arm64.deb is in {}",
            dir.display()
        )
    })
}

/// `dir/<package>_*.deb`, when one was downloaded.
pub fn cached_deb(dir: &Path, package: &str) -> Option<PathBuf> {
    let prefix = format!("{package}_");
    fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .find(|path| {
            path.file_name().is_some_and(|name| {
                let name = name.to_string_lossy();
                name.starts_with(&prefix) && name.ends_with(".deb")
            })
        })
}

/// Unpacks `deb` into `dir` (afresh).
pub fn unpack(deb: &Path, dir: &Path) -> Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("cannot remove {}", dir.display()))?;
    }
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    util::run(
        Command::new("dpkg-deb").arg("-x").arg(deb).arg(dir),
        "unpacking an arm64 package",
        "remove the .deb and rerun to download it again",
    )
}

/// The aarch64 tools a static build needs: the linker (Debian's cross gcc, which links
/// Rust's own musl start files and libc) and a musl C compiler for C dependencies.
pub struct Aarch64Tools {
    pub linker: PathBuf,
    pub musl_cc: PathBuf,
}

const CROSS_GCC: &str = "aarch64-linux-gnu-gcc";

pub fn aarch64_tools() -> Result<Aarch64Tools> {
    if util::find_in_path(CROSS_GCC).is_none() {
        setup::apt_install(&["gcc-aarch64-linux-gnu"])
            .context("the aarch64 cross compiler is missing")?;
    }
    let linker = util::find_in_path(CROSS_GCC).ok_or_else(|| {
        anyhow!("{CROSS_GCC} is not on PATH after installing gcc-aarch64-linux-gnu")
    })?;
    let root = util::target_dir()?.join("cross/aarch64-musl");
    let musl_cc = root.join("aarch64-linux-musl-gcc");
    if !musl_cc.is_file() {
        let deb = arm64_deb("musl-dev", &util::target_dir()?.join("cross/debs"))?;
        let sysroot = root.join("sysroot");
        unpack(&deb, &sysroot)?;
        // The package's specs name its files under /usr; point them at the unpacked copy.
        let specs = sysroot.join("usr/lib/aarch64-linux-musl/musl-gcc.specs");
        let text = fs::read_to_string(&specs)
            .with_context(|| format!("cannot read {}", specs.display()))?;
        let prefix = sysroot.join("usr");
        let text = text.replace("/usr/", &format!("{}/", prefix.display()));
        let moved = root.join("musl-gcc.specs");
        fs::write(&moved, text).with_context(|| format!("cannot write {}", moved.display()))?;
        let script = format!(
            "#!/bin/sh\nexec {} \"$@\" -specs \"{}\"\n",
            linker.display(),
            moved.display()
        );
        fs::write(&musl_cc, script)
            .with_context(|| format!("cannot write {}", musl_cc.display()))?;
        fs::set_permissions(&musl_cc, fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot make {} executable", musl_cc.display()))?;
    }
    Ok(Aarch64Tools { linker, musl_cc })
}
