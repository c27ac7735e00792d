//! The lock table: contention rows grouped by lock, caller, process or host, and the
//! holders of the sleeping locks.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::export::tables::table::{fit, more_rows, most_first};
use crate::{
    kind::GroupBy,
    lock::{caller, lock_row_type_name, lock_side, lock_type_name, lock_type_name_both_sides},
    lockclass::{self, StackClass},
    profile::{CompactString, LockRow, Profile},
    units::format_ns,
};

/// One row of the lock table: rows of the profile grouped by lock, caller or process.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LockGroup {
    #[serde(rename = "type")]
    pub lock_type: String,
    pub lock: String,
    /// How the lock was named (`LockRow::lock_name_source`); empty for a group of
    /// several locks and in profiles of older versions.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub lock_name_source: String,
    /// How many locks (distinct addresses) the group holds: the instances of a class
    /// grouped by lock (`bit_wait_table`, `futex hash bucket`).
    pub instances: u64,
    /// The class of the group's lock when grouped by instance (`--by instance`) and it
    /// has one other than its own name (`lockclass`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub class: String,
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
    /// Cgroup v2 path of the first process ("?" when unknown); left out when the
    /// profile knows no process's cgroup (older versions).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cgroup: String,
    /// Who held the lock while these waits began (sleeping locks with a known owner),
    /// most wait first: "waiters wait on X, held by Y".
    pub holders: Vec<Holder>,
    /// How long the lock's contended acquirers held it while the next waiter waited
    /// (grouped by lock only; absent when none was seen).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contended_holds: Option<ContendedHolds>,
}

/// Holds under contention of one lock: totals and the holders, most hold time first.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ContendedHolds {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    pub holders: Vec<ContendedHolder>,
}

/// The holds under contention of one holder (thread and acquisition stack) of a lock.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ContendedHolder {
    #[serde(rename = "type")]
    pub lock_type: String,
    pub lock: String,
    pub pid: u32,
    pub tid: u32,
    pub process: String,
    /// Where the holder took the lock: the first frame outside the locking code.
    pub caller: String,
    /// The holder's acquisition stack, leaf first, locking code left out.
    pub frames: Vec<String>,
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
}

/// Holds under contention by (lock, type, holder thread, acquisition stack), most hold
/// time first.
pub fn contended_holders(profile: &Profile) -> Vec<ContendedHolder> {
    // (lock, flags, pid, tid, stack) -> (count, total, max).
    type Holder<'a> = (&'a str, u32, u32, u32, Option<u32>);
    let mut sums: BTreeMap<Holder, (u64, u64, u64)> = BTreeMap::new();
    for row in &profile.contended_holds {
        let key = (
            row.lock_name.as_str(),
            row.flags,
            row.pid,
            row.tid.unwrap_or(0),
            row.stack,
        );
        let sum = sums.entry(key).or_default();
        sum.0 = sum.0.saturating_add(row.latency.count);
        sum.1 = sum.1.saturating_add(row.latency.total_ns);
        sum.2 = sum.2.max(row.latency.max_ns);
    }
    let mut groups: Vec<ContendedHolder> = sums
        .into_iter()
        .map(
            |((lock, flags, pid, tid, stack), (count, total_ns, max_ns))| {
                let frames = profile.stack_frames(stack);
                let outside: Vec<String> = frames
                    .iter()
                    .skip_while(|frame| crate::lock::is_lock_internal(&frame.name))
                    .map(|frame| frame.display())
                    .collect();
                ContendedHolder {
                    lock_type: lock_type_name(flags).to_string(),
                    lock: lock.to_string(),
                    pid,
                    tid,
                    process: profile.process_name(pid),
                    caller: caller(&frames)
                        .map(|frame| frame.display())
                        .unwrap_or_else(|| UNKNOWN.to_string()),
                    frames: outside,
                    count,
                    total_ns,
                    max_ns,
                }
            },
        )
        .collect();
    most_first(
        &mut groups,
        |group| group.total_ns,
        |a, b| a.lock.cmp(&b.lock).then_with(|| a.tid.cmp(&b.tid)),
    );
    groups
}

