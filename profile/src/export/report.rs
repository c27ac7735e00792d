//! The per-lock table (text for people, JSON for scripts) and the end-of-run summary.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::{
    kind::GroupBy,
    lock::{caller, lock_type_name},
    profile::Profile,
    units::format_ns,
};

/// One row of the lock table: rows of the profile grouped by lock, caller or process.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LockGroup {
    #[serde(rename = "type")]
    pub lock_type: String,
    pub lock: String,
    /// The caller with the most wait time in this group.
    pub caller: String,
    pub contended: u64,
    pub total_wait_ns: u64,
    pub max_wait_ns: u64,
    pub min_wait_ns: u64,
    pub avg_wait_ns: u64,
    /// Every caller, most wait first.
    pub callers: Vec<String>,
    pub pids: Vec<u32>,
    /// Process names, in the order of `pids`.
    pub processes: Vec<String>,
    /// Host of the first process (profiles merged from several hosts differ here).
    pub host: String,
    /// Who held the lock while these waits began (sleeping locks with a known owner),
    /// most wait first: "waiters wait on X, held by Y".
    pub holders: Vec<Holder>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Holder {
    pub pid: u32,
    pub process: String,
    /// Wait of this group's waiters that began while this process held the lock.
    pub wait_ns: u64,
    /// Where the holder slept while the waits began (its kernel stack at switch-out,
    /// scheduler frames left out, leaf first), for the stack with the most wait; empty
    /// when unknown (the holder was running, or off-CPU was not recorded).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sleeping_in: Vec<String>,
}

/// Groups lock rows and sorts them by total wait, largest first.
pub fn lock_groups(profile: &Profile, by: GroupBy) -> Vec<LockGroup> {
    top_lock_groups(profile, by, 0, false).0
}

/// The caller of every stack (the first frame outside the locking code), computed once
/// per stack rather than once per row, as ids into a table of distinct caller names.
fn stack_callers(profile: &Profile) -> (Vec<u32>, Vec<String>) {
    let mut names: Vec<String> = vec![STACK_LOST.to_string(), UNKNOWN.to_string()];
    let mut ids: HashMap<String, u32> = HashMap::new();
    let per_stack = (0..profile.stacks.len())
        .map(|id| {
            let frames = profile.stack_frames(Some(id as u32));
            let Some(frame) = caller(&frames) else {
                return UNKNOWN_ID;
            };
            let name = frame.display();
            *ids.entry(name.clone()).or_insert_with(|| {
                names.push(name);
                (names.len() - 1) as u32
            })
        })
        .collect();
    (per_stack, names)
}

const STACK_LOST: &str = "[stack lost]";
const STACK_LOST_ID: u32 = 0;
const UNKNOWN: &str = "[unknown]";
const UNKNOWN_ID: u32 = 1;

/// A fast, non-cryptographic hasher (the Fx hash of rustc) for the grouping maps: a
/// report of a million rows spends most of its time hashing keys.
#[derive(Default, Clone, Copy)]
struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, value: u8) {
        self.write_u64(value.into());
    }
    fn write_u32(&mut self, value: u32) {
        self.write_u64(value.into());
    }
    fn write_usize(&mut self, value: usize) {
        self.write_u64(value as u64);
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(5) ^ value).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxBuild = std::hash::BuildHasherDefault<FxHasher>;

