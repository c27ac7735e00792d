//! Wakers (`record --wakers`): who woke the off-CPU waits. The waker shares, the "woken
//! by" lines of the text report and the `wakers` of the JSON report; the `offwake`
//! view's stacks and HTML section are in views/offwake.rs.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::export::{tables::offcpu::short_stack, tables::table::fit};
use crate::profile::{OffcpuRow, Profile, WakerRow};

/// The waits of some off-CPU rows that one waker (thread and stacks) woke.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WakerShare {
    /// Process of the waker (`swapper` for an interrupt on an idle CPU).
    pub process: String,
    pub pid: u32,
    pub tid: u32,
    /// Thread name of the waker.
    pub thread: String,
    /// Kernel frames of the waker at the wake-up, leaf first (`[stack lost]` when lost).
    pub frames: Vec<String>,
    /// User frames of the waker, leaf first (empty when not symbolized).
    pub user_frames: Vec<String>,
    pub wait_ns: u64,
    pub count: u64,
    pub max_ns: u64,
    /// Share of the rows' off-CPU time, 0..100.
    pub percent: f64,
}

/// The name shown for a waker: its thread name, or `[interrupt]`.
pub(crate) fn waker_name(profile: &Profile, waker: &WakerRow) -> String {
    if waker.interrupt {
        INTERRUPT.to_string()
    } else {
        thread_name(profile, waker.pid, waker.tid)
    }
}

/// How a wake-up from an interrupt is named.
pub const INTERRUPT: &str = "[interrupt]";

/// A thread's name from the profile's processes (the process name when unknown).
pub fn thread_name(profile: &Profile, pid: u32, tid: u32) -> String {
    profile
        .process(pid)
        .and_then(|process| process.threads.iter().find(|thread| thread.tid == tid))
        .map(|thread| thread.comm.clone())
        .unwrap_or_else(|| profile.process_name(pid))
}

/// The wakers of `rows`, merged by (thread, stacks), most time first, each with its
/// share of the rows' total time.
pub fn shares<'a>(
    profile: &Profile,
    rows: impl IntoIterator<Item = &'a OffcpuRow>,
) -> Vec<WakerShare> {
    type Key = (bool, u32, u32, Option<u32>, Option<u32>);
    let mut merged: BTreeMap<Key, (u64, u64, u64)> = BTreeMap::new();
    let mut total_ns = 0u64;
    for row in rows {
        total_ns = total_ns.saturating_add(row.total_ns);
        for waker in &row.wakers {
            let entry = merged
                .entry((
                    waker.interrupt,
                    waker.pid,
                    waker.tid,
                    waker.stack,
                    waker.ustack,
                ))
                .or_default();
            entry.0 = entry.0.saturating_add(waker.wait_ns);
            entry.1 = entry.1.saturating_add(waker.count);
            entry.2 = entry.2.max(waker.max_ns);
        }
    }
    let mut out: Vec<WakerShare> = merged
        .into_iter()
        .map(
            |((interrupt, pid, tid, stack, ustack), (wait_ns, count, max_ns))| WakerShare {
                process: if interrupt {
                    INTERRUPT.to_string()
                } else {
                    profile.process_name(pid)
                },
                pid,
                tid,
                thread: if interrupt {
                    INTERRUPT.to_string()
                } else {
                    thread_name(profile, pid, tid)
                },
                frames: if stack.is_none() {
                    vec!["[stack lost]".into()]
                } else {
                    display(profile, stack)
                },
                user_frames: display(profile, ustack),
                wait_ns,
                count,
                max_ns,
                percent: if total_ns == 0 {
                    0.0
                } else {
                    wait_ns as f64 * 100.0 / total_ns as f64
                },
            },
        )
        .collect();
    out.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.tid.cmp(&b.tid)));
    out
}

/// Makes the shares' percent of `total_ns` (the time of every row of the group, woken
/// by a seen waker or not).
pub fn rescale(shares: &mut [WakerShare], total_ns: u64) {
    for share in shares {
        share.percent = if total_ns == 0 {
            0.0
        } else {
            share.wait_ns as f64 * 100.0 / total_ns as f64
        };
    }
}

fn display(profile: &Profile, stack: Option<u32>) -> Vec<String> {
    profile
        .stack_frames(stack)
        .iter()
        .map(|frame| frame.display())
        .collect()
}

/// Frames of the wake-up machinery itself (what every waker runs), left out of the
/// short lines so the cause shows: `pipe_write`, `futex_wake`, `hrtimer_wakeup`.
pub(crate) fn is_wakeup_frame(name: &str) -> bool {
    name == "try_to_wake_up"
        || name.starts_with("ttwu")
        || name.contains("wake_up")
        || name.ends_with("wake_function")
        || name == "pollwake"
        || name == "signal_wake_up_state"
}

