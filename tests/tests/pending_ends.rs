//! The lock end program leaves each finished contention in its CPU's ring for the next
//! begin on that CPU to add. What the rings still hold when the programs are detached,
//! user space adds at the stop. On a live machine any begin adds a ring's ends first, so
//! this is tested on the kernel maps themselves, with rings written by hand.

mod common;

use aya::maps::{PerCpuArray, PerCpuValues};
use lockpath::probes::shared::MapSet;
use profiler_common::{
    latency::LatencyStat,
    lock::{
        names, ContendedHoldKey, LockKey, LockStat, PendingEnd, PendingRing, LOCK_PENDING_ENDS,
        NO_HOLD,
    },
};

use common::*;

fn lock(addr: u64) -> LockKey {
    LockKey {
        lock_addr: addr,
        tgid: 4242,
        kstack_id: -1,
        flags: 1,
        owner_kstack_id: -1,
        ..LockKey::default()
    }
}

fn end(key: LockKey, wait_ns: u64, hold: Option<(ContendedHoldKey, u64)>) -> PendingEnd {
    let (hold, hold_ns) = hold.unwrap_or((ContendedHoldKey::default(), NO_HOLD));
    PendingEnd {
        key,
        wait_ns,
        hold,
        hold_ns,
    }
}

/// CPU 0's ring is `first`, every other CPU's `others`.
fn write_rings(maps: &mut MapSet, first: PendingRing, others: PendingRing) {
    let cpus = aya::util::nr_cpus().expect("the number of CPUs");
    let mut rings: PerCpuArray<_, PendingRing> =
        PerCpuArray::try_from(maps.get_mut(names::LOCK_PENDING).expect("LOCK_PENDING"))
            .expect("LOCK_PENDING is a per-CPU array");
    let values: Vec<PendingRing> = (0..cpus)
        .map(|cpu| if cpu == 0 { first } else { others })
        .collect();
    rings
        .set(
            0,
            PerCpuValues::try_from(values).expect("a ring per CPU"),
            0,
        )
        .expect("the rings are written");
}

/// With room for two lock rows, one of them already there: the ends between a ring's
/// tail and head are added (across the ring's end), to the existing row, to a new one,
/// and to the overflow row once the map is full, with the one hold they closed; a slot
/// outside tail..head and a CPU whose ring is empty add nothing.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: makes eBPF maps")]
fn ends_left_in_the_rings_are_added_at_the_stop() {
    let Some(mut maps) = object_maps(
        "ends_left_in_the_rings_are_added_at_the_stop",
        &[names::LOCK_STATS],
        2,
    ) else {
        return;
    };

    let (a, b, c, stale) = (lock(0xa000), lock(0xb000), lock(0xc000), lock(0xd000));
    let hold = ContendedHoldKey {
        lock_addr: 0xa000,
        tid: 4243,
        tgid: 4242,
        kstack_id: -1,
        flags: 1,
    };
    insert(&mut maps, names::LOCK_STATS, a, LockStat::one(100));
    // Slots 6, 7, 0, 1, 2 pending (tail 6, head 11); slot 5 was added before.
    let mut ring = PendingRing {
        head: 11,
        tail: 6,
        ..PendingRing::default()
    };
    ring.ends[5] = end(stale, 1_000, None);
    ring.ends[6] = end(a, 10, Some((hold, 50)));
    ring.ends[7] = end(a, 20, None);
    ring.ends[0] = end(b, 30, None);
    ring.ends[1] = end(c, 40, None);
    ring.ends[2] = end(c, 45, None);
    // Another CPU's ring, all added already: its slots are old ends.
    let mut empty = PendingRing {
        head: 3 + LOCK_PENDING_ENDS as u32,
        tail: 3 + LOCK_PENDING_ENDS as u32,
        ..PendingRing::default()
    };
    empty.ends = [end(stale, 2_000, Some((hold, 9_999))); LOCK_PENDING_ENDS];
    write_rings(&mut maps, ring, empty);

    lockpath::probes::lock::add_pending_ends(&mut maps).expect("the pending ends are added");

    let rows: Vec<(LockKey, LockStat)> = maps.entries(names::LOCK_STATS).expect("LOCK_STATS");
    let overflow: Vec<(LockKey, LockStat)> =
        maps.entries(names::LOCK_OVERFLOW).expect("LOCK_OVERFLOW");
    let row = |key: LockKey| rows.iter().find(|(k, _)| *k == key).map(|(_, stat)| *stat);
    eprintln!("rows: {rows:?}\noverflow: {overflow:?}");
    assert_eq!(rows.len(), 2, "{rows:?}");
    let a_row = row(a).expect("the existing row");
    assert_eq!(
        (a_row.count, a_row.total_ns, a_row.max_ns, a_row.min_ns),
        (3, 130, 100, 10),
        "the two ends of the existing row are added to it"
    );
    let b_row = row(b).expect("a new row for the second lock");
    assert_eq!((b_row.count, b_row.total_ns), (1, 30));
    assert_eq!(
        overflow.len(),
        1,
        "the third lock's ends go to its overflow row: {overflow:?}"
    );
    let (key, stat) = overflow[0];
    assert_eq!(key, c.overflow());
    assert_eq!(
        (stat.count, stat.total_ns, stat.max_ns, stat.min_ns),
        (2, 85, 45, 40)
    );

    let holds: Vec<(ContendedHoldKey, LatencyStat)> =
        maps.entries(names::LOCK_HOLDS).expect("LOCK_HOLDS");
    let holds_overflow: Vec<(ContendedHoldKey, LatencyStat)> = maps
        .entries(names::LOCK_HOLDS_OVERFLOW)
        .expect("LOCK_HOLDS_OVERFLOW");
    assert!(holds_overflow.is_empty(), "{holds_overflow:?}");
    assert_eq!(holds.len(), 1, "one end closed a hold: {holds:?}");
    assert_eq!(holds[0].0, hold);
    assert_eq!((holds[0].1.count, holds[0].1.total_ns), (1, 50));
}

