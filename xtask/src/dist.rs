//! `cargo xtask dist`: `lockpath` statically linked for x86_64 musl (stripped, eBPF
//! object embedded), its man page and shell completions, and a .deb and an .rpm holding
//! them with the systemd unit (installed disabled), all in `target/dist/`.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

use crate::{build, setup, util};

/// The Rust target of the static binary.
pub const TARGET: &str = "x86_64-unknown-linux-musl";
/// The cargo profile of the static binary (workspace Cargo.toml: release, no debug
/// info, stripped).
const PROFILE: &str = "static";
/// Rust flags of the static binary's target only (host build scripts keep theirs).
const RUSTFLAGS_ENV: &str = "CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUSTFLAGS";
/// Where the packaging tools' `target/release/` prefix points for this build.
const ASSETS: &str = "assets";

/// What `cargo xtask dist` wrote.
pub struct Dist {
    pub binary: PathBuf,
    pub deb: PathBuf,
    pub rpm: PathBuf,
}

pub fn dist() -> Result<Dist> {
    let tools = setup::ensure()?;
    setup::ensure_dist_tools(TARGET)?;
    let ebpf_obj = build::build_ebpf(&tools)?;
    let out = util::target_dir()?.join("dist");
    fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;

    // 1. The static binary.
    const STEP: &str = "dist step 1/3 (static lockpath)";
    let mut cmd = util::host_cargo();
    cmd.args(["build", "--profile", PROFILE, "--target", TARGET])
        .args(["-p", "profiler", "--bin", "lockpath"])
        .env(build::EBPF_OBJ_ENV, &ebpf_obj)
        // Not position-independent: a static-pie binary starts by relocating itself,
        // which `file` does not call "statically linked"; a plain static one needs nothing.
        .env(RUSTFLAGS_ENV, "-C relocation-model=static");
    util::say(format!("building the static lockpath ({TARGET})"));
    util::run(
        &mut cmd,
        STEP,
        "see the errors above; a C dependency needs musl-gcc (apt-get install musl-tools)",
    )?;
    let build_dir = util::target_dir()?.join(TARGET).join(PROFILE);
    let built = build_dir.join("lockpath");
    check_static(&built).with_context(|| STEP.to_string())?;
    let binary = out.join(format!("lockpath-{}", TARGET.replace("-unknown", "")));
    copy(&built, &binary)?;

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

    for artifact in [&binary, &deb, &rpm] {
        let size = fs::metadata(artifact).map(|meta| meta.len()).unwrap_or(0);
        util::say(format!(
            "dist: {} ({:.1} MiB)",
            artifact.display(),
            size as f64 / (1024.0 * 1024.0)
        ));
    }
    Ok(Dist { binary, deb, rpm })
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
