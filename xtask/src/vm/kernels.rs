//! The lab's kernels: Debian packages, downloaded and unpacked once under target/vm/.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{anyhow, bail, Context as _, Result};

use crate::util;

use super::apt;

/// A kernel of the lab and what the checks may expect of it.
pub(super) struct LabKernel {
    /// Short name, passed to the guest as `lockpath.lab=`.
    pub(super) name: &'static str,
    /// The Debian package with the kernel image (`boot/vmlinuz-*`, or
    /// `usr/lib/modules/*/vmlinuz` from 7.0 on)...
    pub(super) package: &'static str,
    /// ...and packages unpacked beside it (from 7.0 on the modules have their own).
    pub(super) more_packages: &'static [&'static str],
    /// `x86_64` or `aarch64`: which QEMU boots it and which binaries its guest gets.
    pub(super) arch: &'static str,
    /// Debian suite to add temporarily when the package is not in the host's lists.
    pub(super) suite: Option<&'static str>,
    /// Hooks this kernel offers, passed as `lockpath.features=`; checks skip (exit 77)
    /// only when a hook they need is not listed here.
    pub(super) features: &'static [&'static str],
    /// Checks that must PASS on this kernel (a SKIP of one of them is a failure), in
    /// lists...
    pub(super) required: &'static [&'static [&'static str]],
    /// ...but these, which this kernel's build cannot run (they must say why and skip).
    pub(super) excused: &'static [&'static str],
    /// Words added to the kernel's command line (`slab_nomerge`).
    pub(super) cmdline: &'static str,
    /// Run only these checks (passed as `lockpath.checks=`); every check when empty.
    pub(super) only: &'static [&'static str],
    /// A `slab_nomerge` boot: the lab kernel whose slab lock names it is the reference
    /// for (`protocol::compare_slab_names`); `vm-test NAME` boots it too.
    pub(super) reference_for: Option<&'static str>,
}

impl LabKernel {
    /// Whether `vm-test ONLY` boots this kernel (all of them without a name).
    pub(super) fn selected(&self, only: Option<&str>) -> bool {
        only.is_none_or(|name| name == self.name || self.reference_for == Some(name))
    }
}

/// The checks that must pass on a kernel with kprobes and fentry, with or without the
/// lock tracepoints.
const WITH_KPROBES: &[&str] = &[
    "lock-auto",
    "lock-kprobe",
    "lock-filter-kprobe",
    "func-fentry",
    "func-kprobe",
    "hold-fentry",
    "hold-kprobe",
    "hold-bad-lock",
    "hold-symbol",
    "hold-contended",
    "io-requests",
    "cpu-unwind",
    "offcpu-file-lock",
    "lock-cgroup",
    "stuck-before-start",
    "lock-names-kallsyms",
];

/// The checks that must also pass on a kernel with the lock tracepoints.
const WITH_LOCK_TRACEPOINTS: &[&str] = &[
    "lock-tracepoint",
    "lock-names",
    "wakers",
    "lock-spin-vm",
    "lock-paths",
    "stacks-spare",
];

/// What the lab's kernels have unless they say otherwise: an x86_64 kernel of the host's
/// suite with the lock tracepoints, kprobes and fentry, booted as distributions boot it,
/// and every check run. `name` and `package` are always given.
const DEFAULTS: LabKernel = LabKernel {
    name: "",
    package: "",
    more_packages: &[],
    arch: "x86_64",
    suite: None,
    features: &["lock_tracepoint", "kprobe", "fentry"],
    required: &[WITH_KPROBES, WITH_LOCK_TRACEPOINTS],
    excused: &[],
    cmdline: "",
    only: &[],
    reference_for: None,
};

