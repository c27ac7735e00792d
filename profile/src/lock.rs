//! Rules of the lock family that every view of a profile follows: the type names (as
//! `perf lock contention` prints them) and which frame is the caller.

use std::collections::BTreeMap;

use profiler_common::lock::{
    LCB_F_MUTEX, LCB_F_PERCPU, LCB_F_READ, LCB_F_RT, LCB_F_SPIN, LCB_F_WRITE,
    LOCK_OUTCOME_DEADLOCK, LOCK_OUTCOME_FAILED, LOCK_OUTCOME_INTERRUPTED, LOCK_OUTCOME_TIMED_OUT,
    OUTCOME_SHIFT,
};

use crate::profile::Frame;

/// Lock type from `LCB_F_*` flags, named as `perf lock contention` names them, with the
/// outcome of waits that did not end with the lock taken (`mutex !EINTR`; the outcome
/// sits above the `LCB_F_*` bits, `OUTCOME_SHIFT`).
pub fn lock_type_name(flags: u32) -> &'static str {
    with_outcome(base_type_name(flags & ((1 << OUTCOME_SHIFT) - 1)), flags)
}

/// The type name of a lock for tables with one row per lock: without the side of a
/// lock with readers and writers (`rwsem` for `rwsem:R` and `rwsem:W`), and a mutex
/// whether its waiter spun or slept (`mutex` for `mutex:spin` too); other types as
/// `lock_type_name`.
pub fn lock_type_name_both_sides(flags: u32) -> &'static str {
    let base = flags & ((1 << OUTCOME_SHIFT) - 1);
    if base & LCB_F_MUTEX != 0 {
        return with_outcome("mutex", flags);
    }
    let side = LCB_F_READ | LCB_F_WRITE;
    if base & side == 0 {
        return lock_type_name(flags);
    }
    let name = match base & !side {
        0 => "rwsem",
        LCB_F_SPIN => "rwlock",
        LCB_F_RT => "rwlock-rt",
        LCB_F_PERCPU => "pcpu-sem",
        _ => return lock_type_name(flags),
    };
    with_outcome(name, flags)
}

/// A mutex wait that spun (`mutex:spin`), as `lock_side` says.
pub const SIDE_SPIN: u32 = 1;
/// A mutex wait that slept (`mutex`), as `lock_side` says.
pub const SIDE_SLEEP: u32 = 8;

/// Which way a wait waited on its lock: a reader's or a writer's (`LCB_F_READ`,
/// `LCB_F_WRITE`), a mutex waiter's spin or sleep (`SIDE_SPIN`, `SIDE_SLEEP`); 0 for
/// other locks.
pub fn lock_side(flags: u32) -> u32 {
    if flags & LCB_F_MUTEX != 0 {
        if flags & LCB_F_SPIN != 0 {
            SIDE_SPIN
        } else {
            SIDE_SLEEP
        }
    } else {
        flags & (LCB_F_READ | LCB_F_WRITE)
    }
}

/// The type name of one row per lock (`report --by lock`) whose waits waited on the
/// `sides` (`lock_side`, or-ed) and of which `flags` are one wait's: `rwsem:R+W` when
/// readers and writers waited, `mutex` when a mutex's waiters spun and slept, else the
/// wait's own type name.
pub fn lock_row_type_name(flags: u32, sides: u32) -> &'static str {
    if sides == SIDE_SPIN | SIDE_SLEEP {
        return with_outcome("mutex", flags);
    }
    let side = LCB_F_READ | LCB_F_WRITE;
    if sides != side {
        return lock_type_name(flags);
    }
    let name = match flags & ((1 << OUTCOME_SHIFT) - 1) & !side {
        0 => "rwsem:R+W",
        LCB_F_SPIN => "rwlock:R+W",
        LCB_F_RT => "rwlock-rt:R+W",
        LCB_F_PERCPU => "pcpu-sem:R+W",
        _ => return lock_type_name(flags),
    };
    with_outcome(name, flags)
}

