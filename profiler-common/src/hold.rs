//! Hold times of one named lock (`lockpath record --hold LOCK`): from the return of a
//! lock function (the lock is held) to the entry of its unlock, for that lock only.
//!
//! Each acquire entry point (`mutex_lock`, `down_write_killable`, `mutex_trylock`,
//! ...) gets a slot: one fexit program, or a kprobe/kretprobe pair, per slot. What the
//! slot's function is (lock type and mode, how its return value says "acquired") is
//! the load-time global `HOLD_CONFIG`. Unlock entry points need no slot: their program
//! only matches the lock address and closes the hold of the calling thread.

/// Acquire slots: one per lock entry point of the timed types (mutex: 6, rwsem: 9).
pub const HOLD_ACQUIRE_SLOTS: usize = 16;
/// Release slots (fentry programs; the kprobe variant is one program attached to all).
pub const HOLD_RELEASE_SLOTS: usize = 4;

/// The function returns nothing useful: it returned, so the lock is held.
pub const HOLD_RET_ANY: u32 = 0;
/// Acquired when the function returns 0 (`*_killable`, `*_interruptible`).
pub const HOLD_RET_ZERO: u32 = 1;
/// Acquired when the function returns 1 (`*_trylock`).
pub const HOLD_RET_ONE: u32 = 2;

/// What an acquire slot is. `flags` are `LCB_F_*` flags (the lock type and mode, as
/// the contention tracepoints give them), so the report names holds and waits alike.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HoldSlot {
    pub flags: u32,
    pub ret: u32,
}

/// The lock to time and the slots, as one load-time global.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldConfig {
    /// Address of the lock; 0 disables every hold program.
    pub lock_addr: u64,
    pub slots: [HoldSlot; HOLD_ACQUIRE_SLOTS],
}

impl HoldConfig {
    pub const DISABLED: HoldConfig = HoldConfig {
        lock_addr: 0,
        slots: [HoldSlot { flags: 0, ret: 0 }; HOLD_ACQUIRE_SLOTS],
    };
}

/// A hold in progress, by thread id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HoldOpen {
    pub start_ns: u64,
    pub kstack_id: i32,
    pub flags: u32,
    /// Recursive read acquisitions by the same thread: only the outermost is timed.
    pub depth: u32,
    pub _pad: u32,
}

/// A kprobe-method acquire in progress (entry seen, return not yet), by thread id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HoldPending {
    pub kstack_id: i32,
    pub _pad: u32,
}

/// Aggregation key: one row per holder process, holder stack and mode.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HoldKey {
    pub tgid: u32,
    /// Kernel stack of the acquisition, or a negative errno when it was lost.
    pub kstack_id: i32,
    pub flags: u32,
    pub _pad: u32,
}

impl HoldKey {
    /// The row of `HOLD_OVERFLOW` that takes this hold when `HOLD_STATS` is full: its
    /// process and mode, without stack.
    pub const fn overflow(&self) -> HoldKey {
        HoldKey {
            tgid: self.tgid,
            kstack_id: -1,
            flags: self.flags,
            _pad: 0,
        }
    }
}

/// Entries of the holds in progress (`HOLD_OPEN`) and of the kprobe acquisitions in
/// progress (`HOLD_PENDING`), by thread.
pub const HOLD_OPEN_ENTRIES: u32 = 16384;
pub const HOLD_PENDING_ENTRIES: u32 = 16384;

/// What the family's programs could not record: each loss's slot in `LOSSES`, its name
/// in a profile and what it means (`ALL`, which the report prints).
pub mod losses {
    crate::loss::losses! {
        HOLD_MAP_FULL = 27, "hold_map_full",
            "hold aggregation map full: hold counted in its (process, mode) row without stack (raise \
             --map-entries for its own row)";
        HOLD_OPEN_FULL = 28, "hold_open_full",
            "in-flight hold map full: hold dropped";
        HOLD_NEGATIVE_DELTA = 29, "hold_negative_delta",
            "hold with release before acquisition";
        HOLD_OVERFLOW_FULL = 49, "hold_overflow_full",
            "hold aggregation map and its overflow map full: hold dropped";
    }
}

pub mod names {
    crate::define_names! {
        HOLD_STATS,
        HOLD_OVERFLOW,
        HOLD_OPEN,
        HOLD_PENDING,
        HOLD_CONFIG,
        /// Program name prefixes; the slot number follows (`hold_fexit_0`).
        HOLD_FEXIT_ = hold_fexit_,
        HOLD_FEXIT_VOID_ = hold_fexit_void_,
        HOLD_FENTRY_ = hold_fentry_,
        HOLD_KPROBE_ = hold_kprobe_,
        HOLD_KRETPROBE_ = hold_kretprobe_,
        HOLD_RELEASE_KPROBE = hold_release_kprobe,
    }

    /// Every hold program's name starts with this (not a symbol: not in `ALL`).
    pub const HOLD_: &str = "hold_";
}

#[cfg(feature = "user")]
crate::impl_pod!(HoldConfig, HoldOpen, HoldPending, HoldKey);
