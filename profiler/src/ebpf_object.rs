//! The eBPF object lockpath carries, and what loading it needs of this machine.

use anyhow::{bail, Result};

use crate::tracefs;

/// The eBPF object built by `cargo xtask build` (empty when built without it).
pub(crate) static EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler-ebpf.o"));

/// The built-in eBPF object, or the error that says how to build lockpath with it.
pub(crate) fn built_object() -> Result<&'static [u8]> {
    if EBPF_OBJECT.is_empty() {
        bail!(
            "this lockpath was built without its eBPF programs: build it with `cargo xtask build`"
        );
    }
    Ok(EBPF_OBJECT)
}

/// What recording needs of this machine, checked before anything is loaded.
/// What loading needs: privileges, the built-in eBPF object, tracefs.
pub(crate) fn check_loadable() -> Result<()> {
    check_privileges()?;
    built_object()?;
    tracefs::ensure_mounted()
}

/// Root, or CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN), checked before anything is loaded.
pub(crate) fn check_privileges() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return Ok(());
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    const CAP_PERFMON: u64 = 1 << 38;
    const CAP_BPF: u64 = 1 << 39;
    if effective & CAP_SYS_ADMIN != 0
        || effective & (CAP_BPF | CAP_PERFMON) == CAP_BPF | CAP_PERFMON
    {
        return Ok(());
    }
    bail!(
        "lockpath record needs root, or the capabilities CAP_BPF and CAP_PERFMON: run it with sudo"
    )
}
