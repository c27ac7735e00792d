//! Latency tables: request spans (`--rpc`, `--span`), function latency (`--func`,
//! `--ufunc`) and hold times (`--hold`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::export::{
    operations::diff::{add, Breakdown, Measure},
    tables::{
        lock::{STACK_LOST, UNKNOWN},
        table::{fit, more_rows, most_first, shown_rows},
    },
};
use crate::{
    lock::{caller, lock_type_name},
    profile::Profile,
    units::format_ns,
};

/// Request or function latency (`groups`) by name (its breakdown called `what`) and
/// by process, as `diff` compares them.
pub(crate) fn latency_breakdowns(
    groups: Vec<LatencyGroup>,
    what: &'static str,
    out: &mut Vec<Breakdown>,
) {
    let mut by_name: BTreeMap<String, Measure> = BTreeMap::new();
    let mut by_process: BTreeMap<String, Measure> = BTreeMap::new();
    for group in groups {
        for (entries, key) in [
            (&mut by_name, group.name.clone()),
            (&mut by_process, format!("{} {}", group.name, group.process)),
        ] {
            add(entries, key, group.latency.total_ns, group.latency.count);
        }
    }
    out.push(Breakdown::new(what, by_name));
    out.push(Breakdown::new("process", by_process));
}

/// One row of a latency table: profile rows grouped by (what, process).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LatencyGroup {
    /// `fuse CREATE`, `sunrpc rpc_task`, `vfs_read`, `/usr/bin/x:work`.
    pub name: String,
    pub pid: u32,
    pub process: String,
    #[serde(flatten)]
    pub latency: LatencySummary,
    /// rpc: the function that ran the completion most (leaf of its stack).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_in: Option<String>,
}

/// A latency aggregate as the tables show it (one of [`LatencyGroup`] or
/// [`HoldGroup`]): count, total, mean, extremes and the histogram.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub total_ns: u64,
    pub mean_ns: u64,
    pub max_ns: u64,
    pub min_ns: u64,
    /// log2 histogram: `hist[i]` counts latencies (holds) in [2^i, 2^(i+1)) ns.
    pub hist: Vec<u64>,
}

impl From<&crate::profile::Latency> for LatencySummary {
    fn from(latency: &crate::profile::Latency) -> Self {
        LatencySummary {
            count: latency.count,
            total_ns: latency.total_ns,
            mean_ns: latency.mean_ns(),
            max_ns: latency.max_ns,
            min_ns: latency.min_ns,
            hist: latency.hist.clone(),
        }
    }
}

impl LatencySummary {
    /// The first columns of a latency table: count, total, mean, max.
    fn columns(&self) -> String {
        format!(
            "{:>7} {:>9} {:>9} {:>9}",
            self.count,
            format_ns(self.total_ns),
            format_ns(self.mean_ns),
            format_ns(self.max_ns)
        )
    }

    /// Their headings.
    fn headings() -> String {
        format!("{:>7} {:>9} {:>9} {:>9}", "count", "total", "mean", "max")
    }
}

/// A latency table: the latency columns then `headings`; per group up to `top`, its
/// latency columns then the rest of its row (`row`); the line for the rows not shown.
fn latency_rows<G>(
    headings: String,
    groups: &[G],
    top: usize,
    row: impl Fn(&G) -> (&LatencySummary, String),
) -> String {
    let mut out = format!("{}  {headings}\n", LatencySummary::headings());
    let shown = shown_rows(top, groups.len());
    for group in &groups[..shown] {
        let (latency, rest) = row(group);
        out.push_str(&format!("{}  {rest}\n", latency.columns()));
    }
    out.push_str(&more_rows(shown, groups.len()));
    out
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
            latency: LatencySummary::from(&latency),
            completed_in: leaves
                .into_iter()
                .max_by_key(|(_, total)| *total)
                .map(|(leaf, _)| leaf),
        })
        .collect();
    most_first(
        &mut out,
        |group| group.latency.total_ns,
        |a, b| a.name.cmp(&b.name),
    );
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
    if groups.is_empty() {
        return format!("no {what} recorded\n");
    }
    latency_rows(
        format!("{:<28} {:<14} {}", what, "process", "completed in"),
        groups,
        top,
        |group| {
            let rest = format!(
                "{:<28} {:<14} {}",
                fit(&group.name, 28),
                fit(&group.process, 14),
                fit(group.completed_in.as_deref().unwrap_or(""), 17),
            );
            (&group.latency, rest)
        },
    )
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
    #[serde(flatten)]
    pub latency: LatencySummary,
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
                latency: LatencySummary::from(&row.latency),
            }
        })
        .collect();
    most_first(
        &mut groups,
        |group| group.latency.total_ns,
        |a, b| {
            a.pid
                .cmp(&b.pid)
                .then_with(|| a.acquired_in.cmp(&b.acquired_in))
        },
    );
    groups
}

/// The hold table: one row per holder, then the stack of the holder with the most hold
/// time (where the lock is taken, leaf first).
pub fn hold_table(profile: &Profile, top: usize) -> String {
    let groups = hold_groups(profile);
    let Some(first) = groups.first() else {
        return "no acquisition of the lock was seen\n".to_string();
    };
    let mut out = latency_rows(
        format!("{:<9} {:<22} {}", "type", "holder", "acquired in"),
        &groups,
        top,
        |group| {
            let rest = format!(
                "{:<9} {:<22} {}",
                group.lock_type,
                fit(&format!("{}[{}]", group.process, group.pid), 22),
                fit(&group.acquired_in, 30),
            );
            (&group.latency, rest)
        },
    );
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
