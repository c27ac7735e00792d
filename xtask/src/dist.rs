//! `cargo xtask dist`: `lockpath` statically linked for x86_64 and aarch64 musl
//! (stripped, the eBPF object of the same architecture embedded), its man page and shell
//! completions, and a .deb and an .rpm (x86_64) holding them with the systemd unit
//! (installed disabled), all in `target/dist/`.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

use crate::{build, cross, setup, util};

/// A static build: the Rust target, the architecture of its eBPF object, and the env
/// var of its target-only rust flags (host build scripts keep theirs).
pub struct StaticTarget {
    pub triple: &'static str,
    pub arch: &'static str,
    rustflags_env: &'static str,
}

pub const X86_64: StaticTarget = StaticTarget {
    triple: "x86_64-unknown-linux-musl",
    arch: "x86_64",
    rustflags_env: "CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUSTFLAGS",
};

pub const AARCH64: StaticTarget = StaticTarget {
    triple: "aarch64-unknown-linux-musl",
    arch: "aarch64",
    rustflags_env: "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_RUSTFLAGS",
};

/// The Rust target of the packaged binary.
pub const TARGET: &str = X86_64.triple;
/// The cargo profile of the static binary (workspace Cargo.toml: release, no debug
/// info, stripped).
const PROFILE: &str = "static";
/// Where the packaging tools' `target/release/` prefix points for this build.
const ASSETS: &str = "assets";

/// What `cargo xtask dist` wrote.
pub struct Dist {
    pub binary: PathBuf,
    pub deb: PathBuf,
    pub rpm: PathBuf,
    /// The static aarch64 binary (arm64 eBPF object embedded).
    pub aarch64_binary: PathBuf,
}

/// Builds `-p PACKAGE --bin BIN ...` (`what`) statically for `target` with the cargo
/// `profile` (`static`: stripped, for shipping; `release`: with symbols, for the lab's
/// workloads), with the eBPF object `ebpf_obj` embedded when it builds lockpath; returns
/// the directory of the binaries.
pub fn build_static(
    target: &StaticTarget,
    profile: &str,
    what: &[&str],
    ebpf_obj: Option<&Path>,
) -> Result<PathBuf> {
    let step = format!("static build ({})", target.triple);
    setup::ensure_dist_tools(target.triple)?;
    let mut cmd = util::host_cargo();
    cmd.args(["build", "--profile", profile, "--target", target.triple])
        .args(what)
        // Not position-independent: a static-pie binary starts by relocating itself,
        // which `file` does not call "statically linked"; a plain static one needs nothing.
        .env(target.rustflags_env, "-C relocation-model=static");
    if let Some(ebpf_obj) = ebpf_obj {
        cmd.env(build::EBPF_OBJ_ENV, ebpf_obj);
    }
    if target.arch == AARCH64.arch && std::env::consts::ARCH != AARCH64.arch {
        let tools = cross::aarch64_tools()?;
        cmd.env(
            "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER",
            &tools.linker,
        )
        .env("CC_aarch64_unknown_linux_musl", &tools.musl_cc)
        .env("AR_aarch64_unknown_linux_musl", "aarch64-linux-gnu-ar");
    }
    util::say(format!("building {} ({})", what.join(" "), target.triple));
    util::run(
        &mut cmd,
        &step,
        "see the errors above; a C dependency needs musl-gcc (apt-get install musl-tools)",
    )?;
    Ok(util::target_dir()?.join(target.triple).join(profile))
}

/// The static aarch64 lockpath with the arm64 eBPF object, checked static.
pub fn aarch64_lockpath() -> Result<PathBuf> {
    let tools = setup::ensure()?;
    let ebpf_obj = build::build_ebpf_for(&tools, AARCH64.arch)?;
    let lockpath = ["-p", "profiler", "--bin", "lockpath"];
    let built = build_static(&AARCH64, PROFILE, &lockpath, Some(&ebpf_obj))?.join("lockpath");
    check_static(&built).context("the static aarch64 lockpath")?;
    Ok(built)
}

