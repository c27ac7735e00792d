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

/// Per kernel: boot, run every check, power off, at most this long. TCG on a busy 2-core
/// host: the arm64 guest's checks have taken 340 s on one such host and more than 420 s
/// on a slower one. A guest that stops printing is found by `SILENT_AFTER` long before.
const BOOT_TIMEOUT: Duration = Duration::from_secs(720);

/// A guest running the checks whose serial console stays silent this long froze as a
/// whole: the guest's init kills a check after 180 s (tests/vm/init) and prints its
/// output and verdict, so a living guest is never silent for longer (a frozen one may
/// print RCU stall reports for a while, then nothing). A benchmark may be silent for as
/// long as it runs.
const SILENT_AFTER: Duration = Duration::from_secs(240);

/// A finished guest: how qemu ended (`None`: killed at the timeout, or hung), its
/// serial log.
struct GuestRun {
    status: Option<std::process::ExitStatus>,
    serial: String,
    log_path: PathBuf,
    elapsed_s: f64,
    /// The guest kernel reported CPUs stuck for `HUNG_AFTER_S` or more, or the guest
    /// gave no final verdict by the timeout, and was killed; or it panicked on an int3
    /// (`panicked_on_int3`).
    hung: bool,
}

/// A guest whose kernel reports a CPU stuck this long (`BUG: soft lockup - CPU#0 stuck
/// for 53s!`) is not coming back: TCG has been seen to keep re-running a stale
/// translation of an `int3` that code patching had already removed (both vCPUs at
/// `down_read+0x0` forever, in one guest log).
const HUNG_AFTER_S: u64 = 60;

/// Hung boots tolerated before the next one counts: the 6.1 guest hung so in about one
/// run in five, and the 5.10 guest twice in a row in one run (each time in a check that
/// attaches kprobes); one hung boot costs `SILENT_AFTER` (4 minutes) or, when it keeps
/// printing, up to the boot's timeout.
const MAX_HUNG_BOOTS: usize = 3;

/// Whether the guest kernel died of a breakpoint trap it did not expect (`int3: 0000
/// [#1]`, then `Kernel panic`): the same emulator fault as the hangs above, met on the
/// other side (a vCPU runs the `int3` of a patch site after the kernel removed its
/// handler's entry: seen once on 6.12, at a jump label in `__schedule`, while kprobes
/// were attached). Such a boot is tried again like a hung one.
fn panicked_on_int3(serial: &str) -> bool {
    serial.contains("int3: 0000 [#") && serial.contains("Kernel panic")
}

/// The longest "stuck for Ns" the guest kernel has reported.
fn longest_soft_lockup_s(serial: &str) -> u64 {
    serial
        .lines()
        .filter(|line| line.contains("BUG: soft lockup"))
        .filter_map(|line| {
            let after = line.split("stuck for ").nth(1)?;
            after.split('s').next()?.parse().ok()
        })
        .max()
        .unwrap_or(0)
}

