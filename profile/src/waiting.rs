//! Waits in progress (`Profile::waiting`): what was still waiting (or running a traced
//! function) when a profile was
//! drained, and whom it waited for. A lock wait names the lock's holder; the holder's
//! own wait in progress, if it has one, is the next link of the chain, and so on, three
//! links deep (the hung-client case: B waits on a directory's lock held by A, which
//! waits on a request to a server that does not answer).

use std::{collections::BTreeMap, fmt::Write as _};

use crate::{
    export::{tables::offcpu::is_scheduler_frame, tables::wakers::thread_name},
    lock::is_lock_internal,
    profile::{Profile, WaitingRow},
    units::format_ns,
};

/// Links followed from a waiting thread to the holder of what it waits on.
pub const CHAIN_DEPTH: usize = 3;

/// The kinds of wait in progress, in the order a thread's waits are preferred as the
/// link of a chain: what it waits on (a request, a lock, IO) says more than that it is
/// off the CPU.
const LINK_PREFERENCE: [&str; 5] = ["rpc", "lock", "io", "func", "offcpu"];

/// The waits that `of` picks (one thread's, or one process's), the most telling first
/// (see `LINK_PREFERENCE`), then the longest.
fn waits_of(profile: &Profile, of: impl Fn(&WaitingRow) -> bool) -> Vec<&WaitingRow> {
    let mut waits: Vec<&WaitingRow> = profile.waiting.iter().filter(|row| of(row)).collect();
    waits.sort_by_key(|row| std::cmp::Reverse(row.age_ns));
    waits.sort_by_key(|row| {
        LINK_PREFERENCE
            .iter()
            .position(|kind| *kind == row.kind)
            .unwrap_or(LINK_PREFERENCE.len())
    });
    waits
}

/// The chain of `row`: the holder's most telling wait in progress, then that wait's
/// holder's, up to `CHAIN_DEPTH` links; it stops at a holder that is not waiting (it
/// runs, or was not recorded) and never visits a thread twice.
pub fn chain<'a>(profile: &'a Profile, row: &'a WaitingRow) -> Vec<&'a WaitingRow> {
    let mut links = Vec::new();
    let mut seen = vec![row.tid];
    let mut current = row;
    while links.len() < CHAIN_DEPTH && current.kind != "rpc" {
        // The holder's thread where it is known, else its process (the lock programs
        // keep the process; a kernel that cannot be read leaves the thread unknown).
        let next = match (current.owner_tid, current.owner_pid) {
            (Some(tid), _) if tid != 0 => waits_of(profile, |row| row.tid == tid),
            (None, Some(pid)) if pid != 0 => waits_of(profile, |row| row.pid == pid),
            _ => break,
        };
        let Some(next) = next.into_iter().next() else {
            break;
        };
        if seen.contains(&next.tid) {
            break;
        }
        seen.push(next.tid);
        links.push(next);
        current = next;
    }
    links
}

/// One row per thread for the report: the thread's most telling wait (its other waits
/// in progress say the same thing from another family), longest first.
pub fn by_thread(profile: &Profile) -> Vec<&WaitingRow> {
    let mut best: BTreeMap<(u32, u32), &WaitingRow> = BTreeMap::new();
    for row in &profile.waiting {
        let rank = |row: &WaitingRow| {
            LINK_PREFERENCE
                .iter()
                .position(|kind| *kind == row.kind)
                .unwrap_or(LINK_PREFERENCE.len())
        };
        best.entry((row.pid, row.tid))
            .and_modify(|kept| {
                if rank(row) < rank(kept) {
                    *kept = row;
                }
            })
            .or_insert(row);
    }
    let mut rows: Vec<&WaitingRow> = best.into_values().collect();
    // The thread's longest wait in progress gives its age (an off-CPU wait can be
    // older than the lock or request that its stack shows).
    let age = |row: &WaitingRow| {
        profile
            .waiting
            .iter()
            .filter(|other| other.tid == row.tid && other.pid == row.pid)
            .map(|other| other.age_ns)
            .max()
            .unwrap_or(row.age_ns)
    };
    rows.sort_by(|a, b| age(b).cmp(&age(a)).then(a.tid.cmp(&b.tid)));
    rows
}

