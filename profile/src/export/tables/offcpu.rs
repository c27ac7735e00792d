//! Off-CPU reports: per process, the split of off-CPU time by wait class, with the top
//! stack of each class (text for the summary, JSON for `report --format json`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::export::tables::table::fit;
use crate::{
    profile::{OffcpuRow, Profile},
    units::format_ns,
};

/// Per process: total and classes, most time first.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OffcpuProcess {
    pub pid: u32,
    pub process: String,
    pub total_ns: u64,
    pub count: u64,
    pub classes: Vec<OffcpuClass>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OffcpuClass {
    pub class: String,
    pub total_ns: u64,
    pub count: u64,
    pub max_ns: u64,
    /// Share of the process's off-CPU time, 0..100.
    pub percent: f64,
    /// Stacks of this class, most time first.
    pub stacks: Vec<OffcpuStack>,
    /// Who woke this class's waits (`record --wakers`), most time first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub wakers: Vec<crate::export::tables::wakers::WakerShare>,
    /// Owners of the file locks waited for (`file-lock` waits), most wait first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_by: Vec<OffcpuHolder>,
}

/// A process holding the file locks some waits of a class were queued behind.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OffcpuHolder {
    pub pid: u32,
    pub process: String,
    /// Off-CPU time of the waits it held the lock for.
    pub total_ns: u64,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OffcpuStack {
    /// Kernel frames, leaf first (`[stack lost]` when lost).
    pub kernel: Vec<String>,
    /// User frames, leaf first (empty when not symbolized).
    pub user: Vec<String>,
    pub threads: Vec<u32>,
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    /// Who woke these waits (`record --wakers`), most time first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub wakers: Vec<crate::export::tables::wakers::WakerShare>,
}

/// Frames that only say "the task slept": left out of the short top-stack line.
pub(crate) fn is_scheduler_frame(name: &str) -> bool {
    matches!(
        name,
        "__schedule"
            | "schedule"
            | "io_schedule"
            | "schedule_timeout"
            | "schedule_hrtimeout_range"
            | "schedule_hrtimeout_range_clock"
            | "schedule_preempt_disabled"
            | "bit_wait_io"
            | "bit_wait"
            | "__wait_on_bit"
            | "__wait_on_bit_lock"
            | "out_of_line_wait_on_bit"
            | "out_of_line_wait_on_bit_lock"
            | "io_schedule_timeout"
    ) || name.starts_with("preempt_schedule")
}

/// class -> (kernel stack, user stack) -> merged stack, for one process.
type ClassTree = BTreeMap<String, BTreeMap<(Option<u32>, Option<u32>), OffcpuStack>>;

/// (pid, class, kernel stack, user stack).
type StackKey = (u32, String, Option<u32>, Option<u32>);
/// Holder pid -> (off-CPU time, waits).
type HolderSums = BTreeMap<u32, (u64, u64)>;

/// The off-CPU time of every process in `profile`, split by wait class with each
/// class's stacks, wakers and file-lock holders; most time first.
pub fn processes(profile: &Profile) -> Vec<OffcpuProcess> {
    let Grouped {
        tree,
        rows_of,
        holders,
    } = group_rows(profile);
    let mut out: Vec<OffcpuProcess> = tree
        .into_iter()
        .map(|(pid, classes)| process_summary(profile, pid, classes, &rows_of, &holders))
        .collect();
    out.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.pid.cmp(&b.pid)));
    out
}

/// A profile's off-CPU rows gathered by [`group_rows`].
struct Grouped<'a> {
    /// pid -> class -> (kernel stack, user stack) -> the stack's rows merged.
    tree: BTreeMap<u32, ClassTree>,
    /// The rows of each stack that name wakers.
    rows_of: BTreeMap<StackKey, Vec<&'a OffcpuRow>>,
    /// (pid, class) -> holder pid -> (time, waits) of the file-lock waits it held.
    holders: BTreeMap<(u32, &'a str), HolderSums>,
}