fn with_outcome(base: &'static str, flags: u32) -> &'static str {
    let suffix = match flags >> OUTCOME_SHIFT {
        0 => return base,
        LOCK_OUTCOME_INTERRUPTED => "EINTR",
        LOCK_OUTCOME_TIMED_OUT => "ETIMEDOUT",
        LOCK_OUTCOME_DEADLOCK => "EDEADLK",
        LOCK_OUTCOME_FAILED => "failed",
        _ => return "unknown",
    };
    // Names with an outcome are made once per distinct base and outcome (a few dozen at
    // most: 18 types times 4 outcomes) and kept, so every exporter can hold a &str.
    static NAMES: std::sync::Mutex<BTreeMap<(&'static str, u32), &'static str>> =
        std::sync::Mutex::new(BTreeMap::new());
    let mut names = NAMES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    names
        .entry((base, flags >> OUTCOME_SHIFT))
        .or_insert_with(|| Box::leak(format!("{base} !{suffix}").into_boxed_str()))
}

fn base_type_name(flags: u32) -> &'static str {
    const RT_READ: u32 = LCB_F_RT | LCB_F_READ;
    const RT_WRITE: u32 = LCB_F_RT | LCB_F_WRITE;
    const SPIN_READ: u32 = LCB_F_SPIN | LCB_F_READ;
    const SPIN_WRITE: u32 = LCB_F_SPIN | LCB_F_WRITE;
    const PERCPU_READ: u32 = LCB_F_PERCPU | LCB_F_READ;
    const PERCPU_WRITE: u32 = LCB_F_PERCPU | LCB_F_WRITE;
    const MUTEX_SPIN: u32 = LCB_F_MUTEX | LCB_F_SPIN;
    match flags {
        0 => "semaphore",
        LCB_F_SPIN => "spinlock",
        SPIN_READ => "rwlock:R",
        SPIN_WRITE => "rwlock:W",
        LCB_F_READ => "rwsem:R",
        LCB_F_WRITE => "rwsem:W",
        LCB_F_RT => "rt-mutex",
        RT_READ => "rwlock-rt:R",
        RT_WRITE => "rwlock-rt:W",
        PERCPU_READ => "pcpu-sem:R",
        PERCPU_WRITE => "pcpu-sem:W",
        LCB_F_MUTEX => "mutex",
        MUTEX_SPIN => "mutex:spin",
        _ => "unknown",
    }
}

/// Frames that belong to the locking code itself (and to the tracing machinery that
/// took the stack), skipped when looking for the caller.
pub fn is_lock_internal(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "_raw_spin_",
        "_raw_read_",
        "_raw_write_",
        "raw_spin_rq_lock",
        "do_raw_spin_lock",
        "queued_spin_lock_slowpath",
        "native_queued_spin_lock_slowpath",
        "pv_queued_spin_lock_slowpath",
        "__pv_queued_spin_lock_slowpath",
        "queued_read_lock",
        "queued_write_lock",
        "__mutex_lock",
        "mutex_lock",
        "__ww_mutex_lock",
        "ww_mutex_lock",
        "mutex_spin_on_owner",
        "rwsem_down_",
        "rwsem_optimistic_spin",
        "rwsem_spin_on_owner",
        "down_read",
        "down_write",
        "__down",
        "down_killable",
        "down_interruptible",
        "down_timeout",
        "rt_mutex_",
        "__rt_mutex",
        "rt_spin_lock",
        "percpu_down_",
        "__percpu_down_",
        "percpu_rwsem_wait",
        "osq_lock",
        "bpf_",
        "__bpf_",
        "__traceiter_",
        "trace_contention_",
        "__trace_",
        "perf_trace_",
        "trace_call_bpf",
    ];
    name == "down" || PREFIXES.iter().any(|prefix| name.starts_with(prefix))
}

/// Whether a lock name found by `source` (`LockRow::lock_name_source`) is a guess: a
/// lock of a merged slab cache named by the one candidate type with a lock there, or a
/// slab cache whose merging the kernel did not say, or a generic kmalloc object typed
/// by the functions that take it (docs/lock-names.md).
pub fn name_is_guess(source: &str) -> bool {
    matches!(source, "slab_merged" | "slab_unchecked" | "slab_kmalloc")
}