/// `lock-storm[123/124]`.
/// `pid 123` when the profile does not name the process.
pub fn who(profile: &Profile, pid: u32, tid: u32) -> String {
    let ids = if pid == tid || tid == 0 {
        format!("{pid}")
    } else {
        format!("{pid}/{tid}")
    };
    match profile.process(pid) {
        Some(_) => format!("{}[{ids}]", thread_name(profile, pid, tid.max(pid))),
        None => format!("pid {ids}"),
    }
}

/// What a wait is, in a few words: `rwsem:W mmap_lock`, `FUSE CREATE`, `D io`.
pub fn describe(row: &WaitingRow) -> String {
    let mut text = match row.kind.as_str() {
        "offcpu" => format!("{} {}", row.state, row.class),
        _ => row.class.clone(),
    };
    if !row.what.is_empty() {
        text.push(' ');
        text.push_str(&row.what);
    }
    text
}

/// The first frame of the wait's kernel stack that is neither the scheduler nor the
/// locking code: where the thread waits.
pub fn where_waits(profile: &Profile, row: &WaitingRow) -> String {
    let Some(stack) = row.stack.and_then(|id| profile.stacks.get(id as usize)) else {
        return String::new();
    };
    stack
        .frames
        .iter()
        .filter_map(|&id| profile.frames.get(id as usize))
        .find(|frame| !is_scheduler_frame(&frame.name) && !is_lock_internal(&frame.name))
        .map(|frame| frame.display())
        .unwrap_or_default()
}

/// A wait of the JSON report: the row, named, with where it waits and its chain.
#[derive(Debug, serde::Serialize)]
pub struct JsonWait {
    pub thread: String,
    #[serde(flatten)]
    pub row: WaitingRow,
    #[serde(rename = "where", skip_serializing_if = "String::is_empty")]
    pub where_: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<JsonLink>,
}

/// One link of a chain: the holder, and the wait it is in.
#[derive(Debug, serde::Serialize)]
pub struct JsonLink {
    pub thread: String,
    pub pid: u32,
    pub tid: u32,
    pub kind: String,
    pub on: String,
    pub age_ns: u64,
}

/// The JSON report's waits: as the text's section, `top` of them (0: all).
pub fn json(profile: &Profile, top: usize) -> Vec<JsonWait> {
    let rows = by_thread(profile);
    let shown = if top == 0 { rows.len() } else { top };
    rows.into_iter()
        .take(shown)
        .map(|row| JsonWait {
            thread: who(profile, row.pid, row.tid),
            row: row.clone(),
            where_: where_waits(profile, row),
            chain: chain(profile, row)
                .into_iter()
                .map(|link| JsonLink {
                    thread: who(profile, link.pid, link.tid),
                    pid: link.pid,
                    tid: link.tid,
                    kind: link.kind.clone(),
                    on: describe(link),
                    age_ns: link.age_ns,
                })
                .collect(),
        })
        .collect()
}

/// The report's first section, when anything was still waiting: longest first, with
/// each wait's chain.
pub fn text(profile: &Profile, top: usize) -> String {
    let rows = by_thread(profile);
    if rows.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "still waiting at the end ({} thread{}, longest first):\n",
        rows.len(),
        if rows.len() == 1 { "" } else { "s" }
    );
    let _ = writeln!(out, "{:>9}  {:<28} {:<30} where", "waiting", "thread", "on");
    let shown = if top == 0 { rows.len() } else { top };
    for row in rows.iter().take(shown) {
        let age = profile
            .waiting
            .iter()
            .filter(|other| other.tid == row.tid && other.pid == row.pid)
            .map(|other| other.age_ns)
            .max()
            .unwrap_or(row.age_ns);
        let _ = writeln!(
            out,
            "{:>9}{} {:<28} {:<30} {}",
            format_ns(age),
            if row.before_start { "+" } else { " " },
            who(profile, row.pid, row.tid),
            describe(row),
            where_waits(profile, row)
        );
        let mut holder: &WaitingRow = row;
        for link in chain(profile, row) {
            let _ = writeln!(
                out,
                "{:>11}held by {} waiting {} on {}  {}",
                "",
                who(profile, link.pid, link.tid),
                format_ns(link.age_ns),
                describe(link),
                where_waits(profile, link)
            );
            holder = link;
        }
        if let (Some(pid), true) = (holder.owner_pid, holder.kind == "rpc") {
            let _ = writeln!(
                out,
                "{:>11}served by {}",
                "",
                who(profile, pid, holder.owner_tid.unwrap_or(pid))
            );
        } else if let (Some(pid), Some(tid)) = (holder.owner_pid, holder.owner_tid) {
            if !profile.waiting.iter().any(|other| other.tid == tid) {
                let _ = writeln!(
                    out,
                    "{:>11}held by {} (not waiting: running or not recorded)",
                    "",
                    who(profile, pid, tid)
                );
            }
        }
    }
    if rows.len() > shown {
        let _ = writeln!(out, "({} more: --top 0 shows all)", rows.len() - shown);
    }
    if rows.iter().any(|row| row.before_start) {
        out.push_str("+ began before the recording (age from the scheduler's time stamp)\n");
    }
    out.push('\n');
    out
}

