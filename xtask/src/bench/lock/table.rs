//! The Markdown rows of one workload.

use std::{collections::BTreeMap, fmt::Write as _};

use anyhow::Result;

use crate::util;

use super::{
    counters::ContentionCost,
    format_count,
    rounds::ToolRuns,
    side_by_side::{workload_share, SideBySide},
    solo::Floor,
    Tool, MIN_WAITS, TARGET_ACCURACY, TARGET_COST_NS, TARGET_END_NS, TARGET_SLOWDOWN,
};

/// The table rows of one workload.
pub(super) fn storm_rows(
    name: &str,
    (side, alone, floor): (&Result<SideBySide>, &Result<ContentionCost>, &Result<Floor>),
    rounds: &BTreeMap<Tool, ToolRuns>,
    runs: usize,
    notes: &mut Vec<String>,
) -> String {
    let mut md = String::new();
    let reference_mid = reference_median_cost(rounds);
    let reference_cost = reference_mid.and_then(|cost| cost.per_contention());
    // The workload is named in its first row only.
    let mut workload = name.to_string();
    alone_row(&mut md, &mut workload, alone);
    cost_row(&mut md, &mut workload, name, side, reference_mid, notes);
    end_row(&mut md, &mut workload, (side, alone), floor);
    let (ours, reference) = wait_row(&mut md, &mut workload, rounds, runs, reference_cost);
    slowdown_row(&mut md, &mut workload, rounds, runs);
    wait_notes(name, rounds, ours, reference, reference_cost, notes);
    md
}

/// The table's verdict on whether a target is met: "yes", or a bold "no".
fn verdict(ok: bool) -> &'static str {
    if ok {
        "yes"
    } else {
        "**no**"
    }
}

/// "failed: <error>" as a table cell when `tool`'s runs ended in an error, else `None`.
fn failed(rounds: &BTreeMap<Tool, ToolRuns>, tool: Tool) -> Option<String> {
    rounds
        .get(&tool)
        .and_then(|r| r.error.as_deref())
        .map(|e| format!("failed: {}", cell(e, 60)))
}

/// The reference's own cost: that of its run with the median BPF time per
/// contention (the lower of the two middle runs when their number is even).
fn reference_median_cost(rounds: &BTreeMap<Tool, ToolRuns>) -> Option<ContentionCost> {
    let mut reference_runs: Vec<(f64, ContentionCost)> = rounds
        .get(&Tool::Reference)
        .map(|r| {
            r.runs
                .iter()
                .filter_map(|run| Some((run.cost?.per_contention()?, run.cost?)))
                .collect()
        })
        .unwrap_or_default();
    reference_runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    reference_runs
        .get(reference_runs.len().saturating_sub(1) / 2)
        .map(|(_, cost)| *cost)
}

/// Row (a), BPF time per contention of lockpath and bpftrace attached side by side,
/// with the reference's own median cost beside them; adds a note with every window's
/// figures, run counts and recursion misses. `workload` is written into the row's
/// first cell and left empty.
fn cost_row(
    md: &mut String,
    workload: &mut String,
    name: &str,
    side: &Result<SideBySide>,
    reference_mid: Option<ContentionCost>,
    notes: &mut Vec<String>,
) {
    match side {
        Ok(side) => {
            let ours = side.lockpath.per_contention();
            let _ = writeln!(
                md,
                "| {} | BPF time per contention, begin + end, beside bpftrace (one run, both attached, median of {} windows of {:.1} s) | {} | {} | {} | | {} |",
                std::mem::take(workload),
                side.windows.len(),
                side.window_s,
                side.lockpath.show(),
                side.bpftrace.show(),
                reference_mid.map_or("-".into(), |cost| format!(
                    "{} (its own runs, median)",
                    cost.show().replace("**", "")
                )),
                ours.map_or(String::new(), |_| "(judged alone, above)".into())
            );
            notes.push(format!(
                "{name}, side-by-side run: every window, lockpath / bpftrace ns per contention: {}; in the median window {} contention_begin / {} contention_end runs of lockpath's programs and {} / {} of bpftrace's{}{}; recursion misses lockpath {} / {}, bpftrace {} / {}{}.",
                util::comma_list(
                    side.windows
                        .iter()
                        .map(|(ours, theirs)| format!("{ours:.0} / {theirs:.0}"))
                ),
                side.lockpath.begin.run_cnt,
                side.lockpath.end.run_cnt,
                side.bpftrace.begin.run_cnt,
                side.bpftrace.end.run_cnt,
                workload_share(side),
                side.lockpath.show_waking().map_or(String::new(), |waking| format!(
                    "; lockpath's `sched_waking` program (a hold's end at the unlock's wake-up): {waking}"
                )),
                side.lockpath.begin.recursion_misses,
                side.lockpath.end.recursion_misses,
                side.bpftrace.begin.recursion_misses,
                side.bpftrace.end.recursion_misses,
                if side.attempts > 1 {
                    format!("; attempt {} (earlier ones barely contended or failed)", side.attempts)
                } else {
                    String::new()
                }
            ));
        }
        Err(err) => {
            let short = cell(&format!("{err:#}"), 100);
            let _ = writeln!(
                md,
                "| {} | BPF time per contention, begin + end | failed: {short} | | | | |",
                std::mem::take(workload)
            );
        }
    }
}

