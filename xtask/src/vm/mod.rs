//! `cargo xtask vm-test`: a lab of other kernels. Boots Debian's 7.3 (twice: as is and
//! with `slab_nomerge`), 6.12, 6.1 and 5.10 x86_64 cloud kernels and its 6.1 arm64 cloud
//! kernel in QEMU (TCG) with an initramfs
//! holding busybox, lockpath and the test workloads of the guest's architecture, runs
//! every guest check in `tests/vm/checks/` and reads the verdicts from the serial
//! console. Kernels are downloaded once and cached in `target/vm/`.
//!
//! Guest protocol (see tests/vm/init): one `LAB-CHECK <name> PASS|FAIL|SKIP <why>` line
//! per check, then `LAB-DONE pass=N fail=N skip=N`, then the guest powers off.
//!
//! kernels.rs: the lab's kernels, downloaded and unpacked once; initramfs.rs: the
//! guest's root file system; qemu.rs: booting a guest and reading its serial console;
//! protocol.rs: the verdict lines.

mod initramfs;
mod kernels;
mod protocol;
mod qemu;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{bail, Result};

use crate::util;

use initramfs::build_initramfs;
use kernels::{kernel_image, TemporarySuite, KERNELS};
pub use qemu::bench;
use qemu::boot;

/// Debian packages of the host tools, by command.
const HOST_TOOLS: &[(&str, &str)] = &[
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("qemu-system-aarch64", "qemu-system-arm"),
    ("cpio", "cpio"),
    ("dpkg-deb", "dpkg"),
];
const BUSYBOX_STATIC: &str = "/bin/busybox";

/// Binaries that go into the guest's /bin besides busybox.
pub struct GuestBinaries {
    /// `x86_64` (this machine's: dynamic binaries, their libraries copied along) or
    /// `aarch64` (static binaries).
    pub arch: &'static str,
    pub lockpath: PathBuf,
    /// Workloads and checkers of the `lockpath-tests` crate.
    pub workloads: Vec<PathBuf>,
}

/// The architectures of the lab kernels `only` selects (all when `None`).
pub fn arches(only: Option<&str>) -> Vec<&'static str> {
    let mut arches: Vec<&'static str> = KERNELS
        .iter()
        .filter(|kernel| kernel.selected(only))
        .map(|kernel| kernel.arch)
        .collect();
    arches.dedup();
    arches
}

pub fn vm_test(binaries: &[GuestBinaries], only: Option<&str>) -> Result<()> {
    let started = Instant::now();
    if let Some(name) = only {
        if !KERNELS.iter().any(|kernel| kernel.name == name) {
            bail!(
                "vm-test: no lab kernel named {name}; known: {}",
                util::comma_list(KERNELS.iter().map(|k| k.name))
            );
        }
    }
    TemporarySuite::remove_leftovers();
    ensure_host_tools()?;
    let vm_dir = util::target_dir()?.join("vm");
    let mut images = Vec::new();
    for kernel in KERNELS.iter().filter(|kernel| kernel.selected(only)) {
        images.push((kernel, kernel_image(&vm_dir, kernel)?));
    }
    let mut initrds = Vec::new();
    for guest in binaries {
        initrds.push((guest.arch, build_initramfs(&vm_dir, guest)?));
    }
    let mut failures = Vec::new();
    let mut passed = Vec::new();
    for (kernel, vmlinuz) in images {
        let Some((_, initrd)) = initrds.iter().find(|(arch, _)| *arch == kernel.arch) else {
            bail!("vm-test: no guest binaries were built for {}", kernel.arch);
        };
        match boot(&vm_dir, kernel, &vmlinuz, initrd) {
            Ok(summary) => {
                util::say(format!("vm {}: {summary}", kernel.name));
                passed.push(kernel.name);
            }
            Err(err) => {
                util::say(format!("vm {}: FAILED: {err:#}", kernel.name));
                failures.push(kernel.name);
            }
        }
    }
    for reference in KERNELS
        .iter()
        .filter(|kernel| passed.contains(&kernel.name))
    {
        let Some(name) = reference.reference_for.filter(|name| passed.contains(name)) else {
            continue;
        };
        let serial = |kernel: &str| {
            std::fs::read_to_string(vm_dir.join(format!("guest-{kernel}.log"))).unwrap_or_default()
        };
        match protocol::compare_slab_names(&serial(name), &serial(reference.name)) {
            Ok(summary) => util::say(format!("vm {name} against {}: {summary}", reference.name)),
            Err(why) => {
                util::say(format!(
                    "vm {name} against {}: FAILED: slab lock names: {why}",
                    reference.name
                ));
                failures.push(name);
            }
        }
    }
    if !failures.is_empty() {
        bail!(
            "vm-test: checks failed on kernel(s) {} (guest logs above and in {})",
            failures.join(", "),
            vm_dir.display()
        );
    }
    util::say(format!(
        "vm-test: all lab kernels passed in {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// Installs qemu, cpio and busybox-static with apt-get when missing.
fn ensure_host_tools() -> Result<()> {
    let mut missing: Vec<&str> = HOST_TOOLS
        .iter()
        .filter(|(command, _)| util::find_in_path(command).is_none())
        .map(|(_, package)| *package)
        .collect();
    if !is_static_busybox(Path::new(BUSYBOX_STATIC)) {
        missing.push("busybox-static");
    }
    if missing.is_empty() {
        return Ok(());
    }
    let manual = format!("apt-get install -y {}", missing.join(" "));
    if !util::is_root().unwrap_or(false) || util::find_in_path("apt-get").is_none() {
        bail!("vm-test: missing host tools; as root run `{manual}`");
    }
    util::say(format!("installing VM tools: {}", missing.join(" ")));
    apt(&["update", "-q"], "apt-get update")?;
    let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
    args.extend(&missing);
    apt(&args, "installing VM tools")?;
    if !is_static_busybox(Path::new(BUSYBOX_STATIC)) {
        bail!("vm-test: {BUSYBOX_STATIC} is not a static busybox after `{manual}`; install busybox-static by hand");
    }
    Ok(())
}

/// A static busybox has no program interpreter (`ldd` says so).
fn is_static_busybox(path: &Path) -> bool {
    if !path.is_file() {
        return false;
    }
    match Command::new("ldd").arg(path).output() {
        Ok(output) => {
            let text = String::from_utf8_lossy(&output.stdout).to_string()
                + &String::from_utf8_lossy(&output.stderr);
            text.contains("not a dynamic executable") || text.contains("statically linked")
        }
        Err(_) => false,
    }
}

/// apt-get with a lock timeout: other engineers' builds may hold the dpkg lock.
fn apt(args: &[&str], step: &str) -> Result<()> {
    let mut cmd = Command::new("apt-get");
    cmd.args(["-o", "DPkg::Lock::Timeout=300"])
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive");
    util::run(
        &mut cmd,
        step,
        "check network access to deb.debian.org and rerun",
    )
}
