//! Wakers (`record --wakers`): attach `sched:sched_waking`, switch the off-CPU program's
//! waker join on, and drain `WAKER_STATS` into the `wakers` of each off-CPU row.

use std::collections::HashMap as StdHashMap;

use anyhow::{bail, Result};
use aya::{Ebpf, EbpfLoader};
use profiler_common::{
    offcpu::{names as offcpu_names, OffcpuStat, STATE_INTERRUPTIBLE, STATE_UNINTERRUPTIBLE},
    wakers::{names, ChainKey, ChainStat, WakerKey, LAST_WAIT_ENTRIES, WAKER_PENDING_ENTRIES},
};

use crate::waitclass::interrupt_entry;
use crate::{
    probes::prelude::*,
    profile::{ChainLinkRow, ChainRow, OffcpuRow, WakerRow},
    tracefs,
    waitclass::Classifier,
};

pub const FAMILY: Registration = Registration {
    name: "wakers",
    asked: |args| args.offcpu.wakers,
    check,
    plan: plan_family,
    maps: &[
        (names::WAKER_STATS, MapSize::Stats),
        (names::WAKER_OVERFLOW, MapSize::Overflow),
        (names::WAKER_PENDING, MapSize::Fixed(WAKER_PENDING_ENTRIES)),
        (names::LAST_WAIT, MapSize::Fixed(LAST_WAIT_ENTRIES)),
        (names::CHAIN_STATS, MapSize::Stats),
        (names::CHAIN_OVERFLOW, MapSize::Overflow),
    ],
    names: names::ALL,
};

fn check(args: &FamilyArgs) -> Result<()> {
    if args.offcpu.wakers && !(args.offcpu.offcpu || args.offcpu.offcpu_all) {
        bail!(
            "--wakers names who woke each off-CPU wait: add --offcpu (D waits) or --offcpu-all (D and S)"
        );
    }
    Ok(())
}

fn plan_family(args: &FamilyArgs, ctx: &mut PlanContext) -> Result<Planned> {
    check(args)?;
    if !args.offcpu.wakers {
        return Ok(None);
    }
    match tracefs::field_offset("sched", "sched_waking", "pid") {
        Ok(pid_offset) => Ok(Some(Box::new(WakersFamily {
            on: 1,
            pid_offset,
            classifier: Classifier::new(args.offcpu.wait_class.clone()),
        }))),
        Err(err) => {
            ctx.unavailable.push(Unavailable {
                family: FAMILY.name.into(),
                what: "sched:sched_waking".into(),
                reason: format!("{err:#}; off-CPU waits are recorded without their wakers"),
            });
            Ok(None)
        }
    }
}

/// The wakers of one recording.
struct WakersFamily {
    /// `WAKERS_ON`, 1 once planned.
    on: u32,
    pid_offset: u32,
    /// The off-CPU family's classes, for the waits of chain links.
    classifier: Classifier,
}

impl Family for WakersFamily {
    fn configure<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        loader
            .override_global(names::WAKERS_ON, &self.on, true)
            .override_global(names::WAKING_PID_OFFSET, &self.pid_offset, true);
    }

    fn user_stacks(&self) -> bool {
        true
    }

    fn attach(&mut self, ebpf: &mut Ebpf, ctx: &mut AttachContext) -> Result<Vec<ProbeUse>> {
        // The off-CPU family attached first: without its program with the waker join
        // (refused by this kernel: the reason is in `unavailable`), nothing to join to.
        let joined = ebpf
            .program(offcpu_names::OFFCPU_SCHED_SWITCH_WAKERS)
            .is_some_and(|program| program.fd().is_ok());
        if !joined {
            return Ok(Vec::new());
        }
        if let Err(err) =
            attach_tracepoint(ebpf, names::WAKERS_SCHED_WAKING, "sched", "sched_waking")
        {
            ctx.unavailable.push(Unavailable {
                family: FAMILY.name.into(),
                what: "sched:sched_waking".into(),
                reason: format!("{err:#}; off-CPU waits are recorded without their wakers"),
            });
            return Ok(Vec::new());
        }
        Ok(vec![ProbeUse {
            family: FAMILY.name.into(),
            method: "tracepoint sched:sched_waking, joined at the off-CPU switch-in".into(),
        }])
    }

    fn drain(&self, out: &mut Drain) -> Result<()> {
        drain(out.maps, out.stacks, &mut out.profile.offcpu)?;
        out.profile.chains = drain_chains(out.maps, out.stacks, &self.classifier)?;
        Ok(())
    }

    fn progress(&self, _live: &Profile) -> Option<String> {
        None
    }
}

