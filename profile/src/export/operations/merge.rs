//! `lockpath merge A B ... -o ALL`: one profile from the profiles of many hosts. Every
//! process keeps its host (`Process::host`); frames and stacks are interned again, and
//! each kind's rows get their stack and process ids rewritten (`Profile::visit_row_ids`).

use std::collections::{BTreeMap, HashMap};

use anyhow::{bail, Result};

use crate::profile::{ProbeUse, Profile, StackInterner, FORMAT};

/// Pids of the host's processes are kept when no other host used them; a clash gets
/// `input_index << 22 | pid` (pids are below 2^22 on Linux), documented in the format.
const PID_BITS: u32 = 22;

/// Off-CPU rows of one key from several periods of a host: one row (a wait that spans
/// periods has its parts in each; together they are the whole wait).
fn combine_offcpu_rows(profile: &mut Profile) {
    type Key = (
        u32,
        u32,
        String,
        String,
        Option<u32>,
        Option<u32>,
        Option<u32>,
    );
    let mut index: HashMap<Key, usize> = HashMap::new();
    let mut combined: Vec<crate::profile::OffcpuRow> = Vec::new();
    for row in std::mem::take(&mut profile.offcpu) {
        let key = (
            row.pid,
            row.tid,
            row.state.clone(),
            row.class.clone(),
            row.stack,
            row.ustack,
            row.held_by,
        );
        match index.get(&key) {
            Some(&at) => {
                let kept = &mut combined[at];
                kept.count = kept.count.saturating_add(row.count);
                kept.total_ns = kept.total_ns.saturating_add(row.total_ns);
                kept.max_ns = kept.max_ns.max(row.max_ns);
                kept.wakers.extend(row.wakers);
            }
            None => {
                index.insert(key, combined.len());
                combined.push(row);
            }
        }
    }
    profile.offcpu = combined;
}

pub fn merge(inputs: Vec<Profile>, command_line: Vec<String>) -> Result<Profile> {
    if inputs.len() < 2 {
        bail!("merge needs at least two profiles");
    }
    let mut merged = Profile::new();
    merged.command_line = command_line;
    merged.targets.mode = "merged".into();
    let mut hosts: Vec<String> = Vec::new();
    let mut kernels: Vec<String> = Vec::new();
    // Pid -> the host whose process has it (periods of one host share their pids).
    let mut used_pids: HashMap<u32, String> = HashMap::new();
    let mut interner = StackInterner::default();
    let mut probes: Vec<ProbeUse> = Vec::new();
    let mut losses: BTreeMap<String, u64> = BTreeMap::new();
    merged.start_unix_s = inputs
        .iter()
        .map(|p| p.start_unix_s)
        .filter(|&s| s > 0)
        .min()
        .unwrap_or(0);
    // The runs overlap in time on different hosts: the merged run lasts as long as the longest.
    merged.duration_s = inputs.iter().map(|p| p.duration_s).fold(0.0, f64::max);

    // A host's waits in progress are those at the end of its latest profile.
    let ends: Vec<(String, f64)> = inputs
        .iter()
        .map(|p| (p.host.clone(), p.start_unix_s as f64 + p.duration_s))
        .collect();
    let ends: Vec<(&str, f64)> = ends.iter().map(|(h, e)| (h.as_str(), *e)).collect();
    let keeps_waits = crate::waiting::latest_of_host(&ends);
    for (index, mut input) in inputs.into_iter().enumerate() {
        if !keeps_waits[index] {
            input.waiting.clear();
        }
        if input.format != FORMAT {
            bail!(
                "input {} has format {:?}, not {FORMAT:?}",
                index + 1,
                input.format
            );
        }
        for host in std::iter::once(input.host.clone())
            .chain(input.processes.iter().filter_map(|p| p.host.clone()))
        {
            if !hosts.contains(&host) {
                hosts.push(host);
            }
        }
        if !kernels.contains(&input.kernel) {
            kernels.push(input.kernel.clone());
        }
        renumber(&mut input, index, &mut interner, &mut used_pids);
        for probe in &input.probes {
            if !probes.contains(probe) {
                probes.push(probe.clone());
            }
        }
        for (name, count) in &input.losses {
            let total = losses.entry(name.clone()).or_default();
            // Saturating: a damaged input must not wrap the sum around (or panic).
            *total = total.saturating_add(*count);
        }
        for process in std::mem::take(&mut input.processes) {
            // The same process in another period of its host: one entry, all threads.
            match merged
                .processes
                .iter_mut()
                .find(|known| known.pid == process.pid && known.host == process.host)
            {
                Some(known) => {
                    for thread in process.threads {
                        if !known.threads.iter().any(|t| t.tid == thread.tid) {
                            known.threads.push(thread);
                        }
                    }
                }
                None => merged.processes.push(process),
            }
        }
        merged.append_rows(input);
    }
    combine_offcpu_rows(&mut merged);
    interner.finish(&mut merged);
    merged.host = hosts.join(",");
    merged.kernel = kernels.join(",");
    merged.probes = probes;
    merged.losses = losses;
    merged.targets.command = Vec::new();
    Ok(merged)
}

