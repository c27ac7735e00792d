//! Off-CPU waits: attach `sched:sched_switch`, drain `OFFCPU_STATS`, classify each
//! stack into a wait class (waitclass.rs).

use anyhow::{bail, Result};
use aya::{Ebpf, EbpfLoader};
use profiler_common::offcpu::{
    names, OffcpuKey, OffcpuStat, OFFCPU_START_ENTRIES, STATE_INTERRUPTIBLE, STATE_UNINTERRUPTIBLE,
};

use crate::{
    probes::{filelock, prelude::*},
    profile::OffcpuRow,
    tracefs,
    waitclass::{self, Classifier},
};

pub const FAMILY: Registration = Registration {
    name: "offcpu",
    asked: |args| args.offcpu || args.offcpu_all,
    check: |args| options(args).map(|_| ()),
    plan: plan_family,
    maps: &[
        (names::OFFCPU_STATS, MapSize::Stats),
        (names::OFFCPU_START, MapSize::Fixed(OFFCPU_START_ENTRIES)),
        (
            names::FILELOCK_WAITERS,
            MapSize::Fixed(profiler_common::offcpu::FILELOCK_WAITERS_ENTRIES),
        ),
    ],
    names: names::ALL,
};

/// The off-CPU options from the flags, checked before anything is loaded.
fn options(args: &RecordArgs) -> Result<Option<OffcpuOptions>> {
    waitclass::validate(&args.wait_class)?;
    let offcpu = (args.offcpu || args.offcpu_all).then(|| OffcpuOptions {
        all_states: args.offcpu_all,
        min_wait_ns: args.min_wait.unwrap_or(0),
        wakers: args.wakers,
    });
    if offcpu.is_none() && (args.min_wait.is_some() || !args.wait_class.is_empty()) {
        bail!(
            "--min-wait and --wait-class apply to off-CPU recording: add --offcpu or --offcpu-all"
        );
    }
    Ok(offcpu)
}

fn plan_family(args: &RecordArgs, _ctx: &mut PlanContext) -> Result<Planned> {
    let Some(options) = options(args)? else {
        return Ok(None);
    };
    Ok(Some(Box::new(OffcpuFamily {
        globals: OffcpuGlobals::read(&options)?,
        filelock: filelock::FilelockGlobals::read(),
        options,
        classifier: Classifier::new(args.wait_class.clone()),
    })))
}

/// The off-CPU family of one recording.
struct OffcpuFamily {
    options: OffcpuOptions,
    globals: OffcpuGlobals,
    /// Offsets of the file-lock holders' program, or why it cannot run here.
    filelock: Result<filelock::FilelockGlobals>,
    classifier: Classifier,
}

impl Family for OffcpuFamily {
    fn configure<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        self.globals.apply(loader);
        if let Ok(filelock) = &self.filelock {
            filelock.apply(loader);
        }
    }

    fn user_stacks(&self) -> bool {
        true
    }

    fn attach(&mut self, ebpf: &mut Ebpf, ctx: &mut AttachContext) -> Result<Vec<ProbeUse>> {
        let mut used = if self.options.wakers {
            // A kernel that refuses the program with the waker join still records the
            // waits with the plain one; the wakers family then says why it is missing.
            match attach_tracepoint(
                ebpf,
                names::OFFCPU_SCHED_SWITCH_WAKERS,
                "sched",
                "sched_switch",
            ) {
                Ok(()) => probe_use(&self.options, " with wakers"),
                Err(err) => {
                    ctx.unavailable.push(crate::profile::Unavailable {
                        family: "wakers".into(),
                        what: "off-CPU waits joined to their wakers".into(),
                        reason: format!("{err:#}; off-CPU waits are recorded without their wakers"),
                    });
                    attach(ebpf, &self.options)?
                }
            }
        } else {
            attach(ebpf, &self.options)?
        };
        match self
            .filelock
            .as_ref()
            .map_err(|err| anyhow::anyhow!("{err:#}"))
            .and_then(|globals| filelock::attach(ebpf, globals))
        {
            Ok(method) => used.method.push_str(&format!("; {method}")),
            Err(err) => ctx.unavailable.push(filelock::unavailable(&err)),
        }
        Ok(vec![used])
    }

    fn drain(&self, out: &mut Drain) -> Result<()> {
        out.profile.offcpu = drain(out.maps, out.stacks, &self.classifier)?;
        Ok(())
    }

    fn progress(&self, live: &Profile) -> Option<String> {
        progress_of(&live.offcpu, |row| row.count, "off-CPU waits")
    }

    fn flamegraph(&self) -> Option<Kind> {
        Some(Kind::Offcpu)
    }
}

