//! Wait classes: why a thread was off the CPU, decided from the frames of its kernel
//! stack. The rules are data (`BUILTIN_RULES`, documented in docs/wait-classes.md):
//! ordered, first match wins; a rule matches when any frame's function name matches
//! its pattern. User rules (`--wait-class NAME=PATTERN`) come before the built-in ones.
//! Order matters: a buffer read waits in `io_schedule` too, so the specific classes
//! (rpc, buffer, page, journal) are tried before the generic block-io ones.

use anyhow::{bail, Result};

use crate::{filter::wildcard_contains, profile::Frame};

pub const BUFFER: &str = "buffer";
pub const PAGE: &str = "page";
pub const BLOCK_IO: &str = "block-io";
pub const JOURNAL: &str = "journal";
pub const LOCK: &str = "lock";
pub const RPC: &str = "rpc";
pub const SLEEP: &str = "sleep";
pub const LOCK_MANAGER: &str = "lock-manager";
pub const RECLAIM: &str = "reclaim";
pub const WRITEBACK_THROTTLE: &str = "writeback-throttle";
pub const CGROUP_THROTTLE: &str = "cgroup-throttle";
pub const FUTEX: &str = "futex";
pub const FILE_LOCK: &str = "file-lock";
pub const CHILD: &str = "child";
pub const PIPE: &str = "pipe";
pub const SOCKET: &str = "socket";
pub const POLL: &str = "poll";
pub const OTHER: &str = "other";

/// Classes whose waits are IO waits (`flamegraph --kind io`).
pub const IO_CLASSES: [&str; 4] = [BUFFER, PAGE, BLOCK_IO, JOURNAL];