/// Gives the rows of the `index`th input the ids of the merged profile: its stacks
/// interned again, and its processes' pids kept unless a process of another host has
/// taken them (`used_pids`: pid -> its host).
fn renumber(
    input: &mut Profile,
    index: usize,
    interner: &mut StackInterner,
    used_pids: &mut HashMap<u32, String>,
) {
    // Stacks: intern the input's again; old id -> new id.
    let stack_ids: Vec<u32> = input
        .stacks
        .iter()
        .map(|stack| {
            let frames = stack
                .frames
                .iter()
                .map(|&frame| input.frames[frame as usize].clone())
                .collect();
            interner.stack(frames, stack.truncated)
        })
        .collect();
    // Processes: keep their pid unless another input already has it.
    let mut pid_map: HashMap<u32, u32> = HashMap::new();
    for process in &mut input.processes {
        let original = process.pid;
        let mut pid = original;
        let host = process.host.clone().unwrap_or_else(|| input.host.clone());
        if used_pids.get(&pid).is_some_and(|other| *other != host) {
            pid = ((index as u32 + 1) << PID_BITS) | (original & ((1 << PID_BITS) - 1));
        }
        used_pids.insert(pid, host.clone());
        pid_map.insert(original, pid);
        process.pid = pid;
        process.host = Some(host);
    }
    // Rows of processes without an entry (should not happen) keep their pid.
    let pid = |old: u32| pid_map.get(&old).copied().unwrap_or(old);
    let stack = |old: u32| stack_ids.get(old as usize).copied().unwrap_or(old);
    input.visit_row_ids(&mut |row| {
        for id in row.pids.iter_mut() {
            **id = pid(**id);
        }
        for id in row.maybe_pids.iter_mut() {
            **id = id.map(pid);
        }
        for id in row.stacks.iter_mut() {
            **id = id.map(stack);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        export::formats::folded, export::formats::report::tests::profile_with_two_locks, kind::Kind,
    };

    /// Merges `a` as node-a and `b` as node-b, whose stacks are stored in the other
    /// order (`flip_rows` rewrites its rows' stack ids to match, so the merge must
    /// reindex them), checks that `kind`'s folded lines of `b` are in the merge under
    /// node-b, and returns the merge as read back from its JSON.
    fn merged_as_two_hosts(
        mut a: Profile,
        mut b: Profile,
        kind: Kind,
        flip_rows: fn(&mut Profile),
    ) -> Profile {
        a.host = "node-a".into();
        b.host = "node-b".into();
        b.stacks.reverse();
        flip_rows(&mut b);
        let expected_b = folded::render(&b, kind);
        let merged = merge(vec![a, b], vec!["lockpath".into()]).expect("merge");
        let merged = Profile::from_bytes(&serde_json::to_vec(&merged).expect("json"))
            .expect("valid profile");
        let folded = folded::render(&merged, kind);
        for line in expected_b.lines() {
            assert!(
                folded.contains(&format!("node-b:{line}")),
                "{line} in\n{folded}"
            );
        }
        merged
    }

    #[test]
    fn merge_keeps_hosts_and_reindexes_stacks() {
        let mut a = profile_with_two_locks();
        a.duration_s = 2.0;
        let mut b = profile_with_two_locks();
        b.duration_s = 3.0;
        let merged = merged_as_two_hosts(a, b, Kind::Lock, |b| {
            for row in &mut b.locks {
                row.stack = row.stack.map(|id| 1 - id);
            }
        });
        assert_eq!(merged.host, "node-a,node-b");
        assert_eq!(merged.duration_s, 3.0);
        assert_eq!(merged.stacks.len(), 2, "identical stacks are stored once");
        assert_eq!(merged.locks.len(), 6);
        assert_eq!(merged.processes.len(), 4);
        let folded = folded::render(&merged, Kind::Lock);
        assert!(
            folded.contains("node-a:ior;spinlock;do_pipe2 7000"),
            "{folded}"
        );
        // Pid 10 of node-b clashed with node-a's and was moved.
        let moved = merged
            .processes
            .iter()
            .find(|p| p.host.as_deref() == Some("node-b") && p.pid != 10 && p.pid & 0x3fffff == 10)
            .expect("moved pid");
        assert!(merged.locks.iter().any(|row| row.pid == moved.pid));
    }

    #[test]
    fn merge_remaps_offcpu_and_io_rows() {
        use crate::export::tables::offcpu::tests::profile_with_waits_and_io;
        let merged = merged_as_two_hosts(
            profile_with_waits_and_io(),
            profile_with_waits_and_io(),
            Kind::Offcpu,
            |b| {
                for row in &mut b.offcpu {
                    row.stack = row.stack.map(|id| 1 - id);
                }
            },
        );
        assert_eq!(merged.offcpu.len(), 6);
        assert_eq!(merged.io.len(), 4);
        let moved = merged
            .processes
            .iter()
            .find(|p| p.host.as_deref() == Some("node-b"))
            .expect("node-b process")
            .pid;
        assert_ne!(moved, 10);
        assert_eq!(
            merged.offcpu.iter().filter(|row| row.pid == moved).count(),
            3
        );
        assert_eq!(merged.io.iter().filter(|row| row.pid == moved).count(), 2);
    }

    #[test]
    fn merge_keeps_contended_holds_with_their_processes_and_stacks() {
        let with_holds = || {
            let mut profile = profile_with_two_locks();
            let hold = |stack| crate::profile::HoldRow {
                lock_addr: 0x1000,
                lock_name: "0x1000".into(),
                flags: 0x20,
                pid: 10,
                tid: Some(10),
                stack: Some(stack),
                latency: Default::default(),
            };
            profile.contended_holds = vec![hold(0), hold(1)];
            profile
        };
        let merged = merged_as_two_hosts(with_holds(), with_holds(), Kind::Lock, |b| {
            for row in &mut b.contended_holds {
                row.stack = row.stack.map(|id| 1 - id);
            }
        });
        assert_eq!(merged.contended_holds.len(), 4);
        let moved = merged
            .processes
            .iter()
            .find(|p| p.host.as_deref() == Some("node-b") && p.pid & 0x3fffff == 10)
            .expect("node-b's process 10")
            .pid;
        assert_ne!(moved, 10);
        // Each host's holds name the frames they named in their own profile (node-b's
        // stacks were stored in the other order).
        let frames_of = |pid: u32| {
            let mut stacks: Vec<Vec<String>> = merged
                .contended_holds
                .iter()
                .filter(|row| row.pid == pid)
                .map(|row| {
                    let stack = &merged.stacks[row.stack.expect("stack") as usize];
                    stack
                        .frames
                        .iter()
                        .map(|&frame| merged.frames[frame as usize].name.clone())
                        .collect()
                })
                .collect();
            stacks.sort();
            stacks
        };
        assert_eq!(frames_of(moved).len(), 2);
        assert_eq!(frames_of(moved), frames_of(10));
    }

    #[test]
    fn merge_needs_two() {
        assert!(merge(vec![profile_with_two_locks()], vec![]).is_err());
    }
}
