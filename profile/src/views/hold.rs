//! `hold`: the holds under contention the lock family records by itself (how long each
//! contended acquirer held the lock while the next waiter waited). The timings of
//! `--hold` (every hold of one lock) are this view's section of the text report, and in
//! the JSON report.

use std::collections::BTreeMap;

use super::{lock::lock_stack_frames, AddSample, ReportHeadings, View, ViewInfo};
use crate::{
    export::{
        formats::{folded::clean, html::table, report::TextReport},
        operations::diff::{add, Breakdown, Measure},
    },
    lock::lock_type_name,
    profile::Profile,
};

/// `HoldView`'s constants (its `info`, by the `kinds!` table).
pub(super) const INFO: ViewInfo = ViewInfo {
    about: "Holds under contention by lock, holder process and acquisition stack (from \
         --lock: how long each contended acquirer held the lock while the next \
         waiter waited); --hold's own timings are in the report and JSON",
    families: &["lock"],
    sample_types: &[("holds", "count"), ("hold", "nanoseconds")],
    flame_title: "Holds under contention by lock, holder and acquisition stack (width: hold time while others waited, ms)",
    diff_flame_title: "Holds under contention, NEW against BASE (width: NEW hold time in ms per second of run; red grew, blue shrank)",
    diff_columns: ("held/s", "holds/s"),
    report: ReportHeadings {
        title: "Held while others waited",
        flame_heading: None,
        flame_title: "Holds under contention flamegraph",
    },
};

pub struct HoldView;

impl View for HoldView {
    fn has_rows(&self, profile: &Profile) -> bool {
        !profile.contended_holds.is_empty()
    }

    /// Lock type and lock; holder process; the holder's acquisition stack from the
    /// outermost frame to where it took the lock. Width: hold time under contention.
    fn samples(&self, profile: &Profile, add: &mut AddSample) {
        for row in &profile.contended_holds {
            let mut frames = vec![
                clean(&format!("{} {}", lock_type_name(row.flags), row.lock_name)),
                clean(&profile.process_name(row.pid)),
            ];
            frames.extend(lock_stack_frames(profile, row.stack));
            add(frames, &[row.latency.count, row.latency.total_ns]);
        }
    }

    /// Holders compared between two runs: who held which lock, taken where.
    fn breakdowns(&self, profile: &Profile, out: &mut Vec<Breakdown>) {
        let mut by_holder: BTreeMap<String, Measure> = BTreeMap::new();
        let mut by_lock: BTreeMap<String, Measure> = BTreeMap::new();
        for group in crate::export::tables::lock::contended_holders(profile) {
            for (entries, key) in [
                (
                    &mut by_holder,
                    format!("{} {} {}", group.lock_type, group.caller, group.process),
                ),
                (&mut by_lock, format!("{} {}", group.lock_type, group.lock)),
            ] {
                add(entries, key, group.total_ns, group.count);
            }
        }
        out.push(Breakdown::new("holder", by_holder));
        out.push(Breakdown::new("lock", by_lock));
    }

    /// The hold times of `--hold`'s lock, by holder (the holds under contention are in
    /// the lock section, beside the lock they were taken on).
    fn text_section(&self, profile: &Profile, text: &TextReport) -> String {
        let lock = profile
            .holds
            .first()
            .map(|row| row.lock_name.as_str())
            .unwrap_or("the --hold lock");
        text.section(
            text.shows(profile, &["hold"], !profile.holds.is_empty()),
            &format!("hold times of {lock}, by holder (acquisition to release, total time):\n"),
            || crate::export::tables::latency::hold_table(profile, text.top),
        )
    }

    /// The table of holds under contention, by holder.
    fn html_tables(&self, profile: &Profile, out: &mut String) {
        let rows: Vec<Vec<String>> = crate::export::tables::lock::contended_holders(profile)
            .into_iter()
            .take(50)
            .map(|group| {
                vec![
                    group.count.to_string(),
                    crate::units::format_ns(group.total_ns),
                    crate::units::format_ns(group.max_ns),
                    format!("{} {}", group.lock_type, group.lock),
                    format!("{}[{}/{}]", group.process, group.pid, group.tid),
                    group.caller,
                ]
            })
            .collect();
        out.push_str(&table(
            &["holds", "total", "max", "lock", "holder", "acquired in"],
            &[true, true, true, false, false, false],
            &rows,
        ));
    }
}