/// Merges the off-CPU rows of `profile` into one stack per process, class, kernel stack
/// and user stack (counts and times summed, thread ids in order of first appearance),
/// and keeps the rows with wakers and the file-lock holders' sums beside them.
fn group_rows(profile: &Profile) -> Grouped<'_> {
    let mut tree: BTreeMap<u32, ClassTree> = BTreeMap::new();
    let mut rows_of: BTreeMap<StackKey, Vec<&OffcpuRow>> = BTreeMap::new();
    let mut holders: BTreeMap<(u32, &str), HolderSums> = BTreeMap::new();
    for row in &profile.offcpu {
        if !row.wakers.is_empty() {
            rows_of
                .entry((row.pid, row.class.clone(), row.stack, row.ustack))
                .or_default()
                .push(row);
        }
        if let Some(holder) = row.held_by {
            let sums = holders
                .entry((row.pid, row.class.as_str()))
                .or_default()
                .entry(holder)
                .or_default();
            sums.0 += row.total_ns;
            sums.1 += row.count;
        }
        let stack = tree
            .entry(row.pid)
            .or_default()
            .entry(row.class.clone())
            .or_default()
            .entry((row.stack, row.ustack))
            .or_insert_with(|| empty_stack(profile, row));
        stack.count += row.count;
        stack.total_ns += row.total_ns;
        stack.max_ns = stack.max_ns.max(row.max_ns);
        if !stack.threads.contains(&row.tid) {
            stack.threads.push(row.tid);
        }
    }
    Grouped {
        tree,
        rows_of,
        holders,
    }
}

/// A stack with the frames of `row`'s kernel and user stacks (`[stack lost]` for a lost
/// kernel stack) and nothing counted yet.
fn empty_stack(profile: &Profile, row: &OffcpuRow) -> OffcpuStack {
    OffcpuStack {
        kernel: if row.stack.is_none() {
            vec!["[stack lost]".into()]
        } else {
            profile
                .stack_frames(row.stack)
                .iter()
                .map(|frame| frame.display())
                .collect()
        },
        user: profile
            .stack_frames(row.ustack)
            .iter()
            .map(|frame| frame.display())
            .collect(),
        threads: Vec::new(),
        count: 0,
        total_ns: 0,
        max_ns: 0,
        wakers: Vec::new(),
    }
}

/// Process `pid`'s summary from its merged stacks by class: the classes, most time
/// first, each with its share of the process's off-CPU time.
fn process_summary(
    profile: &Profile,
    pid: u32,
    classes: ClassTree,
    rows_of: &BTreeMap<StackKey, Vec<&OffcpuRow>>,
    holders: &BTreeMap<(u32, &str), HolderSums>,
) -> OffcpuProcess {
    let mut classes: Vec<OffcpuClass> = classes
        .into_iter()
        .map(|(class, stacks)| class_summary(profile, pid, class, stacks, rows_of, holders))
        .collect();
    classes.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.class.cmp(&b.class)));
    let total_ns: u64 = classes.iter().map(|c| c.total_ns).sum();
    for class in &mut classes {
        class.percent = if total_ns == 0 {
            0.0
        } else {
            class.total_ns as f64 * 100.0 / total_ns as f64
        };
    }
    OffcpuProcess {
        pid,
        process: profile.process_name(pid),
        total_ns,
        count: classes.iter().map(|c| c.count).sum(),
        classes,
    }
}