/// The holds under contention of the lock named `lock`, with its top holders.
fn contended_holds_of(groups: &[ContendedHolder], lock: &str) -> Option<ContendedHolds> {
    let of_lock: Vec<&ContendedHolder> = groups.iter().filter(|group| group.lock == lock).collect();
    if of_lock.is_empty() {
        return None;
    }
    Some(ContendedHolds {
        count: of_lock.iter().map(|group| group.count).sum(),
        total_ns: of_lock.iter().map(|group| group.total_ns).sum(),
        max_ns: of_lock.iter().map(|group| group.max_ns).max().unwrap_or(0),
        holders: of_lock.into_iter().take(10).cloned().collect(),
    })
}

/// "Held while others waited": for the locks with the most hold time under contention,
/// who held them, where they took them, and for how long. Empty when none was seen.
pub fn contended_holds_table(profile: &Profile, top: usize) -> String {
    let groups = contended_holders(profile);
    if groups.is_empty() {
        return String::new();
    }
    let mut locks: Vec<(&str, u64)> = Vec::new();
    for group in &groups {
        match locks.iter_mut().find(|(lock, _)| *lock == group.lock) {
            Some(entry) => entry.1 += group.total_ns,
            None => locks.push((&group.lock, group.total_ns)),
        }
    }
    locks.sort_by_key(|lock| std::cmp::Reverse(lock.1));
    let mut out = String::from(
        "\nheld while others waited (holds under contention, at most: acquisition to the release seen or the next waiter's):\n",
    );
    out.push_str(&format!(
        "  {:>8} {:>10} {:>10}  {:<10} {:<24} {}\n",
        "holds", "total", "max", "type", "holder", "acquired in"
    ));
    for (lock, total) in locks.iter().take(top.clamp(1, 10)) {
        out.push_str(&format!("  {lock}: {} held\n", format_ns(*total)));
        for group in groups.iter().filter(|group| group.lock == *lock).take(5) {
            let holder = format!("{}[{}/{}]", group.process, group.pid, group.tid);
            out.push_str(&format!(
                "  {:>8} {:>10} {:>10}  {:<10} {:<24} {}\n",
                group.count,
                format_ns(group.total_ns),
                format_ns(group.max_ns),
                group.lock_type,
                fit(&holder, 24),
                fit(&group.caller, 40)
            ));
        }
    }
    out
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

pub(crate) const STACK_LOST: &str = "[stack lost]";
const STACK_LOST_ID: u32 = 0;
pub(crate) const UNKNOWN: &str = "[unknown]";
const UNKNOWN_ID: u32 = 1;

/// A fast, non-cryptographic hasher (rustc's Fx hash) for the grouping maps: a report
/// of a million rows spends most of its time hashing keys.
type FxBuild = rustc_hash::FxBuildHasher;

/// The key of a group by caller, process, host or cgroup (with its type id).
#[derive(PartialEq, Eq, Hash)]
enum Key<'a> {
    Host(&'a str),
    Caller(u32),
    Pid(u32),
}

/// The sums of one group in the first pass. 48 bytes: with 100,000s of groups, every
/// byte here is memory the kernel must first zero (the group's lock name and name
/// source are its first row's).
struct Sums<'a> {
    row: &'a LockRow,
    type_id: u16,
    several_locks: bool,
    has_holder: bool,
    /// By lock: the sides (`lock_side`) of the group's waits, readers and writers of one
    /// lock being one group.
    sides: u8,
    count: u64,
    total: u64,
    max: u64,
    min: u64,
}

impl<'a> Sums<'a> {
    fn new(row: &'a LockRow, type_id: u16) -> Self {
        Sums {
            row,
            type_id,
            several_locks: false,
            has_holder: false,
            sides: 0,
            count: 0,
            total: 0,
            max: 0,
            min: u64::MAX,
        }
    }

    fn add(&mut self, row: &LockRow) {
        if self.row.lock_name != row.lock_name {
            self.several_locks = true;
        }
        // Saturating: a damaged or hand-made profile must not wrap around.
        self.count = self.count.saturating_add(row.count);
        self.total = self.total.saturating_add(row.total_ns);
        self.max = self.max.max(row.max_ns);
        self.min = self.min.min(row.min_ns);
    }
}