/// The built-in rules, in the order they are tried: (class, frame pattern).
/// Patterns: `*` matches any run of characters; otherwise the whole name must match.
pub const BUILTIN_RULES: &[(&str, &str)] = &[
    // Remote lock managers (their waits are RPCs too: tried first).
    (LOCK_MANAGER, "dlm_posix_*"),
    (LOCK_MANAGER, "dlm_lock*"),
    (LOCK_MANAGER, "gdlm_*"),
    (LOCK_MANAGER, "nlmclnt_*"),
    (LOCK_MANAGER, "nfs4_*lock*"),
    (LOCK_MANAGER, "ldlm_*"),
    // Memory pressure: direct reclaim and compaction, whatever they wait for below.
    (RECLAIM, "__alloc_pages_direct_reclaim"),
    (RECLAIM, "__perform_reclaim"),
    (RECLAIM, "try_to_free_pages"),
    (RECLAIM, "do_try_to_free_pages"),
    (RECLAIM, "try_to_free_mem_cgroup_pages"),
    (RECLAIM, "throttle_direct_reclaim"),
    (RECLAIM, "reclaim_throttle"),
    (RECLAIM, "__alloc_pages_direct_compact"),
    (RECLAIM, "try_to_compact_pages"),
    // Dirty-page throttling of writers (vm.dirty_ratio / dirty_bytes), block-layer
    // writeback throttling.
    (WRITEBACK_THROTTLE, "balance_dirty_pages*"),
    (WRITEBACK_THROTTLE, "wbt_wait"),
    // Cgroup limits: memory.high penalties, blkcg IO latency and cost throttling.
    (CGROUP_THROTTLE, "*mem_cgroup_handle_over_high"),
    (CGROUP_THROTTLE, "blkcg_maybe_throttle_current"),
    (CGROUP_THROTTLE, "blkcg_iolatency_throttle"),
    (CGROUP_THROTTLE, "ioc_rqos_throttle"),
    // Waiting for a reply from a server.
    (RPC, "request_wait_answer"),
    (RPC, "fuse_simple_request"),
    (RPC, "rpc_wait_bit_killable"),
    (RPC, "__rpc_execute"),
    (RPC, "rpc_execute"),
    (RPC, "ptlrpc_set_wait"),
    (RPC, "ptlrpc_queue_wait"),
    (RPC, "l_wait_event*"),
    // Buffer heads: metadata blocks read or written through the buffer cache.
    (BUFFER, "__wait_on_buffer"),
    (BUFFER, "sleep_on_buffer"),
    (BUFFER, "__lock_buffer"),
    (BUFFER, "__sync_dirty_buffer"),
    (BUFFER, "sync_dirty_buffer"),
    (BUFFER, "__bread_gfp"),
    (BUFFER, "*_bread"),
    (BUFFER, "*_bread_*"),
    (BUFFER, "*_read_bh"),
    (BUFFER, "*_read_bh_*"),
    (BUFFER, "bh_read*"),
    (BUFFER, "bh_submit_read"),
    (BUFFER, "ll_rw_block"),
    // Page cache: waiting for a page (folio) to be read, unlocked or written back.
    (PAGE, "folio_wait_bit*"),
    (PAGE, "folio_wait_writeback"),
    (PAGE, "folio_wait_stable"),
    (PAGE, "wait_on_page_bit*"),
    (PAGE, "__folio_lock*"),
    (PAGE, "__lock_page*"),
    // The file-system journal.
    (JOURNAL, "jbd2_*"),
    (JOURNAL, "wait_transaction_*"),
    (JOURNAL, "start_this_handle"),
    // Bit waits with the buffer wrapper tail-called away (`__wait_on_buffer` and
    // `__lock_buffer` jump to these, so they are not on the stack): buffer-head locks.
    (BUFFER, "out_of_line_wait_on_bit"),
    (BUFFER, "out_of_line_wait_on_bit_lock"),
    // Block IO the task waits for directly.
    (BLOCK_IO, "submit_bio_wait"),
    (BLOCK_IO, "blk_*"),
    (BLOCK_IO, "__blkdev_*"),
    (BLOCK_IO, "blkdev_*"),
    (BLOCK_IO, "bio_*"),
    (BLOCK_IO, "wait_for_completion_io*"),
    (BLOCK_IO, "wb_wait_for_completion"),
    (BLOCK_IO, "io_schedule*"),
    // Sleeping locks of the kernel.
    (LOCK, "__mutex_lock*"),
    (LOCK, "mutex_lock*"),
    (LOCK, "rwsem_down_*"),
    (LOCK, "__down*"),
    (LOCK, "down_*"),
    (LOCK, "percpu_rwsem_wait"),
    (LOCK, "__percpu_down_*"),
    (LOCK, "rt_mutex_*"),
    (LOCK, "__rt_mutex_*"),
    // User-space locks and condition variables.
    (FUTEX, "futex_wait*"),
    (FUTEX, "__futex_wait*"),
    (FUTEX, "futex_lock_pi*"),
    (FUTEX, "*sys_futex*"),
    // File locks: POSIX (fcntl), OFD, flock, leases. After `lock`: a kernel lock taken
    // inside the file-lock code (file_rwsem) is a lock wait.
    (FILE_LOCK, "fcntl_setlk*"),
    (FILE_LOCK, "do_lock_file_wait"),
    (FILE_LOCK, "posix_lock_inode_wait"),
    (FILE_LOCK, "locks_lock_inode_wait"),
    (FILE_LOCK, "locks_lock_file_wait"),
    (FILE_LOCK, "flock_lock_inode_wait"),
    (FILE_LOCK, "*sys_flock"),
    (FILE_LOCK, "__break_lease"),
    // A parent waiting for its children.
    (CHILD, "do_wait"),
    (CHILD, "kernel_wait4"),
    (CHILD, "kernel_waitid"),
    (CHILD, "*sys_wait4"),
    (CHILD, "*sys_waitid"),
    (CHILD, "*sys_waitpid"),
    // vfork (posix_spawn): the parent waits until the child execs or exits.
    (CHILD, "wait_for_vfork_done"),
    (CHILD, "kernel_clone"),
    // Pipes and FIFOs.
    (PIPE, "*pipe_read"),
    (PIPE, "*pipe_write"),
    (PIPE, "pipe_wait*"),
    (PIPE, "wait_for_partner"),
    // Sockets: receive, send buffer space, accept, connect.
    (SOCKET, "sk_wait_*"),
    (SOCKET, "sk_stream_wait_*"),
    (SOCKET, "__skb_wait_for_more_packets"),
    (SOCKET, "__skb_recv_datagram"),
    (SOCKET, "inet_csk_accept"),
    (SOCKET, "inet_csk_wait_for_connect"),
    (SOCKET, "inet_wait_for_connect"),
    (SOCKET, "unix_stream_data_wait"),
    (SOCKET, "unix_stream_read_generic"),
    (SOCKET, "unix_wait_for_peer"),
    (SOCKET, "unix_dgram_recvmsg"),
    (SOCKET, "sock_alloc_send_pskb"),
    (SOCKET, "tcp_recvmsg*"),
    (SOCKET, "*sys_recvfrom"),
    (SOCKET, "*sys_recvmsg"),
    (SOCKET, "*sys_recvmmsg"),
    (SOCKET, "*sys_sendto"),
    (SOCKET, "*sys_sendmsg"),
    (SOCKET, "*sys_accept*"),
    (SOCKET, "*sys_connect"),
    // Waiting for any of several descriptors.
    (POLL, "do_sys_poll"),
    (POLL, "do_poll*"),
    (POLL, "do_select"),
    (POLL, "core_sys_select"),
    (POLL, "ep_poll"),
    (POLL, "do_epoll_wait"),
    (POLL, "*sys_poll"),
    (POLL, "*sys_ppoll*"),
    (POLL, "*sys_select"),
    (POLL, "*sys_pselect6*"),
    (POLL, "*sys_epoll_*wait*"),
    // Sleeping on purpose.
    (SLEEP, "do_nanosleep"),
    (SLEEP, "hrtimer_nanosleep"),
    (SLEEP, "*sys_nanosleep"),
    (SLEEP, "*sys_clock_nanosleep"),
    (SLEEP, "msleep*"),
    (SLEEP, "usleep_range*"),
    (SLEEP, "*sys_pause"),
];