/// Row (a0), lockpath's BPF time per contention alone, judged against the target.
/// `workload` is written into the row's first cell and left empty.
fn alone_row(md: &mut String, workload: &mut String, alone: &Result<ContentionCost>) {
    let (cell_text, target) = match alone {
        Ok(cost) => (
            cost.show(),
            cost.per_contention().map_or(String::new(), |ns| {
                format!(
                    "<= {TARGET_COST_NS:.0} ns: {}",
                    verdict(ns <= TARGET_COST_NS)
                )
            }),
        ),
        Err(err) => (
            format!("failed: {}", cell(&format!("{err:#}"), 100)),
            String::new(),
        ),
    };
    let waking = alone
        .as_ref()
        .ok()
        .and_then(ContentionCost::show_waking)
        .map_or(String::new(), |waking| {
            format!("; `sched_waking`: {waking}")
        });
    push_row(
        md,
        workload,
        &format!(
            "BPF time per contention, begin + end, lockpath alone (one run, one window){waking}"
        ),
        [&cell_text, "", "", "", &target],
    );
}

/// One row of the table: the workload (written into the first cell and left empty), the
/// measure, and the cells of the tools' columns and the target's.
fn push_row(md: &mut String, workload: &mut String, measure: &str, cells: [&str; 5]) {
    let _ = writeln!(
        md,
        "| {} | {measure} | {} |",
        std::mem::take(workload),
        cells.join(" | ")
    );
}

/// Row (a'), the end program by itself, which runs with the lock held: lockpath's alone
/// (judged against the target) and beside bpftrace, bpftrace's, and the floor of this
/// machine (`floor`). `workload` is written into the row's first cell and left empty.
fn end_row(
    md: &mut String,
    workload: &mut String,
    (side, alone): (&Result<SideBySide>, &Result<ContentionCost>),
    floor: &Result<Floor>,
) {
    let end_ns = |cost: &ContentionCost| cost.end.per_run();
    let alone_ns = alone.as_ref().ok().and_then(end_ns);
    let beside_ns = side.as_ref().ok().and_then(|side| end_ns(&side.lockpath));
    let theirs = side
        .as_ref()
        .ok()
        .and_then(|side| end_ns(&side.bpftrace))
        .map_or("-".into(), |ns| format!("{ns:.0} ns"));
    let ours = format!(
        "{} alone, {} beside bpftrace",
        alone_ns.map_or("-".into(), |ns| format!("**{ns:.0} ns**")),
        beside_ns.map_or("-".into(), |ns| format!("{ns:.0} ns")),
    );
    let floor_text = match floor {
        Ok(floor) => format!(
            "floor here: {:.0} ns for a program that does nothing, {:.0} ns for one that only reads the clock",
            floor.empty_ns, floor.clock_ns
        ),
        Err(err) => format!("floor not measured: {}", cell(&format!("{err:#}"), 60)),
    };
    let target = match alone_ns {
        Some(ns) => format!(
            "<= {TARGET_END_NS:.0} ns: {}; {floor_text}",
            verdict(ns <= TARGET_END_NS)
        ),
        None => floor_text,
    };
    push_row(
        md,
        workload,
        "BPF time per run of the `contention_end` program by itself (it runs with the lock held)",
        [&ours, &theirs, "", "", &target],
    );
}

/// Row (b), spin-wait accuracy: the median average spinlock wait under lockpath and
/// under the reference, and whether lockpath is within the target of the reference
/// (or below it by no more than the reference's own cost `reference_cost`). Returns
/// the two medians in ns. `workload` is written into the row's first cell and left
/// empty.
fn wait_row(
    md: &mut String,
    workload: &mut String,
    rounds: &BTreeMap<Tool, ToolRuns>,
    runs: usize,
    reference_cost: Option<f64>,
) -> (Option<f64>, Option<f64>) {
    let ours = rounds
        .get(&Tool::Lockpath)
        .and_then(ToolRuns::median_spin_ns);
    let reference = rounds
        .get(&Tool::Reference)
        .and_then(ToolRuns::median_spin_ns);
    let show_wait = |ns: Option<f64>, tool: Tool| match (ns, failed(rounds, tool)) {
        (_, Some(failed)) => failed,
        (Some(ns), None) => format!("{:.3} us", ns / 1000.0),
        (None, None) => "-".into(),
    };
    let (ratio, target) = match (ours, reference) {
        (Some(ours), Some(reference)) if reference > 0.0 => {
            let ratio = ours / reference;
            let below_by = reference - ours;
            let ok = (ratio - 1.0).abs() <= TARGET_ACCURACY
                || (below_by > 0.0 && reference_cost.is_some_and(|cost| below_by <= cost));
            (
                format!(" (x{ratio:.2} of the reference)"),
                format!(
                    "within {:.0}% of the reference, or below by <= its own cost: {}",
                    TARGET_ACCURACY * 100.0,
                    verdict(ok)
                ),
            )
        }
        _ => (String::new(), String::new()),
    };
    let _ = writeln!(
        md,
        "| {} | average spinlock wait of the workload (median of {runs}) | {}{ratio} | | {} | | {target} |",
        std::mem::take(workload),
        show_wait(ours, Tool::Lockpath),
        show_wait(reference, Tool::Reference),
    );
    (ours, reference)
}