/// The `top` largest groups (0: all; only groups with a known holder if `need_holders`),
/// and how many groups there are in total. Two passes: sums per group (keys borrow from
/// the profile, callers are ids), then callers, processes and holders only for the
/// groups that are shown, so a million rows cost no million allocations.
pub fn top_lock_groups(
    profile: &Profile,
    by: GroupBy,
    top: usize,
    need_holders: bool,
) -> (Vec<LockGroup>, usize) {
    #[derive(PartialEq, Eq, Hash)]
    enum Key<'a> {
        Name(&'a str),
        Caller(u32),
        Pid(u32),
    }
    struct Sums<'a> {
        lock_type: &'static str,
        lock: &'a str,
        several_locks: bool,
        has_holder: bool,
        count: u64,
        total: u64,
        max: u64,
        min: u64,
    }
    fn lock_of<'a>(sums: &Sums<'a>) -> &'a str {
        if sums.several_locks {
            "(several)"
        } else {
            sums.lock
        }
    }
    let (stack_caller, caller_names) = stack_callers(profile);
    let caller_of = |stack: Option<u32>| match stack {
        None => STACK_LOST_ID,
        Some(id) => stack_caller.get(id as usize).copied().unwrap_or(UNKNOWN_ID),
    };
    // Hosts by pid, computed once (only grouping by host needs them).
    let hosts: HashMap<u32, String> = match by {
        GroupBy::Host => profile
            .locks
            .iter()
            .map(|row| row.pid)
            .collect::<BTreeSet<u32>>()
            .into_iter()
            .map(|pid| (pid, profile.host_of(pid)))
            .collect(),
        _ => HashMap::new(),
    };
    let mut ids: HashMap<(Key, &'static str), u32, FxBuild> = HashMap::default();
    let mut groups: Vec<Sums> = Vec::new();
    let mut row_group: Vec<u32> = Vec::with_capacity(profile.locks.len());
    for row in &profile.locks {
        let lock_type = lock_type_name(row.flags);
        let key = match by {
            GroupBy::Lock => (Key::Name(&row.lock_name), lock_type),
            GroupBy::Caller => (Key::Caller(caller_of(row.stack)), lock_type),
            GroupBy::Process => (Key::Pid(row.pid), lock_type),
            GroupBy::Host => (
                Key::Name(hosts.get(&row.pid).map_or("", String::as_str)),
                "",
            ),
        };
        let id = *ids.entry(key).or_insert_with(|| {
            groups.push(Sums {
                lock_type,
                lock: &row.lock_name,
                several_locks: false,
                has_holder: false,
                count: 0,
                total: 0,
                max: 0,
                min: u64::MAX,
            });
            (groups.len() - 1) as u32
        });
        row_group.push(id);
        let sums = &mut groups[id as usize];
        if sums.lock != row.lock_name {
            sums.several_locks = true;
        }
        sums.has_holder |= row.owner_pid.is_some();
        // Saturating: a damaged or hand-made profile must not wrap around.
        sums.count = sums.count.saturating_add(row.count);
        sums.total = sums.total.saturating_add(row.total_ns);
        sums.max = sums.max.max(row.max_ns);
        sums.min = sums.min.min(row.min_ns);
    }
    drop(ids);
    let total_groups = groups.len();
    let order = |a: &u32, b: &u32| {
        let (a, b) = (&groups[*a as usize], &groups[*b as usize]);
        b.total
            .cmp(&a.total)
            .then_with(|| b.count.cmp(&a.count))
            .then_with(|| lock_of(a).cmp(lock_of(b)))
            .then_with(|| a.lock_type.cmp(b.lock_type))
    };
    let mut shown: Vec<u32> = (0..groups.len() as u32)
        .filter(|&id| !need_holders || groups[id as usize].has_holder)
        .collect();
    if top != 0 && shown.len() > top {
        // Only the top rows are shown: select them, then sort only those.
        shown.select_nth_unstable_by(top - 1, order);
        shown.truncate(top);
    }
    shown.sort_unstable_by(order);

    // Second pass: callers, processes and holders of the shown groups.
    const HIDDEN: u32 = u32::MAX;
    let mut slot_of_group = vec![HIDDEN; groups.len()];
    for (slot, &group) in shown.iter().enumerate() {
        slot_of_group[group as usize] = slot as u32;
    }
    let mut callers: Vec<HashMap<u32, u64, FxBuild>> = vec![HashMap::default(); shown.len()];
    let mut pids: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); shown.len()];
    // owner pid -> (wait, owner stack -> wait)
    type HolderSums = BTreeMap<u32, (u64, BTreeMap<Option<u32>, u64>)>;
    let mut holders: Vec<HolderSums> = vec![BTreeMap::new(); shown.len()];
    for (row, &group) in profile.locks.iter().zip(&row_group) {
        let slot = slot_of_group[group as usize] as usize;
        if slot == HIDDEN as usize {
            continue;
        }
        let total = callers[slot].entry(caller_of(row.stack)).or_default();
        *total = total.saturating_add(row.total_ns);
        pids[slot].insert(row.pid);
        if let Some(owner) = row.owner_pid {
            let (wait, stacks) = holders[slot].entry(owner).or_default();
            *wait = wait.saturating_add(row.total_ns);
            let stack_wait = stacks.entry(row.owner_stack).or_default();
            *stack_wait = stack_wait.saturating_add(row.total_ns);
        }
    }
    let mut names: HashMap<u32, String> = HashMap::new();
    let mut name_of = |pid: u32| {
        names
            .entry(pid)
            .or_insert_with(|| profile.process_name(pid))
            .clone()
    };
    let caller_name = |id: u32| {
        caller_names
            .get(id as usize)
            .map_or(UNKNOWN, String::as_str)
    };
    let mut out = Vec::with_capacity(shown.len());
    for (((&group, callers), pids), holders) in shown.iter().zip(callers).zip(pids).zip(holders) {
        let sums = &groups[group as usize];
        let mut callers: Vec<(&str, u64)> = callers
            .into_iter()
            .map(|(id, total)| (caller_name(id), total))
            .collect();
        callers.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let pids: Vec<u32> = pids.into_iter().collect();
        let mut holders: Vec<Holder> = holders
            .into_iter()
            .map(|(pid, (wait_ns, stacks))| Holder {
                pid,
                process: name_of(pid),
                wait_ns,
                sleeping_in: stacks
                    .into_iter()
                    .filter(|(stack, _)| stack.is_some())
                    .max_by_key(|(_, wait)| *wait)
                    .map(|(stack, _)| sleeping_frames(profile, stack))
                    .unwrap_or_default(),
            })
            .collect();
        holders.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then_with(|| a.pid.cmp(&b.pid)));
        out.push(LockGroup {
            holders,
            lock_type: sums.lock_type.to_string(),
            lock: lock_of(sums).to_string(),
            caller: callers.first().map(|c| c.0.to_string()).unwrap_or_default(),
            contended: sums.count,
            total_wait_ns: sums.total,
            max_wait_ns: sums.max,
            min_wait_ns: if sums.count == 0 { 0 } else { sums.min },
            avg_wait_ns: sums.total.checked_div(sums.count).unwrap_or(0),
            callers: callers.into_iter().map(|c| c.0.to_string()).collect(),
            processes: pids.iter().map(|&pid| name_of(pid)).collect(),
            host: pids
                .first()
                .map(|&pid| profile.host_of(pid))
                .unwrap_or_default(),
            pids,
        });
    }
    (out, total_groups)
}