fn state_bit(state: &str) -> u32 {
    match state {
        "D" => STATE_UNINTERRUPTIBLE,
        "S" => STATE_INTERRUPTIBLE,
        _ => 0,
    }
}

/// Adds each `WAKER_STATS` entry to the off-CPU row of its waiter (the off-CPU family
/// drained first: its rows are in `rows`). An entry whose row is missing (a wait closed
/// between the two drains of a live snapshot) is left for the next drain. Rows whose
/// stacks symbolize alike (two call sites in one function) are merged first, so each
/// row's wakers are the wakers of exactly its waits.
pub fn drain(maps: &MapSet, stacks: &mut StackResolver, rows: &mut Vec<OffcpuRow>) -> Result<()> {
    type RowKey = (u32, u32, u32, Option<u32>, Option<u32>, Option<u32>);
    let mut index: StdHashMap<RowKey, usize> = StdHashMap::new();
    let mut merged: Vec<OffcpuRow> = Vec::with_capacity(rows.len());
    for row in rows.drain(..) {
        let key = (
            row.pid,
            row.tid,
            state_bit(&row.state),
            row.stack,
            row.ustack,
            row.held_by,
        );
        match index.get(&key) {
            Some(&at) => {
                let known = &mut merged[at];
                known.count += row.count;
                known.total_ns += row.total_ns;
                known.max_ns = known.max_ns.max(row.max_ns);
            }
            None => {
                index.insert(key, merged.len());
                merged.push(row);
            }
        }
    }
    *rows = merged;
    for (key, stat) in maps
        .entries_with_overflow::<WakerKey, OffcpuStat>(names::WAKER_STATS, names::WAKER_OVERFLOW)?
    {
        let waiter = key.waiter;
        let row_key = (
            waiter.tgid,
            waiter.tid,
            waiter.state,
            stacks.kernel_stack(waiter.kstack_id),
            stacks.user_stack(waiter.tgid, waiter.ustack_id),
            (waiter.holder_tgid != 0).then_some(waiter.holder_tgid),
        );
        let Some(&at) = index.get(&row_key) else {
            continue;
        };
        let waker = key.waker;
        let stack = stacks.kernel_stack(waker.kstack_id);
        let frames = stacks.interner.frames_of(stack);
        let row = match interrupt_entry(&frames) {
            // Woken from an interrupt: the task below it was only interrupted.
            Some(entry) => WakerRow {
                pid: 0,
                tid: 0,
                stack: Some(stacks.interner.stack(frames[..=entry].to_vec(), false)),
                ustack: None,
                count: stat.count,
                wait_ns: stat.total_ns,
                max_ns: stat.max_ns,
                interrupt: true,
            },
            None => WakerRow {
                pid: waker.tgid,
                tid: waker.tid,
                stack,
                ustack: stacks.user_stack(waker.tgid, waker.ustack_id),
                count: stat.count,
                wait_ns: stat.total_ns,
                max_ns: stat.max_ns,
                interrupt: false,
            },
        };
        // Ids of one symbolized stack can differ (hash collisions aside, the same
        // frames from different ids): merge rows that resolve alike.
        let wakers = &mut rows[at].wakers;
        match wakers.iter_mut().find(|known| {
            (
                known.interrupt,
                known.pid,
                known.tid,
                known.stack,
                known.ustack,
            ) == (row.interrupt, row.pid, row.tid, row.stack, row.ustack)
        }) {
            Some(known) => {
                known.count += row.count;
                known.wait_ns += row.wait_ns;
                known.max_ns = known.max_ns.max(row.max_ns);
            }
            None => wakers.push(row),
        }
    }
    rows.sort_by_key(|row| std::cmp::Reverse(row.total_ns));
    for row in rows.iter_mut() {
        row.wakers
            .sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.tid.cmp(&b.tid)));
    }
    Ok(())
}

