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

impl FuncKey {
    /// The row of `FUNC_OVERFLOW` that takes this call when `FUNC_STATS` is full: its
    /// function and process, without stack.
    pub const fn overflow(&self) -> FuncKey {
        FuncKey {
            slot: self.slot,
            tgid: self.tgid,
            stack_id: -1,
            _pad: 0,
        }
    }
}

/// Entries of the calls in progress (`FUNC_CALLS`).
pub const FUNC_CALLS_ENTRIES: u32 = 65536;

/// What the family's programs could not record: each loss's slot in `LOSSES`, its name
/// in a profile and what it means (`ALL`, which the report prints).
pub mod losses {
    crate::loss::losses! {
        FUNC_ENTRY_FULL = 23, "func_entry_full",
            "in-flight call map full: function call not timed";
        FUNC_MAP_FULL = 24, "func_map_full",
            "function aggregation map full: call counted in its (function, process) row without stack \
             (raise --map-entries for its own row)";
        FUNC_NEGATIVE_DELTA = 25, "func_negative_delta",
            "function return before its entry: call dropped";
        FUNC_OVERFLOW_FULL = 48, "func_overflow_full",
            "function aggregation map and its overflow map full: call dropped";
    }
}

pub mod names {
    crate::define_names! {
        FUNC_STATS,
        FUNC_OVERFLOW,
        FUNC_CALLS,
        /// Program name prefixes; the slot number follows (`func_fentry_0`).
        FUNC_FENTRY_ = func_fentry_,
        FUNC_FEXIT_ = func_fexit_,
        FUNC_KPROBE_ = func_kprobe_,
        FUNC_KRETPROBE_ = func_kretprobe_,
        UFUNC_ENTRY_ = ufunc_entry_,
        UFUNC_RETURN_ = ufunc_return_,
    }
}

#[cfg(feature = "user")]
crate::impl_pod!(FuncCall, FuncEntry, FuncKey);