/// One rule: frames whose name matches `pattern` put the wait in `class`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub class: String,
    pub pattern: String,
}

/// The ordered rule set of one recording.
#[derive(Debug, Clone)]
pub struct Classifier {
    rules: Vec<Rule>,
}

impl Default for Classifier {
    fn default() -> Self {
        Classifier::new(Vec::new())
    }
}

impl Classifier {
    /// User rules first (they win), then the built-in ones.
    pub fn new(user_rules: Vec<Rule>) -> Self {
        let mut rules = user_rules;
        rules.extend(BUILTIN_RULES.iter().map(|(class, pattern)| Rule {
            class: class.to_string(),
            pattern: pattern.to_string(),
        }));
        Classifier { rules }
    }

    /// The class of a wait with these kernel frames; `other` when no rule matches.
    pub fn classify(&self, frames: &[&Frame]) -> String {
        self.rules
            .iter()
            .find(|rule| {
                frames
                    .iter()
                    .any(|frame| glob_match(&rule.pattern, &frame.name))
            })
            .map(|rule| rule.class.clone())
            .unwrap_or_else(|| OTHER.to_string())
    }
}

/// Parses `--wait-class NAME=PATTERN`.
pub fn parse_rule(text: &str) -> Result<Rule, String> {
    let Some((class, pattern)) = text.split_once('=') else {
        return Err(format!(
            "{text:?} is not NAME=FRAME_PATTERN (e.g. --wait-class 'journal=ldiskfs_*')"
        ));
    };
    let (class, pattern) = (class.trim(), pattern.trim());
    if class.is_empty() || pattern.is_empty() {
        return Err(format!(
            "{text:?}: both the class name and the frame pattern must be non-empty"
        ));
    }
    if class.contains([';', ' ']) {
        return Err(format!("{text:?}: a class name has no spaces or ';'"));
    }
    Ok(Rule {
        class: class.to_string(),
        pattern: pattern.to_string(),
    })
}

/// Checks rules given to `record` (clap already parsed them) before recording starts.
pub fn validate(rules: &[Rule]) -> Result<()> {
    for rule in rules {
        if rule.pattern.chars().all(|c| c == '*') {
            bail!(
                "--wait-class {}={}: a pattern of only '*' matches every wait; name a frame",
                rule.class,
                rule.pattern
            );
        }
    }
    Ok(())
}

/// `*` matches any run of characters (also empty); everything else literally; the whole
/// name must match.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let Some((first, rest)) = pattern.split_once('*') else {
        return pattern == name;
    };
    // `first*inner*last`: the name starts with `first` and ends with `last` (the two not
    // overlapping), and what is between them contains `inner`.
    let (inner, last) = rest.rsplit_once('*').unwrap_or(("", rest));
    name.len() >= first.len() + last.len()
        && name.starts_with(first)
        && name.ends_with(last)
        && wildcard_contains(&name[first.len()..name.len() - last.len()], inner)
}

