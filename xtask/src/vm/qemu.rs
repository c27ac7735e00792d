//! Booting a guest in QEMU and reading its serial console.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context as _, Result};

use crate::util;

use super::{
    ensure_host_tools,
    initramfs::build_initramfs,
    kernels::{kernel_image, LabKernel, KERNELS},
    protocol::parse_serial,
    GuestBinaries,
};

/// Per kernel: boot, run every check, power off. TCG on a busy 2-core host (the 5.10
/// guest's 15 checks took more than 240 s there in session 6).
const BOOT_TIMEOUT: Duration = Duration::from_secs(420);

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
pub(super) fn boot(
    vm_dir: &Path,
    kernel: &LabKernel,
    vmlinuz: &Path,
    initrd: &Path,
) -> Result<String> {
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