/// Row (c), elapsed overhead: the workload's median ops/s alone, each tool's slowdown
/// (ops/s alone over ops/s under the tool), and whether lockpath's is within the
/// target. `workload` is written into the row's first cell and left empty.
fn slowdown_row(
    md: &mut String,
    workload: &mut String,
    rounds: &BTreeMap<Tool, ToolRuns>,
    runs: usize,
) {
    let median_ops = |tool: Tool| rounds.get(&tool).and_then(ToolRuns::median_ops);
    let alone = median_ops(Tool::Alone);
    let slowdown = |tool: Tool| -> String {
        if let Some(failed) = failed(rounds, tool) {
            return failed;
        }
        match (alone, median_ops(tool)) {
            (Some(alone), Some(ops)) if ops > 0.0 => format!("x{:.2}", alone / ops),
            _ => "-".into(),
        }
    };
    let lockpath_slowdown = match (alone, median_ops(Tool::Lockpath)) {
        (Some(alone), Some(ops)) if ops > 0.0 => Some(alone / ops),
        _ => None,
    };
    let _ = writeln!(
        md,
        "| {} | slowdown: ops/s alone / ops/s under the tool (median of {runs}; alone {}) | {} | {} | {} | {} | {} |",
        std::mem::take(workload),
        match (alone, failed(rounds, Tool::Alone)) {
            (_, Some(failed)) => failed,
            (Some(ops), None) => format!("{} ops/s", format_count(ops)),
            (None, None) => "-".into(),
        },
        slowdown(Tool::Lockpath),
        slowdown(Tool::BpftraceStack),
        slowdown(Tool::Reference),
        slowdown(Tool::PerfLock),
        lockpath_slowdown.map_or(String::new(), |s| format!(
            "<= x{TARGET_SLOWDOWN:.2}: {}",
            verdict(s <= TARGET_SLOWDOWN)
        ))
    );
}

/// The workload's notes on spinning waits: the median number of waits per run under
/// lockpath and the reference, which tools' runs were repeated for too little
/// contention, and, when lockpath's median wait `ours` reads below the reference's,
/// by how much next to the reference's own cost.
fn wait_notes(
    name: &str,
    rounds: &BTreeMap<Tool, ToolRuns>,
    ours: Option<f64>,
    reference: Option<f64>,
    reference_cost: Option<f64>,
    notes: &mut Vec<String>,
) {
    let waits = |tool: Tool| {
        rounds
            .get(&tool)
            .and_then(ToolRuns::median_waits)
            .map_or("-".into(), |n| format!("{n:.0}"))
    };
    let repeated: Vec<String> = rounds
        .iter()
        .filter(|(_, r)| r.repeated > 0)
        .map(|(tool, r)| format!("{} {}", tool.label(), r.repeated))
        .collect();
    notes.push(format!(
        "{name}: spinning waits per run (median) lockpath {}, reference {}{}.",
        waits(Tool::Lockpath),
        waits(Tool::Reference),
        if repeated.is_empty() {
            String::new()
        } else {
            format!(
                "; runs repeated because the workload barely contended (< {MIN_WAITS} waits): {}",
                repeated.join(", ")
            )
        }
    ));
    if let (Some(ours), Some(reference)) = (ours, reference) {
        if ours < reference {
            notes.push(format!(
                "{name}: lockpath reads {:.0} ns below the reference; the reference's own BPF time per contention is {}.",
                reference - ours,
                reference_cost.map_or("unknown".into(), |c| format!("{c:.0} ns"))
            ));
        }
    }
}

/// An error message as a table cell: one line, no column separators, at most `max` chars.
pub(super) fn cell(text: &str, max: usize) -> String {
    text.chars()
        .map(|c| match c {
            '|' => '/',
            '\n' | '\r' => ' ',
            c => c,
        })
        .take(max)
        .collect()
}