/// Where an interrupt entered in a kernel stack (leaf first): the index of its entry
/// frame. Frames after it (toward the root) belong to whatever the interrupt
/// interrupted, not to the waker.
pub fn interrupt_entry(frames: &[Frame]) -> Option<usize> {
    frames.iter().position(|frame| {
        let name = frame.name.as_str();
        name.starts_with("asm_sysvec_")
            || name.starts_with("asm_common_interrupt")
            || name == "common_interrupt"
            || name == "ret_from_intr"
            || name == "apic_timer_interrupt"
            || name == "do_IRQ"
            || name == "call_on_irq_stack"
            || name == "el1_interrupt"
            || name == "el0_interrupt"
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class_of(classifier: &Classifier, names: &[&str]) -> String {
        let owned = crate::fixtures::kernel(names);
        let refs: Vec<&Frame> = owned.iter().collect();
        classifier.classify(&refs)
    }

    #[test]
    fn globs_and_wildcards() {
        // (pattern, names it matches whole (`glob_match`), names it is only found in
        // (`wildcard_contains`), names it matches neither way)
        type Names = &'static [&'static str];
        let cases: &[(&str, Names, Names, Names)] = &[
            ("ext4_*_write", &[], &["ext4_file_write_iter"], &[]),
            ("pipe", &[], &["pipe_write"], &[]),
            ("pipe_*write", &[], &[], &["pipe_read"]),
            ("*", &["x"], &[], &[]),
            ("jbd2_*", &["jbd2_log_wait_commit"], &[], &[]),
            ("*_bread", &["ext4_bread"], &["ext4_bread_batch"], &[]),
            ("*_bread_*", &["ext4_bread_batch"], &[], &[]),
            ("a*b*c", &["axxbyyc"], &[], &["axxcyyb"]),
            ("exact", &["exact"], &["exactly"], &[]),
            // The prefix and suffix of a glob may not overlap.
            ("ab*ba", &[], &[], &["aba"]),
        ];
        for &(pattern, whole, found_in, neither) in cases {
            let outcomes = [
                (whole, true, true),
                (found_in, false, true),
                (neither, false, false),
            ];
            for (names, matches, contained) in outcomes {
                for name in names {
                    assert_eq!(glob_match(pattern, name), matches, "{pattern} is {name}");
                    assert_eq!(
                        wildcard_contains(name, pattern),
                        contained,
                        "{pattern} in {name}"
                    );
                }
            }
        }
    }

    #[test]
    fn builtin_classes_from_real_stacks() {
        let c = Classifier::default();
        let cases: &[(&str, &[&str])] = &[
            (
                BUFFER,
                &[
                    "__schedule",
                    "schedule",
                    "io_schedule",
                    "bit_wait_io",
                    "__wait_on_bit",
                    "out_of_line_wait_on_bit",
                    "ext4_read_bh",
                    "ext4_bread",
                    "__ext4_find_entry",
                ],
            ),
            // `__wait_on_buffer` tail-calls the bit wait: only the caller names the buffer.
            (
                BUFFER,
                &[
                    "schedule",
                    "io_schedule",
                    "bit_wait_io",
                    "__wait_on_bit",
                    "out_of_line_wait_on_bit",
                    "__ext4_get_inode_loc",
                ],
            ),
            (
                PAGE,
                &[
                    "schedule",
                    "io_schedule",
                    "folio_wait_bit_common",
                    "filemap_read",
                ],
            ),
            (
                JOURNAL,
                &["schedule", "jbd2_log_wait_commit", "ext4_sync_file"],
            ),
            (
                BLOCK_IO,
                &[
                    "schedule",
                    "io_schedule",
                    "submit_bio_wait",
                    "blkdev_issue_flush",
                ],
            ),
            (
                LOCK,
                &[
                    "schedule",
                    "schedule_preempt_disabled",
                    "__mutex_lock.constprop.0",
                ],
            ),
            (
                RPC,
                &["schedule", "request_wait_answer", "fuse_simple_request"],
            ),
            (
                SLEEP,
                &[
                    "schedule",
                    "do_nanosleep",
                    "hrtimer_nanosleep",
                    "__x64_sys_clock_nanosleep",
                ],
            ),
            (PIPE, &["schedule", "pipe_read"]),
            (OTHER, &["schedule", "rcu_gp_kthread", "kthread"]),
            (OTHER, &[]),
            (
                FILE_LOCK,
                &[
                    "__schedule",
                    "schedule",
                    "posix_lock_inode_wait",
                    "do_lock_file_wait",
                    "fcntl_setlk",
                    "do_fcntl",
                    "__x64_sys_fcntl",
                ],
            ),
            (
                FILE_LOCK,
                &[
                    "schedule",
                    "locks_lock_inode_wait",
                    "__do_sys_flock",
                    "__x64_sys_flock",
                ],
            ),
            (
                LOCK,
                &[
                    "schedule",
                    "percpu_rwsem_wait",
                    "__percpu_down_read",
                    "flock_lock_inode",
                    "locks_lock_inode_wait",
                ],
            ),
            (
                LOCK_MANAGER,
                &[
                    "schedule",
                    "rpc_wait_bit_killable",
                    "__rpc_execute",
                    "nlmclnt_call",
                ],
            ),
            (
                CHILD,
                &["schedule", "do_wait", "kernel_wait4", "__do_sys_wait4"],
            ),
            (
                PIPE,
                &["schedule", "anon_pipe_read", "vfs_read", "ksys_read"],
            ),
            (
                CHILD,
                &[
                    "__wait_for_common",
                    "wait_for_completion_state",
                    "kernel_clone",
                    "__do_sys_clone3",
                ],
            ),
            (
                SOCKET,
                &["schedule", "schedule_timeout", "unix_stream_read_generic"],
            ),
            (
                SOCKET,
                &["schedule_timeout", "sk_wait_data", "tcp_recvmsg_locked"],
            ),
            (
                POLL,
                &["schedule_hrtimeout_range", "do_sys_poll", "__x64_sys_poll"],
            ),
            (
                POLL,
                &["schedule_hrtimeout_range", "ep_poll", "do_epoll_wait"],
            ),
            (
                FUTEX,
                &["schedule", "futex_wait_queue", "__futex_wait", "futex_wait"],
            ),
            (
                RECLAIM,
                &[
                    "io_schedule",
                    "folio_wait_bit_common",
                    "shrink_folio_list",
                    "try_to_free_pages",
                    "__alloc_pages_slowpath",
                ],
            ),
            (
                WRITEBACK_THROTTLE,
                &[
                    "io_schedule_timeout",
                    "balance_dirty_pages",
                    "balance_dirty_pages_ratelimited_flags",
                    "generic_perform_write",
                ],
            ),
            (
                CGROUP_THROTTLE,
                &[
                    "schedule_timeout_killable",
                    "__mem_cgroup_handle_over_high",
                    "irqentry_exit_to_user_mode",
                ],
            ),
        ];
        for (class, stack) in cases {
            assert_eq!(class_of(&c, stack), *class, "{stack:?}");
        }
        // A futex is not a kernel lock any more.
        assert_ne!(class_of(&c, &["futex_wait_queue"]), LOCK);
    }

    #[test]
    fn documented_rules_match_the_table() {
        let doc = include_str!("../../docs/wait-classes.md");
        let rows: Vec<(String, String)> = doc
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let number_cell = cells.get(1)?;
                number_cell.parse::<usize>().ok()?;
                Some((
                    cells[2].trim_matches('`').into(),
                    cells[3].trim_matches('`').into(),
                ))
            })
            .collect();
        let table: Vec<(String, String)> = BUILTIN_RULES
            .iter()
            .map(|(class, pattern)| (class.to_string(), pattern.to_string()))
            .collect();
        assert_eq!(
            rows, table,
            "docs/wait-classes.md and BUILTIN_RULES disagree"
        );
    }

    #[test]
    fn user_rules_win_and_parse() {
        let rule = parse_rule("ldiskfs=ldiskfs_*").expect("rule");
        let c = Classifier::new(vec![rule]);
        let stack = ["io_schedule", "__wait_on_buffer", "ldiskfs_bread"];
        assert_eq!(class_of(&c, &stack), "ldiskfs");
        assert!(parse_rule("nopattern")
            .unwrap_err()
            .contains("NAME=FRAME_PATTERN"));
        assert!(parse_rule("=x").is_err());
        assert!(parse_rule("x=").is_err());
        assert!(validate(&[parse_rule("all=**").expect("parses")]).is_err());
    }
}