/// The frames of a sleeping task's stack that say where it sleeps: scheduler frames
/// left out, leaf first.
fn sleeping_frames(profile: &Profile, stack: Option<u32>) -> Vec<String> {
    profile
        .stack_frames(stack)
        .into_iter()
        .filter(|frame| !super::offcpu::is_scheduler_frame(&frame.name))
        .map(|frame| frame.display())
        .collect()
}

/// How many of `len` rows a table shows for `--top top` (0: all).
pub fn shown_rows(top: usize, len: usize) -> usize {
    if top == 0 {
        len
    } else {
        top.min(len)
    }
}

/// The line under a table that does not show all its rows; empty when it does.
pub fn more_rows(shown: usize, len: usize) -> String {
    if shown < len {
        format!("({} more rows: --top 0 shows all)\n", len - shown)
    } else {
        String::new()
    }
}

/// Cuts `text` to `width` characters, marking the cut with `…`.
pub fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// The lock table as text, within 100 columns.
pub fn lock_table(profile: &Profile, by: GroupBy, top: usize) -> String {
    let (groups, total_groups) = top_lock_groups(profile, by, top, false);
    let mut out = String::new();
    if groups.is_empty() {
        out.push_str("no lock contention recorded\n");
        return out;
    }
    let third = match by {
        GroupBy::Process => "process",
        GroupBy::Host => "host",
        _ => "lock",
    };
    out.push_str(&format!(
        "{:>10} {:>10} {:>10} {:>10}  {:<10} {:<20} {}\n",
        "contended", "total wait", "max wait", "avg wait", "type", third, "caller"
    ));
    let shown = groups.len();
    for group in &groups {
        let third_value = match by {
            GroupBy::Process => group.processes.first().cloned().unwrap_or_default(),
            GroupBy::Host => group.host.clone(),
            _ => group.lock.clone(),
        };
        out.push_str(&format!(
            "{:>10} {:>10} {:>10} {:>10}  {:<10} {:<20} {}\n",
            group.contended,
            format_ns(group.total_wait_ns),
            format_ns(group.max_wait_ns),
            format_ns(group.avg_wait_ns),
            group.lock_type,
            fit(&third_value, 20),
            fit(&group.caller, 30),
        ));
    }
    out.push_str(&more_rows(shown, total_groups));
    out
}

/// One row of a latency table: profile rows grouped by (what, process).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LatencyGroup {
    /// `fuse CREATE`, `sunrpc rpc_task`, `vfs_read`, `/usr/bin/x:work`.
    pub name: String,
    pub pid: u32,
    pub process: String,
    pub count: u64,
    pub total_ns: u64,
    pub mean_ns: u64,
    pub max_ns: u64,
    pub min_ns: u64,
    /// log2 histogram: `hist[i]` counts latencies in [2^i, 2^(i+1)) ns.
    pub hist: Vec<u64>,
    /// rpc: the function that ran the completion most (leaf of its stack).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_in: Option<String>,
}

fn group_latency<'a>(
    profile: &Profile,
    rows: impl Iterator<Item = (String, u32, &'a crate::profile::Latency, Option<u32>)>,
) -> Vec<LatencyGroup> {
    let mut groups: BTreeMap<(String, u32), (crate::profile::Latency, BTreeMap<String, u64>)> =
        BTreeMap::new();
    for (name, pid, latency, stack) in rows {
        let entry = groups.entry((name, pid)).or_default();
        entry.0.merge(latency);
        if let Some(stack) = stack {
            if let Some(frame) = profile.stack_frames(Some(stack)).first() {
                *entry.1.entry(frame.display()).or_default() += latency.total_ns;
            }
        }
    }
    let mut out: Vec<LatencyGroup> = groups
        .into_iter()
        .map(|((name, pid), (latency, leaves))| LatencyGroup {
            process: profile.process_name(pid),
            name,
            pid,
            count: latency.count,
            total_ns: latency.total_ns,
            mean_ns: latency.mean_ns(),
            max_ns: latency.max_ns,
            min_ns: latency.min_ns,
            hist: latency.hist.clone(),
            completed_in: leaves
                .into_iter()
                .max_by_key(|(_, total)| *total)
                .map(|(leaf, _)| leaf),
        })
        .collect();
    out.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then_with(|| a.name.cmp(&b.name))
    });
    out
}

/// Request latency grouped by provider, operation and process.
pub fn rpc_groups(profile: &Profile) -> Vec<LatencyGroup> {
    group_latency(
        profile,
        profile.rpcs.iter().map(|row| {
            (
                format!("{} {}", row.provider, row.op_name),
                row.pid,
                &row.latency,
                row.end_stack,
            )
        }),
    )
}

/// Function latency grouped by function and process.
pub fn func_groups(profile: &Profile) -> Vec<LatencyGroup> {
    let mut groups = group_latency(
        profile,
        profile
            .funcs
            .iter()
            .map(|row| (short_function_name(row), row.pid, &row.latency, None)),
    );
    for group in &mut groups {
        group.completed_in = None;
    }
    groups
}

