//! Wait chains (`record --wakers`): a wait whose waker was itself off the CPU during it,
//! followed up to three waits deep ("t2 waited 160 ms on rwsem:W, woken by t1, which
//! waited 158 ms of it in rpc, woken by the daemon thread, which waited 155 ms in
//! sleep"). Text, JSON and HTML views of `Profile::chains`.

use serde::Serialize;

use crate::export::{tables::offcpu::short_stack, tables::table::fit, tables::wakers::thread_name};
use crate::{
    profile::{ChainRow, Profile},
    units::format_ns,
};

/// One wait of a chain, named.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChainWait {
    pub process: String,
    pub pid: u32,
    pub tid: u32,
    pub thread: String,
    pub state: String,
    pub class: String,
    /// Kernel frames of the wait, leaf first.
    pub frames: Vec<String>,
    /// The waiter's time (first wait), or the part of this link's wait that overlapped
    /// the wait before it.
    pub wait_ns: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Chain {
    /// Waits of the waiter that had this chain.
    pub count: u64,
    /// The waiter first, then each waker that was itself waiting.
    pub waits: Vec<ChainWait>,
    /// Who woke the last wait of the chain (`[interrupt]` or `[not seen]` when no task).
    pub last_woken_by: String,
}

fn frames(profile: &Profile, stack: Option<u32>) -> Vec<String> {
    if stack.is_none() {
        return vec!["[stack lost]".into()];
    }
    profile
        .stack_frames(stack)
        .iter()
        .map(|frame| frame.display())
        .collect()
}

fn named(row: &ChainRow, profile: &Profile) -> Chain {
    let mut waits = vec![ChainWait {
        process: profile.process_name(row.pid),
        pid: row.pid,
        tid: row.tid,
        thread: thread_name(profile, row.pid, row.tid),
        state: row.state.clone(),
        class: row.class.clone(),
        frames: frames(profile, row.stack),
        wait_ns: row.wait_ns,
    }];
    for link in &row.links {
        waits.push(ChainWait {
            process: profile.process_name(link.pid),
            pid: link.pid,
            tid: link.tid,
            thread: thread_name(profile, link.pid, link.tid),
            state: link.state.clone(),
            class: link.class.clone(),
            frames: frames(profile, link.stack),
            wait_ns: link.wait_ns,
        });
    }
    Chain {
        count: row.count,
        waits,
        last_woken_by: if row.last_waker_tid == 0 {
            "[interrupt or not seen]".into()
        } else {
            format!(
                "{}[{}]",
                thread_name(profile, row.last_waker_pid, row.last_waker_tid),
                row.last_waker_tid
            )
        },
    }
}

/// Every chain, named, most time explained first (the first link's overlap with the
/// waiter's wait).
pub fn chains(profile: &Profile) -> Vec<Chain> {
    let mut out: Vec<Chain> = profile
        .chains
        .iter()
        .map(|row| named(row, profile))
        .collect();
    out.sort_by(|a, b| {
        explained(b)
            .cmp(&explained(a))
            .then(b.waits[0].wait_ns.cmp(&a.waits[0].wait_ns))
    });
    out
}

fn explained(chain: &Chain) -> u64 {
    chain.waits.get(1).map_or(0, |link| link.wait_ns)
}

/// Chains worth a line: the first link was off the CPU for at least a tenth of the
/// waiter's wait (shorter overlaps are a waker that blocked briefly; JSON keeps them).
fn significant(chain: &Chain) -> bool {
    explained(chain).saturating_mul(10) >= chain.waits[0].wait_ns
}