/// What `record --offcpu` asks for.
#[derive(Debug, Clone, Default)]
pub struct OffcpuOptions {
    /// Also voluntary sleeps (S), not only uninterruptible waits (D).
    pub all_states: bool,
    /// Waits shorter than this are dropped in the kernel.
    pub min_wait_ns: u64,
    /// `--wakers`: the program that also joins each wait to its waker (wakers.rs).
    pub wakers: bool,
}

/// Load-time globals of the off-CPU program: record offsets (from the format file) and
/// the options. Returned as (name, value) so the loader sets them before load.
pub struct OffcpuGlobals {
    prev_pid: u32,
    prev_state: u32,
    next_pid: u32,
    states: u32,
    min_ns: u64,
}

impl OffcpuGlobals {
    pub fn read(options: &OffcpuOptions) -> Result<Self> {
        let field = |name: &str| tracefs::field_offset("sched", "sched_switch", name);
        Ok(OffcpuGlobals {
            prev_pid: field("prev_pid")?,
            prev_state: field("prev_state")?,
            next_pid: field("next_pid")?,
            states: if options.all_states {
                STATE_UNINTERRUPTIBLE | STATE_INTERRUPTIBLE
            } else {
                STATE_UNINTERRUPTIBLE
            },
            min_ns: options.min_wait_ns,
        })
    }

    pub fn apply<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        loader
            .override_global(names::SWITCH_PREV_PID_OFFSET, &self.prev_pid, true)
            .override_global(names::SWITCH_PREV_STATE_OFFSET, &self.prev_state, true)
            .override_global(names::SWITCH_NEXT_PID_OFFSET, &self.next_pid, true)
            .override_global(names::OFFCPU_STATES, &self.states, true)
            .override_global(names::OFFCPU_MIN_NS, &self.min_ns, true);
    }
}

pub fn attach(ebpf: &mut Ebpf, options: &OffcpuOptions) -> Result<ProbeUse> {
    attach_tracepoint(ebpf, names::OFFCPU_SCHED_SWITCH, "sched", "sched_switch")?;
    Ok(probe_use(options, ""))
}

fn probe_use(options: &OffcpuOptions, with: &str) -> ProbeUse {
    let states = if options.all_states { "D+S" } else { "D" };
    ProbeUse {
        family: FAMILY.name.into(),
        method: format!(
            "tracepoint sched:sched_switch{with} (states {states}, min wait {} ns)",
            options.min_wait_ns
        ),
    }
}

pub fn drain(
    maps: &MapSet,
    stacks: &mut StackResolver,
    classifier: &Classifier,
) -> Result<Vec<OffcpuRow>> {
    let mut rows = Vec::new();
    for (key, stat) in maps.entries::<OffcpuKey, OffcpuStat>(names::OFFCPU_STATS)? {
        let stack = stacks.kernel_stack(key.kstack_id);
        let frames = stacks.interner.frames_of(stack);
        let class = classifier.classify(&frames.iter().collect::<Vec<_>>());
        rows.push(OffcpuRow {
            pid: key.tgid,
            tid: key.tid,
            state: state_name(key.state).into(),
            class,
            stack,
            ustack: stacks.user_stack(key.tgid, key.ustack_id),
            count: stat.count,
            total_ns: stat.total_ns,
            max_ns: stat.max_ns,
            held_by: (key.holder_tgid != 0).then_some(key.holder_tgid),
            wakers: Vec::new(),
        });
    }
    rows.sort_by_key(|row| std::cmp::Reverse(row.total_ns));
    Ok(rows)
}

fn state_name(state: u32) -> &'static str {
    match state {
        STATE_UNINTERRUPTIBLE => "D",
        STATE_INTERRUPTIBLE => "S",
        _ => "?",
    }
}

/// Parses `--min-wait`: a number with a unit (ns, us, ms, s), e.g. `500us`, `2ms`.
pub fn parse_min_wait(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| {
        format!("{text:?} is not a duration: give a number and a unit, e.g. 500us or 2ms")
    })?;
    let scale = match unit.trim() {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "" if value == 0.0 => 1.0,
        other => {
            return Err(format!(
                "{text:?}: unknown unit {other:?}; use ns, us, ms or s (e.g. 500us)"
            ))
        }
    };
    let ns = value * scale;
    if !ns.is_finite() || ns >= u64::MAX as f64 {
        return Err(format!("{text:?} is too large"));
    }
    Ok(ns as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_wait_units() {
        for (text, ns) in [
            ("500us", 500_000),
            ("2ms", 2_000_000),
            ("1.5s", 1_500_000_000),
            ("10ns", 10),
            ("0", 0),
        ] {
            assert_eq!(parse_min_wait(text), Ok(ns), "{text}");
        }
        assert!(parse_min_wait("garbage")
            .unwrap_err()
            .contains("not a duration"));
        assert!(parse_min_wait("10").unwrap_err().contains("unknown unit"));
        assert!(parse_min_wait("5 parsecs").is_err());
        assert!(parse_min_wait("-3ms").is_err());
    }
}