/// `vfs_read`, or `binary:symbol` without the binary's directory for user functions.
fn short_function_name(row: &crate::profile::FuncRow) -> String {
    if !row.user {
        return row.function.clone();
    }
    match row.function.rsplit_once(':') {
        Some((binary, symbol)) => {
            let file = binary.rsplit('/').next().unwrap_or(binary);
            format!("{file}:{symbol}")
        }
        None => row.function.clone(),
    }
}

/// A latency table as text, within 100 columns.
pub fn latency_table(groups: &[LatencyGroup], what: &str, top: usize) -> String {
    let mut out = String::new();
    if groups.is_empty() {
        out.push_str(&format!("no {what} recorded\n"));
        return out;
    }
    out.push_str(&format!(
        "{:>7} {:>9} {:>9} {:>9}  {:<28} {:<14} {}\n",
        "count", "total", "mean", "max", what, "process", "completed in"
    ));
    let shown = shown_rows(top, groups.len());
    for group in &groups[..shown] {
        out.push_str(&format!(
            "{:>7} {:>9} {:>9} {:>9}  {:<28} {:<14} {}\n",
            group.count,
            format_ns(group.total_ns),
            format_ns(group.mean_ns),
            format_ns(group.max_ns),
            fit(&group.name, 28),
            fit(&group.process, 14),
            fit(group.completed_in.as_deref().unwrap_or(""), 17),
        ));
    }
    out.push_str(&more_rows(shown, groups.len()));
    out
}

/// Hold times of the `--hold` lock by one holder: process, acquisition stack and mode.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HoldGroup {
    #[serde(rename = "type")]
    pub lock_type: String,
    pub lock: String,
    pub pid: u32,
    pub process: String,
    /// The first frame of the holder's stack outside the locking code.
    pub acquired_in: String,
    /// The holder's kernel stack where it took the lock, leaf first.
    pub stack: Vec<String>,
    pub count: u64,
    pub total_ns: u64,
    pub mean_ns: u64,
    pub max_ns: u64,
    pub min_ns: u64,
    /// log2 histogram: `hist[i]` counts holds in [2^i, 2^(i+1)) ns.
    pub hist: Vec<u64>,
}

/// One group per hold row, most total hold time first.
pub fn hold_groups(profile: &Profile) -> Vec<HoldGroup> {
    let mut groups: Vec<HoldGroup> = profile
        .holds
        .iter()
        .map(|row| {
            let frames = profile.stack_frames(row.stack);
            HoldGroup {
                lock_type: lock_type_name(row.flags).to_string(),
                lock: row.lock_name.clone(),
                pid: row.pid,
                process: profile.process_name(row.pid),
                acquired_in: match (row.stack, caller(&frames)) {
                    (None, _) => STACK_LOST.to_string(),
                    (Some(_), Some(frame)) => frame.display(),
                    (Some(_), None) => UNKNOWN.to_string(),
                },
                stack: frames.iter().map(|frame| frame.display()).collect(),
                count: row.latency.count,
                total_ns: row.latency.total_ns,
                mean_ns: row.latency.mean_ns(),
                max_ns: row.latency.max_ns,
                min_ns: row.latency.min_ns,
                hist: row.latency.hist.clone(),
            }
        })
        .collect();
    groups.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then_with(|| a.pid.cmp(&b.pid))
            .then_with(|| a.acquired_in.cmp(&b.acquired_in))
    });
    groups
}

/// The hold table: one row per holder, then the stack of the holder with the most hold
/// time (where the lock is taken, leaf first).
pub fn hold_table(profile: &Profile, top: usize) -> String {
    let groups = hold_groups(profile);
    let Some(first) = groups.first() else {
        return "no acquisition of the lock was seen\n".to_string();
    };
    let mut out = format!(
        "{:>7} {:>9} {:>9} {:>9}  {:<9} {:<22} {}\n",
        "count", "total", "mean", "max", "type", "holder", "acquired in"
    );
    let shown = shown_rows(top, groups.len());
    for group in &groups[..shown] {
        out.push_str(&format!(
            "{:>7} {:>9} {:>9} {:>9}  {:<9} {:<22} {}\n",
            group.count,
            format_ns(group.total_ns),
            format_ns(group.mean_ns),
            format_ns(group.max_ns),
            group.lock_type,
            fit(&format!("{}[{}]", group.process, group.pid), 22),
            fit(&group.acquired_in, 30),
        ));
    }
    out.push_str(&more_rows(shown, groups.len()));
    if !first.stack.is_empty() {
        out.push_str(&format!(
            "stack of {}[{}], leaf first: {}\n",
            first.process,
            first.pid,
            first
                .stack
                .iter()
                .take(12)
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(" < ")
        ));
    }
    out
}

/// Probes asked for but not available on this kernel, one line each.
pub fn unavailable(profile: &Profile) -> String {
    let mut out = String::new();
    if profile.unavailable.is_empty() {
        return out;
    }
    out.push_str(
        "\nnot recorded (asked for, but this kernel or the arguments did not allow it):\n",
    );
    for missing in &profile.unavailable {
        out.push_str(&format!(
            "  {} {}: {}\n",
            missing.family, missing.what, missing.reason
        ));
    }
    out
}