/// A waker's frames from where it caused the wake-up (wake-up machinery left out).
pub fn wake_site(frames: &[String]) -> Vec<String> {
    let start = frames
        .iter()
        .position(|name| !is_wakeup_frame(name.split(' ').next().unwrap_or(name)))
        .unwrap_or(frames.len());
    frames[start..].to_vec()
}

/// `woken by` lines of the text report for a class row: the top wakers, within 100
/// columns.
pub fn woken_by_lines(shares: &[WakerShare], top: usize, indent: usize) -> String {
    let mut out = String::new();
    for (index, share) in shares.iter().take(top).enumerate() {
        let label = if index == 0 { "woken by" } else { "        " };
        let who = if share.thread == INTERRUPT {
            INTERRUPT.to_string()
        } else {
            fit(&format!("{}[{}]", share.thread, share.tid), 22)
        };
        let head = format!(
            "{:indent$}{label} {who:<22} {:>5.1}%: ",
            "",
            share.percent,
            indent = indent
        );
        let width = 100usize.saturating_sub(head.chars().count());
        out.push_str(&head);
        out.push_str(&short_stack(&wake_site(&share.frames), width));
        out.push('\n');
    }
    if shares.len() > top {
        let rest: f64 = shares[top..].iter().map(|share| share.percent).sum();
        out.push_str(&format!(
            "{:indent$}         ({} more wakers, {rest:.1}%)\n",
            "",
            shares.len() - top,
            indent = indent
        ));
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::profile::{OffcpuRow, Process, Thread, WakerRow};

    /// A pipe reader (pid 20, tid 21) woken 90 ms by the writer thread 22 (through
    /// pipe_write) and 10 ms with no waker seen.
    pub(crate) fn profile_with_wakers() -> Profile {
        let (mut profile, [read, write]) = crate::fixtures::with_kernel_stacks([
            &["schedule", "pipe_read", "ksys_read"],
            &[
                "try_to_wake_up",
                "__wake_up_common",
                "__wake_up_sync_key",
                "pipe_write",
                "ksys_write",
            ],
        ]);
        profile.offcpu = vec![OffcpuRow {
            pid: 20,
            tid: 21,
            state: "S".into(),
            class: "pipe".into(),
            stack: Some(read),
            ustack: None,
            count: 10,
            total_ns: 100_000_000,
            max_ns: 20_000_000,
            held_by: None,
            wakers: vec![WakerRow {
                pid: 20,
                tid: 22,
                stack: Some(write),
                ustack: None,
                count: 9,
                wait_ns: 90_000_000,
                max_ns: 20_000_000,
                interrupt: false,
            }],
        }];
        profile.processes = vec![Process {
            pid: 20,
            comm: "pingpong".into(),
            host: None,
            cgroup: None,
            threads: vec![
                Thread {
                    tid: 21,
                    comm: "reader".into(),
                },
                Thread {
                    tid: 22,
                    comm: "writer".into(),
                },
            ],
        }];
        profile
    }

    #[test]
    fn shares_name_the_waker_and_its_part() {
        let profile = profile_with_wakers();
        let shares = shares(&profile, &profile.offcpu);
        assert_eq!(shares.len(), 1);
        assert_eq!(shares[0].thread, "writer");
        assert_eq!(shares[0].tid, 22);
        assert_eq!(shares[0].wait_ns, 90_000_000);
        assert!((shares[0].percent - 90.0).abs() < 1e-9);
        assert_eq!(
            wake_site(&shares[0].frames),
            vec!["pipe_write".to_string(), "ksys_write".to_string()]
        );
        crate::export::tables::table::assert_table_shows(
            &woken_by_lines(&shares, 3, 24),
            &["woken by writer[22]", "90.0%: pipe_write < ksys_write"],
        );
    }

    #[test]
    fn offwake_puts_the_waker_upside_down_above_the_separator() {
        let profile = profile_with_wakers();
        let mut lines = Vec::new();
        crate::kind::Kind::Offwake
            .view()
            .samples(&profile, &mut |frames, values| {
                lines.push((frames.join(";"), values.to_vec()))
            });
        lines.sort();
        assert_eq!(
            lines,
            vec![
                (
                    "pingpong;pipe;ksys_read;pipe_read;schedule;--;[waker not seen]".to_string(),
                    vec![1, 10_000_000]
                ),
                (
                    "pingpong;pipe;ksys_read;pipe_read;schedule;--;try_to_wake_up;__wake_up_common;\
                     __wake_up_sync_key;pipe_write;ksys_write;writer[22]"
                        .to_string(),
                    vec![9, 90_000_000]
                ),
            ]
        );
        let total: u64 = lines.iter().map(|(_, values)| values[1]).sum();
        assert_eq!(
            total, profile.offcpu[0].total_ns,
            "the graph's total is the off-CPU total"
        );
    }
}