/// With the lock map and its overflow map full, and the hold maps too, an end left in a
/// ring has no row to go to: it is counted as the programs count theirs
/// (`lock_overflow_full`, and `lock_hold_overflow_full` for the hold it closed), so the
/// profile says that a contention was lost.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: makes eBPF maps")]
fn ends_that_find_the_maps_full_are_counted_as_lost() {
    let small = [
        names::LOCK_STATS,
        names::LOCK_OVERFLOW,
        names::LOCK_HOLDS,
        names::LOCK_HOLDS_OVERFLOW,
    ];
    let Some(mut maps) = object_maps(
        "ends_that_find_the_maps_full_are_counted_as_lost",
        &small,
        1,
    ) else {
        return;
    };

    // Every map holds one row of another process already.
    let other = LockKey {
        tgid: 7,
        ..lock(0xa000)
    };
    let other_hold = ContendedHoldKey {
        lock_addr: 0xa000,
        tid: 8,
        tgid: 7,
        kstack_id: -1,
        flags: 1,
    };
    insert(&mut maps, names::LOCK_STATS, other, LockStat::one(100));
    insert(
        &mut maps,
        names::LOCK_OVERFLOW,
        other.overflow(),
        LockStat::one(100),
    );
    let held = LatencyStat::EMPTY.with(100);
    insert(&mut maps, names::LOCK_HOLDS, other_hold, held);
    insert(
        &mut maps,
        names::LOCK_HOLDS_OVERFLOW,
        other_hold.overflow(),
        held,
    );
    let hold = ContendedHoldKey {
        tid: 4243,
        tgid: 4242,
        ..other_hold
    };
    let mut ring = PendingRing {
        head: 1,
        tail: 0,
        ..PendingRing::default()
    };
    ring.ends[0] = end(lock(0xc000), 40, Some((hold, 50)));
    write_rings(&mut maps, ring, PendingRing::default());

    lockpath::probes::lock::add_pending_ends(&mut maps).expect("the pending ends are added");

    let losses = lockpath::probes::shared::drain_losses(&maps).expect("LOSSES");
    eprintln!("losses: {losses:?}");
    assert_eq!(losses.get("lock_overflow_full"), Some(&1), "{losses:?}");
    assert_eq!(
        losses.get("lock_hold_overflow_full"),
        Some(&1),
        "{losses:?}"
    );
    assert_eq!(losses.len(), 2, "no other loss: {losses:?}");
    let rows: Vec<(LockKey, LockStat)> = maps.entries(names::LOCK_STATS).expect("LOCK_STATS");
    assert_eq!(
        rows,
        vec![(other, LockStat::one(100))],
        "the full map is unchanged"
    );
}