/// The age of the oldest wait in progress (0: none).
pub fn oldest(profile: &Profile) -> u64 {
    profile
        .waiting
        .iter()
        .map(|row| row.age_ns)
        .max()
        .unwrap_or(0)
}

/// `diff`'s line on what was still waiting at the end of each run (empty when nothing
/// was, in either).
pub fn diff_line(base: &Profile, new: &Profile) -> String {
    let (base_threads, new_threads) = (by_thread(base).len(), by_thread(new).len());
    if base_threads == 0 && new_threads == 0 {
        return String::new();
    }
    let side = |threads: usize, profile: &Profile| match threads {
        0 => "none".to_string(),
        _ => format!("{threads} (oldest {})", format_ns(oldest(profile))),
    };
    format!(
        "still waiting at the end: BASE {}, NEW {}\n",
        side(base_threads, base),
        side(new_threads, new)
    )
}

/// The HTML report's first section, when anything was still waiting: one row per
/// thread, its chain in the last column.
pub fn html_section(profile: &Profile) -> String {
    let rows: Vec<Vec<String>> = json(profile, 0)
        .into_iter()
        .map(|wait| {
            let chain: Vec<String> = wait
                .chain
                .iter()
                .map(|link| {
                    format!(
                        "{} ({} on {})",
                        link.thread,
                        format_ns(link.age_ns),
                        link.on
                    )
                })
                .collect();
            vec![
                format_ns(wait.row.age_ns),
                wait.thread,
                describe(&wait.row),
                wait.where_,
                if wait.row.before_start { "yes" } else { "" }.into(),
                chain.join(" → "),
            ]
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from("<section id=\"waiting\">\n<h2>Still waiting at the end</h2>\n");
    out.push_str(&crate::export::formats::html::table(
        &[
            "waiting",
            "thread",
            "on",
            "where",
            "before start",
            "held by",
        ],
        &[true],
        &rows,
    ));
    out.push_str("</section>\n");
    out
}

/// Merging profiles: the waits in progress of a host are those at the end of its
/// latest profile (a period's waits that ended later are in later periods' rows).
/// Given each input's (host, end time), whether its waits are kept.
pub fn latest_of_host(inputs: &[(&str, f64)]) -> Vec<bool> {
    inputs
        .iter()
        .enumerate()
        .map(|(index, (host, end_s))| {
            !inputs
                .iter()
                .enumerate()
                .any(|(other, (other_host, other_end))| {
                    other_host == host
                        && (other_end > end_s || (other_end == end_s && other > index))
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Frame, Stack};

    fn row(kind: &str, pid: u32, tid: u32, age_s: u64) -> WaitingRow {
        WaitingRow {
            kind: kind.into(),
            pid,
            tid,
            age_ns: age_s * 1_000_000_000,
            since_ns: 1_000,
            counted_ns: age_s * 1_000_000_000,
            class: kind.into(),
            ..Default::default()
        }
    }

    /// B waits on a directory lock held by A; A waits on a FUSE request served by D.
    fn hung_client() -> Profile {
        let mut profile = Profile::new();
        profile.frames = vec![
            Frame::kernel("schedule"),
            Frame::kernel("rwsem_down_write_slowpath"),
            Frame::kernel("open_last_lookups"),
        ];
        profile.stacks = vec![Stack {
            frames: vec![0, 1, 2],
            truncated: false,
        }];
        let mut b_lock = row("lock", 20, 21, 4);
        b_lock.class = "rwsem:W".into();
        b_lock.what = "i_rwsem".into();
        b_lock.owner_pid = Some(10);
        b_lock.owner_tid = Some(10);
        b_lock.stack = Some(0);
        let mut b_off = row("offcpu", 20, 21, 5);
        b_off.state = "D".into();
        let mut a_rpc = row("rpc", 10, 10, 7);
        a_rpc.class = "FUSE CREATE".into();
        a_rpc.owner_pid = Some(30);
        let a_off = row("offcpu", 10, 10, 7);
        profile.waiting = vec![b_off, b_lock, a_off, a_rpc];
        profile
    }

    #[test]
    fn a_lock_wait_chains_to_its_holder_s_request() {
        let profile = hung_client();
        let b = &profile.waiting[1];
        let links = chain(&profile, b);
        assert_eq!(links.len(), 1);
        assert_eq!(links[0].kind, "rpc");
        assert_eq!(links[0].tid, 10);
    }

    #[test]
    fn one_row_per_thread_longest_first() {
        let profile = hung_client();
        let rows = by_thread(&profile);
        assert_eq!(rows.len(), 2);
        // A (7 s) before B (5 s, its off-CPU wait being older than its lock wait).
        assert_eq!((rows[0].tid, rows[0].kind.as_str()), (10, "rpc"));
        assert_eq!((rows[1].tid, rows[1].kind.as_str()), (21, "lock"));
    }

    #[test]
    fn text_names_the_chain_and_the_server() {
        let text = text(&hung_client(), 10);
        assert!(
            text.starts_with("still waiting at the end (2 threads"),
            "{text}"
        );
        assert!(text.contains("rwsem:W i_rwsem"), "{text}");
        assert!(
            text.contains("held by pid 10 waiting 7.00 s on FUSE CREATE"),
            "{text}"
        );
        assert!(text.contains("served by pid 30"), "{text}");
        assert!(text.contains("open_last_lookups"), "{text}");
    }

    #[test]
    fn json_and_metrics_know_the_waits() {
        let profile = hung_client();
        let waits = json(&profile, 0);
        assert_eq!(waits.len(), 2);
        assert_eq!(waits[1].chain.len(), 1);
        assert_eq!(waits[1].chain[0].on, "FUSE CREATE");
        let metrics = crate::export::formats::prometheus::render(&profile);
        assert!(
            metrics.contains(r#"lockpath_waits_in_progress{kind="rpc",class="FUSE CREATE"} 1"#),
            "{metrics}"
        );
        assert!(
            metrics.contains(
                r#"lockpath_wait_in_progress_oldest_seconds{kind="lock",class="rwsem:W"} 4"#
            ),
            "{metrics}"
        );
    }

    #[test]
    fn html_and_diff_know_the_waits() {
        let profile = hung_client();
        let page = html_section(&profile);
        assert!(page.contains("Still waiting at the end"), "{page}");
        assert!(page.contains("FUSE CREATE"), "{page}");
        assert_eq!(
            diff_line(&Profile::new(), &profile),
            "still waiting at the end: BASE none, NEW 2 (oldest 7.00 s)\n"
        );
        assert_eq!(diff_line(&Profile::new(), &Profile::new()), "");
    }

    #[test]
    fn without_the_holder_s_thread_its_process_s_wait_is_the_link() {
        let mut profile = hung_client();
        profile.waiting[1].owner_tid = None;
        let b = profile.waiting[1].clone();
        let links = chain(&profile, &b);
        assert_eq!(links.len(), 1);
        assert_eq!((links[0].pid, links[0].kind.as_str()), (10, "rpc"));
    }

    #[test]
    fn a_chain_never_loops() {
        let mut profile = hung_client();
        // A waits on a lock held by B, B on one held by A.
        profile.waiting[3].kind = "lock".into();
        profile.waiting[3].owner_pid = Some(20);
        profile.waiting[3].owner_tid = Some(21);
        let b = profile.waiting[1].clone();
        assert_eq!(chain(&profile, &b).len(), 1);
    }

    #[test]
    fn merging_keeps_each_host_s_latest_waits() {
        let kept = latest_of_host(&[("a", 10.0), ("a", 5.0), ("b", 3.0), ("a", 10.0)]);
        assert_eq!(kept, vec![false, false, true, true]);
    }
}