pub fn dist() -> Result<Dist> {
    let tools = setup::ensure()?;
    let ebpf_obj = build::build_ebpf(&tools)?;
    let out = util::target_dir()?.join("dist");
    fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;

    // 1. The static binaries.
    const STEP: &str = "dist step 1/3 (static lockpath)";
    let lockpath = ["-p", "profiler", "--bin", "lockpath"];
    let build_dir = build_static(&X86_64, PROFILE, &lockpath, Some(&ebpf_obj))?;
    let built = build_dir.join("lockpath");
    check_static(&built).with_context(|| STEP.to_string())?;
    let binary = out.join(dist_name(&X86_64));
    copy(&built, &binary)?;
    let aarch64_binary = out.join(dist_name(&AARCH64));
    copy(&aarch64_lockpath()?, &aarch64_binary)?;

    // 2. Man page, completions and the packaged unit, beside the binary where both
    // packaging tools look (`target/release/assets/...` in profiler/Cargo.toml).
    let assets = build_dir.join(ASSETS);
    write_assets(&assets, &ebpf_obj)?;

    // 3. The packages.
    const PKG: &str = "dist step 3/3 (packages)";
    // Only this run's packages, so their paths are known.
    for old in files_with(&out, "deb")?
        .into_iter()
        .chain(files_with(&out, "rpm")?)
    {
        fs::remove_file(&old).with_context(|| format!("cannot remove {}", old.display()))?;
    }
    let mut deb = util::host_cargo();
    deb.args(["deb", "-p", "profiler", "--no-build", "--no-strip"])
        .args(["--target", TARGET, "--profile", PROFILE, "--output"])
        .arg(&out);
    util::run(&mut deb, PKG, "see cargo-deb's message above")?;
    let mut rpm = util::host_cargo();
    rpm.args(["generate-rpm", "-p", "profiler"])
        // gzip: the payload every rpm reads (zstd needs rpm 4.14 with zstd built in).
        .args(["--payload-compress", "gzip"])
        .args(["--target", TARGET, "--profile", PROFILE, "--output"])
        .arg(&out);
    util::run(&mut rpm, PKG, "see cargo-generate-rpm's message above")?;
    let deb = only_file(&out, "deb")?;
    let rpm = only_file(&out, "rpm")?;

    for artifact in [&binary, &aarch64_binary, &deb, &rpm] {
        let size = fs::metadata(artifact).map(|meta| meta.len()).unwrap_or(0);
        util::say(format!(
            "dist: {} ({:.1} MiB)",
            artifact.display(),
            size as f64 / (1024.0 * 1024.0)
        ));
    }
    Ok(Dist {
        binary,
        deb,
        rpm,
        aarch64_binary,
    })
}

/// `lockpath-x86_64-linux-musl`, `lockpath-aarch64-linux-musl`.
fn dist_name(target: &StaticTarget) -> String {
    format!("lockpath-{}", target.triple.replace("-unknown", ""))
}

/// Fails unless `file` calls the binary statically linked (when `file` is installed;
/// the dist tests check it in any case).
fn check_static(binary: &Path) -> Result<()> {
    if util::find_in_path("file").is_none() {
        util::say("warning: `file` is not installed; not checking that lockpath is static");
        return Ok(());
    }
    let said = util::capture(
        Command::new("file").arg(binary),
        "checking the static binary",
        "install `file` (apt-get install file)",
    )?;
    if !said.contains("statically linked") {
        bail!(
            "{} is not statically linked: {}",
            binary.display(),
            said.trim()
        );
    }
    Ok(())
}

/// The man pages (gzipped), the bash/zsh/fish completions and the unit with the
/// packaged binary's path, into `dir`.
fn write_assets(dir: &Path, ebpf_obj: &Path) -> Result<()> {
    const STEP: &str = "dist step 2/3 (man page, completions, unit)";
    let _ = fs::remove_dir_all(dir);
    // The host build of the profiler library, with the same eBPF object as
    // `cargo xtask build`, so the release library is not built again.
    let mut cmd = util::host_cargo();
    cmd.args(["run", "--quiet", "--release", "-p", "profiler"])
        .args(["--example", "assets", "--"])
        .arg(dir)
        .env(build::EBPF_OBJ_ENV, ebpf_obj);
    util::run(
        &mut cmd,
        STEP,
        "see the errors above in profiler/examples/assets.rs",
    )?;
    let pages = files_with(&dir.join("man"), "1")?;
    if pages.is_empty() {
        bail!("{STEP}: no man page was written");
    }
    util::run(
        Command::new("gzip").args(["-9", "-n", "-f"]).args(&pages),
        STEP,
        "install gzip",
    )?;
    let unit = util::workspace_root().join("contrib/lockpath.service");
    let text =
        fs::read_to_string(&unit).with_context(|| format!("cannot read {}", unit.display()))?;
    // The packages install the binary in /usr/bin; the unit in contrib/ names the
    // /usr/local/bin of a hand-copied one.
    if !text.contains("/usr/local/bin/lockpath") {
        bail!(
            "{STEP}: {} no longer runs /usr/local/bin/lockpath; update xtask/src/dist.rs",
            unit.display()
        );
    }
    let packaged = dir.join("lockpath.service");
    fs::write(
        &packaged,
        text.replace("/usr/local/bin/lockpath", "/usr/bin/lockpath"),
    )
    .with_context(|| format!("cannot write {}", packaged.display()))?;
    Ok(())
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to)
        .map(|_| ())
        .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))
}

/// The `*.EXT` files in `dir`.
fn files_with(dir: &Path, ext: &str) -> Result<Vec<PathBuf>> {
    Ok(fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == ext))
        .collect())
}

/// The one `*.EXT` file in `dir`.
fn only_file(dir: &Path, ext: &str) -> Result<PathBuf> {
    match files_with(dir, ext)?.as_slice() {
        [one] => Ok(one.clone()),
        found => bail!(
            "expected one .{ext} in {}, found {}",
            dir.display(),
            found.len()
        ),
    }
}
