//! Wakers (`record --wakers`): who woke each off-CPU wait. `sched:sched_waking` runs in
//! the waker; when the woken thread has an open off-CPU wait (`OFFCPU_START`), the
//! waker's identity and stacks are kept by the woken thread id (`WAKER_PENDING`). When
//! the off-CPU program closes that wait at switch-in, its time is added to
//! `WAKER_STATS` under (waiter key, waker).

use crate::offcpu::OffcpuKey;

/// The task that woke a thread, kept until the thread runs again.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WakeInfo {
    /// Process and thread of the waker (0/0: the idle task, i.e. an interrupt that
    /// came while the CPU idled).
    pub tgid: u32,
    pub tid: u32,
    /// Kernel stack id of the waker in the shared stack map, or a negative errno.
    pub kstack_id: i32,
    /// User stack id of the waker, or a negative errno (kernel threads have none).
    pub ustack_id: i32,
}

/// Aggregation key: one row per (off-CPU row of the waiter, waker).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WakerKey {
    pub waiter: OffcpuKey,
    pub waker: WakeInfo,
}

impl WakerKey {
    /// The row of `WAKER_OVERFLOW` that takes this wait when `WAKER_STATS` is full: the
    /// waiter's off-CPU row (wakers belong to it) and the waker's thread, without the
    /// waker's stacks.
    pub const fn overflow(&self) -> WakerKey {
        WakerKey {
            waiter: self.waiter,
            waker: WakeInfo {
                tgid: self.waker.tgid,
                tid: self.waker.tid,
                kstack_id: -1,
                ustack_id: -1,
            },
        }
    }
}

/// The last closed off-CPU wait of a thread (`LAST_WAIT`), for wait chains: when it
/// wakes another thread, was it itself waiting during that thread's wait, and who
/// woke it?
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LastWait {
    pub start_ns: u64,
    pub end_ns: u64,
    pub tgid: u32,
    pub kstack_id: i32,
    pub state: u32,
    /// Who woke it (0/0: not seen, or the idle task) and the waker's kernel stack id
    /// (user space tells a wake-up from an interrupt by it).
    pub waker_tgid: u32,
    pub waker_tid: u32,
    pub waker_kstack_id: i32,
}

/// The last `RECENT_WAITS` closed waits of a thread (`LAST_WAIT`), a ring: a chain
/// link is the one of them that overlapped the wait it ended the most (the holder of a
/// lock may wait briefly again after its long wait, before it releases the lock).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecentWaits {
    pub waits: [LastWait; RECENT_WAITS],
    /// Slot of the next wait (modulo `RECENT_WAITS`).
    pub next: u32,
    pub _pad: u32,
}

/// Waits kept per thread for chains (a power of two).
pub const RECENT_WAITS: usize = 4;

/// One link of a chain: a waker that was itself off the CPU during the wait it ended.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChainLink {
    pub tgid: u32,
    pub tid: u32,
    /// Kernel stack of its wait; unused links have tid 0 and a negative id.
    pub kstack_id: i32,
    pub state: u32,
}

/// Links after the waiter: a chain is at most 3 waits deep.
pub const CHAIN_LINKS: usize = 2;

/// Aggregation key of a chain: the waiter's off-CPU row, the links, and who woke the
/// last link.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChainKey {
    pub waiter: OffcpuKey,
    pub links: [ChainLink; CHAIN_LINKS],
    pub last_waker_tgid: u32,
    pub last_waker_tid: u32,
    /// Kernel stack ids of the waker of the waiter and of each link (negative: none).
    /// A waker whose stack shows an interrupt entry was only interrupted: user space
    /// cuts the chain there.
    pub waker_kstacks: [i32; CHAIN_LINKS + 1],
    pub _pad: u32,
}

impl ChainKey {
    /// The row of `CHAIN_OVERFLOW` that takes this chain when `CHAIN_STATS` is full: the
    /// waiter's thread, state and file-lock holder (as `OffcpuKey::overflow`), each link's
    /// thread and state and who woke the last one, without the waits' stacks. The wakers'
    /// stacks stay: user space tells a wake-up from an interrupt by them, and cuts the
    /// chain there.
    pub const fn overflow(&self) -> ChainKey {
        let mut links = self.links;
        links[0].kstack_id = -1;
        links[1].kstack_id = -1;
        ChainKey {
            waiter: self.waiter.overflow(),
            links,
            last_waker_tgid: self.last_waker_tgid,
            last_waker_tid: self.last_waker_tid,
            waker_kstacks: self.waker_kstacks,
            _pad: 0,
        }
    }
}

/// Times of a chain: the waiter's waits and, per link, the part of each link's wait
/// that overlapped the wait before it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChainStat {
    pub count: u64,
    pub wait_ns: u64,
    pub link_ns: [u64; CHAIN_LINKS],
}

/// Threads whose recent waits are kept (`LAST_WAIT`, least recently used go first).
pub const LAST_WAIT_ENTRIES: u32 = 16384;

/// Entries of the wake-ups waiting for their thread to run (`WAKER_PENDING`).
pub const WAKER_PENDING_ENTRIES: u32 = crate::offcpu::OFFCPU_START_ENTRIES;

/// What the family's programs could not record: each loss's slot in `LOSSES`, its name
/// in a profile and what it means (`ALL`, which the report prints).
pub mod losses {
    crate::loss::losses! {
        WAKER_MAP_FULL = 40, "waker_map_full",
            "waker aggregation map full: wait counted in its (waiter, waker thread) row without \
             stacks (raise --map-entries for its own row)";
        WAKER_PENDING_FULL = 41, "waker_pending_full",
            "map of wake-ups awaiting their thread full: a wait's waker dropped (the wait itself is \
             kept)";
        CHAIN_MAP_FULL = 42, "chain_map_full",
            "wait-chain aggregation map full: chain counted in its row of the same threads without \
             the waits' stacks (raise --map-entries for its own row)";
        WAKER_OVERFLOW_FULL = 50, "waker_overflow_full",
            "waker aggregation map and its overflow map full: a wait's waker dropped (the wait itself \
             is kept)";
        CHAIN_OVERFLOW_FULL = 54, "chain_overflow_full",
            "wait-chain aggregation map and its overflow map full: a chain dropped (the wait and its \
             waker are kept)";
    }
}

pub mod names {
    crate::define_names! {
        WAKER_STATS,
        WAKER_OVERFLOW,
        WAKER_PENDING,
        /// 1 when `--wakers` is recorded: the off-CPU program then closes waits with
        /// their waker.
        WAKERS_ON,
        WAKING_PID_OFFSET,
        WAKERS_SCHED_WAKING = wakers_sched_waking,
        LAST_WAIT,
        CHAIN_STATS,
        CHAIN_OVERFLOW,
    }
}

#[cfg(feature = "user")]
crate::impl_pod!(
    WakeInfo,
    WakerKey,
    LastWait,
    RecentWaits,
    ChainLink,
    ChainKey,
    ChainStat
);
