//! `cargo xtask vm-test`: a lab of other kernels. Boots Debian's 6.1 and 5.10 cloud
//! kernels in QEMU (TCG) with an initramfs holding busybox, lockpath and the test
//! workloads, runs every guest check in `tests/vm/checks/` and reads the verdicts
//! from the serial console. Kernels are downloaded once and cached in `target/vm/`.
//!
//! Guest protocol (see tests/vm/init): one `LAB-CHECK <name> PASS|FAIL|SKIP <why>` line
//! per check, then `LAB-DONE pass=N fail=N skip=N`, then the guest powers off.

use std::{
    collections::BTreeMap,
    fs,
    os::unix::fs::{symlink, PermissionsExt as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context as _, Result};

use crate::util;

/// A kernel of the lab and what the checks may expect of it.
struct LabKernel {
    /// Short name, passed to the guest as `lockpath.lab=`.
    name: &'static str,
    package: &'static str,
    /// Debian suite to add temporarily when the package is not in the host's lists.
    suite: Option<&'static str>,
    /// Hooks this kernel offers, passed as `lockpath.features=`; checks skip (exit 77)
    /// only when a hook they need is not listed here.
    features: &'static [&'static str],
    /// Checks that must PASS on this kernel (a SKIP of one of them is a failure).
    required: &'static [&'static str],
}

const KERNELS: &[LabKernel] = &[
    LabKernel {
        name: "6.1",
        package: "linux-image-6.1.0-50-cloud-amd64-unsigned",
        suite: None,
        features: &["lock_tracepoint", "kprobe", "fentry"],
        required: &[
            "lock-auto",
            "lock-tracepoint",
            "lock-kprobe",
            "func-fentry",
            "func-kprobe",
            "hold-fentry",
            "hold-kprobe",
            "hold-bad-lock",
            "hold-symbol",
            "hold-contended",
            "io-requests",
        ],
    },
    LabKernel {
        name: "5.10",
        package: "linux-image-5.10.0-32-cloud-amd64-unsigned",
        suite: Some("bullseye"),
        features: &["kprobe", "fentry"],
        required: &[
            "lock-auto",
            "lock-kprobe",
            "lock-no-tracepoint",
            "func-fentry",
            "func-kprobe",
            "hold-fentry",
            "hold-kprobe",
            "hold-bad-lock",
            "hold-symbol",
            "hold-contended",
            "io-requests",
        ],
    },
];

/// Per kernel: boot, run every check, power off. TCG on a busy 2-core host.
const BOOT_TIMEOUT: Duration = Duration::from_secs(240);

/// Debian packages of the host tools, by command.
const HOST_TOOLS: &[(&str, &str)] = &[
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("cpio", "cpio"),
    ("dpkg-deb", "dpkg"),
];
const BUSYBOX_STATIC: &str = "/bin/busybox";

/// Binaries that go into the guest's /bin besides busybox.
pub struct GuestBinaries {
    pub lockpath: PathBuf,
    /// Workloads and checkers of the `lockpath-tests` crate.
    pub workloads: Vec<PathBuf>,
}