/// The first frame, from the leaf outward, that is not locking code: who took the lock.
pub fn caller<'a>(frames_leaf_first: &[&'a Frame]) -> Option<&'a Frame> {
    frames_leaf_first
        .iter()
        .copied()
        .find(|frame| !is_lock_internal(&frame.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_follow_perf() {
        assert_eq!(lock_type_name(LCB_F_SPIN), "spinlock");
        assert_eq!(lock_type_name(LCB_F_SPIN | LCB_F_READ), "rwlock:R");
        assert_eq!(lock_type_name(LCB_F_SPIN | LCB_F_WRITE), "rwlock:W");
        assert_eq!(lock_type_name(LCB_F_READ), "rwsem:R");
        assert_eq!(lock_type_name(LCB_F_WRITE), "rwsem:W");
        assert_eq!(lock_type_name(LCB_F_MUTEX), "mutex");
        assert_eq!(lock_type_name(LCB_F_MUTEX | LCB_F_SPIN), "mutex:spin");
        assert_eq!(lock_type_name(LCB_F_PERCPU | LCB_F_WRITE), "pcpu-sem:W");
        assert_eq!(lock_type_name(LCB_F_RT), "rt-mutex");
        assert_eq!(lock_type_name(0), "semaphore");
        assert_eq!(lock_type_name(0x400), "unknown");
        assert_eq!(lock_type_name(LCB_F_RT | LCB_F_READ), "rwlock-rt:R");
        assert_eq!(lock_type_name(LCB_F_RT | LCB_F_WRITE), "rwlock-rt:W");
        assert_eq!(
            lock_type_name(LCB_F_MUTEX | LOCK_OUTCOME_INTERRUPTED << OUTCOME_SHIFT),
            "mutex !EINTR"
        );
        assert_eq!(
            lock_type_name(LCB_F_WRITE | LOCK_OUTCOME_TIMED_OUT << OUTCOME_SHIFT),
            "rwsem:W !ETIMEDOUT"
        );
        assert_eq!(
            lock_type_name(LCB_F_SPIN | LOCK_OUTCOME_DEADLOCK << OUTCOME_SHIFT),
            "spinlock !EDEADLK"
        );
    }

    #[test]
    fn one_row_names_drop_the_side_only() {
        assert_eq!(lock_type_name_both_sides(LCB_F_READ), "rwsem");
        assert_eq!(lock_type_name_both_sides(LCB_F_WRITE), "rwsem");
        assert_eq!(lock_type_name_both_sides(LCB_F_SPIN | LCB_F_READ), "rwlock");
        assert_eq!(
            lock_type_name_both_sides(LCB_F_RT | LCB_F_WRITE),
            "rwlock-rt"
        );
        assert_eq!(
            lock_type_name_both_sides(LCB_F_PERCPU | LCB_F_READ),
            "pcpu-sem"
        );
        assert_eq!(lock_type_name_both_sides(LCB_F_SPIN), "spinlock");
        assert_eq!(lock_type_name_both_sides(LCB_F_MUTEX | LCB_F_SPIN), "mutex");
        assert_eq!(lock_type_name_both_sides(LCB_F_MUTEX), "mutex");
        assert_eq!(
            lock_type_name_both_sides(LCB_F_READ | LOCK_OUTCOME_INTERRUPTED << OUTCOME_SHIFT),
            "rwsem !EINTR"
        );
        assert_eq!(lock_side(LCB_F_SPIN | LCB_F_WRITE), LCB_F_WRITE);
        assert_eq!(lock_side(LCB_F_MUTEX | LCB_F_SPIN), SIDE_SPIN);
        assert_eq!(lock_side(LCB_F_MUTEX), SIDE_SLEEP);
        assert_eq!(lock_side(LCB_F_SPIN), 0);
        let both = LCB_F_READ | LCB_F_WRITE;
        assert_eq!(lock_row_type_name(LCB_F_WRITE, both), "rwsem:R+W");
        assert_eq!(
            lock_row_type_name(LCB_F_READ | LOCK_OUTCOME_INTERRUPTED << OUTCOME_SHIFT, both),
            "rwsem:R+W !EINTR"
        );
        assert_eq!(lock_row_type_name(LCB_F_WRITE, LCB_F_WRITE), "rwsem:W");
        assert_eq!(
            lock_row_type_name(LCB_F_MUTEX | LCB_F_SPIN, SIDE_SPIN | SIDE_SLEEP),
            "mutex"
        );
        assert_eq!(
            lock_row_type_name(LCB_F_MUTEX | LCB_F_SPIN, SIDE_SPIN),
            "mutex:spin"
        );
    }

    #[test]
    fn caller_skips_lock_internals() {
        let frame = Frame::kernel;
        let stack = [
            frame("queued_spin_lock_slowpath"),
            frame("_raw_spin_lock"),
            frame("after_reply"),
            frame("ptlrpc_check_set"),
        ];
        let refs: Vec<&Frame> = stack.iter().collect();
        assert_eq!(caller(&refs).map(|f| f.name.as_str()), Some("after_reply"));
        let rwsem = [
            frame("rwsem_down_write_slowpath"),
            frame("down_write"),
            frame("path_openat"),
        ];
        let refs: Vec<&Frame> = rwsem.iter().collect();
        assert_eq!(caller(&refs).map(|f| f.name.as_str()), Some("path_openat"));
        assert!(caller(&[]).is_none());
        assert!(is_lock_internal("down"));
        assert!(!is_lock_internal("download_firmware"));
        // arm64 keeps a clone of the rwlock's entry out of line.
        assert!(is_lock_internal("queued_write_lock.constprop.0"));
        assert!(is_lock_internal("queued_read_lock_slowpath"));
    }
}
