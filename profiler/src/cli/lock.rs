//! `record`'s options of the lock family: contention, how it is hooked, and which
//! contentions are kept.

use clap::{Args, ValueEnum};

#[derive(Debug, Args)]
pub struct LockArgs {
    /// Record lock contention (spinlocks, rwlocks, mutexes, rwsems); the default when no
    /// other family is asked for.
    #[arg(long)]
    pub lock: bool,

    /// How lock contention is hooked: `auto` uses the lock:contention_* tracepoints
    /// (Linux 5.19+) and falls back to kprobes on the contention slow paths; the other
    /// values force one method (for tests of the fallback).
    #[arg(long, value_enum, value_name = "METHOD", default_value_t = LockMethod::Auto)]
    pub lock_method: LockMethod,

    /// How a contention's kernel stack is found: `cached` (default) walks it once per
    /// lock and call path every 100 ms and reuses the walk in between (about 0.6 us per
    /// contention instead of 3 or more); `exact` walks every contention's stack, for
    /// checking what the cache attributes.
    #[arg(long, value_enum, value_name = "HOW", default_value_t = LockStacks::Cached)]
    pub lock_stacks: LockStacks,

    /// Record only the contentions on this lock (repeatable; like perf's -L). ADDR (a
    /// report's lock column) and a static lock's kernel symbol are checked in the
    /// kernel, before any other work (up to 8 addresses); a name known only after the
    /// fact (mmap_lock, siglock, rq_lock:cpu3, NAME.wait_lock, static@FUNCTION, ...) is
    /// kept when the maps are drained. Not `--lock`: on record that selects the lock
    /// family (`report --lock` filters a recorded profile).
    #[arg(long = "lock-filter", value_name = "NAME|ADDR")]
    pub lock_filter: Vec<String>,

    /// Record only the contentions on locks of this type (repeatable; like perf's -Y):
    /// spinlock, rwlock, mutex, rwsem, rwsem:W, ... as reports name them. Checked in
    /// the kernel, before any other work.
    #[arg(long = "type", value_name = "TYPE")]
    pub lock_type: Vec<String>,

    /// Keep only the contentions whose kernel stack has a frame containing PATTERN (`*`
    /// is a wildcard; repeatable; like perf's -S). Not in the kernel (it needs symbolized
    /// stacks): applied when the maps are drained, so the profile holds only matching
    /// rows.
    #[arg(long = "caller", value_name = "PATTERN")]
    pub caller: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LockMethod {
    /// Tracepoints when the kernel has them, else kprobes.
    Auto,
    /// lock:contention_begin/end (raw tracepoints).
    Tracepoint,
    /// kprobes/kretprobes on the spinlock, mutex and rwsem slow paths.
    Kprobe,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LockStacks {
    /// One walk per lock and call path every 100 ms, reused in between.
    Cached,
    /// A walk for every contention (costs about 3 us or more each).
    Exact,
}