/// The text section: the top chains, one line per wait, within 100 columns.
pub fn text(profile: &Profile, top: usize) -> String {
    if profile.chains.is_empty() {
        return String::new();
    }
    let all: Vec<Chain> = chains(profile).into_iter().filter(significant).collect();
    if all.is_empty() {
        return String::new();
    }
    let shown = crate::export::tables::table::shown_rows(top, all.len());
    let mut out = String::from(
        "\nwait chains (the waker was itself off the CPU during the wait; times summed):\n",
    );
    for chain in &all[..shown] {
        for (index, wait) in chain.waits.iter().enumerate() {
            let who = fit(&format!("{}[{}]", wait.thread, wait.tid), 22);
            let head = if index == 0 {
                format!(
                    "  {who} waited {:>9} in {} ({} waits): ",
                    format_ns(wait.wait_ns),
                    fit(&wait.class, 10),
                    chain.count
                )
            } else {
                format!(
                    "    <- woken by {who}, off-CPU {:>9} of it in {}: ",
                    format_ns(wait.wait_ns),
                    fit(&wait.class, 10)
                )
            };
            let width = 100usize.saturating_sub(head.chars().count()).max(10);
            out.push_str(&head);
            out.push_str(&short_stack(&wait.frames, width));
            out.push('\n');
        }
        out.push_str(&format!(
            "    <- woken by {}\n",
            fit(&chain.last_woken_by, 80)
        ));
    }
    out.push_str(&crate::export::tables::table::more_of(
        shown,
        all.len(),
        "chains",
    ));
    out
}

/// The HTML section: a table of the top chains.
pub fn html_section(profile: &Profile) -> String {
    use crate::export::{formats::escape::html as esc, formats::html};
    if profile.chains.is_empty() {
        return String::new();
    }
    let mut rows = Vec::new();
    for chain in chains(profile).into_iter().filter(significant).take(50) {
        for (index, wait) in chain.waits.iter().enumerate() {
            rows.push(vec![
                if index == 0 {
                    chain.count.to_string()
                } else {
                    String::new()
                },
                if index == 0 {
                    "waited".to_string()
                } else {
                    "woken by, itself waiting".to_string()
                },
                format!("{}[{}] ({})", wait.thread, wait.tid, wait.process),
                format_ns(wait.wait_ns),
                wait.class.clone(),
                short_stack(&wait.frames, 120),
            ]);
        }
        rows.push(vec![
            String::new(),
            "woken by".into(),
            chain.last_woken_by.clone(),
            String::new(),
            String::new(),
            String::new(),
        ]);
    }
    format!(
        "<section id=\"chains\">\n<h2>{}</h2>\n{}</section>\n",
        esc("Wait chains (the waker was itself off the CPU)"),
        html::table(
            &["waits", "link", "thread", "time", "class", "where"],
            &[true, false, false, true, false, false],
            &rows,
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        fixtures::{kernel, set_stacks},
        profile::ChainLinkRow,
    };

    #[test]
    fn a_chain_reads_waiter_first_then_each_waker() {
        let mut profile = crate::export::tables::wakers::tests::profile_with_wakers();
        let [rwsem, fuse] = set_stacks(
            &mut profile,
            [
                (kernel(&["schedule", "rwsem_down_write_slowpath"]), false),
                (kernel(&["schedule", "request_wait_answer"]), false),
            ],
        );
        profile.offcpu.clear();
        profile.chains = vec![ChainRow {
            pid: 20,
            tid: 21,
            state: "D".into(),
            class: "lock".into(),
            stack: Some(rwsem),
            count: 1,
            wait_ns: 160_000_000,
            links: vec![ChainLinkRow {
                pid: 20,
                tid: 22,
                state: "S".into(),
                class: "rpc".into(),
                stack: Some(fuse),
                wait_ns: 158_000_000,
            }],
            last_waker_pid: 0,
            last_waker_tid: 0,
        }];
        crate::export::tables::table::assert_table_shows(
            &text(&profile, 10),
            &[
                "reader[21]",
                "waited    160 ms",
                "<- woken by writer[22]",
                "158 ms of it in rpc",
                "request_wait_answer",
            ],
        );
        let html = html_section(&profile);
        assert!(html.contains("id=\"chains\""), "{html}");
    }
}
