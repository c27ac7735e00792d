//! Function latency: kernel functions (`--func`, fentry/fexit or kprobe/kretprobe) and
//! user functions (`--ufunc`, uprobe/uretprobe), entry to return, per process.

/// Kernel functions get slots `0..FUNC_SLOTS`, user functions
/// `UFUNC_SLOT_BASE..UFUNC_SLOT_BASE + FUNC_SLOTS`; one program pair per slot.
pub const FUNC_SLOTS: u32 = 8;
pub const UFUNC_SLOT_BASE: u32 = 8;

/// A call in progress, keyed by thread id and slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FuncCall {
    pub tid: u32,
    pub slot: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FuncEntry {
    pub start_ns: u64,
    /// Stack at entry (kernel stack for `--func`, user stack for `--ufunc`).
    pub stack_id: i32,
    /// Recursive entries of the same function on this thread: only the outermost
    /// call is timed.
    pub depth: u32,
}

/// Aggregation key: one row per function, process and entry stack.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FuncKey {
    pub slot: u32,
    pub tgid: u32,
    pub stack_id: i32,
    pub _pad: u32,
}

/// Entries of the calls in progress (`FUNC_CALLS`).
pub const FUNC_CALLS_ENTRIES: u32 = 65536;

pub mod names {
    pub const FUNC_STATS: &str = "FUNC_STATS";
    pub const FUNC_CALLS: &str = "FUNC_CALLS";
    /// Program name prefixes; the slot number follows (`func_fentry_0`).
    pub const FUNC_FENTRY_: &str = "func_fentry_";
    pub const FUNC_FEXIT_: &str = "func_fexit_";
    pub const FUNC_KPROBE_: &str = "func_kprobe_";
    pub const FUNC_KRETPROBE_: &str = "func_kretprobe_";
    pub const UFUNC_ENTRY_: &str = "ufunc_entry_";
    pub const UFUNC_RETURN_: &str = "ufunc_return_";

    /// Every name above (a name ending in `_` is a prefix: slot 0 is checked).
    pub const ALL: &[&str] = &[
        FUNC_STATS,
        FUNC_CALLS,
        FUNC_FENTRY_,
        FUNC_FEXIT_,
        FUNC_KPROBE_,
        FUNC_KRETPROBE_,
        UFUNC_ENTRY_,
        UFUNC_RETURN_,
    ];
}

#[cfg(feature = "user")]
crate::impl_pod!(FuncCall, FuncEntry, FuncKey);