fn state_name(state: u32) -> &'static str {
    match state {
        STATE_UNINTERRUPTIBLE => "D",
        STATE_INTERRUPTIBLE => "S",
        _ => "?",
    }
}

/// The wait chains of `CHAIN_STATS` and of its overflow map (those without the waits'
/// stacks), merged where the stacks symbolize alike, most waiter time first.
pub fn drain_chains(
    maps: &MapSet,
    stacks: &mut StackResolver,
    classifier: &Classifier,
) -> Result<Vec<ChainRow>> {
    let mut rows: Vec<ChainRow> = Vec::new();
    // Chains whose stacks symbolize alike are one row.
    type ChainIdentity = ((u32, u32, Option<u32>, u32), Vec<(u32, Option<u32>)>);
    let mut index: StdHashMap<ChainIdentity, usize> = StdHashMap::new();
    let class_of = |stacks: &mut StackResolver, stack: Option<u32>| {
        let frames = stacks.interner.frames_of(stack);
        classifier.classify(&frames.iter().collect::<Vec<_>>())
    };
    for (key, stat) in maps
        .entries_with_overflow::<ChainKey, ChainStat>(names::CHAIN_STATS, names::CHAIN_OVERFLOW)?
    {
        let stack = stacks.kernel_stack(key.waiter.kstack_id);
        // A waker in an interrupt only interrupted its task: the chain ends there.
        let from_interrupt = |stacks: &mut StackResolver, id: i32| {
            let stack = stacks.kernel_stack(id);
            interrupt_entry(&stacks.interner.frames_of(stack)).is_some()
        };
        if from_interrupt(stacks, key.waker_kstacks[0]) {
            continue;
        }
        let mut links = Vec::new();
        let (mut last_pid, mut last_tid) = (key.last_waker_tgid, key.last_waker_tid);
        for (index, (link, &wait_ns)) in key.links.iter().zip(&stat.link_ns).enumerate() {
            if link.tid == 0 {
                break;
            }
            let link_stack = stacks.kernel_stack(link.kstack_id);
            links.push(ChainLinkRow {
                pid: link.tgid,
                tid: link.tid,
                state: state_name(link.state).into(),
                class: class_of(stacks, link_stack),
                stack: link_stack,
                wait_ns,
            });
            if from_interrupt(stacks, key.waker_kstacks[index + 1]) {
                (last_pid, last_tid) = (0, 0);
                break;
            }
        }
        let row = ChainRow {
            pid: key.waiter.tgid,
            tid: key.waiter.tid,
            state: state_name(key.waiter.state).into(),
            class: class_of(stacks, stack),
            stack,
            count: stat.count,
            wait_ns: stat.wait_ns,
            links,
            last_waker_pid: last_pid,
            last_waker_tid: last_tid,
        };
        let identity: ChainIdentity = (
            (row.pid, row.tid, row.stack, row.last_waker_tid),
            row.links
                .iter()
                .map(|link| (link.tid, link.stack))
                .collect(),
        );
        match index.get(&identity).map(|&at| &mut rows[at]) {
            Some(known) => {
                known.count += row.count;
                known.wait_ns += row.wait_ns;
                for (mine, theirs) in known.links.iter_mut().zip(&row.links) {
                    mine.wait_ns += theirs.wait_ns;
                }
            }
            None => {
                index.insert(identity, rows.len());
                rows.push(row);
            }
        }
    }
    rows.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.tid.cmp(&b.tid)));
    Ok(rows)
}
