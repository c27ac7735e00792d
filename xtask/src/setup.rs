//! `cargo xtask setup`: the toolchain pieces (nightly rust-src, bpf-linker built against
//! the nightly toolchain's own LLVM; the README's "Two commands"), installed
//! idempotently. A no-op run only asks rustup and bpf-linker two questions.

use std::{
    fs,
    os::unix::fs::symlink,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{anyhow, bail, Context as _, Result};

use crate::util;

pub const BPF_LINKER_VERSION: &str = "0.13.0";
/// LLVM majors that bpf-linker 0.13.0 has `llvm-<major>` features for.
const SUPPORTED_LLVM: &[&str] = &["21", "22", "23"];

/// What later steps need from setup.
pub struct Tools {
    /// Directory holding a working `bpf-linker`; goes on PATH for the eBPF build.
    pub bin_dir: PathBuf,
}

pub fn ensure() -> Result<Tools> {
    ensure_rust_src()?;
    let bin_dir = util::install_bin_dir().context("setup: cannot locate cargo's bin directory")?;
    let linker = bin_dir.join("bpf-linker");
    match linker_version(&linker) {
        Ok(()) => {}
        Err(why) => {
            util::say(format!("bpf-linker needs (re)building: {why}"));
            install_bpf_linker()?;
            linker_version(&linker).map_err(|why| {
                anyhow!(
                    "setup step 2/2 (bpf-linker): installed, but {why}; \
                     check `install.root` in cargo's config and rerun `cargo xtask setup`"
                )
            })?;
        }
    }
    util::say(format!(
        "setup ok: rust-src (nightly) and bpf-linker {BPF_LINKER_VERSION} at {}",
        linker.display()
    ));
    Ok(Tools { bin_dir })
}

fn ensure_rust_src() -> Result<()> {
    const STEP: &str = "setup step 1/2 (rust-src for nightly)";
    let installed = util::capture(
        util::isolated("rustup").args([
            "component",
            "list",
            "--toolchain",
            "nightly",
            "--installed",
        ]),
        STEP,
        "install rustup and the nightly toolchain (`rustup toolchain install nightly`)",
    )?;
    if installed.lines().any(|line| line.trim() == "rust-src") {
        return Ok(());
    }
    util::say("installing rust-src for the nightly toolchain");
    util::run(
        util::isolated("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]),
        STEP,
        "check network access to static.rust-lang.org, then rerun `cargo xtask setup`",
    )
}

/// Ok when `linker --version` runs and reports the pinned version. A binary
/// whose libLLVM went away (e.g. nightly was updated) fails to start here.
fn linker_version(linker: &Path) -> std::result::Result<(), String> {
    let output = Command::new(linker)
        .arg("--version")
        .output()
        .map_err(|err| format!("{} cannot be started ({err})", linker.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let wanted = format!("bpf-linker {BPF_LINKER_VERSION}");
    if output.status.success() && stdout.lines().any(|line| line.trim() == wanted) {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let said = stdout
        .lines()
        .chain(stderr.lines())
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("nothing");
    Err(format!(
        "`{} --version` said `{said}` ({}), not `{wanted}`",
        linker.display(),
        output.status
    ))
}

/// Builds bpf-linker against the nightly toolchain's own libLLVM (no system LLVM).
fn install_bpf_linker() -> Result<()> {
    const STEP: &str = "setup step 2/2 (bpf-linker)";
    let nightly_hint = "install the nightly toolchain (`rustup toolchain install nightly`)";

    let sysroot = util::capture(
        util::isolated("rustc").args(["+nightly", "--print", "sysroot"]),
        STEP,
        nightly_hint,
    )?;
    let sysroot = PathBuf::from(sysroot.trim());
    let version = util::capture(
        util::isolated("rustc").args(["+nightly", "-vV"]),
        STEP,
        nightly_hint,
    )?;
    let major = llvm_major(&version).ok_or_else(|| {
        anyhow!("{STEP}: no `LLVM version:` line in `rustc +nightly -vV`; {nightly_hint}")
    })?;
    if !SUPPORTED_LLVM.contains(&major) {
        bail!(
            "{STEP}: nightly uses LLVM {major} but bpf-linker {BPF_LINKER_VERSION} supports LLVM {}; \
             pin a nightly with a supported LLVM in profiler-ebpf/rust-toolchain.toml",
            SUPPORTED_LLVM.join("/")
        );
    }
    let libllvm = find_libllvm(&sysroot.join("lib")).map_err(|why| anyhow!("{STEP}: {why}"))?;
    let prefix = llvm_prefix(&libllvm).map_err(|err| anyhow!("{STEP}: {err:#}"))?;

    let mut cmd = util::isolated("cargo");
    cmd.args(["install", "bpf-linker", "--version", BPF_LINKER_VERSION])
        // --force: we only get here when the installed one does not work.
        .args(["--locked", "--force", "--no-default-features", "--features"])
        .arg(format!("llvm-{major}"))
        .env("LLVM_PREFIX", &prefix)
        // Outside the workspace, so its .cargo/config.toml and toolchain files do not apply.
        .current_dir(prefix.parent().unwrap_or(&prefix));
    if let Some(root) = util::install_root() {
        cmd.arg("--root").arg(root);
    }
    util::say(format!(
        "building bpf-linker {BPF_LINKER_VERSION} against {} (LLVM {major}); takes 1-2 minutes",
        libllvm.display()
    ));
    util::run(
        &mut cmd,
        STEP,
        "see cargo's output above (a C++ toolchain, gcc and libstdc++, is needed), then rerun `cargo xtask setup`",
    )
}

/// `LLVM version: 22.1.4` -> `22`.
fn llvm_major(rustc_vv: &str) -> Option<&str> {
    rustc_vv
        .lines()
        .find_map(|line| line.strip_prefix("LLVM version:"))
        .and_then(|version| version.trim().split('.').next())
        .filter(|major| !major.is_empty())
}

/// The toolchain's `lib/libLLVM.so.*` (not the `libLLVM-<major>-...so` alias).
fn find_libllvm(lib_dir: &Path) -> std::result::Result<PathBuf, String> {
    let entries = fs::read_dir(lib_dir).map_err(|err| {
        format!(
            "cannot list {} ({err}); reinstall nightly with `rustup toolchain install nightly --force`",
            lib_dir.display()
        )
    })?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok())
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .starts_with("libLLVM.so.")
        })
        .map(|entry| entry.path())
        .collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(format!(
            "no libLLVM.so.* in {}; this nightly does not ship libLLVM, use a nightly that does",
            lib_dir.display()
        )),
        _ => Err(format!(
            "several libLLVM.so.* in {}; reinstall nightly with `rustup toolchain install nightly --force`",
            lib_dir.display()
        )),
    }
}

/// `~/.cache/lockpath/llvm-prefix` with `lib/libLLVM.so` and `lib/<soname>`
/// linking to the toolchain's library. It lives outside target/ because the
/// installed bpf-linker keeps an rpath to `lib/` and must outlive `cargo clean`.
fn llvm_prefix(libllvm: &Path) -> Result<PathBuf> {
    let file_name = libllvm
        .file_name()
        .context("libLLVM path has no file name")?;
    let prefix = util::home()?.join(".cache/lockpath/llvm-prefix");
    let lib = prefix.join("lib");
    fs::create_dir_all(&lib).with_context(|| {
        format!(
            "cannot create {}; make $HOME writable or set HOME",
            lib.display()
        )
    })?;
    // Drop links to libraries of earlier nightlies.
    let entries = fs::read_dir(&lib).with_context(|| format!("cannot list {}", lib.display()))?;
    for entry in entries.filter_map(|entry| entry.ok()) {
        if entry.file_name().to_string_lossy().starts_with("libLLVM") {
            fs::remove_file(entry.path())
                .with_context(|| format!("cannot remove {}", entry.path().display()))?;
        }
    }
    for name in [std::ffi::OsStr::new("libLLVM.so"), file_name] {
        let link = lib.join(name);
        symlink(libllvm, &link)
            .with_context(|| format!("cannot link {} -> {}", link.display(), libllvm.display()))?;
    }
    Ok(prefix)
}

/// Debian tools the integration tests call, by command and package.
const TEST_TOOLS: &[(&str, &str)] = &[
    ("bpftool", "bpftool"),
    ("perf", "linux-perf"),
    ("bpftrace", "bpftrace"),
    // The IO-path test: ext4 on a loop device.
    ("mkfs.ext4", "e2fsprogs"),
    ("losetup", "mount"),
    // The exporters' tests: HTML report in a real browser, pprof reader, metrics scraper.
    ("chromium", "chromium"),
    ("chromedriver", "chromium-driver"),
    ("go", "golang-go"),
    ("prometheus", "prometheus"),
    ("script", "bsdutils"),
    // User stacks without frame pointers: a C workload built in the test, and a
    // packaged program built without frame pointers.
    ("cc", "gcc"),
    ("objcopy", "binutils"),
    ("xz", "xz-utils"),
    ("fio", "fio"),
    // The dist tests: the static binary, a bullseye chroot for the .deb, the .rpm's files.
    ("file", "file"),
    ("debootstrap", "debootstrap"),
    ("rpm", "rpm"),
    // The static aarch64 binary, run on this machine by QEMU's user-mode emulator.
    ("qemu-aarch64-static", "qemu-user-static"),
    // The lock-name tests: the kernel's file, futex and mutex paths under contention.
    ("stress-ng", "stress-ng"),
];

/// Installs missing test tools with apt-get when root. Never fails: the tests
/// that need a missing tool report it themselves.
pub fn ensure_test_tools() {
    let missing: Vec<(&str, &str)> = TEST_TOOLS
        .iter()
        .copied()
        .filter(|(command, _)| util::find_in_path(command).is_none())
        .collect();
    if missing.is_empty() {
        return;
    }
    let commands: Vec<&str> = missing.iter().map(|(command, _)| *command).collect();
    let packages: Vec<&str> = missing.iter().map(|(_, package)| *package).collect();
    let manual = format!("apt-get install -y {}", packages.join(" "));
    if !util::is_root().unwrap_or(false) {
        util::say(format!(
            "warning: test tools missing ({}); as root run `{manual}`",
            commands.join(", ")
        ));
        return;
    }
    if util::find_in_path("apt-get").is_none() {
        util::say(format!(
            "warning: test tools missing ({}) and no apt-get; install them by hand",
            commands.join(", ")
        ));
        return;
    }
    util::say(format!("installing test tools: {}", packages.join(" ")));
    let mut update = Command::new("apt-get");
    update.args(["update", "-q"]);
    if let Err(err) = util::run(
        &mut update,
        "apt-get update",
        "continuing with the cached package lists",
    ) {
        util::say(format!("warning: {err:#}"));
    }
    let mut install = Command::new("apt-get");
    install
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(&packages)
        .env("DEBIAN_FRONTEND", "noninteractive");
    if let Err(err) = util::run(
        &mut install,
        "installing test tools",
        "tests that need them will fail or skip",
    ) {
        util::say(format!("warning: {err:#}"));
    }
}

/// Packaging tools of `cargo xtask dist`, pinned (both build with the stable toolchain).
const DIST_TOOLS: &[(&str, &str)] = &[("cargo-deb", "3.8.0"), ("cargo-generate-rpm", "0.21.1")];

/// What `cargo xtask dist` needs beyond `ensure`: the rustup target of the static
/// binary, musl-gcc for the C code of its dependencies (mimalloc, liblzma), and the
/// pinned packaging tools. Idempotent; a no-op run asks rustup and each tool once.
pub fn ensure_dist_tools(target: &str) -> Result<()> {
    const STEP: &str = "dist setup";
    let installed = util::capture(
        util::isolated("rustup").args(["target", "list", "--installed"]),
        STEP,
        "install rustup",
    )?;
    if !installed.lines().any(|line| line.trim() == target) {
        util::say(format!("adding the rustup target {target}"));
        util::run(
            util::isolated("rustup").args(["target", "add", target]),
            STEP,
            "check network access to static.rust-lang.org",
        )?;
    }
    if util::find_in_path("musl-gcc").is_none() {
        apt_install(&["musl-tools"]).context("musl-gcc is missing")?;
    }
    let bin_dir = util::install_bin_dir()?;
    for (tool, version) in DIST_TOOLS {
        let path = bin_dir.join(tool);
        let said = Command::new(&path)
            .arg("--version")
            .output()
            .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
            .unwrap_or_default();
        if said.split_whitespace().any(|word| word == *version) {
            continue;
        }
        util::say(format!("installing {tool} {version} (a few minutes)"));
        let mut cmd = util::isolated("cargo");
        cmd.args(["install", tool, "--version", version, "--locked", "--force"])
            // Outside the workspace, so its config does not apply.
            .current_dir(&bin_dir);
        if let Some(root) = util::install_root() {
            cmd.arg("--root").arg(root);
        }
        util::run(&mut cmd, STEP, "see cargo's output above")?;
    }
    Ok(())
}

/// `apt-get install` of `packages` (root only), after one `apt-get update`.
pub fn apt_install(packages: &[&str]) -> Result<()> {
    let manual = format!("apt-get install -y {}", packages.join(" "));
    if !util::is_root().unwrap_or(false) || util::find_in_path("apt-get").is_none() {
        bail!("as root run `{manual}`");
    }
    util::say(format!("installing {}", packages.join(" ")));
    let mut update = Command::new("apt-get");
    update.args(["update", "-q"]);
    if let Err(err) = util::run(&mut update, "apt-get update", "using the cached lists") {
        util::say(format!("warning: {err:#}"));
    }
    util::run(
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive"),
        "apt-get install",
        &format!("run `{manual}` by hand"),
    )
}
