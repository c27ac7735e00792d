//! On-CPU sampling: one software CPU-clock perf event per online CPU, at `--freq` Hz,
//! each running `cpu_sample`; drain `CPU_SAMPLES` into profile rows.

use anyhow::{bail, Context, Result};
use aya::{
    programs::{
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
        PerfEvent,
    },
    util::online_cpus,
    Ebpf, EbpfLoader,
};
use clap::Args;
use profiler_common::cpu::{names, CpuKey};

mod unwound;
pub use unwound::StackCopies;

use crate::{probes::prelude::*, profile::CpuRow, symbolize::UserSymbols};
use profiler_common::cpu::USER_STACK_MAX;

pub const FAMILY: Registration = Registration {
    name: "cpu",
    asked: |args| args.cpu.cpu,
    check: |args| match args.cpu.cpu {
        true => check_frequency(args.cpu.freq),
        false => Ok(()),
    },
    plan: |args, _ctx| {
        Ok(args.cpu.cpu.then(|| {
            Box::new(CpuFamily {
                freq_hz: args.cpu.freq,
                stacks: StackCopies::new(args.cpu.user_stack_bytes),
            }) as Box<dyn Family>
        }))
    },
    maps: &[
        (names::CPU_SAMPLES, MapSize::Stats),
        (names::CPU_OVERFLOW, MapSize::Overflow),
    ],
    names: names::ALL,
};

/// The on-CPU sampling family of one recording.
struct CpuFamily {
    freq_hz: u64,
    /// User stack copies and their unwinding (`--user-stack-bytes`).
    stacks: StackCopies,
}

impl Family for CpuFamily {
    fn user_stacks(&self) -> bool {
        true
    }

    fn configure<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        self.stacks.configure(loader, self.freq_hz);
    }

    fn attach(&mut self, ebpf: &mut Ebpf, _ctx: &mut AttachContext) -> Result<Vec<ProbeUse>> {
        let mut used = attach(ebpf, self.freq_hz)?;
        if let Some(method) = self.stacks.start(ebpf)? {
            used.method.push_str(&method);
        }
        Ok(vec![used])
    }

    fn poll(&self, user: &mut UserSymbols) {
        self.stacks.poll(user);
    }

    fn new_period(&self) {
        self.stacks.new_period();
    }

    fn drain(&self, out: &mut Drain) -> Result<()> {
        out.profile.cpu_freq_hz = self.freq_hz;
        let mut rows = drain(out.maps, out.stacks)?;
        rows.extend(self.stacks.rows(out.stacks));
        out.profile.cpu = merge_rows(rows);
        Ok(())
    }

    fn finish(&self, _profile: &Profile) {
        self.stacks.finish();
    }

    fn progress(&self, live: &Profile) -> Option<String> {
        progress_of(&live.cpu, |row| row.samples, "CPU samples")
    }
}

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
    let program: &mut PerfEvent = program(ebpf, names::CPU_SAMPLE)?;
    program
        .load()
        .map_err(|err| crate::probes::shared::load_error(names::CPU_SAMPLE, err))?;
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
        family: FAMILY.name.into(),
        method: format!(
            "perf_event software cpu-clock at {freq_hz} Hz on {} CPUs",
            cpus.len()
        ),
    })
}

/// Reads the sample counts out of the kernel, with their stacks symbolized.
pub fn drain(maps: &MapSet, stacks: &mut StackResolver) -> Result<Vec<CpuRow>> {
    let mut rows = Vec::new();
    // With the samples the full map had no room for: rows of their threads, no stacks.
    for (key, count) in
        maps.entries_with_overflow::<CpuKey, u64>(names::CPU_SAMPLES, names::CPU_OVERFLOW)?
    {
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

/// Rows with the same process, thread and stacks (from the in-kernel counts and from the
/// unwound samples) as one, most samples first.
fn merge_rows(rows: Vec<CpuRow>) -> Vec<CpuRow> {
    let mut merged: std::collections::HashMap<_, CpuRow> = std::collections::HashMap::new();
    for row in rows {
        let key = (row.pid, row.tid, row.kernel_stack, row.user_stack);
        match merged.get_mut(&key) {
            Some(existing) => existing.samples += row.samples,
            None => {
                merged.insert(key, row);
            }
        }
    }
    let mut rows: Vec<CpuRow> = merged.into_values().collect();
    rows.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then(a.pid.cmp(&b.pid))
            .then(a.tid.cmp(&b.tid))
            .then(a.user_stack.cmp(&b.user_stack))
            .then(a.kernel_stack.cmp(&b.kernel_stack))
    });
    rows
}

// `record`'s options of the on-CPU sampling family, and their grammar.

#[derive(Debug, Args)]
pub struct CpuArgs {
    /// Sample what runs on the CPUs (kernel and user stacks) with a perf CPU clock.
    #[arg(long)]
    pub cpu: bool,

    /// On-CPU sampling frequency in Hz, on every CPU (with --cpu).
    #[arg(long, value_name = "HZ", default_value_t = 99, requires = "cpu",
          value_parser = parse_freq)]
    pub freq: u64,

    /// Bytes of user stack copied with each on-CPU sample taken in user mode, to unwind
    /// code built without frame pointers from its .eh_frame/.debug_frame (with --cpu);
    /// 0: frame-pointer stacks only. At most 65480.
    #[arg(long, value_name = "BYTES", requires = "cpu",
          default_value_t = DEFAULT_USER_STACK_BYTES,
          value_parser = parse_user_stack_bytes)]
    pub user_stack_bytes: u32,
}

/// `--freq`: a whole number of Hz (an `Hz` suffix is allowed), at least 1.
fn parse_freq(text: &str) -> Result<u64, String> {
    let hz: u64 = text
        .trim_end_matches("Hz")
        .parse()
        .map_err(|_| format!("{text:?} is not a frequency in Hz (a whole number)"))?;
    if hz == 0 {
        return Err("the sampling frequency must be at least 1 Hz (99 is the default)".into());
    }
    Ok(hz)
}

/// Bytes of user stack copied per sample unless `--user-stack-bytes` says otherwise
/// (see docs/how-it-works.md, user stacks, for the measured cost).
pub const DEFAULT_USER_STACK_BYTES: u32 = USER_STACK_MAX as u32;

/// `--user-stack-bytes`: 0 (frame pointers only) up to what one sample can carry.
pub fn parse_user_stack_bytes(text: &str) -> Result<u32, String> {
    let bytes: u64 = text.trim().parse().map_err(|_| {
        format!("{text:?} is not a number of bytes (0 turns stack copies off; default {DEFAULT_USER_STACK_BYTES})")
    })?;
    if bytes > USER_STACK_MAX as u64 {
        return Err(format!(
            "--user-stack-bytes {bytes} is more than one sample can carry ({USER_STACK_MAX}): choose a smaller size"
        ));
    }
    // Whole stack slots.
    Ok((bytes as u32) & !7)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_bytes_are_checked_and_rounded() {
        // Multiples of 8 bytes, rounded down.
        for (text, bytes) in [("0", 0), ("8192", 8192), ("1001", 1000)] {
            assert_eq!(parse_user_stack_bytes(text), Ok(bytes), "{text}");
        }
        let err = parse_user_stack_bytes("70000").unwrap_err();
        assert!(err.contains(&USER_STACK_MAX.to_string()), "{err}");
        assert!(parse_user_stack_bytes("8k").is_err());
    }
}