/// Boots `kernel` with the initramfs, `extra` added to its command line, and waits up
/// to `timeout` for it to power off, or until its console has been silent for `silent`.
fn run_guest(
    vm_dir: &Path,
    kernel: &LabKernel,
    (vmlinuz, initrd): (&Path, &Path),
    (log_name, extra): (&str, &str),
    (timeout, silent): (Duration, Duration),
) -> Result<GuestRun> {
    let log_path = vm_dir.join(log_name);
    let log = fs::File::create(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    // arm64: QEMU's `virt` board, whose serial port is a PL011 (ttyAMA0); a Cortex-A72
    // (ARMv8.0) emulates faster than `max`, whose pointer authentication TCG computes.
    let (qemu, machine, console): (&str, &[&str], &str) = match kernel.arch {
        "aarch64" => (
            "qemu-system-aarch64",
            &["-M", "virt", "-cpu", "cortex-a72"],
            "ttyAMA0",
        ),
        _ => ("qemu-system-x86_64", &[], "ttyS0"),
    };
    let only = match kernel.only {
        [] => String::new(),
        checks => format!("lockpath.checks={}", checks.join(",")),
    };
    let append = format!(
        "console={console} panic=-1 quiet loglevel=5 lockpath.lab={} lockpath.features={} {} {only} {extra}",
        kernel.name,
        kernel.features.join(","),
        kernel.cmdline,
    );
    let mut cmd = Command::new(qemu);
    cmd.args(machine)
        .args(["-accel", "tcg", "-smp", "2", "-m", "1024", "-kernel"])
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
    let read_serial =
        || String::from_utf8_lossy(&fs::read(&log_path).unwrap_or_default()).into_owned();
    let mut hung = false;
    let mut polls = 0u64;
    let (mut printed, mut last_output) = (0usize, Instant::now());
    let status = loop {
        if let Some(status) = child.try_wait().context("cannot wait for qemu")? {
            break Some(status);
        }
        polls += 1;
        // Every 5 s: a kernel that reports its CPUs stuck for a minute is hung; a guest
        // silent for `silent` is frozen.
        if polls.is_multiple_of(25) {
            let serial = read_serial();
            if serial.len() != printed {
                (printed, last_output) = (serial.len(), Instant::now());
            }
            hung = longest_soft_lockup_s(&serial) >= HUNG_AFTER_S || last_output.elapsed() > silent;
        }
        if hung || started.elapsed() > timeout {
            // A guest that printed no verdict by the timeout froze as a whole: its checks
            // are killed after 180 s each (tests/vm/init), so a stuck check ends in a
            // verdict, and only the emulator or the kernel can keep the last one from
            // coming (seen once on 5.10 after offcpu-file-lock, without a soft lockup).
            hung = hung || !read_serial().contains("LAB-DONE");
            // Our own child, by pid.
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let serial = read_serial();
    // A guest that panicked on an int3 exits (`-no-reboot`) without a verdict.
    hung = hung || (!serial.contains("LAB-DONE") && panicked_on_int3(&serial));
    Ok(GuestRun {
        status,
        serial,
        log_path,
        elapsed_s: started.elapsed().as_secs_f64(),
        hung,
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
            (None, _) if self.hung => Some(format!(
                "the guest kernel hung (soft lockup of {} s or more, or no verdict in {} s)",
                HUNG_AFTER_S,
                timeout.as_secs()
            )),
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
/// A guest whose kernel hung under emulation (see `HUNG_AFTER_S`) is booted again, up to
/// `MAX_HUNG_BOOTS` times, and the summary says so; any other failure, or one hang more,
/// is final.
pub(super) fn boot(
    vm_dir: &Path,
    kernel: &LabKernel,
    vmlinuz: &Path,
    initrd: &Path,
) -> Result<String> {
    let log_name = format!("guest-{}.log", kernel.name);
    let boot_once = || {
        run_guest(
            vm_dir,
            kernel,
            (vmlinuz, initrd),
            (&log_name, ""),
            (BOOT_TIMEOUT, SILENT_AFTER),
        )
    };
    let mut run = boot_once()?;
    let mut hung_logs = Vec::new();
    while run.hung && hung_logs.len() < MAX_HUNG_BOOTS {
        let kept = vm_dir.join(format!(
            "guest-{}-hung-{}.log",
            kernel.name,
            hung_logs.len() + 1
        ));
        let _ = fs::rename(&run.log_path, &kept);
        util::say(format!(
            "vm {}: the guest hung after {:.0} s (soft lockup, no verdict, or a panic on an \
             int3; log kept in {}); \
             booting it again",
            kernel.name,
            run.elapsed_s,
            kept.display()
        ));
        hung_logs.push(kept.display().to_string());
        run = boot_once()?;
    }
    let retried = match hung_logs.is_empty() {
        true => String::new(),
        false => format!(
            " (after {} hung boot(s), logs in {})",
            hung_logs.len(),
            hung_logs.join(", ")
        ),
    };
    let verdict = parse_serial(&run.serial, kernel);
    run.check(BOOT_TIMEOUT, verdict)
        .map(|summary| summary + &retried)
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
        (BENCH_TIMEOUT, BENCH_TIMEOUT),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_lockups_are_read_from_the_serial_log() {
        let serial = "[   84.767876] watchdog: BUG: soft lockup - CPU#0 stuck for 26s! [lockpath:186]\n\
                      [   84.769567] RIP: 0010:down_read+0x0/0xa0\n\
                      [  112.770179] watchdog: BUG: soft lockup - CPU#0 stuck for 53s! [lockpath:186]\n\
                      [  112.935736] watchdog: BUG: soft lockup - CPU#1 stuck for 52s! [fuse-workload:169]\n";
        assert_eq!(longest_soft_lockup_s(serial), 53);
        assert_eq!(longest_soft_lockup_s("LAB-CHECK lock-auto PASS ok\n"), 0);
    }

    #[test]
    fn a_panic_on_an_int3_is_told_from_other_deaths() {
        let serial = "[   97.399831] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n\
                      [   97.400621] RIP: 0010:__schedule+0x343/0xbe0\n\
                      [   97.402651] Kernel panic - not syncing: Fatal exception in interrupt\n";
        assert!(panicked_on_int3(serial));
        let other = "[   12.0] Oops: general protection fault: 0000 [#1] SMP\n\
                     [   12.1] Kernel panic - not syncing: Fatal exception\n";
        assert!(!panicked_on_int3(other));
        assert!(!panicked_on_int3(
            "LAB-CHECK lock-auto PASS ok\nLAB-DONE pass=1\n"
        ));
    }
}