// Debian's newest kernel (trixie-backports), with `bpf_get_kmem_cache` (6.13): slab lock
// names. Booted twice: as distributions run it (SLUB merges caches of one size and
// flags) and with `slab_nomerge` (every cache its own), the reference the merged boot's
// names are compared with (`lab-check slab-names`).
const KERNEL_7_3: LabKernel = LabKernel {
    name: "7.3",
    package: "linux-binary-7.3.4+deb13-cloud-amd64",
    more_packages: &["linux-modules-7.3.4+deb13-cloud-amd64"],
    suite: Some("trixie-backports"),
    features: &["lock_tracepoint", "kprobe", "fentry", "slab_names"],
    required: &[WITH_KPROBES, WITH_LOCK_TRACEPOINTS, &["lock-names-slab"]],
    // Its /proc/kallsyms lists no data symbols (the check says so and skips).
    excused: &["lock-names-kallsyms"],
    ..DEFAULTS
};

pub(super) const KERNELS: &[LabKernel] = &[
    LabKernel {
        name: "6.12",
        package: "linux-image-6.12.117+deb13-cloud-amd64-unsigned",
        suite: Some("trixie"),
        ..DEFAULTS
    },
    LabKernel {
        name: "6.1",
        package: "linux-image-6.1.0-50-cloud-amd64-unsigned",
        ..DEFAULTS
    },
    LabKernel {
        name: "5.10",
        package: "linux-image-5.10.0-32-cloud-amd64-unsigned",
        suite: Some("bullseye"),
        features: &["kprobe", "fentry"],
        required: &[WITH_KPROBES, &["lock-no-tracepoint"]],
        ..DEFAULTS
    },
    LabKernel {
        name: "6.1-arm64",
        package: "linux-image-6.1.0-50-cloud-arm64-unsigned",
        arch: "aarch64",
        // No fentry: arm64 attaches BPF trampolines to kernel functions from 6.4 on
        // (ftrace direct calls); 6.1 refuses with ENOTSUPP and lockpath uses kprobes.
        features: &["lock_tracepoint", "kprobe"],
        // The checks this kernel cannot run, each of which says so and skips: the fentry
        // ones (func-fentry checks here that lockpath says so in one line); those that
        // need data symbols, which Debian's arm64 cloud kernel lacks (no
        // CONFIG_KALLSYMS_ALL); and virt_spin_lock's, which is x86-only.
        excused: &[
            "hold-fentry",
            "hold-symbol",
            "lock-names-kallsyms",
            "lock-spin-vm",
        ],
        ..DEFAULTS
    },
    KERNEL_7_3,
    // Its reference: every cache its own, only the slab-name check.
    LabKernel {
        name: "7.3-nomerge",
        required: &[&["lock-names-slab"]],
        excused: &[],
        cmdline: "slab_nomerge",
        only: &["lock-names-slab"],
        reference_for: Some("7.3"),
        ..KERNEL_7_3
    },
];

/// `target/vm/kernels/<package>/boot/vmlinuz-*` (or `usr/lib/modules/*/vmlinuz`),
/// downloading and unpacking the kernel's packages once.
pub(super) fn kernel_image(vm_dir: &Path, kernel: &LabKernel) -> Result<PathBuf> {
    let unpacked = vm_dir.join("kernels").join(kernel.package);
    if let Some(vmlinuz) = find_vmlinuz(&unpacked) {
        return Ok(vmlinuz);
    }
    let partial = vm_dir
        .join("kernels")
        .join(format!("{}.partial", kernel.package));
    if partial.exists() {
        fs::remove_dir_all(&partial)
            .with_context(|| format!("cannot remove {}", partial.display()))?;
    }
    fs::create_dir_all(&partial).with_context(|| format!("cannot create {}", partial.display()))?;
    for package in std::iter::once(kernel.package).chain(kernel.more_packages.iter().copied()) {
        let deb = download_deb(&vm_dir.join("debs"), kernel, package)?;
        util::say(format!("unpacking {}", deb.display()));
        util::run(
            Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&partial),
            "vm-test (unpacking the kernel)",
            "remove target/vm/debs and rerun to download it again",
        )?;
    }
    fs::rename(&partial, &unpacked).with_context(|| {
        format!(
            "cannot rename {} to {}",
            partial.display(),
            unpacked.display()
        )
    })?;
    find_vmlinuz(&unpacked).ok_or_else(|| {
        anyhow!(
            "vm-test: {} has no boot/vmlinuz-* nor usr/lib/modules/*/vmlinuz; remove it and rerun",
            unpacked.display()
        )
    })
}

