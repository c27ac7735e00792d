//! The cost of `--hold`, measured in the kernel lab's 6.1 guest.

use anyhow::Result;

use super::{median, Bench};

/// Configurations of tests/vm/bench/hold-cost.sh, in table order: (key, what it is).
pub(super) const HOLD_CONFIGS: &[(&str, &str)] = &[
    ("pipe/none", "pipe round (write + read 1 byte): no lockpath"),
    (
        "pipe/lock",
        "pipe round: `--lock` (contention tracepoints), for comparison",
    ),
    (
        "pipe/hold-mutex-fentry",
        "pipe round: `--hold mutex:X`, fexit/fentry",
    ),
    (
        "pipe/hold-mutex-kprobe",
        "pipe round: `--hold mutex:X`, kprobes",
    ),
    ("mmap/none", "mmap + munmap of a page: no lockpath"),
    ("mmap/lock", "mmap + munmap: `--lock`, for comparison"),
    (
        "mmap/hold-rwsem-fentry",
        "mmap + munmap: `--hold rwsem:X`, fexit/fentry",
    ),
    (
        "mmap/hold-rwsem-kprobe",
        "mmap + munmap: `--hold rwsem:X`, kprobes",
    ),
];

/// The cost of `--hold` on every other lock of the system: this host's kernel has
/// neither fentry nor kprobes, so it is measured in the lab's 6.1 guest, where the
/// workloads time themselves (ns per operation) with and without lockpath attached.
pub(super) fn hold_cost(bench: &Bench, runs: usize) -> Result<String> {
    let binaries = crate::vm::GuestBinaries {
        arch: std::env::consts::ARCH,
        lockpath: bench.lockpath.clone(),
        workloads: crate::test::build_workloads()?,
    };
    let (guest, values) = crate::vm::bench(&binaries, "hold-cost", runs)?;
    let mut md = format!(
        "\n### Cost of `--hold` ({guest}; {runs} interleaved runs, median)\n\n\
         X is an address no lock has: every lock operation of the type pays the hook and one \
         compare, as every other lock of a production system does. TCG emulates the CPU, so \
         the nanoseconds are many times a real machine's; the ratios are the result.\n\n\
         | operation and lockpath | ns per operation | vs no lockpath |\n|---|---:|---:|\n"
    );
    for (key, what) in HOLD_CONFIGS {
        let Some(ns) = values.get(*key).and_then(|runs| median(runs)) else {
            md.push_str(&format!("| {what} | not measured | |\n"));
            continue;
        };
        let base_key = format!("{}/none", key.split('/').next().unwrap_or(""));
        let ratio = values
            .get(&base_key)
            .and_then(|runs| median(runs))
            .filter(|base| *base > 0.0)
            .map(|base| format!("{:+.1}%", (ns / base - 1.0) * 100.0))
            .unwrap_or_default();
        md.push_str(&format!("| {what} | {ns:.0} | {ratio} |\n"));
    }
    Ok(md)
}