/// Every table the profile has data or probes for (summary and `report`).
pub fn latency_sections(profile: &Profile, top: usize) -> String {
    let mut out = String::new();
    let has = |family: &str| profile.probes.iter().any(|probe| probe.family == family);
    if has("rpc") || !profile.rpcs.is_empty() {
        out.push_str("\nrequest latency, by operation and process (total time):\n");
        out.push_str(&latency_table(&rpc_groups(profile), "request", top));
    }
    if has("func") || has("ufunc") || !profile.funcs.is_empty() {
        out.push_str("\nfunction latency, by function and process (total time):\n");
        out.push_str(&latency_table(&func_groups(profile), "function", top));
    }
    if has("hold") || !profile.holds.is_empty() {
        let lock = profile
            .holds
            .first()
            .map(|row| row.lock_name.as_str())
            .unwrap_or("the --hold lock");
        out.push_str(&format!(
            "\nhold times of {lock}, by holder (acquisition to release, total time):\n"
        ));
        out.push_str(&hold_table(profile, top));
    }
    out.push_str(&unavailable(profile));
    out
}

/// Losses, explained; empty when nothing was lost.
pub fn losses(profile: &Profile) -> String {
    if profile.losses.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nlost events (numbers above are lower bounds):\n");
    for (name, count) in &profile.losses {
        let why = profiler_common::loss::LOSS_NAMES
            .iter()
            .find(|(_, known, _)| known == name)
            .map(|(_, _, why)| *why)
            .unwrap_or("");
        out.push_str(&format!("  {count:>10}  {name}: {why}\n"));
    }
    out
}

pub fn summary_header(profile: &Profile) -> String {
    format!(
        "lockpath: {} on {} ({}), {:.1} s\n\n",
        profile.targets.mode, profile.host, profile.kernel, profile.duration_s
    )
}

/// "Waiters wait on X, held by Y": the holders of the top sleeping locks, when the
/// kernel side could read the owner. Empty when no owner is known.
pub fn holders_table(profile: &Profile, top: usize) -> String {
    if profile.locks.iter().all(|row| row.owner_pid.is_none()) {
        // No owner known anywhere: spare a second grouping pass over every row.
        return String::new();
    }
    let (groups, _) = top_lock_groups(profile, GroupBy::Lock, top.max(1), true);
    if groups.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nheld by (owner of the sleeping lock when the waits began):\n");
    for group in groups {
        out.push_str(&format!("  {:<9} {}\n", group.lock_type, group.lock));
        for holder in group.holders.iter().take(3) {
            let mut line = format!(
                "      {}[{}] {} of waits",
                holder.process,
                holder.pid,
                format_ns(holder.wait_ns)
            );
            if !holder.sleeping_in.is_empty() {
                let path: Vec<&str> = holder
                    .sleeping_in
                    .iter()
                    .take(4)
                    .map(String::as_str)
                    .collect();
                line.push_str(&format!(", sleeping in {}", path.join(" < ")));
            }
            out.push_str(&fit(&line, 120));
            out.push('\n');
        }
    }
    out
}

/// Whether the lock family is part of this profile (a profile that names no family and
/// has no rows of another family is read as a lock profile).
pub fn lock_family_recorded(profile: &Profile) -> bool {
    !profile.locks.is_empty()
        || profile.probes.iter().any(|probe| probe.family == "lock")
        || (profile.probes.is_empty()
            && profile.cpu.is_empty()
            && profile.offcpu.is_empty()
            && profile.io.is_empty()
            && profile.rpcs.is_empty()
            && profile.funcs.is_empty()
            && profile.holds.is_empty())
}

/// What `lockpath report` prints (format text).
pub fn text(profile: &Profile, by: GroupBy, top: usize) -> String {
    let mut text = summary_header(profile);
    if lock_family_recorded(profile) {
        text.push_str(&lock_table(profile, by, top));
        text.push_str(&holders_table(profile, 10));
        if profile.is_merged() && by != GroupBy::Host {
            text.push_str("\nby host:\n");
            text.push_str(&lock_table(profile, GroupBy::Host, top));
        }
    }
    text.push_str(&family_sections(profile, top));
    if !profile.cpu.is_empty() {
        text.push('\n');
        text.push_str(&cpu_tables(profile, top));
    }
    text.push_str(&latency_sections(profile, top));
    text.push_str(&losses(profile));
    text
}

/// What `record` prints at the end.
pub fn summary(profile: &Profile, top: usize) -> String {
    let mut out = summary_header(profile);
    if profile.probes.iter().any(|probe| probe.family == "lock") {
        out.push_str("lock contention, by lock (total wait):\n");
        out.push_str(&lock_table(profile, GroupBy::Lock, top));
        out.push_str(&holders_table(profile, top.min(10)));
    }
    let mut sections = String::new();
    if profile.probes.iter().any(|probe| probe.family == "cpu") {
        sections.push('\n');
        sections.push_str(&cpu_tables(profile, top));
    }
    sections.push_str(&family_sections(profile, top));
    sections.push_str(&latency_sections(profile, top));
    // The header ends with a blank line already.
    out.push_str(
        if profile.locks.is_empty() && !out.contains("lock contention") {
            sections.trim_start_matches('\n')
        } else {
            &sections
        },
    );
    out.push_str(&losses(profile));
    out
}

