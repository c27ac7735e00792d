//! Whether this machine's spinlock waits reach the `lock:contention_*` tracepoints.
//!
//! On a virtual machine without paravirt spinlocks, x86 kernels take a contended
//! spinlock by test-and-set: `queued_spin_lock_slowpath` returns through
//! `virt_spin_lock()` before it reaches `trace_contention_begin`, so the tracepoints see
//! the sleeping locks and the rwlocks, and no spinlock at all. The kernel decides at boot
//! with the static key `virt_spin_lock_key`: on with the CPU's `hypervisor` flag, off
//! once a hypervisor's paravirt spinlocks (or its hint that vCPUs are never preempted)
//! are set up. That key is read from kernel memory when kallsyms names it; otherwise the
//! kernel log's line about paravirt spinlocks decides; otherwise it is not known.
//!
//! Where the key is on, the lock family adds the kprobe pair of the kprobe fallback on
//! the spin slow path, beside the tracepoints (see `probes::lock`).

use crate::probes::blocked_on::KernelReader;
use crate::symbolize::kallsyms::KernelSymbols;

/// The kernel's static key that sends spin waits around the tracepoint.
pub const KEY_SYMBOL: &str = "virt_spin_lock_key";

/// How the kernel takes a contended spinlock, as far as the tracepoints are concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpinPath {
    /// The queued slow path with its tracepoints (bare metal, paravirt spinlocks, or a
    /// hypervisor's hint): `why` says how it is known.
    Traced { why: &'static str },
    /// Test-and-set in `virt_spin_lock`: spin waits bypass the tracepoints.
    TestAndSet { why: &'static str },
    /// A virtual machine whose choice could not be read.
    Unknown,
}

/// The evidence: the CPU flags, the key's value where it could be read, the kernel log.
pub fn decide(cpuinfo: &str, key: Option<u32>, kernel_log: Option<&str>) -> SpinPath {
    let hypervisor = cpuinfo
        .lines()
        .filter(|line| line.starts_with("flags"))
        .any(|line| line.split_whitespace().any(|flag| flag == "hypervisor"));
    if !hypervisor {
        return SpinPath::Traced {
            why: "no hypervisor flag in /proc/cpuinfo",
        };
    }
    match key {
        Some(0) => {
            return SpinPath::Traced {
                why: "virt_spin_lock_key is off",
            }
        }
        Some(_) => {
            return SpinPath::TestAndSet {
                why: "virt_spin_lock_key is on (a virtual machine without paravirt spinlocks)",
            }
        }
        None => {}
    }
    let log = kernel_log.unwrap_or("");
    // The lines of the hypervisors' set-up (KVM, Hyper-V, Xen): enabled paravirt
    // spinlocks turn the key off; KVM's other refusals (a realtime hint, one CPU,
    // `nopvspin`) turn it off too; only a host without support leaves it on.
    if log.contains("PV spinlocks enabled") {
        return SpinPath::Traced {
            why: "the kernel log says PV spinlocks enabled",
        };
    }
    if log.contains("PV spinlocks disabled, no host support") {
        return SpinPath::TestAndSet {
            why: "the kernel log says PV spinlocks disabled, no host support",
        };
    }
    if log.contains("PV spinlocks disabled") {
        return SpinPath::Traced {
            why: "the kernel log says PV spinlocks disabled (native queued spinlocks)",
        };
    }
    SpinPath::Unknown
}

/// Reads the evidence of this machine and decides. `reader`: the kernel-memory reader,
/// when the recording has one.
pub fn detect(symbols: &KernelSymbols, reader: Option<&mut KernelReader>) -> SpinPath {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let key = match (symbols.find_data(KEY_SYMBOL), reader) {
        // `struct static_key` starts with its `atomic_t enabled`.
        (Some(symbol), Some(reader)) => reader.read_u32(symbol.addr),
        _ => None,
    };
    let log = match key {
        Some(_) => None,
        None => kernel_log(),
    };
    decide(&cpuinfo, key, log.as_deref())
}

/// Whether `detect` may want the kernel reader (a virtual machine whose kallsyms names the
/// key): the reader is only made for it then.
pub fn wants_reader(symbols: &KernelSymbols) -> bool {
    symbols.find_data(KEY_SYMBOL).is_some()
        && std::fs::read_to_string("/proc/cpuinfo")
            .is_ok_and(|cpuinfo| cpuinfo.contains(" hypervisor"))
}

/// The kernel log as `/dev/kmsg` still holds it (its records, message text only).
fn kernel_log() -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut kmsg = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .ok()?;
    let mut log = String::new();
    let mut record = vec![0u8; 8192];
    // One record per read; EAGAIN at the end of the buffer, EPIPE where records were
    // overwritten while reading (skip on).
    for _ in 0..100_000 {
        match kmsg.read(&mut record) {
            Ok(0) => break,
            Ok(length) => {
                let text = String::from_utf8_lossy(&record[..length]);
                if let Some((_, message)) = text.split_once(';') {
                    log.push_str(message.lines().next().unwrap_or(""));
                    log.push('\n');
                }
            }
            Err(err) if err.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(_) => break,
        }
    }
    Some(log)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VM: &str = "processor\t: 0\nflags\t\t: fpu vme de pse tsc msr hypervisor lahf_lm\n";
    const METAL: &str = "processor\t: 0\nflags\t\t: fpu vme de pse tsc msr lahf_lm\n";

    #[test]
    fn the_spin_path_follows_the_evidence() {
        let traced = |path: &SpinPath| matches!(path, SpinPath::Traced { .. });
        let tas = |path: &SpinPath| matches!(path, SpinPath::TestAndSet { .. });
        // (cpuinfo, virt_spin_lock_key, kernel log line, expected path)
        type Case<'a> = (&'a str, Option<u32>, Option<&'a str>, fn(&SpinPath) -> bool);
        let cases: &[Case] = &[
            // Bare metal: never test-and-set, whatever else says.
            (METAL, Some(1), None, traced),
            (METAL, None, None, traced),
            // The key's value decides over the log.
            (
                VM,
                Some(0),
                Some("PV spinlocks disabled, no host support"),
                traced,
            ),
            (VM, Some(1), Some("kvm-guest: PV spinlocks enabled"), tas),
            // The log, line by line as each hypervisor prints it.
            (VM, None, Some("kvm-guest: PV spinlocks enabled\n"), traced),
            (VM, None, Some("Hyper-V: PV spinlocks enabled\n"), traced),
            (
                VM,
                None,
                Some("kvm-guest: PV spinlocks disabled, no host support\n"),
                tas,
            ),
            (
                VM,
                None,
                Some("kvm-guest: PV spinlocks disabled with KVM_HINTS_REALTIME hints\n"),
                traced,
            ),
            (
                VM,
                None,
                Some("kvm-guest: PV spinlocks disabled, single CPU\n"),
                traced,
            ),
        ];
        for (cpuinfo, key, log, expected) in cases {
            let path = decide(cpuinfo, *key, *log);
            assert!(expected(&path), "{key:?} {log:?}: {path:?}");
        }
        // A VM with neither the key nor a log line (VMware, TCG, a rotated log).
        assert_eq!(
            decide(VM, None, Some("Booting kernel\n")),
            SpinPath::Unknown
        );
        assert_eq!(decide(VM, None, None), SpinPath::Unknown);
    }
}
