//! Lock classes: locks whose instances mean nothing apart, grouped under one name. A
//! hashed bit-wait queue (`static@finish_wait:0x...`), a wait queue or completion on a
//! kernel stack, a futex hash bucket or a `kmalloc` object taken in one function is one
//! of many interchangeable instances; what a reader acts on is the class:
//! `bit_wait_table`, `on-stack completion in submit_bio_wait`, `futex hash bucket`,
//! `&kmalloc-2k in __jbd2_log_wait_for_space`. Every other lock is its own class (its
//! name). The class is derived from the row's name, name source, address and stack, so
//! profiles of every version have classes.

use std::collections::HashMap;

use profiler_common::lock::{LCB_F_SPIN, OUTCOME_SHIFT};

use crate::{
    lock::is_lock_internal,
    profile::{Frame, LockRow},
};

/// The `lock_name_source` of a group of a class's instances.
pub const SOURCE_CLASS: &str = "class";

/// Whether a row's name may be one instance of a class (an address, a static or slab
/// lock named after its caller, a generic cache): only those rows' stacks are looked at.
pub fn may_have_class(row: &LockRow) -> bool {
    let name = row.lock_name.as_str();
    matches!(
        row.lock_name_source.as_str(),
        "address" | "caller" | "slab" | ""
    ) && (name.starts_with("0x")
        || name.starts_with("static@")
        || name.starts_with("slab@")
        || is_generic_cache(name))
}

/// What a stack says about the lock its waiter wanted, beyond the lock's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StackClass {
    /// Nothing: the lock is its own class.
    None,
    /// A wait on a bit or variable: the wait queue is one of `bit_wait_table`'s.
    BitWait,
    /// A wait on a folio (page) bit: one of `folio_wait_table`'s queues.
    FolioWait,
    /// The lock of a wait queue head, taken by the wait queue code for `user`.
    WaitQueue { user: String },
    /// The lock of a completion (or simple wait queue), for `user`.
    Completion { user: String },
    /// A futex hash bucket's lock.
    Futex,
    /// Some other lock taken in `caller` (the first frame outside the locking code).
    Caller { caller: String },
}

/// Wait-queue and completion code between the lock and the function that waits or
/// wakes.
fn is_wait_machinery(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "finish_wait",
        "prepare_to_wait",
        "__prepare_to_wait",
        "add_wait_queue",
        "remove_wait_queue",
        "__wake_up",
        "wake_up_",
        "autoremove_wake_function",
        "default_wake_function",
        "init_wait_entry",
        "complete",
        "wait_for_completion",
        "__wait_for_common",
        "do_wait_for_common",
        "wait_for_common",
        "try_wait_for_completion",
        "completion_done",
        "swake_up",
        "prepare_to_swait",
        "finish_swait",
        "__finish_swait",
        "__prepare_to_swait",
        "schedule",
        "io_schedule",
    ];
    starts_with_any(name, PREFIXES)
}

fn is_completion(name: &str) -> bool {
    name.starts_with("complete")
        || name.starts_with("wait_for_completion")
        || name.starts_with("try_wait_for_completion")
        || name.contains("wait_for_common")
        || name.contains("swait")
        || name.starts_with("swake_up")
}

/// Waits and wake-ups on a bit or a variable: their queues are `bit_wait_table`'s.
fn is_bit_wait(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "__wait_on_bit",
        "out_of_line_wait_on_bit",
        "wait_on_bit",
        "__wake_up_bit",
        "wake_up_bit",
        "wake_bit_function",
        "bit_wait",
        "__var_waitqueue",
        "bit_waitqueue",
        "init_wait_var_entry",
        "wake_up_var",
        "var_wake_function",
        "__wait_var_event",
    ];
    starts_with_any(name, PREFIXES)
}

/// Waits and wake-ups on a folio's bits: their queues are `folio_wait_table`'s.
fn is_folio_wait(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "folio_wait_bit",
        "folio_wake_bit",
        "wake_page_function",
        "wake_up_page_bit",
        "wait_on_page_bit",
    ];
    starts_with_any(name, PREFIXES)
}

fn starts_with_any(name: &str, prefixes: &[&str]) -> bool {
    prefixes.iter().any(|prefix| name.starts_with(prefix))
}

/// What the stack (leaf first) of a lock row says about its lock.
pub fn stack_class(frames: &[&Frame]) -> StackClass {
    let mut outside = frames
        .iter()
        .copied()
        .skip_while(|frame| is_lock_internal(&frame.name))
        .peekable();
    let Some(caller) = outside.peek().copied() else {
        return StackClass::None;
    };
    if caller.name.starts_with("futex_") || caller.name.starts_with("__futex_") {
        return StackClass::Futex;
    }
    if !is_wait_machinery(&caller.name) && !is_bit_wait(&caller.name) {
        if is_folio_wait(&caller.name) {
            return StackClass::FolioWait;
        }
        return StackClass::Caller {
            caller: caller.display(),
        };
    }
    let mut completion = false;
    for frame in outside {
        let name = frame.name.as_str();
        if is_bit_wait(name) {
            return StackClass::BitWait;
        }
        if is_folio_wait(name) {
            return StackClass::FolioWait;
        }
        if is_wait_machinery(name) {
            completion |= is_completion(name);
            continue;
        }
        let user = frame.display();
        return match completion {
            true => StackClass::Completion { user },
            false => StackClass::WaitQueue { user },
        };
    }
    StackClass::None
}