/// One wait class of process `pid` from its merged stacks: the stacks most time first
/// (threads sorted), each with its wakers; the class's wakers as shares of its whole
/// time; the holders of the file locks its waits were queued behind, most time first.
/// `percent` is left 0 for the caller to fill.
fn class_summary(
    profile: &Profile,
    pid: u32,
    class: String,
    stacks: BTreeMap<(Option<u32>, Option<u32>), OffcpuStack>,
    rows_of: &BTreeMap<StackKey, Vec<&OffcpuRow>>,
    holders: &BTreeMap<(u32, &str), HolderSums>,
) -> OffcpuClass {
    let mut rows_of_class = Vec::new();
    let mut stacks: Vec<OffcpuStack> = stacks
        .into_iter()
        .map(|((kernel, user), mut stack)| {
            if let Some(rows) = rows_of.get(&(pid, class.clone(), kernel, user)) {
                stack.wakers = crate::export::tables::wakers::shares(profile, rows.iter().copied());
                crate::export::tables::wakers::rescale(&mut stack.wakers, stack.total_ns);
                rows_of_class.extend(rows.iter().copied());
            }
            stack
        })
        .collect();
    stacks.sort_by_key(|stack| std::cmp::Reverse(stack.total_ns));
    for stack in &mut stacks {
        stack.threads.sort_unstable();
    }
    let mut held_by: Vec<OffcpuHolder> = holders
        .get(&(pid, class.as_str()))
        .into_iter()
        .flatten()
        .map(|(&holder, &(total_ns, count))| OffcpuHolder {
            pid: holder,
            process: profile.process_name(holder),
            total_ns,
            count,
        })
        .collect();
    held_by.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.pid.cmp(&b.pid)));
    let class_total: u64 = stacks.iter().map(|s| s.total_ns).sum();
    let mut wakers = crate::export::tables::wakers::shares(profile, rows_of_class);
    // Shares of the class's time (not only of its rows with wakers).
    crate::export::tables::wakers::rescale(&mut wakers, class_total);
    OffcpuClass {
        wakers,
        held_by,
        class,
        total_ns: stacks.iter().map(|s| s.total_ns).sum(),
        count: stacks.iter().map(|s| s.count).sum(),
        max_ns: stacks.iter().map(|s| s.max_ns).max().unwrap_or(0),
        percent: 0.0,
        stacks,
    }
}

/// `a < b < c`: the frames below the scheduler, leaf first, cut to `width` columns.
pub(crate) fn short_stack(frames: &[String], width: usize) -> String {
    let mut out = String::new();
    for frame in frames.iter().filter(|name| {
        let bare = name.split(' ').next().unwrap_or(name);
        !is_scheduler_frame(bare)
    }) {
        let piece = if out.is_empty() {
            frame.clone()
        } else {
            format!(" < {frame}")
        };
        if out.chars().count() + piece.chars().count() > width {
            out.push_str(" < …");
            break;
        }
        out.push_str(&piece);
    }
    out
}

/// `name[pid] 12.3 ms, ...`: the first `top` holders of a class.
pub fn holders_text(holders: &[OffcpuHolder], top: usize) -> String {
    let mut parts: Vec<String> = holders
        .iter()
        .take(top)
        .map(|holder| {
            let who = if holder.process == format!("pid {}", holder.pid) {
                holder.process.clone()
            } else {
                format!("{}[{}]", holder.process, holder.pid)
            };
            format!("{who} {}", format_ns(holder.total_ns))
        })
        .collect();
    if holders.len() > top {
        parts.push(format!("{} more", holders.len() - top));
    }
    parts.join(", ")
}

