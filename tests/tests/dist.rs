//! The artifacts of `cargo xtask dist`: the static binary is static and runs; the .deb
//! installs with dpkg on Debian bullseye (glibc 2.31) and lockpath works there; the .rpm
//! holds the expected files. The static binary's recording is checked in lock.rs.

mod common;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use common::*;

/// Files both packages install (the .deb's zsh completion lives under
/// vendor-completions, the .rpm's under site-functions, as each distribution expects),
/// besides the man pages of the subcommands (`lockpath-record.1.gz`, ...).
const COMMON_FILES: &[&str] = &[
    "/usr/bin/lockpath",
    "/usr/share/man/man1/lockpath.1.gz",
    "/usr/share/man/man1/lockpath-record.1.gz",
    "/usr/share/man/man1/lockpath-report.1.gz",
    "/usr/share/bash-completion/completions/lockpath",
    "/usr/share/fish/vendor_completions.d/lockpath.fish",
];

fn deb() -> PathBuf {
    dist_artifact("LOCKPATH_DEB", "lockpath_0.1.0-1_amd64.deb")
}

fn rpm() -> PathBuf {
    dist_artifact("LOCKPATH_RPM", "lockpath-0.1.0-1.x86_64.rpm")
}

/// A profile of the golden corpus, for `report` runs.
fn test_profile() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../profile/tests/golden/lock_offcpu_cpu.json")
}

/// True when running as root (chroot, dpkg). Under `CI=true` a test that is not fails;
/// elsewhere it is skipped with the reason printed.
fn require_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if is_ci() {
        panic!("{test}: not running as root under CI=true");
    }
    eprintln!("SKIP {test}: not running as root");
    false
}

fn run(cmd: &mut Command) -> std::process::Output {
    let what = format!("{cmd:?}");
    let output = cmd
        .output()
        .unwrap_or_else(|err| panic!("cannot start {what}: {err}"));
    assert_succeeded(&output, &what);
    output
}

#[test]
fn static_binary_is_static_and_runs() {
    const TEST: &str = "static_binary_is_static_and_runs";
    let bin = static_lockpath_bin();
    if !require_artifact(TEST, &bin) || !require_tool(TEST, "file") {
        return;
    }
    let said = String::from_utf8_lossy(&run(Command::new("file").arg(&bin)).stdout).into_owned();
    assert!(said.contains("statically linked"), "file says: {said}");
    assert!(
        said.contains("stripped") && !said.contains("not stripped"),
        "{said}"
    );
    let version = lockpath_ok_with(&bin, &["--version"]);
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("lockpath {}", env!("CARGO_PKG_VERSION"))
    );
    // The same report as the glibc build's, byte for byte.
    let profile = test_profile();
    let ours = lockpath_ok_with(&bin, &["report", path_str(&profile), "--top", "0"]);
    let glibc = lockpath_ok(&["report", path_str(&profile), "--top", "0"]);
    assert!(!ours.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&glibc.stdout)
    );
}

/// The static aarch64 binary is one, and gives the x86_64 build's report byte for byte
/// when QEMU's user-mode emulator runs it here (its recording runs in the arm64 lab).
#[test]
fn aarch64_binary_is_static_and_reports_like_x86_64() {
    const TEST: &str = "aarch64_binary_is_static_and_reports_like_x86_64";
    let bin = dist_artifact("LOCKPATH_DIST_AARCH64_BIN", "lockpath-aarch64-linux-musl");
    if !require_artifact(TEST, &bin)
        || !require_tool(TEST, "file")
        || !require_tool(TEST, "qemu-aarch64-static")
    {
        return;
    }
    let said = String::from_utf8_lossy(&run(Command::new("file").arg(&bin)).stdout).into_owned();
    assert!(
        said.contains("ARM aarch64") && said.contains("statically linked"),
        "file says: {said}"
    );
    let emulated = |args: &[&str]| {
        run(Command::new("qemu-aarch64-static").arg(&bin).args(args))
            .stdout
            .clone()
    };
    assert_eq!(
        String::from_utf8_lossy(&emulated(&["--version"])).trim(),
        format!("lockpath {}", env!("CARGO_PKG_VERSION"))
    );
    let profile = test_profile();
    let ours = emulated(&["report", path_str(&profile), "--top", "0"]);
    let x86_64 = lockpath_ok(&["report", path_str(&profile), "--top", "0"]);
    assert!(!ours.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&ours),
        String::from_utf8_lossy(&x86_64.stdout)
    );
}

