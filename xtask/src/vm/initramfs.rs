//! The guest's root file system: busybox, lockpath, the workloads, their libraries,
//! the fuse module and the checks.

use std::{
    collections::BTreeMap,
    fs,
    os::unix::fs::{symlink, PermissionsExt as _},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};

use crate::util;

use super::{GuestBinaries, BUSYBOX_STATIC};

/// Builds `target/vm/initramfs-ARCH.cpio.gz` afresh (binaries change between runs).
pub(super) fn build_initramfs(vm_dir: &Path, binaries: &GuestBinaries) -> Result<PathBuf> {
    let arch = binaries.arch;
    let root = vm_dir.join(format!("initramfs-{arch}"));
    if root.exists() {
        fs::remove_dir_all(&root).with_context(|| format!("cannot remove {}", root.display()))?;
    }
    for dir in ["bin", "proc", "sys", "dev", "tmp", "checks", "bench", "etc"] {
        fs::create_dir_all(root.join(dir))
            .with_context(|| format!("cannot create {}", root.join(dir).display()))?;
    }
    let bin = root.join("bin");
    copy_executable(&busybox(vm_dir, arch)?, &bin.join("busybox"))?;
    // Debian's busybox-static of one release has the same applets on every architecture.
    for applet in busybox_applets()? {
        let link = bin.join(&applet);
        if !link.exists() {
            symlink("busybox", &link).with_context(|| format!("cannot link {}", link.display()))?;
        }
    }
    // lockpath by its own name (the dist binary is `lockpath-aarch64-linux-musl`).
    copy_executable(&binaries.lockpath, &bin.join("lockpath"))?;
    let mut elf = vec![binaries.lockpath.clone()];
    elf.extend(binaries.workloads.iter().cloned());
    for binary in &binaries.workloads {
        let name = binary
            .file_name()
            .with_context(|| format!("{} has no file name", binary.display()))?;
        copy_executable(binary, &bin.join(name))?;
    }
    // The host's binaries are dynamic; another architecture's are static.
    let libraries = match arch == std::env::consts::ARCH {
        true => shared_libraries(&elf)?,
        false => Vec::new(),
    };
    for library in libraries {
        let inside = root.join(library.strip_prefix("/").unwrap_or(&library));
        if let Some(parent) = inside.parent() {
            fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        // fs::copy follows symlinks: the guest gets the library under the name ldd gave.
        fs::copy(&library, &inside)
            .with_context(|| format!("cannot copy {} into the initramfs", library.display()))?;
    }
    copy_guest_modules(vm_dir, &root, arch)?;
    let vm_sources = util::workspace_root().join("tests/vm");
    copy_executable(&vm_sources.join("init"), &root.join("init"))?;
    let checks = fs::read_dir(vm_sources.join("checks"))
        .with_context(|| format!("cannot list {}", vm_sources.join("checks").display()))?;
    for entry in checks.filter_map(|entry| entry.ok()) {
        let path = entry.path();
        // The checks (*.sh) and their helpers (lib); not the README.
        if path.is_file() && path.extension().is_none_or(|ext| ext != "md") {
            copy_executable(&path, &root.join("checks").join(entry.file_name()))?;
        }
    }

    let benches = fs::read_dir(vm_sources.join("bench"))
        .with_context(|| format!("cannot list {}", vm_sources.join("bench").display()))?;
    for entry in benches.filter_map(|entry| entry.ok()) {
        if entry.path().extension().is_some_and(|ext| ext == "sh") {
            copy_executable(&entry.path(), &root.join("bench").join(entry.file_name()))?;
        }
    }

    let initrd = vm_dir.join(format!("initramfs-{arch}.cpio.gz"));
    let script = format!(
        "cd '{}' && find . | cpio -o -H newc --quiet | gzip -1 > '{}'",
        root.display(),
        initrd.display()
    );
    util::run(
        Command::new("sh").args(["-c", &script]),
        "vm-test (packing the initramfs)",
        "check that cpio and gzip are installed",
    )?;
    Ok(initrd)
}

/// Kernel modules the checks need, from every unpacked lab kernel, as
/// `/lib/modules/<release>/<name>.ko` (the guest's init loads them with insmod): FUSE,
/// for the fixture whose delayed CREATE holds a directory's inode lock; loop, for the
/// block devices of the IO check (absent when built in).
const GUEST_MODULES: &[&str] = &["kernel/fs/fuse/fuse.ko", "kernel/drivers/block/loop.ko"];

fn copy_guest_modules(vm_dir: &Path, root: &Path, arch: &str) -> Result<()> {
    let Ok(kernels) = fs::read_dir(vm_dir.join("kernels")) else {
        return Ok(());
    };
    // Debian names its arm64 kernel packages `...-arm64-...`.
    let arm64 = arch == "aarch64";
    let kernels = kernels
        .filter_map(|entry| entry.ok())
        .filter(|kernel| kernel.file_name().to_string_lossy().contains("-arm64") == arm64);
    for kernel in kernels {
        // Debian from trixie on ships its modules under /usr (merged /usr).
        let releases = ["lib/modules", "usr/lib/modules"]
            .iter()
            .filter_map(|dir| fs::read_dir(kernel.path().join(dir)).ok())
            .flatten();
        for release in releases.filter_map(|entry| entry.ok()) {
            for module in GUEST_MODULES {
                let from = release.path().join(module);
                // Newer Debian kernels ship their modules xz-compressed, which busybox's
                // insmod cannot load: those are unpacked here.
                let compressed = release.path().join(format!("{module}.xz"));
                if !from.is_file() && !compressed.is_file() {
                    continue;
                }
                let dir = root.join("lib/modules").join(release.file_name());
                fs::create_dir_all(&dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
                let name = Path::new(module)
                    .file_name()
                    .with_context(|| format!("{module} has no file name"))?;
                if from.is_file() {
                    fs::copy(&from, dir.join(name)).with_context(|| {
                        format!("cannot copy {} into the initramfs", from.display())
                    })?;
                } else {
                    let unpacked = util::capture_bytes(
                        Command::new("xz").arg("-dc").arg(&compressed),
                        "vm-test (unpacking a kernel module)",
                        "install xz-utils (cargo xtask setup does)",
                    )?;
                    fs::write(dir.join(name), unpacked).with_context(|| {
                        format!("cannot write {} into the initramfs", compressed.display())
                    })?;
                }
            }
        }
    }
    Ok(())
}

fn copy_executable(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to)
        .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    fs::set_permissions(to, fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {} executable", to.display()))
}

/// A static busybox for the guest: the host's, or Debian's busybox-static of `arch`
/// unpacked under target/vm/.
fn busybox(vm_dir: &Path, arch: &str) -> Result<PathBuf> {
    if arch == std::env::consts::ARCH {
        return Ok(PathBuf::from(BUSYBOX_STATIC));
    }
    let unpacked = vm_dir.join(format!("busybox-{arch}"));
    let binary = unpacked.join("bin/busybox");
    if !binary.is_file() {
        let deb = crate::cross::arm64_deb("busybox-static", &vm_dir.join("debs"))?;
        crate::cross::unpack(&deb, &unpacked)?;
    }
    Ok(binary)
}

fn busybox_applets() -> Result<Vec<String>> {
    let list = util::capture(
        Command::new(BUSYBOX_STATIC).arg("--list"),
        "vm-test (busybox applets)",
        "reinstall busybox-static",
    )?;
    Ok(list
        .lines()
        .map(str::trim)
        .filter(|name| !name.is_empty() && !name.contains('/'))
        .map(String::from)
        .collect())
}

/// Every library (and the program interpreter) that `ldd` lists for `binaries`.
fn shared_libraries(binaries: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut found = BTreeMap::new();
    for binary in binaries {
        let text = util::capture(
            Command::new("ldd").arg(binary),
            "vm-test (ldd)",
            "the test binaries must be dynamic ELF executables for this host",
        )?;
        for line in text.lines() {
            // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` or
            // `/lib64/ld-linux-x86-64.so.2 (0x...)`; `linux-vdso.so.1 (0x...)` has no file.
            let path = match line.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next(),
                None => line.split_whitespace().next(),
            };
            if let Some(path) = path.filter(|path| path.starts_with('/')) {
                found.insert(PathBuf::from(path), ());
            }
        }
    }
    Ok(found.into_keys().collect())
}