pub fn vm_test(binaries: &GuestBinaries, only: Option<&str>) -> Result<()> {
    let started = Instant::now();
    TemporarySuite::remove_leftovers();
    ensure_host_tools()?;
    let vm_dir = util::target_dir()?.join("vm");
    let mut images = Vec::new();
    for kernel in KERNELS
        .iter()
        .filter(|kernel| only.is_none_or(|name| name == kernel.name))
    {
        images.push((kernel, kernel_image(&vm_dir, kernel)?));
    }
    let initrd = build_initramfs(&vm_dir, binaries)?;
    let mut failures = Vec::new();
    for (kernel, vmlinuz) in images {
        match boot(&vm_dir, kernel, &vmlinuz, &initrd) {
            Ok(summary) => util::say(format!("vm {}: {summary}", kernel.name)),
            Err(err) => {
                util::say(format!("vm {}: FAILED: {err:#}", kernel.name));
                failures.push(kernel.name);
            }
        }
    }
    if let Some(name) = only {
        if !KERNELS.iter().any(|kernel| kernel.name == name) {
            bail!(
                "vm-test: no lab kernel named {name}; known: {}",
                KERNELS
                    .iter()
                    .map(|k| k.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
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

/// `target/vm/kernels/<package>/boot/vmlinuz-*`, downloading and unpacking once.
fn kernel_image(vm_dir: &Path, kernel: &LabKernel) -> Result<PathBuf> {
    let unpacked = vm_dir.join("kernels").join(kernel.package);
    if let Some(vmlinuz) = find_vmlinuz(&unpacked) {
        return Ok(vmlinuz);
    }
    let deb = download_deb(&vm_dir.join("debs"), kernel)?;
    let partial = vm_dir
        .join("kernels")
        .join(format!("{}.partial", kernel.package));
    if partial.exists() {
        fs::remove_dir_all(&partial)
            .with_context(|| format!("cannot remove {}", partial.display()))?;
    }
    fs::create_dir_all(&partial).with_context(|| format!("cannot create {}", partial.display()))?;
    util::say(format!("unpacking {}", deb.display()));
    util::run(
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&partial),
        "vm-test (unpacking the kernel)",
        "remove target/vm/debs and rerun to download it again",
    )?;
    fs::rename(&partial, &unpacked).with_context(|| {
        format!(
            "cannot rename {} to {}",
            partial.display(),
            unpacked.display()
        )
    })?;
    find_vmlinuz(&unpacked).ok_or_else(|| {
        anyhow!(
            "vm-test: {} has no boot/vmlinuz-*; remove it and rerun",
            unpacked.display()
        )
    })
}

fn find_vmlinuz(unpacked: &Path) -> Option<PathBuf> {
    fs::read_dir(unpacked.join("boot"))
        .ok()?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .find(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("vmlinuz-"))
        })
}

fn cached_deb(debs: &Path, package: &str) -> Option<PathBuf> {
    let prefix = format!("{package}_");
    fs::read_dir(debs)
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

fn download_deb(debs: &Path, kernel: &LabKernel) -> Result<PathBuf> {
    if let Some(deb) = cached_deb(debs, kernel.package) {
        return Ok(deb);
    }
    fs::create_dir_all(debs).with_context(|| format!("cannot create {}", debs.display()))?;
    if !util::is_root().unwrap_or(false) {
        bail!(
            "vm-test: kernel {} is not cached in {} and downloading it needs root (apt-get); rerun as root",
            kernel.package,
            debs.display()
        );
    }
    let _suite = match kernel.suite {
        Some(suite) => Some(TemporarySuite::add(suite)?),
        None => None,
    };
    util::say(format!("downloading {}", kernel.package));
    let mut cmd = Command::new("apt-get");
    cmd.args(["download", "-q", kernel.package])
        .current_dir(debs);
    util::run(
        &mut cmd,
        "vm-test (downloading the kernel)",
        "check network access to deb.debian.org and rerun",
    )?;
    cached_deb(debs, kernel.package).ok_or_else(|| {
        anyhow!(
            "vm-test: apt-get download succeeded but no {}_*.deb is in {}",
            kernel.package,
            debs.display()
        )
    })
}

/// A Debian suite in its own list file, for as long as this value lives. Dropping it
/// removes the file and refreshes the lists, so the host's sources are as before
/// (debian.sources is never touched).
struct TemporarySuite {
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
    fn remove_leftovers() {
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

/// Builds `target/vm/initramfs.cpio.gz` afresh (binaries change between runs).
fn build_initramfs(vm_dir: &Path, binaries: &GuestBinaries) -> Result<PathBuf> {
    let root = vm_dir.join("initramfs");
    if root.exists() {
        fs::remove_dir_all(&root).with_context(|| format!("cannot remove {}", root.display()))?;
    }
    for dir in ["bin", "proc", "sys", "dev", "tmp", "checks", "bench", "etc"] {
        fs::create_dir_all(root.join(dir))
            .with_context(|| format!("cannot create {}", root.join(dir).display()))?;
    }
    let bin = root.join("bin");
    copy_executable(Path::new(BUSYBOX_STATIC), &bin.join("busybox"))?;
    for applet in busybox_applets()? {
        let link = bin.join(&applet);
        if !link.exists() {
            symlink("busybox", &link).with_context(|| format!("cannot link {}", link.display()))?;
        }
    }
    let mut elf = vec![binaries.lockpath.clone()];
    elf.extend(binaries.workloads.iter().cloned());
    for binary in &elf {
        let name = binary
            .file_name()
            .with_context(|| format!("{} has no file name", binary.display()))?;
        copy_executable(binary, &bin.join(name))?;
    }
    for library in shared_libraries(&elf)? {
        let inside = root.join(library.strip_prefix("/").unwrap_or(&library));
        if let Some(parent) = inside.parent() {
            fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        // fs::copy follows symlinks: the guest gets the library under the name ldd gave.
        fs::copy(&library, &inside)
            .with_context(|| format!("cannot copy {} into the initramfs", library.display()))?;
    }
    copy_guest_modules(vm_dir, &root)?;
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

    let initrd = vm_dir.join("initramfs.cpio.gz");
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

fn copy_guest_modules(vm_dir: &Path, root: &Path) -> Result<()> {
    let Ok(kernels) = fs::read_dir(vm_dir.join("kernels")) else {
        return Ok(());
    };
    for kernel in kernels.filter_map(|entry| entry.ok()) {
        let Ok(releases) = fs::read_dir(kernel.path().join("lib/modules")) else {
            continue;
        };
        for release in releases.filter_map(|entry| entry.ok()) {
            for module in GUEST_MODULES {
                let from = release.path().join(module);
                if !from.is_file() {
                    continue;
                }
                let dir = root.join("lib/modules").join(release.file_name());
                fs::create_dir_all(&dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
                let name = Path::new(module)
                    .file_name()
                    .with_context(|| format!("{module} has no file name"))?;
                fs::copy(&from, dir.join(name)).with_context(|| {
                    format!("cannot copy {} into the initramfs", from.display())
                })?;
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

/// A finished guest: how qemu ended (`None`: killed at the timeout), its serial log.
struct GuestRun {
    status: Option<std::process::ExitStatus>,
    serial: String,
    log_path: PathBuf,
    elapsed_s: f64,
}

/// Boots `kernel` with the initramfs, `extra` added to its command line, and waits up
/// to `timeout` for it to power off.
fn run_guest(
    vm_dir: &Path,
    kernel: &LabKernel,
    (vmlinuz, initrd): (&Path, &Path),
    (log_name, extra): (&str, &str),
    timeout: Duration,
) -> Result<GuestRun> {
    let log_path = vm_dir.join(log_name);
    let log = fs::File::create(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let append = format!(
        "console=ttyS0 panic=-1 quiet loglevel=5 lockpath.lab={} lockpath.features={} {extra}",
        kernel.name,
        kernel.features.join(",")
    );
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-accel", "tcg", "-smp", "2", "-m", "1024", "-kernel"])
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", append.trim_end(), "-nographic", "-no-reboot"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().context("cannot duplicate the log file")?)
        .stderr(log);
    util::say(format!(
        "booting {} ({}), timeout {} s; serial log: {}",
        kernel.name,
        vmlinuz.display(),
        timeout.as_secs(),
        log_path.display()
    ));
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|err| anyhow!("cannot start `{}` ({err})", util::describe(&cmd)))?;
    let status = loop {
        if let Some(status) = child.try_wait().context("cannot wait for qemu")? {
            break Some(status);
        }
        if started.elapsed() > timeout {
            // Our own child, by pid.
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let serial = fs::read(&log_path).unwrap_or_default();
    Ok(GuestRun {
        status,
        serial: String::from_utf8_lossy(&serial).into_owned(),
        log_path,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

impl GuestRun {
    /// Ok, or an error carrying `verdict`'s reason, with the guest's log printed.
    fn check(
        &self,
        timeout: Duration,
        verdict: std::result::Result<String, String>,
    ) -> Result<String> {
        let failure = match (&self.status, &verdict) {
            (None, _) => Some(format!(
                "guest did not power off within {} s",
                timeout.as_secs()
            )),
            (Some(status), _) if !status.success() => Some(format!("qemu exited with {status}")),
            (_, Err(why)) => Some(why.clone()),
            _ => None,
        };
        match failure {
            Some(why) => {
                eprintln!(
                    "----- guest serial log ({}) -----\n{}\n----- end of guest log -----",
                    self.log_path.display(),
                    self.serial.trim_end()
                );
                bail!("{why} (after {:.0} s)", self.elapsed_s)
            }
            None => Ok(format!(
                "{} in {:.0} s",
                verdict.unwrap_or_default(),
                self.elapsed_s
            )),
        }
    }
}

/// Boots `kernel` and returns a one-line summary, or an error with the guest's log.
fn boot(vm_dir: &Path, kernel: &LabKernel, vmlinuz: &Path, initrd: &Path) -> Result<String> {
    let run = run_guest(
        vm_dir,
        kernel,
        (vmlinuz, initrd),
        (&format!("guest-{}.log", kernel.name), ""),
        BOOT_TIMEOUT,
    )?;
    let verdict = parse_serial(&run.serial, kernel);
    run.check(BOOT_TIMEOUT, verdict)
}

/// A benchmark in the lab: TCG is slow, so a whole run may take minutes.
const BENCH_TIMEOUT: Duration = Duration::from_secs(900);

/// Runs `tests/vm/bench/NAME.sh` in the guest of the first lab kernel (6.1) and returns
/// its `BENCH KEY VALUE` lines, values by key in the order printed.
pub fn bench(
    binaries: &GuestBinaries,
    name: &str,
    runs: usize,
) -> Result<(String, BTreeMap<String, Vec<f64>>)> {
    let kernel = &KERNELS[0];
    ensure_host_tools()?;
    let vm_dir = util::target_dir()?.join("vm");
    let vmlinuz = kernel_image(&vm_dir, kernel)?;
    let initrd = build_initramfs(&vm_dir, binaries)?;
    let run = run_guest(
        &vm_dir,
        kernel,
        (&vmlinuz, &initrd),
        (
            &format!("bench-{name}-{}.log", kernel.name),
            &format!("lockpath.bench={name} lockpath.runs={runs}"),
        ),
        BENCH_TIMEOUT,
    )?;
    let passed = run.serial.lines().any(|line| {
        line.trim_end_matches('\r')
            .starts_with(&format!("LAB-CHECK {name} PASS"))
    });
    let verdict = if passed {
        Ok(String::new())
    } else {
        Err(format!("the guest benchmark {name} did not pass"))
    };
    run.check(BENCH_TIMEOUT, verdict)?;
    let mut values: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for line in run.serial.lines() {
        // The script's output comes indented under its verdict line: `  | BENCH ...`.
        let line = line.trim_end_matches('\r').trim_start_matches([' ', '|']);
        let mut words = line.split_whitespace();
        if let (Some("BENCH"), Some(key), Some(value)) = (words.next(), words.next(), words.next())
        {
            if let Ok(value) = value.parse() {
                values.entry(key.to_string()).or_default().push(value);
            }
        }
    }
    Ok((
        format!("Debian {} guest (QEMU TCG, 2 vCPUs)", kernel.name),
        values,
    ))
}

/// Reads the verdicts; Ok(summary) when every check passed or skipped legitimately.
fn parse_serial(serial: &str, kernel: &LabKernel) -> std::result::Result<String, String> {
    let mut results: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut done = false;
    for line in serial.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(rest) = line.strip_prefix("LAB-CHECK ") {
            let mut parts = rest.splitn(3, ' ');
            let name = parts.next().unwrap_or("").to_string();
            let verdict = parts.next().unwrap_or("").to_string();
            let why = parts.next().unwrap_or("").to_string();
            results.insert(name, (verdict, why));
        } else if line.starts_with("LAB-DONE") {
            done = true;
        }
    }
    if !done {
        return Err("no LAB-DONE line: the guest's /init did not finish".into());
    }
    let mut problems = Vec::new();
    for (name, (verdict, why)) in &results {
        if verdict == "FAIL" {
            problems.push(format!("{name} failed: {why}"));
        }
    }
    for name in kernel.required {
        match results.get(*name) {
            Some((verdict, _)) if verdict == "PASS" => {}
            Some((verdict, why)) if verdict != "FAIL" => problems.push(format!(
                "{name} must pass on {} but was {verdict}: {why}",
                kernel.name
            )),
            Some(_) => {}
            None => problems.push(format!("{name} did not run")),
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    let line = |verdict: &str| {
        results
            .iter()
            .filter(|(_, (v, _))| v == verdict)
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    };
    Ok(format!(
        "passed: {}; skipped: {}",
        line("PASS"),
        match line("SKIP") {
            skipped if skipped.is_empty() => "none".to_string(),
            skipped => skipped,
        }
    ))
}
