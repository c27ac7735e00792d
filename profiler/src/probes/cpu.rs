//! On-CPU sampling: one software CPU-clock perf event per online CPU, at `--freq` Hz,
//! each running `cpu_sample`; drain `CPU_SAMPLES` into profile rows.

use anyhow::{bail, Context, Result};
use aya::{
    maps::HashMap,
    programs::{
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
        PerfEvent,
    },
    util::online_cpus,
    Ebpf,
};
use profiler_common::cpu::CpuKey;

use crate::{
    probes::shared::{MapSet, StackResolver},
    profile::{CpuRow, ProbeUse},
};

/// Highest sampling frequency the kernel accepts (`kernel.perf_event_max_sample_rate`).
fn max_sample_rate() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Checks `--freq` against this kernel's limit before anything is loaded.
pub fn check_frequency(freq_hz: u64) -> Result<()> {
    if let Some(max) = max_sample_rate() {
        if freq_hz > max {
            bail!(
                "--freq {freq_hz} is above this kernel's limit of {max} Hz \
                 (kernel.perf_event_max_sample_rate): choose a lower frequency"
            );
        }
    }
    Ok(())
}

/// Attaches the sampling program to a CPU-clock event on every online CPU.
pub fn attach(ebpf: &mut Ebpf, freq_hz: u64) -> Result<ProbeUse> {
    let cpus = online_cpus()
        .map_err(|(path, err)| anyhow::anyhow!("cannot read the online CPUs from {path}: {err}"))?;
    let program: &mut PerfEvent = ebpf
        .program_mut("cpu_sample")
        .context("program cpu_sample missing from the eBPF object")?
        .try_into()
        .context("program cpu_sample is not a perf_event program")?;
    program
        .load()
        .context("the kernel refused to load cpu_sample")?;
    for &cpu in &cpus {
        program
            .attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::AllProcessesOneCpu { cpu },
                SamplePolicy::Frequency(freq_hz),
                false,
            )
            .with_context(|| {
                format!("cannot open a CPU-clock perf event on CPU {cpu} at {freq_hz} Hz")
            })?;
    }
    Ok(ProbeUse {
        family: "cpu".into(),
        method: format!(
            "perf_event software cpu-clock at {freq_hz} Hz on {} CPUs",
            cpus.len()
        ),
    })
}

/// Reads the sample counts out of the kernel, with their stacks symbolized.
pub fn drain(maps: &MapSet, stacks: &mut StackResolver) -> Result<Vec<CpuRow>> {
    let map = maps.get("CPU_SAMPLES")?;
    let samples: HashMap<_, CpuKey, u64> =
        HashMap::try_from(map).context("CPU_SAMPLES has an unexpected type")?;
    let mut rows = Vec::new();
    for entry in samples.iter() {
        let (key, count) = entry.context("cannot read CPU_SAMPLES")?;
        rows.push(CpuRow {
            pid: key.tgid,
            tid: key.tid,
            kernel_stack: stacks.kernel_stack(key.kstack_id),
            user_stack: stacks.user_stack(key.tgid, key.ustack_id),
            samples: count,
        });
    }
    rows.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.pid.cmp(&b.pid)));
    Ok(rows)
}