fn find_vmlinuz(unpacked: &Path) -> Option<PathBuf> {
    let in_boot = fs::read_dir(unpacked.join("boot"))
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .find(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("vmlinuz-"))
        });
    in_boot.or_else(|| {
        fs::read_dir(unpacked.join("usr/lib/modules"))
            .ok()?
            .filter_map(|entry| entry.ok())
            .map(|release| release.path().join("vmlinuz"))
            .find(|path| path.is_file())
    })
}

fn download_deb(debs: &Path, kernel: &LabKernel, package: &str) -> Result<PathBuf> {
    if let Some(deb) = crate::cross::cached_deb(debs, package) {
        return Ok(deb);
    }
    if kernel.arch == "aarch64" {
        return crate::cross::arm64_deb(package, debs);
    }
    fs::create_dir_all(debs).with_context(|| format!("cannot create {}", debs.display()))?;
    if !util::is_root().unwrap_or(false) {
        bail!(
            "vm-test: kernel {} is not cached in {} and downloading it needs root (apt-get); rerun as root",
            package,
            debs.display()
        );
    }
    let _suite = match kernel.suite {
        Some(suite) => Some(TemporarySuite::add(suite)?),
        None => None,
    };
    util::say(format!("downloading {}", package));
    let mut cmd = Command::new("apt-get");
    cmd.args(["download", "-q", package]).current_dir(debs);
    util::run(
        &mut cmd,
        "vm-test (downloading the kernel)",
        "check network access to deb.debian.org and rerun",
    )?;
    crate::cross::cached_deb(debs, package).ok_or_else(|| {
        anyhow!(
            "vm-test: apt-get download succeeded but no {}_*.deb is in {}",
            package,
            debs.display()
        )
    })
}

/// A Debian suite in its own list file, for as long as this value lives. Dropping it
/// removes the file and refreshes the lists, so the host's sources are as before
/// (debian.sources is never touched).
pub(super) struct TemporarySuite {
    list: PathBuf,
}

const LIST_DIR: &str = "/etc/apt/sources.list.d";
const LIST_PREFIX: &str = "lockpath-vm-";

impl TemporarySuite {
    fn add(suite: &str) -> Result<Self> {
        let list = Path::new(LIST_DIR).join(format!("{LIST_PREFIX}{suite}.list"));
        fs::write(
            &list,
            format!("deb http://deb.debian.org/debian {suite} main\n"),
        )
        .with_context(|| format!("cannot write {}", list.display()))?;
        let added = TemporarySuite { list };
        // On failure `added` is dropped here, which removes the list again.
        apt(
            &["update", "-q"],
            "apt-get update (with the temporary suite)",
        )?;
        Ok(added)
    }
}

impl TemporarySuite {
    /// A run killed while downloading (SIGKILL, Ctrl-C) cannot run `drop`: its list file
    /// is removed here, at the start of the next run, and the lists refreshed.
    pub(super) fn remove_leftovers() {
        let Ok(entries) = fs::read_dir(LIST_DIR) else {
            return;
        };
        let leftovers: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.file_name().to_string_lossy().starts_with(LIST_PREFIX))
            .map(|entry| entry.path())
            .collect();
        if leftovers.is_empty() {
            return;
        }
        for list in &leftovers {
            util::say(format!(
                "removing {} left by an interrupted run",
                list.display()
            ));
            if let Err(err) = fs::remove_file(list) {
                util::say(format!("warning: cannot remove {} ({err})", list.display()));
            }
        }
        if let Err(err) = apt(&["update", "-q"], "apt-get update (leftover suite removed)") {
            util::say(format!("warning: {err:#}"));
        }
    }
}

impl Drop for TemporarySuite {
    fn drop(&mut self) {
        if let Err(err) = fs::remove_file(&self.list) {
            util::say(format!(
                "warning: cannot remove {} ({err}); remove it by hand and run apt-get update",
                self.list.display()
            ));
        }
        if let Err(err) = apt(
            &["update", "-q"],
            "apt-get update (temporary suite removed)",
        ) {
            util::say(format!("warning: {err:#}"));
        }
    }
}