/// By lock, the sums live beside the name's key in the map that finds a row's group:
/// a row's group is one place in memory, not two (with rows of 100,000s of locks, each
/// is a cache miss).
#[derive(Clone, Copy)]
struct Acc {
    count: u64,
    total: u64,
    max: u64,
    min: u64,
}

impl Acc {
    const EMPTY: Acc = Acc {
        count: 0,
        total: 0,
        max: 0,
        min: u64::MAX,
    };

    fn add(&mut self, row: &LockRow) {
        // Saturating: a damaged or hand-made profile must not wrap around.
        self.count = self.count.saturating_add(row.count);
        self.total = self.total.saturating_add(row.total_ns);
        self.max = self.max.max(row.max_ns);
        self.min = self.min.min(row.min_ns);
    }
}

/// Lock classes (`lockclass`) of rows whose name may be one instance of many: what each
/// stack says, computed once per stack; a lock in a generic cache object is one class,
/// under the function with the most wait on it.
pub(crate) struct Classes<'p> {
    profile: &'p Profile,
    stacks: HashMap<Option<u32>, StackClass, FxBuild>,
    main_takers: HashMap<u64, String>,
}

impl<'p> Classes<'p> {
    pub(crate) fn new(profile: &'p Profile, by: GroupBy) -> Self {
        let mut stacks: HashMap<Option<u32>, StackClass, FxBuild> = HashMap::default();
        let main_takers = match by {
            GroupBy::Lock | GroupBy::Instance => {
                lockclass::main_takers(profile.locks.iter(), |row| {
                    let stack = stacks.entry(row.stack).or_insert_with(|| {
                        lockclass::stack_class(&profile.stack_frames(row.stack))
                    });
                    lockclass::taker(stack).map(str::to_string)
                })
            }
            _ => HashMap::new(),
        };
        Classes {
            profile,
            stacks,
            main_takers,
        }
    }

    pub(crate) fn of(&mut self, row: &LockRow) -> Option<String> {
        if !lockclass::may_have_class(row) {
            return None;
        }
        let profile = self.profile;
        let stack = self
            .stacks
            .entry(row.stack)
            .or_insert_with(|| lockclass::stack_class(&profile.stack_frames(row.stack)));
        let taker = self.main_takers.get(&row.lock_addr).map(String::as_str);
        lockclass::lock_class(row, stack, taker)
    }
}

/// A row's type as an id among the distinct type names, found by its flags in a map of
/// a few entries: keys hold no string to hash and compare.
struct Types {
    ids: HashMap<u32, u16, FxBuild>,
    names: Vec<&'static str>,
    name_of: fn(u32) -> &'static str,
}

impl Types {
    fn new(by: GroupBy) -> Self {
        Types {
            ids: HashMap::default(),
            names: Vec::new(),
            // By lock, one row per lock: its readers and writers are one group (as `perf
            // lock contention -l` keys by address), the type names both sides when both
            // waited.
            name_of: match by {
                GroupBy::Lock => lock_type_name_both_sides,
                _ => lock_type_name,
            },
        }
    }

    fn id(&mut self, flags: u32) -> u16 {
        let (names, name_of) = (&mut self.names, self.name_of);
        *self.ids.entry(flags).or_insert_with(|| {
            let name = name_of(flags);
            let id = names.iter().position(|known| *known == name);
            let id = id.unwrap_or_else(|| {
                names.push(name);
                names.len() - 1
            });
            id as u16
        })
    }
}

/// The first pass over the rows: every row's group and the groups' sums. Keys borrow
/// from the profile and callers are ids, so a million rows cost no million allocations.
struct Grouped<'p> {
    groups: Vec<Sums<'p>>,
    /// The group of each row of `profile.locks`.
    row_group: Vec<u32>,
    /// Group id -> its class name, for groups by lock of a class.
    class_names: HashMap<u32, String, FxBuild>,
    types: Types,
}

