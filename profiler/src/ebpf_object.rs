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

#[cfg(test)]
mod tests {
    use object::{Object, ObjectSection, SectionKind};

    use super::EBPF_OBJECT;

    /// `BPF_STX | BPF_ATOMIC`, 32- and 64-bit: the opcodes of atomic instructions.
    const ATOMIC_OPCODES: [u8; 2] = [0xc3, 0xdb];
    /// The atomic operation every kernel takes: `BPF_ADD` without `BPF_FETCH` (`BPF_XADD`).
    /// The others (fetch, or, and, xor, exchange, compare-exchange) need Linux 5.12.
    const BPF_ADD: i32 = 0x00;

    /// Every atomic instruction of the object is a plain add: a kernel before 5.12 (the
    /// 5.10 lab, RHEL 8) refuses a program with any other ("BPF_STX uses reserved
    /// fields"), and the compiler can make one of innocent code (an atomic add of 0
    /// becomes an atomic or).
    #[test]
    fn atomics_load_on_every_kernel() {
        if EBPF_OBJECT.is_empty() {
            assert!(
                std::env::var_os("CI").is_none(),
                "built without the eBPF object: CI builds it with `cargo xtask build`"
            );
            eprintln!("atomics_load_on_every_kernel: skipped, built without the eBPF object");
            return;
        }
        let file = object::File::parse(EBPF_OBJECT).expect("the eBPF object is ELF");
        let (mut adds, mut refused) = (0, Vec::new());
        for section in file.sections().filter(|s| s.kind() == SectionKind::Text) {
            let code = section.data().expect("a program section has its code");
            let name = section.name().unwrap_or("?");
            for (index, insn) in code.chunks_exact(8).enumerate() {
                if !ATOMIC_OPCODES.contains(&insn[0]) {
                    continue;
                }
                let op = i32::from_le_bytes([insn[4], insn[5], insn[6], insn[7]]);
                match op {
                    BPF_ADD => adds += 1,
                    _ => refused.push(format!("{name}, instruction {index}: operation {op:#x}")),
                }
            }
        }
        assert!(
            refused.is_empty(),
            "atomics that kernels before 5.12 refuse: {refused:?}"
        );
        // The scan read the programs: the aggregation adds are atomic.
        assert!(
            adds > 100,
            "only {adds} atomic adds found in the eBPF object"
        );
    }
}
