//! `offwake`: off-CPU time by waiter and by the waker seen to end each wait (`--wakers`):
//! the waiter's stack, a `--` separator, then the waker's stack upside down with its
//! name on top (the layout of bcc's offwaketime; width: the waiter's time off CPU).

use std::collections::BTreeMap;

use super::{offcpu::waiter_frames, AddSample, ReportHeadings, View, ViewInfo};
use crate::{
    export::{
        formats::{
            folded::{clean, clean_frames},
            html::table,
            report::TextReport,
        },
        operations::diff::{add, Breakdown, Measure},
        tables::{
            offcpu::short_stack,
            wakers::{shares, wake_site, waker_name, INTERRUPT},
        },
    },
    profile::{OffcpuRow, Profile},
    units::format_ns,
};

/// `OffwakeView`'s constants (its `info`, by the `kinds!` table).
pub(super) const INFO: ViewInfo = ViewInfo {
    about: "Off-CPU time by waiter stack and waker (--wakers): the waiter's stack, a `--` \
         frame, then the waker's stack upside down with its thread on top",
    families: &["wakers"],
    sample_types: &[("waits", "count"), ("off_cpu", "nanoseconds")],
    flame_title: "Off-CPU time by waiter and waker: waiter stack, --, waker stack upside down (width: time off CPU, ms)",
    diff_flame_title: "Off-CPU time by waker, NEW against BASE (width: NEW time off CPU in ms per second of run; red grew, blue shrank)",
    diff_columns: ("off/s", "waits/s"),
    report: ReportHeadings {
        title: "Who woke the waits",
        flame_heading: Some(
            "Off-wake flamegraph (waiter stack, --, waker stack upside down; width: time off CPU)",
        ),
        flame_title: "off-wake flamegraph",
    },
};

pub struct OffwakeView;

impl View for OffwakeView {
    fn has_rows(&self, profile: &Profile) -> bool {
        profile.offcpu.iter().any(|row| !row.wakers.is_empty())
    }

    /// Waiter stack; `--`; the waker's stack upside down.
    fn samples(&self, profile: &Profile, add: &mut AddSample) {
        offwake_samples(profile, add);
    }

    /// Off-CPU time by who woke it: the waker's process and where it woke (names only).
    fn breakdowns(&self, profile: &Profile, out: &mut Vec<Breakdown>) {
        let mut wakers: BTreeMap<String, Measure> = BTreeMap::new();
        for row in &profile.offcpu {
            for share in crate::export::tables::wakers::shares(profile, [row]) {
                let site = crate::export::tables::wakers::wake_site(&share.frames);
                let key = format!(
                    "{} {} < {}",
                    row.class,
                    share.process,
                    site.first().cloned().unwrap_or_default()
                );
                add(&mut wakers, key, share.wait_ns, share.count);
            }
        }
        out.push(Breakdown::new("class and waker", wakers));
    }

    /// The wait chains (`--wakers`), which say themselves whether there are any.
    fn text_section(&self, profile: &Profile, text: &TextReport) -> String {
        crate::export::tables::chains::text(profile, text.top.min(10))
    }

    /// The table of the top wakers per waiting process and class.
    fn html_tables(&self, profile: &Profile, out: &mut String) {
        let mut groups: BTreeMap<(u32, String), Vec<&OffcpuRow>> = BTreeMap::new();
        for row in &profile.offcpu {
            groups
                .entry((row.pid, row.class.clone()))
                .or_default()
                .push(row);
        }
        let mut ordered: Vec<((u32, String), Vec<&OffcpuRow>, u64)> = groups
            .into_iter()
            .map(|(key, rows)| {
                let total = rows.iter().map(|row| row.total_ns).sum();
                (key, rows, total)
            })
            .collect();
        ordered.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
        let mut rows = Vec::new();
        for ((pid, class), group, total) in ordered.into_iter().take(50) {
            for (index, share) in shares(profile, group).into_iter().take(5).enumerate() {
                let first = index == 0;
                rows.push(vec![
                    if first {
                        profile.process_name(pid)
                    } else {
                        String::new()
                    },
                    if first { class.clone() } else { String::new() },
                    if first {
                        format_ns(total)
                    } else {
                        String::new()
                    },
                    if share.thread == INTERRUPT {
                        INTERRUPT.to_string()
                    } else {
                        format!("{}[{}] ({})", share.thread, share.tid, share.process)
                    },
                    format_ns(share.wait_ns),
                    format!("{:.1}", share.percent),
                    share.count.to_string(),
                    short_stack(&wake_site(&share.frames), 120),
                ]);
            }
        }
        if rows.is_empty() {
            out.push_str("<p>No waker recorded.</p>\n");
        } else {
            out.push_str(&table(
                &[
                    "waiter", "class", "off-CPU", "woken by", "time", "%", "wake-ups", "where",
                ],
                &[false, false, true, false, true, true, true, false],
                &rows,
            ));
        }
    }
}

/// The offwake stacks, root first: waiter process; wait class; the waiter's user and
/// kernel stacks from the outermost frame; `--`; the waker's kernel then user frames
/// from the leaf (the waker's stack hangs upside down); the waker `comm[tid]` on top.
/// Values: waits, time. The time of a row no waker was seen for is under
/// `--;[waker not seen]`, so the graph's total is the off-CPU total.
fn offwake_samples(profile: &Profile, add: &mut AddSample) {
    // A profile recorded without --wakers has no offwake view (not all "not seen").
    if !profile.recorded("wakers") && profile.offcpu.iter().all(|row| row.wakers.is_empty()) {
        return;
    }
    for row in &profile.offcpu {
        let mut waiter = waiter_frames(profile, row);
        waiter.push("--".into());
        let (mut seen_ns, mut seen_count) = (0u64, 0u64);
        for waker in &row.wakers {
            seen_ns = seen_ns.saturating_add(waker.wait_ns);
            seen_count = seen_count.saturating_add(waker.count);
            let mut frames = waiter.clone();
            if waker.stack.is_none() {
                frames.push("[stack lost]".into());
            }
            frames.extend(clean_frames(profile, waker.stack));
            frames.extend(clean_frames(profile, waker.ustack));
            frames.push(clean(&if waker.interrupt {
                INTERRUPT.to_string()
            } else {
                format!("{}[{}]", waker_name(profile, waker), waker.tid)
            }));
            add(frames, &[waker.count, waker.wait_ns]);
        }
        let unseen_ns = row.total_ns.saturating_sub(seen_ns);
        if unseen_ns > 0 {
            let mut frames = waiter;
            frames.push("[waker not seen]".into());
            add(frames, &[row.count.saturating_sub(seen_count), unseen_ns]);
        }
    }
}