impl<'p> Grouped<'p> {
    fn new(
        profile: &'p Profile,
        by: GroupBy,
        classes: &mut Classes,
        caller_of: &impl Fn(Option<u32>) -> u32,
    ) -> Self {
        // Hosts (or cgroups) by pid, computed once (only grouping by host or cgroup
        // needs them).
        let hosts: HashMap<u32, String> = match by {
            GroupBy::Host | GroupBy::Cgroup => profile
                .locks
                .iter()
                .map(|row| row.pid)
                .collect::<BTreeSet<u32>>()
                .into_iter()
                .map(|pid| match by {
                    GroupBy::Host => (pid, profile.host_of(pid)),
                    _ => (pid, profile.cgroup_of(pid)),
                })
                .collect(),
            _ => HashMap::new(),
        };
        let mut grouped = Grouped {
            // At most one group per row: reserved (address space, not memory) rather
            // than grown by copies.
            groups: Vec::with_capacity(profile.locks.len()),
            row_group: Vec::with_capacity(profile.locks.len()),
            class_names: HashMap::default(),
            types: Types::new(by),
        };
        // By lock: one map of names per type, keyed by the name's own bytes (a lock
        // name of up to 24 bytes is inline), so finding a row's group reads no other row.
        let mut by_name: Vec<HashMap<CompactString, (u32, Acc), FxBuild>> = Vec::new();
        // By caller, process or host (host: every type in one group).
        let mut ids: HashMap<(Key, u16), u32, FxBuild> = HashMap::default();
        for row in &profile.locks {
            let type_id = grouped.types.id(row.flags);
            let groups = &mut grouped.groups;
            let mut new_group = || {
                groups.push(Sums::new(row, type_id));
                (groups.len() - 1) as u32
            };
            let id = match by {
                GroupBy::Lock | GroupBy::Instance => {
                    if by_name.len() <= type_id as usize {
                        by_name.resize_with(type_id as usize + 1, HashMap::default);
                    }
                    let names = &mut by_name[type_id as usize];
                    let class = match by {
                        GroupBy::Lock => classes.of(row),
                        _ => None,
                    };
                    let key = class.as_deref().unwrap_or(row.lock_name.as_str());
                    match names.get_mut(key) {
                        Some((id, acc)) => {
                            acc.add(row);
                            *id
                        }
                        None => {
                            let id = new_group();
                            let mut acc = Acc::EMPTY;
                            acc.add(row);
                            names.insert(key.into(), (id, acc));
                            if let Some(class) = class {
                                grouped.class_names.insert(id, class);
                            }
                            id
                        }
                    }
                }
                GroupBy::Caller => *ids
                    .entry((Key::Caller(caller_of(row.stack)), type_id))
                    .or_insert_with(new_group),
                GroupBy::Process => *ids
                    .entry((Key::Pid(row.pid), type_id))
                    .or_insert_with(new_group),
                GroupBy::Host => {
                    let host = hosts.get(&row.pid).map_or("", String::as_str);
                    *ids.entry((Key::Host(host), u16::MAX))
                        .or_insert_with(new_group)
                }
                GroupBy::Cgroup => {
                    let cgroup = hosts.get(&row.pid).map_or("", String::as_str);
                    *ids.entry((Key::Host(cgroup), type_id))
                        .or_insert_with(new_group)
                }
            };
            grouped.row_group.push(id);
            let sums = &mut grouped.groups[id as usize];
            if row.owner_pid.is_some() {
                sums.has_holder = true;
            }
            if matches!(by, GroupBy::Lock | GroupBy::Instance) {
                sums.sides |= lock_side(row.flags) as u8;
                // Summed in `by_name`; every row of a group has its name (or class).
                continue;
            }
            sums.add(row);
        }
        for &(id, acc) in by_name.iter().flat_map(HashMap::values) {
            let sums = &mut grouped.groups[id as usize];
            sums.count = acc.count;
            sums.total = acc.total;
            sums.max = acc.max;
            sums.min = acc.min;
        }
        grouped
    }

    /// The name of group `id`'s lock: its class, `(several)`, or its first row's name.
    fn lock_of(&self, id: u32) -> &str {
        let sums = &self.groups[id as usize];
        if let Some(class) = self.class_names.get(&id) {
            class
        } else if sums.several_locks {
            "(several)"
        } else {
            &sums.row.lock_name
        }
    }