/// The off-CPU and block-IO sections, for the families the profile recorded.
pub fn family_sections(profile: &Profile, top: usize) -> String {
    let mut out = String::new();
    let recorded = |family: &str| profile.probes.iter().any(|probe| probe.family == family);
    if recorded("offcpu") || !profile.offcpu.is_empty() {
        out.push_str("\noff-CPU time by process and wait class:\n");
        out.push_str(&super::offcpu::table(profile, top));
    }
    if recorded("io") || !profile.io.is_empty() {
        out.push_str("\nblock IO by device and operation (issue to completion):\n");
        out.push_str(&super::io::table(profile, top));
    }
    out
}

/// On-CPU samples of one process.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CpuProcess {
    pub pid: u32,
    pub process: String,
    pub samples: u64,
}

/// A function's on-CPU samples: `self` where it was the leaf, `total` where it was on the
/// stack at all (counted once per sample even when recursive).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CpuFunction {
    pub function: String,
    pub kernel: bool,
    pub self_samples: u64,
    pub total_samples: u64,
}

/// Processes by on-CPU samples, most first.
pub fn cpu_processes(profile: &Profile) -> Vec<CpuProcess> {
    let mut by_pid: BTreeMap<u32, u64> = BTreeMap::new();
    for row in &profile.cpu {
        *by_pid.entry(row.pid).or_default() += row.samples;
    }
    let mut out: Vec<CpuProcess> = by_pid
        .into_iter()
        .map(|(pid, samples)| CpuProcess {
            pid,
            process: profile.process_name(pid),
            samples,
        })
        .collect();
    out.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.pid.cmp(&b.pid)));
    out
}

/// Functions by on-CPU samples (self first, then total), most first.
pub fn cpu_functions(profile: &Profile) -> Vec<CpuFunction> {
    let mut by_name: BTreeMap<(String, bool), (u64, u64)> = BTreeMap::new();
    for row in &profile.cpu {
        // Leaf first: the kernel part (if any) is innermost.
        let mut frames = profile.stack_frames(row.kernel_stack);
        frames.extend(profile.stack_frames(row.user_stack));
        let mut seen = BTreeSet::new();
        for (index, frame) in frames.iter().enumerate() {
            let key = (frame.display(), frame.kernel);
            let counts = by_name.entry(key.clone()).or_default();
            if index == 0 {
                counts.0 += row.samples;
            }
            if seen.insert(key) {
                counts.1 += row.samples;
            }
        }
    }
    let mut out: Vec<CpuFunction> = by_name
        .into_iter()
        .map(
            |((function, kernel), (self_samples, total_samples))| CpuFunction {
                function,
                kernel,
                self_samples,
                total_samples,
            },
        )
        .collect();
    out.sort_by(|a, b| {
        b.self_samples
            .cmp(&a.self_samples)
            .then(b.total_samples.cmp(&a.total_samples))
            .then_with(|| a.function.cmp(&b.function))
    });
    out
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// Per-process samples and the top functions (self and total), within 100 columns.
pub fn cpu_tables(profile: &Profile, top: usize) -> String {
    let processes = cpu_processes(profile);
    let total: u64 = processes.iter().map(|process| process.samples).sum();
    let mut out = String::new();
    if total == 0 {
        out.push_str("no on-CPU samples recorded (idle is not counted)\n");
        return out;
    }
    let limit = |len: usize| if top == 0 { len } else { top.min(len) };
    out.push_str(&format!(
        "on-CPU samples, by process ({} samples at {} Hz per CPU, idle not counted):\n",
        total, profile.cpu_freq_hz
    ));
    out.push_str(&format!(
        "{:>10} {:>7} {:>8}  {}\n",
        "samples", "share", "pid", "process"
    ));
    for process in &processes[..limit(processes.len())] {
        out.push_str(&format!(
            "{:>10} {:>6.1}% {:>8}  {}\n",
            process.samples,
            percent(process.samples, total),
            process.pid,
            fit(&process.process, 60)
        ));
    }
    let functions = cpu_functions(profile);
    out.push_str("\ntop functions on CPU (self: the function itself; total: with its callees):\n");
    out.push_str(&format!(
        "{:>10} {:>7} {:>10} {:>7}  {}\n",
        "self", "self%", "total", "total%", "function"
    ));
    for function in &functions[..limit(functions.len())] {
        let name = if function.kernel {
            format!("{} [k]", function.function)
        } else {
            function.function.clone()
        };
        out.push_str(&format!(
            "{:>10} {:>6.1}% {:>10} {:>6.1}%  {}\n",
            function.self_samples,
            percent(function.self_samples, total),
            function.total_samples,
            percent(function.total_samples, total),
            fit(&name, 60)
        ));
    }
    out
}

#[derive(Serialize)]
struct JsonReport<'a> {
    format: &'a str,
    host: &'a str,
    duration_s: f64,
    locks: Vec<LockGroup>,
    offcpu: Vec<super::offcpu::OffcpuProcess>,
    io: Vec<super::io::IoGroup>,
    rpcs: Vec<LatencyGroup>,
    funcs: Vec<LatencyGroup>,
    holds: Vec<HoldGroup>,
    unavailable: &'a [crate::profile::Unavailable],
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu: Option<JsonCpu>,
    lost: &'a BTreeMap<String, u64>,
}