/// Whether `addr` lies where x86-64 maps kernel stacks (the vmalloc area, 4- and
/// 5-level paging).
fn in_vmalloc_area(addr: u64) -> bool {
    (0xffff_c900_0000_0000..0xffff_e900_0000_0000).contains(&addr)
        || (0xffa0_0000_0000_0000..0xffd2_0000_0000_0000).contains(&addr)
}

/// The function a stack's class names as the taker of a lock in a generic cache object:
/// the wait queue's or completion's user, or the caller.
pub fn taker(stack: &StackClass) -> Option<&str> {
    match stack {
        StackClass::WaitQueue { user } | StackClass::Completion { user } => Some(user),
        StackClass::Caller { caller } => Some(caller),
        _ => None,
    }
}

/// The main taker of each lock (by address) in a generic cache object: of the functions
/// that take it (`taker`), the one with the most wait. One lock is one class, whichever
/// function a row of it was taken in (`&kmalloc-2k in start_this_handle` holds the
/// lock's rows of `jbd2_log_wait_commit` too); the locks of several objects taken
/// mostly in one function share it. `stack_class` gives a row's stack class.
pub fn main_takers<'a>(
    rows: impl Iterator<Item = &'a LockRow>,
    mut stack_class: impl FnMut(&LockRow) -> Option<String>,
) -> HashMap<u64, String> {
    let mut waits: HashMap<u64, HashMap<String, u64>> = HashMap::new();
    for row in rows {
        if !may_have_class(row) || !is_generic_cache(&row.lock_name) {
            continue;
        }
        if let Some(taker) = stack_class(row) {
            let wait = waits
                .entry(row.lock_addr)
                .or_default()
                .entry(taker)
                .or_default();
            *wait = wait.saturating_add(row.total_ns);
        }
    }
    waits
        .into_iter()
        .filter_map(|(addr, takers)| {
            let (taker, _) = takers
                .into_iter()
                .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))?;
            Some((addr, taker))
        })
        .collect()
}

/// The class of a lock row, given its stack's class and, for a lock in a generic cache
/// object, its main taker (`main_takers`; else the row's own); `None` when the lock is
/// its own class.
pub fn lock_class(row: &LockRow, stack: &StackClass, main_taker: Option<&str>) -> Option<String> {
    let name = row.lock_name.as_str();
    let spinlock = row.flags & ((1 << OUTCOME_SHIFT) - 1) == LCB_F_SPIN;
    // Names that say which lock it is stay their own class.
    if !may_have_class(row) {
        return None;
    }
    match stack {
        StackClass::BitWait if spinlock => Some("bit_wait_table".into()),
        StackClass::FolioWait if spinlock => Some("folio_wait_table".into()),
        StackClass::Futex if spinlock => Some("futex hash bucket".into()),
        StackClass::WaitQueue { user } | StackClass::Completion { user }
            if name.starts_with("0x") && in_vmalloc_area(row.lock_addr) =>
        {
            let what = match stack {
                StackClass::Completion { .. } => "completion",
                _ => "wait queue",
            };
            Some(format!("on-stack {what} in {user}"))
        }
        StackClass::WaitQueue { .. }
        | StackClass::Completion { .. }
        | StackClass::Caller { .. }
            if is_generic_cache(name) =>
        {
            let taker = main_taker.or(taker(stack))?;
            Some(format!("{name} in {taker}"))
        }
        _ => None,
    }
}