    /// The ids of the `top` largest groups (0: all; only groups with a known holder if
    /// `need_holders`), most wait first.
    fn shown(&self, top: usize, need_holders: bool) -> Vec<u32> {
        let order = |a: &u32, b: &u32| {
            let (sums_a, sums_b) = (&self.groups[*a as usize], &self.groups[*b as usize]);
            sums_b
                .total
                .cmp(&sums_a.total)
                .then_with(|| sums_b.count.cmp(&sums_a.count))
                .then_with(|| self.lock_of(*a).cmp(self.lock_of(*b)))
                .then_with(|| {
                    self.types.names[sums_a.type_id as usize]
                        .cmp(self.types.names[sums_b.type_id as usize])
                })
        };
        let mut shown: Vec<u32> = (0..self.groups.len() as u32)
            .filter(|&id| !need_holders || self.groups[id as usize].has_holder)
            .collect();
        if top != 0 && shown.len() > top {
            // Only the top rows are shown: select them, then sort only those.
            shown.select_nth_unstable_by(top - 1, order);
            shown.truncate(top);
        }
        shown.sort_unstable_by(order);
        shown
    }
}

/// owner pid -> (wait, owner stack -> wait)
type HolderSums = BTreeMap<u32, (u64, BTreeMap<Option<u32>, u64>)>;

/// What the second pass gathers for one shown group.
#[derive(Default, Clone)]
struct Details {
    /// Caller id -> wait.
    callers: HashMap<u32, u64, FxBuild>,
    pids: BTreeSet<u32>,
    instances: std::collections::HashSet<u64, FxBuild>,
    holders: HolderSums,
}

/// The second pass: callers, processes, instances and holders of the shown groups only.
fn details(
    profile: &Profile,
    grouped: &Grouped,
    shown: &[u32],
    caller_of: &impl Fn(Option<u32>) -> u32,
) -> Vec<Details> {
    const HIDDEN: u32 = u32::MAX;
    let mut slot_of_group = vec![HIDDEN; grouped.groups.len()];
    for (slot, &group) in shown.iter().enumerate() {
        slot_of_group[group as usize] = slot as u32;
    }
    let mut details = vec![Details::default(); shown.len()];
    for (row, &group) in profile.locks.iter().zip(&grouped.row_group) {
        let slot = slot_of_group[group as usize];
        if slot == HIDDEN {
            continue;
        }
        let details = &mut details[slot as usize];
        let total = details.callers.entry(caller_of(row.stack)).or_default();
        *total = total.saturating_add(row.total_ns);
        details.pids.insert(row.pid);
        details.instances.insert(row.lock_addr);
        if let Some(owner) = row.owner_pid {
            let (wait, stacks) = details.holders.entry(owner).or_default();
            *wait = wait.saturating_add(row.total_ns);
            let stack_wait = stacks.entry(row.owner_stack).or_default();
            *stack_wait = stack_wait.saturating_add(row.total_ns);
        }
    }
    details
}

/// The holders of a group, most wait first, each with where it slept (its stack with the
/// most wait).
fn holders_of(
    profile: &Profile,
    holders: HolderSums,
    name_of: &mut impl FnMut(u32) -> String,
) -> Vec<Holder> {
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
    holders
}