#[derive(Serialize)]
struct JsonCpu {
    freq_hz: u64,
    samples: u64,
    processes: Vec<CpuProcess>,
    functions: Vec<CpuFunction>,
}

pub fn json(profile: &Profile, by: GroupBy, top: usize) -> serde_json::Result<String> {
    let (locks, _) = top_lock_groups(profile, by, top, false);
    serde_json::to_string_pretty(&JsonReport {
        format: &profile.format,
        host: &profile.host,
        duration_s: profile.duration_s,
        locks,
        offcpu: super::offcpu::processes(profile),
        io: super::io::groups(profile),
        rpcs: rpc_groups(profile),
        funcs: func_groups(profile),
        holds: hold_groups(profile),
        unavailable: &profile.unavailable,
        cpu: json_cpu(profile, top),
        lost: &profile.losses,
    })
}

fn json_cpu(profile: &Profile, top: usize) -> Option<JsonCpu> {
    if !profile.probes.iter().any(|probe| probe.family == "cpu") && profile.cpu.is_empty() {
        return None;
    }
    let processes = cpu_processes(profile);
    let mut functions = cpu_functions(profile);
    if top != 0 {
        functions.truncate(top);
    }
    Some(JsonCpu {
        freq_hz: profile.cpu_freq_hz,
        samples: processes.iter().map(|process| process.samples).sum(),
        processes,
        functions,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::profile::{Frame, LockRow, Process, StackInterner};

    pub(crate) fn profile_with_two_locks() -> Profile {
        let mut profile = Profile::new();
        let mut interner = StackInterner::default();
        let frame = |name: &str| Frame {
            name: name.into(),
            module: None,
            kernel: true,
        };
        let spin = interner.stack(
            vec![
                frame("queued_spin_lock_slowpath"),
                frame("_raw_spin_lock"),
                frame("do_pipe2"),
            ],
            false,
        );
        let rwsem = interner.stack(
            vec![
                frame("rwsem_down_write_slowpath"),
                frame("down_write"),
                frame("vm_mmap_pgoff"),
            ],
            false,
        );
        interner.finish(&mut profile);
        let row = |pid, name: &str, flags, stack, count, total| LockRow {
            pid,
            lock_addr: 1,
            lock_name: name.into(),
            flags,
            stack: Some(stack),
            count,
            total_ns: total,
            max_ns: total / count,
            min_ns: 1,
            owner_pid: None,
            owner_stack: None,
        };
        profile.locks = vec![
            row(10, "0xffff1", 1, spin, 100, 5_000_000),
            row(11, "0xffff1", 1, spin, 50, 2_000_000),
            row(10, "mmap_lock", 4, rwsem, 10, 6_000_000),
        ];
        profile.processes = vec![
            Process {
                pid: 10,
                comm: "ior".into(),
                ..Default::default()
            },
            Process {
                pid: 11,
                comm: "ior".into(),
                ..Default::default()
            },
        ];
        profile
    }

    #[test]
    fn groups_by_lock_sorted_by_total_wait() {
        let groups = lock_groups(&profile_with_two_locks(), GroupBy::Lock);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].lock, "0xffff1");
        assert_eq!(groups[0].total_wait_ns, 7_000_000);
        assert_eq!(groups[0].contended, 150);
        assert_eq!(groups[0].lock_type, "spinlock");
        assert_eq!(groups[0].caller, "do_pipe2");
        assert_eq!(groups[0].pids, vec![10, 11]);
        assert_eq!(groups[1].lock_type, "rwsem:W");
        assert_eq!(groups[1].caller, "vm_mmap_pgoff");
        assert_eq!(groups[1].avg_wait_ns, 600_000);
    }

    #[test]
    fn holders_name_who_held_the_lock() {
        let mut profile = profile_with_two_locks();
        profile.locks[2].owner_pid = Some(11);
        let groups = lock_groups(&profile, GroupBy::Lock);
        let mmap = groups
            .iter()
            .find(|g| g.lock == "mmap_lock")
            .expect("mmap_lock group");
        assert_eq!(mmap.holders.len(), 1);
        assert_eq!(mmap.holders[0].pid, 11);
        assert_eq!(mmap.holders[0].wait_ns, 6_000_000);
        let text = holders_table(&profile, 10);
        assert!(
            text.contains("mmap_lock") && text.contains("ior[11] 6.00 ms"),
            "{text}"
        );
        assert!(!text.contains("sleeping in"), "no owner stack yet: {text}");
        // The owner was off-CPU: where it slept is named, scheduler frames left out.
        profile.locks[2].owner_stack = profile.locks[0].stack;
        let text = holders_table(&profile, 10);
        assert!(
            text.contains("sleeping in queued_spin_lock_slowpath < _raw_spin_lock < do_pipe2"),
            "{text}"
        );
        let groups = lock_groups(&profile, GroupBy::Lock);
        let mmap = groups.iter().find(|g| g.lock == "mmap_lock").expect("mmap");
        assert_eq!(mmap.holders[0].sleeping_in.len(), 3);
        let spin = groups
            .iter()
            .find(|g| g.lock_type == "spinlock")
            .expect("spin");
        assert!(spin.holders.is_empty());
        profile.locks[2].owner_pid = None;
        assert_eq!(
            holders_table(&profile, 10),
            "",
            "nothing when no owner is known"
        );
    }

    #[test]
    fn groups_by_process() {
        let groups = lock_groups(&profile_with_two_locks(), GroupBy::Process);
        assert_eq!(groups.len(), 3);
        assert_eq!(groups[0].pids, vec![10]);
        assert_eq!(groups[0].lock_type, "rwsem:W");
        assert_eq!(groups[0].total_wait_ns, 6_000_000);
    }

    #[test]
    fn table_fits_100_columns() {
        let table = lock_table(&profile_with_two_locks(), GroupBy::Lock, 20);
        for line in table.lines() {
            assert!(line.chars().count() <= 100, "too wide: {line}");
        }
        assert!(table.contains("7.00 ms"), "{table}");
    }

    #[test]
    fn latency_tables_group_and_fit() {
        use crate::profile::{FuncRow, Latency, RpcRow};
        let mut profile = profile_with_two_locks();
        let latency = |count, total| Latency {
            count,
            total_ns: total,
            max_ns: total / count,
            min_ns: 1,
            hist: vec![0, count],
        };
        profile.rpcs = vec![
            RpcRow {
                provider: "fuse".into(),
                op: 35,
                op_name: "CREATE".into(),
                pid: 10,
                start_stack: Some(0),
                end_stack: Some(1),
                latency: latency(2, 200_000_000),
            },
            RpcRow {
                provider: "fuse".into(),
                op: 35,
                op_name: "CREATE".into(),
                pid: 10,
                start_stack: Some(1),
                end_stack: Some(1),
                latency: latency(1, 100_000_000),
            },
        ];
        profile.funcs = vec![FuncRow {
            function: "/very/long/directory/name/of/a/binary:a_rather_long_function_name".into(),
            user: true,
            pid: 11,
            stack: None,
            latency: latency(4, 4_000),
        }];
        let rpcs = rpc_groups(&profile);
        assert_eq!(rpcs.len(), 1);
        assert_eq!(rpcs[0].count, 3);
        assert_eq!(rpcs[0].mean_ns, 100_000_000);
        assert_eq!(rpcs[0].hist, vec![0, 3]);
        // The leaf of the completion stack that carried the most latency.
        assert_eq!(
            rpcs[0].completed_in.as_deref(),
            Some("rwsem_down_write_slowpath")
        );
        let text = latency_sections(&profile, 20);
        assert!(text.contains("fuse CREATE"), "{text}");
        assert!(text.contains("binary:a_rather_long"), "{text}");
        for line in text.lines() {
            assert!(line.chars().count() <= 100, "too wide: {line}");
        }
    }

    #[test]
    fn cpu_functions_count_self_and_total() {
        use crate::profile::{CpuRow, Frame, ProbeUse};
        let mut profile = Profile::new();
        let mut interner = StackInterner::default();
        let user = |name: &str| Frame {
            name: name.into(),
            module: None,
            kernel: false,
        };
        // A recursive caller is counted once per sample in total.
        let hot = interner.stack(
            vec![user("hot"), user("walk"), user("walk"), user("main")],
            false,
        );
        let cold = interner.stack(vec![user("cold"), user("main")], false);
        interner.finish(&mut profile);
        profile.probes.push(ProbeUse {
            family: "cpu".into(),
            method: "test".into(),
        });
        profile.cpu_freq_hz = 99;
        profile.cpu = vec![
            CpuRow {
                pid: 1,
                tid: 1,
                kernel_stack: None,
                user_stack: Some(hot),
                samples: 7,
            },
            CpuRow {
                pid: 2,
                tid: 2,
                kernel_stack: None,
                user_stack: Some(cold),
                samples: 3,
            },
        ];
        let functions = cpu_functions(&profile);
        let get = |name: &str| functions.iter().find(|f| f.function == name).expect(name);
        assert_eq!((get("hot").self_samples, get("hot").total_samples), (7, 7));
        assert_eq!(
            (get("walk").self_samples, get("walk").total_samples),
            (0, 7)
        );
        assert_eq!(
            (get("main").self_samples, get("main").total_samples),
            (0, 10)
        );
        assert_eq!(functions[0].function, "hot");
        let processes = cpu_processes(&profile);
        assert_eq!((processes[0].pid, processes[0].samples), (1, 7));
        let table = cpu_tables(&profile, 20);
        assert!(table.contains("70.0%"), "{table}");
        for line in table.lines() {
            assert!(line.chars().count() <= 100, "too wide: {line}");
        }
        let json: serde_json::Value =
            serde_json::from_str(&json(&profile, GroupBy::Lock, 0).expect("json")).expect("parse");
        assert_eq!(json["cpu"]["samples"], 10);
        assert_eq!(json["cpu"]["functions"][0]["function"], "hot");
    }

    #[test]
    fn json_has_documented_fields() {
        let text = json(&profile_with_two_locks(), GroupBy::Lock, 0).expect("json");
        let value: serde_json::Value = serde_json::from_str(&text).expect("parse");
        let first = &value["locks"][0];
        for field in [
            "type",
            "lock",
            "contended",
            "total_wait_ns",
            "max_wait_ns",
            "avg_wait_ns",
            "callers",
            "pids",
        ] {
            assert!(!first[field].is_null(), "missing {field}");
        }
        assert!(value["lost"].is_object());
    }
}