/// The per-process table of the summary, within 100 columns.
pub fn table(profile: &Profile, top: usize) -> String {
    let processes = processes(profile);
    if processes.is_empty() {
        return "no off-CPU waits recorded\n".into();
    }
    let mut out = format!(
        "{:<20} {:>8} {:>10}  {:<10} {:>12} {:>6}  {}\n",
        "process", "pid", "off-CPU", "class", "ms", "%", "waits"
    );
    let shown = crate::export::tables::table::shown_rows(top, processes.len());
    for process in &processes[..shown] {
        for (index, class) in process.classes.iter().enumerate() {
            let (name, pid, total) = if index == 0 {
                (
                    fit(&process.process, 20),
                    process.pid.to_string(),
                    format_ns(process.total_ns),
                )
            } else {
                (String::new(), String::new(), String::new())
            };
            out.push_str(&format!(
                "{:<20} {:>8} {:>10}  {:<10} {:>12.1} {:>5.1}%  {}\n",
                name,
                pid,
                total,
                fit(&class.class, 10),
                class.total_ns as f64 / 1e6,
                class.percent,
                class.count
            ));
            if let Some(stack) = class.stacks.first() {
                out.push_str(&format!(
                    "{:>24}top: {}\n",
                    "",
                    short_stack(&stack.kernel, 64)
                ));
            }
            out.push_str(&crate::export::tables::wakers::woken_by_lines(
                &class.wakers,
                3,
                24,
            ));
            if !class.held_by.is_empty() {
                out.push_str(&format!(
                    "{:>24}held by: {}\n",
                    "",
                    fit(&holders_text(&class.held_by, 3), 67)
                ));
            }
        }
    }
    out.push_str(&crate::export::tables::table::more_of(
        shown,
        processes.len(),
        "processes",
    ));
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::profile::{OffcpuRow, Process};

    pub(crate) fn profile_with_waits() -> Profile {
        let (mut profile, [buffer, sleep]) = crate::fixtures::with_kernel_stacks([
            &[
                "__schedule",
                "io_schedule",
                "__wait_on_buffer",
                "ext4_read_bh",
                "ext4_bread",
            ],
            &["schedule", "do_nanosleep"],
        ]);
        let row = |tid, class: &str, stack, total| OffcpuRow {
            pid: 10,
            tid,
            state: "D".into(),
            class: class.into(),
            stack: Some(stack),
            ustack: None,
            count: 4,
            total_ns: total,
            max_ns: total / 2,
            held_by: None,
            wakers: Vec::new(),
        };
        profile.offcpu = vec![
            row(10, "buffer", buffer, 30_000_000),
            row(11, "buffer", buffer, 30_000_000),
            row(11, "sleep", sleep, 40_000_000),
        ];
        profile.processes = vec![Process {
            pid: 10,
            comm: "mdtest".into(),
            ..Default::default()
        }];
        profile
    }

    /// `profile_with_waits` plus 100 reads of loop0 by the same process, 90 of them in
    /// [64, 128) us and 10 in [2048, 4096) us.
    pub(crate) fn profile_with_waits_and_io() -> Profile {
        let mut profile = profile_with_waits();
        profile.io = crate::export::tables::io::tests::loop0_reads([10, 10]);
        profile.duration_s = 2.0;
        profile
    }

    #[test]
    fn split_by_class_with_percent() {
        let processes = processes(&profile_with_waits());
        assert_eq!(processes.len(), 1);
        let process = &processes[0];
        assert_eq!(process.total_ns, 100_000_000);
        assert_eq!(process.classes[0].class, "buffer");
        assert_eq!(process.classes[0].total_ns, 60_000_000);
        assert!((process.classes[0].percent - 60.0).abs() < 1e-9);
        assert_eq!(
            process.classes[0].stacks.len(),
            1,
            "same stack of two threads merged"
        );
        assert_eq!(process.classes[0].stacks[0].threads, vec![10, 11]);
        assert_eq!(process.classes[1].class, "sleep");
    }

    #[test]
    fn file_lock_holders_per_class() {
        let mut profile = profile_with_waits();
        let wait = |tid, holder, total| OffcpuRow {
            pid: 10,
            tid,
            state: "S".into(),
            class: "file-lock".into(),
            stack: None,
            ustack: None,
            count: 2,
            total_ns: total,
            max_ns: total,
            held_by: Some(holder),
            wakers: Vec::new(),
        };
        profile.offcpu.push(wait(10, 20, 5_000_000));
        profile.offcpu.push(wait(11, 21, 7_000_000));
        profile.offcpu.push(wait(11, 20, 1_000_000));
        profile.processes.push(Process {
            pid: 20,
            comm: "holder".into(),
            ..Default::default()
        });
        let processes = processes(&profile);
        let class = processes[0]
            .classes
            .iter()
            .find(|class| class.class == "file-lock")
            .expect("file-lock class");
        let holders: Vec<(u32, u64, u64)> = class
            .held_by
            .iter()
            .map(|holder| (holder.pid, holder.total_ns, holder.count))
            .collect();
        assert_eq!(holders, vec![(21, 7_000_000, 2), (20, 6_000_000, 4)]);
        assert!(
            processes[0].classes[0].held_by.is_empty(),
            "buffer waits have none"
        );
        crate::export::tables::table::assert_table_shows(
            &table(&profile, 20),
            &["held by: ", "held by: pid 21 7.00 ms, holder[20] 6.00 ms"],
        );
    }

    #[test]
    fn table_shows_ms_percent_and_top_stack() {
        crate::export::tables::table::assert_table_shows(
            &table(&profile_with_waits(), 20),
            &[
                "mdtest",
                "60.0",
                "top: __wait_on_buffer < ext4_read_bh < ext4_bread",
            ],
        );
    }
}