/// The `top` largest groups (0: all; only groups with a known holder if `need_holders`),
/// and how many groups there are in total. Two passes: sums per group (`Grouped`), then
/// callers, processes and holders only for the groups that are shown (`details`).
pub fn top_lock_groups(
    profile: &Profile,
    by: GroupBy,
    top: usize,
    need_holders: bool,
) -> (Vec<LockGroup>, usize) {
    let (stack_caller, caller_names) = stack_callers(profile);
    let caller_of = |stack: Option<u32>| match stack {
        None => STACK_LOST_ID,
        Some(id) => stack_caller.get(id as usize).copied().unwrap_or(UNKNOWN_ID),
    };
    let caller_name = |id: u32| {
        caller_names
            .get(id as usize)
            .map_or(UNKNOWN, String::as_str)
    };
    let mut classes = Classes::new(profile, by);
    let grouped = Grouped::new(profile, by, &mut classes, &caller_of);
    let total_groups = grouped.groups.len();
    let shown = grouped.shown(top, need_holders);
    let details = details(profile, &grouped, &shown, &caller_of);
    let mut names: HashMap<u32, String> = HashMap::new();
    let mut name_of = |pid: u32| {
        names
            .entry(pid)
            .or_insert_with(|| profile.process_name(pid))
            .clone()
    };
    let knows_cgroups = by == GroupBy::Cgroup || profile.knows_cgroups();
    let by_lock = matches!(by, GroupBy::Lock | GroupBy::Instance);
    let hold_groups = if by_lock && !profile.contended_holds.is_empty() {
        contended_holders(profile)
    } else {
        Vec::new()
    };
    let mut out = Vec::with_capacity(shown.len());
    for (&group, details) in shown.iter().zip(details) {
        let sums = &grouped.groups[group as usize];
        let lock = grouped.lock_of(group);
        let class_name = grouped.class_names.get(&group);
        let mut callers: Vec<(&str, u64)> = details
            .callers
            .into_iter()
            .map(|(id, total)| (caller_name(id), total))
            .collect();
        callers.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let pids: Vec<u32> = details.pids.into_iter().collect();
        out.push(LockGroup {
            contended_holds: match by_lock && !sums.several_locks && class_name.is_none() {
                true => contended_holds_of(&hold_groups, lock),
                false => None,
            },
            holders: holders_of(profile, details.holders, &mut name_of),
            lock_type: match by {
                GroupBy::Lock => lock_row_type_name(sums.row.flags, sums.sides.into()),
                _ => grouped.types.names[sums.type_id as usize],
            }
            .to_string(),
            lock: lock.to_string(),
            lock_name_source: if class_name.is_some() {
                lockclass::SOURCE_CLASS.to_string()
            } else if sums.several_locks {
                String::new()
            } else {
                sums.row.lock_name_source.to_string()
            },
            instances: details.instances.len() as u64,
            class: match by {
                GroupBy::Instance if !sums.several_locks => {
                    classes.of(sums.row).unwrap_or_default()
                }
                _ => String::new(),
            },
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
            cgroup: match pids.first() {
                Some(&pid) if knows_cgroups => profile.cgroup_of(pid),
                _ => String::new(),
            },
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
        .filter(|frame| !crate::export::tables::offcpu::is_scheduler_frame(&frame.name))
        .map(|frame| frame.display())
        .collect()
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
        GroupBy::Cgroup => "cgroup",
        _ => "lock",
    };
    // Wider only when a row's type carries an outcome (`rwsem:R !EINTR`).
    let type_width = groups
        .iter()
        .map(|group| group.lock_type.len())
        .max()
        .unwrap_or(0)
        .max(10);
    out.push_str(&format!(
        "{:>10} {:>10} {:>10} {:>10}  {:<type_width$} {:<20} {}\n",
        "contended", "total wait", "max wait", "avg wait", "type", third, "caller"
    ));
    let shown = groups.len();
    for group in &groups {
        let third_value = match by {
            GroupBy::Process => group.processes.first().cloned().unwrap_or_default(),
            GroupBy::Host => group.host.clone(),
            GroupBy::Cgroup => group.cgroup.clone(),
            _ => lock_cell(group),
        };
        out.push_str(&format!(
            "{:>10} {:>10} {:>10} {:>10}  {:<type_width$} {:<20} {}\n",
            group.contended,
            format_ns(group.total_wait_ns),
            format_ns(group.max_wait_ns),
            format_ns(group.avg_wait_ns),
            group.lock_type,
            match by {
                GroupBy::Cgroup => fit_tail(&third_value, 20),
                GroupBy::Lock | GroupBy::Instance => third_value,
                _ => fit(&third_value, 20),
            },
            fit(&group.caller, 30),
        ));
    }
    out.push_str(&more_rows(shown, total_groups));
    if matches!(by, GroupBy::Lock | GroupBy::Instance) {
        out.push_str(&name_sources(&groups));
    }
    out
}

/// The lock column of a lock row, within 20 columns: the name, `~` before a name that
/// is a guess (`lock_name_source` `slab_merged`), and the count of instances of a class
/// (`bit_wait_table ×12`), kept when the name is cut.
fn lock_cell(group: &LockGroup) -> String {
    let mark = if crate::lock::name_is_guess(&group.lock_name_source) {
        "~"
    } else {
        ""
    };
    let count = if group.lock_name_source == lockclass::SOURCE_CLASS {
        format!(" ×{}", group.instances)
    } else {
        String::new()
    };
    let room = 20usize.saturating_sub(mark.chars().count() + count.chars().count());
    format!("{mark}{}{count}", fit(&group.lock, room.max(1)))
}

/// `text` within `width` characters, its end kept (a cgroup path's leaf says most).
fn fit_tail(text: &str, width: usize) -> String {
    let count = text.chars().count();
    if count <= width {
        return text.to_string();
    }
    let mut cut = String::from('…');
    cut.extend(text.chars().skip(count + 1 - width));
    cut
}

/// How the shown locks were named, one line within 100 columns: `named by task:
/// file_lock, mmap_lock; runqueue: rq_lock:cpu0; not named: 2 addresses`. Empty for
/// profiles that do not say (older versions). Methods in the order of their first lock
/// (most wait first), so what the line must cut is the least.
pub fn name_sources(groups: &[LockGroup]) -> String {
    let mut by_source: Vec<(&str, Vec<&str>)> = Vec::new();
    for group in groups {
        if group.lock_name_source.is_empty() {
            continue;
        }
        let index = match by_source
            .iter()
            .position(|(source, _)| *source == group.lock_name_source)
        {
            Some(index) => index,
            None => {
                by_source.push((&group.lock_name_source, Vec::new()));
                by_source.len() - 1
            }
        };
        let names = &mut by_source[index].1;
        if !names.contains(&group.lock.as_str()) {
            names.push(&group.lock);
        }
    }
    if by_source.is_empty() {
        return String::new();
    }
    let addresses = by_source
        .iter()
        .position(|(source, _)| *source == "address")
        .map_or(0, |index| by_source.remove(index).1.len());
    let mut parts: Vec<String> = by_source
        .into_iter()
        .map(|(source, names)| {
            let guess = if crate::lock::name_is_guess(source) {
                " (~ guess)"
            } else {
                ""
            };
            format!("{source}{guess}: {}", names.join(", "))
        })
        .collect();
    if addresses > 0 {
        let plural = if addresses == 1 { "" } else { "es" };
        parts.push(format!("not named: {addresses} address{plural}"));
    }
    format!("{}\n", fit(&format!("named by {}", parts.join("; ")), 100))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_sources_line_groups_names_by_method() {
        let group = |lock: &str, source: &str| LockGroup {
            lock_type: "spinlock".into(),
            lock: lock.into(),
            lock_name_source: source.into(),
            instances: 1,
            class: String::new(),
            caller: String::new(),
            contended: 1,
            total_wait_ns: 1,
            max_wait_ns: 1,
            min_wait_ns: 1,
            avg_wait_ns: 1,
            callers: Vec::new(),
            pids: Vec::new(),
            processes: Vec::new(),
            host: String::new(),
            cgroup: String::new(),
            holders: Vec::new(),
            contended_holds: None,
        };
        let groups = [
            group("file_lock", "task"),
            group("rq_lock:cpu0", "runqueue"),
            group("mmap_lock", "task"),
            group("0xffff1", "address"),
            group("0xffff2", "address"),
            group("mmap_lock", "task"),
        ];
        assert_eq!(
            name_sources(&groups),
            "named by task: file_lock, mmap_lock; runqueue: rq_lock:cpu0; not named: 2 addresses\n"
        );
        assert_eq!(name_sources(&[group("0xffff1", "")]), "");
    }

    #[test]
    fn readers_and_writers_of_a_lock_share_its_row_by_lock() {
        use profiler_common::lock::{LCB_F_MUTEX, LCB_F_READ, LCB_F_SPIN, LCB_F_WRITE};
        let mut profile = crate::export::formats::report::tests::profile_with_two_locks();
        let writer = profile
            .locks
            .iter()
            .position(|row| row.flags == LCB_F_WRITE)
            .expect("an rwsem:W row");
        let mut reader = profile.locks[writer].clone();
        reader.flags = LCB_F_READ;
        reader.count = 3;
        reader.total_ns = 5;
        profile.locks.push(reader);
        let rwsem = |profile: &Profile, by| {
            lock_groups(profile, by)
                .into_iter()
                .filter(|group| group.lock_type.starts_with("rwsem"))
                .map(|group| (group.lock_type, group.contended))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            rwsem(&profile, GroupBy::Lock),
            vec![("rwsem:R+W".to_string(), 13)]
        );
        assert_eq!(
            rwsem(&profile, GroupBy::Instance),
            vec![("rwsem:W".to_string(), 10), ("rwsem:R".to_string(), 3)]
        );
        // A mutex whose waiters spun and slept is one `mutex` row.
        let mut sleeper = profile.locks[writer].clone();
        sleeper.lock_name = "j_checkpoint_mutex".into();
        sleeper.lock_addr = 9;
        sleeper.flags = LCB_F_MUTEX;
        let mut spinner = sleeper.clone();
        spinner.flags = LCB_F_MUTEX | LCB_F_SPIN;
        profile.locks.extend([sleeper, spinner]);
        let mutexes: Vec<(String, u64)> = lock_groups(&profile, GroupBy::Lock)
            .into_iter()
            .filter(|group| group.lock == "j_checkpoint_mutex")
            .map(|group| (group.lock_type, group.contended))
            .collect();
        assert_eq!(mutexes, vec![("mutex".to_string(), 20)]);
        profile.locks.truncate(profile.locks.len() - 2);
        // Alone, a side keeps its name.
        profile.locks.pop();
        assert_eq!(
            rwsem(&profile, GroupBy::Lock),
            vec![("rwsem:W".to_string(), 10)]
        );
    }

    #[test]
    fn groups_by_cgroup_path_and_lock_type() {
        let mut profile = crate::export::formats::report::tests::profile_with_two_locks();
        // pids 10 and 11 in one cgroup; pid 12 has no process entry: unknown.
        for process in &mut profile.processes {
            process.cgroup = Some("/slurm/uid_1000/job_4242/step_0/user/task_0".into());
        }
        let mut unknown = profile.locks[1].clone();
        unknown.pid = 12;
        unknown.count = 7;
        profile.locks.push(unknown);
        let groups = lock_groups(&profile, GroupBy::Cgroup);
        let sums: Vec<(&str, &str, u64, Vec<u32>)> = groups
            .iter()
            .map(|group| {
                (
                    group.cgroup.as_str(),
                    group.lock_type.as_str(),
                    group.contended,
                    group.pids.clone(),
                )
            })
            .collect();
        let job = "/slurm/uid_1000/job_4242/step_0/user/task_0";
        assert_eq!(
            sums,
            vec![
                (job, "spinlock", 150, vec![10, 11]),
                (job, "rwsem:W", 10, vec![10]),
                ("?", "spinlock", 7, vec![12]),
            ]
        );
        let table = lock_table(&profile, GroupBy::Cgroup, 20);
        crate::export::tables::table::assert_fits_100_columns(&table);
        // Long paths keep their leaf.
        assert!(table.contains(" …/step_0/user/task_0 "), "{table}");
        assert!(table
            .lines()
            .next()
            .is_some_and(|line| line.contains("cgroup")));
        // Other groupings name the cgroup of a profile that knows cgroups.
        let by_lock = lock_groups(&profile, GroupBy::Lock);
        assert_eq!(by_lock[0].cgroup, job);
        // ... and leave it out of profiles that know none.
        let old = crate::export::formats::report::tests::profile_with_two_locks();
        assert!(lock_groups(&old, GroupBy::Lock)
            .iter()
            .all(|group| group.cgroup.is_empty()));
        assert_eq!(lock_groups(&old, GroupBy::Cgroup)[0].cgroup, "?");
    }
}