/// A slab cache of objects of many types (`&kmalloc-2k`, `&kmalloc-cg-1k`).
pub fn is_generic_cache(name: &str) -> bool {
    name.starts_with("&kmalloc-") || name.starts_with("&dma-kmalloc-")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(names: &[&str]) -> Vec<Frame> {
        names.iter().map(|name| Frame::kernel(name)).collect()
    }

    fn class_of(name: &str, source: &str, addr: u64, stack: &[&str]) -> Option<String> {
        let frames = frames(stack);
        let refs: Vec<&Frame> = frames.iter().collect();
        let row = LockRow {
            lock_addr: addr,
            lock_name: name.into(),
            lock_name_source: source.into(),
            flags: LCB_F_SPIN,
            ..Default::default()
        };
        lock_class(&row, &stack_class(&refs), None)
    }

    #[test]
    fn interchangeable_instances_share_a_class() {
        let lock = ["queued_spin_lock_slowpath", "_raw_spin_lock_irqsave"];
        let with = |rest: &[&'static str]| -> Vec<&'static str> {
            lock.iter().chain(rest).copied().collect()
        };
        // Hashed bit-wait queues, static locks without a symbol.
        assert_eq!(
            class_of(
                "static@finish_wait:0xffffffff8300aca8",
                "caller",
                0xffff_ffff_8300_aca8,
                &with(&["finish_wait", "__wait_on_bit", "out_of_line_wait_on_bit"]),
            )
            .as_deref(),
            Some("bit_wait_table")
        );
        assert_eq!(
            class_of(
                "static@__wake_up:0xffffffff8300acc0",
                "caller",
                0xffff_ffff_8300_acc0,
                &with(&["__wake_up", "__wake_up_bit", "unlock_buffer"]),
            )
            .as_deref(),
            Some("bit_wait_table")
        );
        // A completion on a kernel stack.
        assert_eq!(
            class_of(
                "0xffffc900018bbaf0",
                "address",
                0xffff_c900_018b_baf0,
                &with(&["complete", "submit_bio_wait_endio", "bio_endio"]),
            )
            .as_deref(),
            Some("on-stack completion in submit_bio_wait_endio")
        );
        assert_eq!(
            class_of(
                "0xffffc900018bbaf0",
                "address",
                0xffff_c900_018b_baf0,
                &with(&[
                    "wait_for_completion_io",
                    "submit_bio_wait",
                    "blkdev_issue_flush"
                ]),
            )
            .as_deref(),
            Some("on-stack completion in submit_bio_wait")
        );
        // A wait queue head on a stack.
        assert_eq!(
            class_of(
                "0xffffc90000abc010",
                "address",
                0xffff_c900_00ab_c010,
                &with(&["prepare_to_wait_event", "jbd2_log_wait_commit"]),
            )
            .as_deref(),
            Some("on-stack wait queue in jbd2_log_wait_commit")
        );
        // Futex hash buckets, whatever their memory is named.
        assert_eq!(
            class_of(
                "&kmalloc-cg-2k",
                "slab",
                0xffff_8881_0000_1000,
                &with(&["futex_q_lock", "futex_wait_setup"]),
            )
            .as_deref(),
            Some("futex hash bucket")
        );
        // kmalloc objects by the function that takes their lock.
        assert_eq!(
            class_of(
                "&kmalloc-2k",
                "slab",
                0xffff_8881_0000_2000,
                &["__mutex_lock", "mutex_lock", "__jbd2_log_wait_for_space"],
            )
            .as_deref(),
            Some("&kmalloc-2k in __jbd2_log_wait_for_space")
        );
    }

    #[test]
    fn named_locks_are_their_own_class() {
        let lock = ["queued_spin_lock_slowpath", "_raw_spin_lock"];
        let stack: Vec<&str> = lock.iter().copied().chain(["futex_wake"]).collect();
        // Named by what it is: its own class, even where futex code takes it.
        assert_eq!(
            class_of("mmap_lock", "task", 0xffff_8881_0000_1000, &stack),
            None
        );
        assert_eq!(
            class_of("&file->f_pos_lock", "slab", 0xffff_8881_0000_1000, &stack),
            None
        );
        // A static wait queue head that is no bit-wait queue stays itself.
        let wait: Vec<&str> = lock
            .iter()
            .copied()
            .chain(["__wake_up", "tty_wakeup"])
            .collect();
        assert_eq!(
            class_of("static@__wake_up", "caller", 0xffff_ffff_8300_0000, &wait),
            None
        );
        // An address outside the kernel stacks' area is no on-stack queue.
        assert_eq!(
            class_of(
                "0xffff888100001000",
                "address",
                0xffff_8881_0000_1000,
                &wait
            ),
            None
        );
        // No stack: nothing to tell.
        assert_eq!(class_of("0xffffc90000001000", "address", 1, &[]), None);
    }

    #[test]
    fn a_kmalloc_lock_is_one_class_under_its_main_taker() {
        let row = |addr: u64, wait: u64| LockRow {
            lock_addr: addr,
            lock_name: "&kmalloc-2k".into(),
            lock_name_source: "slab".into(),
            flags: LCB_F_SPIN,
            total_ns: wait,
            ..Default::default()
        };
        // One lock taken in two functions, another object's lock taken in the second.
        let rows = [
            (row(0x1000, 30), "start_this_handle"),
            (row(0x1000, 10), "jbd2_log_wait_commit"),
            (row(0x9000, 50), "jbd2_log_wait_commit"),
        ];
        let takers = main_takers(rows.iter().map(|(row, _)| row), |row| {
            rows.iter()
                .find(|(other, _)| std::ptr::eq(other, row))
                .map(|(_, taker)| taker.to_string())
        });
        assert_eq!(
            takers.get(&0x1000).map(String::as_str),
            Some("start_this_handle")
        );
        let stack = StackClass::Caller {
            caller: "jbd2_log_wait_commit".into(),
        };
        assert_eq!(
            lock_class(&rows[1].0, &stack, takers.get(&0x1000).map(String::as_str)).as_deref(),
            Some("&kmalloc-2k in start_this_handle")
        );
        assert_eq!(
            lock_class(&rows[2].0, &stack, takers.get(&0x9000).map(String::as_str)).as_deref(),
            Some("&kmalloc-2k in jbd2_log_wait_commit")
        );
    }
}