#[test]
fn rpm_holds_binary_man_page_completions_and_unit() {
    const TEST: &str = "rpm_holds_binary_man_page_completions_and_unit";
    let rpm = rpm();
    if !require_artifact(TEST, &rpm) || !require_tool(TEST, "rpm") {
        return;
    }
    let listed = run(Command::new("rpm").arg("-qlp").arg(&rpm));
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let files: Vec<&str> = listed.lines().collect();
    let expected: Vec<&str> = COMMON_FILES
        .iter()
        .chain(&[
            "/usr/share/zsh/site-functions/_lockpath",
            "/usr/lib/systemd/system/lockpath.service",
        ])
        .copied()
        .collect();
    for file in &expected {
        assert!(
            files.contains(file),
            "{file} in rpm -qlp {}:\n{listed}",
            rpm.display()
        );
    }
    for file in &files {
        let subcommand_page = file
            .strip_prefix("/usr/share/man/man1/lockpath-")
            .is_some_and(|page| page.ends_with(".1.gz"));
        assert!(
            expected.contains(file) || subcommand_page,
            "unexpected {file} in the rpm:\n{listed}"
        );
    }
    // Installed disabled: no scriptlet enables or starts the unit.
    let scripts = run(Command::new("rpm").arg("-qp").arg("--scripts").arg(&rpm));
    assert!(
        !String::from_utf8_lossy(&scripts.stdout).contains("systemctl"),
        "{}",
        String::from_utf8_lossy(&scripts.stdout)
    );
    // Static: no shared library is required.
    let requires = run(Command::new("rpm").arg("-qpR").arg(&rpm));
    let requires = String::from_utf8_lossy(&requires.stdout);
    assert!(
        requires.lines().all(|line| line.starts_with("rpmlib(")),
        "requires only rpm features: {requires}"
    );
}

/// A Debian bullseye (glibc 2.31) chroot made with debootstrap once, kept in
/// target/dist-chroot/ for later runs.
fn bullseye_chroot() -> PathBuf {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/dist-chroot");
    let root = base.join("bullseye");
    if root.join("usr/bin/dpkg").is_file() {
        return root;
    }
    // Built aside and renamed, so an interrupted debootstrap is never taken for a chroot.
    let partial = base.join("bullseye.partial");
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&base).expect("create target/dist-chroot");
    eprintln!("making a Debian bullseye chroot with debootstrap (a few minutes, once)");
    run(Command::new("debootstrap")
        .args(["--variant=minbase", "bullseye"])
        .arg(&partial)
        .arg("http://deb.debian.org/debian"));
    std::fs::rename(&partial, &root).expect("rename the chroot");
    root
}

fn in_chroot(root: &Path, args: &[&str]) -> std::process::Output {
    run(Command::new("chroot")
        .arg(root)
        .args(args)
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"))
}

#[test]
fn deb_installs_and_runs_on_bullseye() {
    const TEST: &str = "deb_installs_and_runs_on_bullseye";
    let deb = deb();
    if !require_root(TEST) || !require_artifact(TEST, &deb) || !require_tool(TEST, "debootstrap") {
        return;
    }
    let root = bullseye_chroot();
    let glibc = in_chroot(&root, &["ldd", "--version"]);
    let glibc = String::from_utf8_lossy(&glibc.stdout);
    assert!(
        glibc
            .lines()
            .next()
            .is_some_and(|line| line.ends_with(" 2.31")),
        "bullseye's glibc is 2.31: {glibc}"
    );
    // Start from a chroot without lockpath (an earlier run may have left it installed).
    in_chroot(&root, &["dpkg", "--purge", "lockpath"]);
    std::fs::copy(&deb, root.join("tmp/lockpath.deb")).expect("copy the .deb");
    std::fs::copy(test_profile(), root.join("tmp/profile.json")).expect("copy the profile");
    in_chroot(&root, &["dpkg", "-i", "/tmp/lockpath.deb"]);

    let version = in_chroot(&root, &["lockpath", "--version"]);
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("lockpath {}", env!("CARGO_PKG_VERSION"))
    );
    let report = in_chroot(
        &root,
        &["lockpath", "report", "/tmp/profile.json", "--top", "0"],
    );
    let host = lockpath_ok(&["report", path_str(&test_profile()), "--top", "0"]);
    assert!(!report.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&report.stdout),
        String::from_utf8_lossy(&host.stdout),
        "the report in the chroot is the host's"
    );

    for file in COMMON_FILES
        .iter()
        .chain(&["/usr/share/zsh/vendor-completions/_lockpath"])
    {
        let path = root.join(file.trim_start_matches('/'));
        assert!(path.is_file(), "{file} installed");
    }
    let unit = std::fs::read_to_string(root.join("lib/systemd/system/lockpath.service"))
        .expect("the unit is installed");
    assert!(unit.contains("ExecStart=/usr/bin/lockpath "), "{unit}");
    // Installed disabled: nothing links it into a target.
    let wants = root.join("etc/systemd/system/multi-user.target.wants/lockpath.service");
    assert!(!wants.exists(), "the unit must not be enabled");
    let man = in_chroot(
        &root,
        &["sh", "-c", "zcat /usr/share/man/man1/lockpath.1.gz"],
    );
    let man = String::from_utf8_lossy(&man.stdout);
    assert!(
        man.contains(".TH lockpath") && man.contains("record"),
        "{man}"
    );

    // The bash completion parses, and completes the subcommands.
    let completion = in_chroot(
        &root,
        &[
            "bash",
            "-c",
            ". /usr/share/bash-completion/completions/lockpath && \
             COMP_WORDS=(lockpath re) COMP_CWORD=1 && _lockpath lockpath re lockpath && \
             echo \"${COMPREPLY[@]}\"",
        ],
    );
    let words = String::from_utf8_lossy(&completion.stdout);
    assert!(
        words.split_whitespace().any(|word| word == "record")
            && words.split_whitespace().any(|word| word == "report"),
        "bash completes `lockpath re`: {words}"
    );

    in_chroot(&root, &["dpkg", "--purge", "lockpath"]);
    assert!(!root.join("usr/bin/lockpath").exists(), "purged");
}
