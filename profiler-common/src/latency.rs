//! Latency aggregates shared by the request (`rpc`) and function (`func`) families:
//! count, total, max, min and a log2 histogram, all in nanoseconds.

/// Buckets of the log2 histogram: bucket `i` counts latencies in `[2^i, 2^(i+1))` ns
/// (bucket 0 also counts 0 ns); the last bucket counts everything from 2^39 ns (~9 min).
pub const HIST_SLOTS: usize = 40;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencyStat {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    /// Smallest latency; `u64::MAX` until the first one is added.
    pub min_ns: u64,
    pub hist: [u64; HIST_SLOTS],
}

impl LatencyStat {
    /// The value a new aggregate starts from.
    pub const EMPTY: LatencyStat = LatencyStat {
        count: 0,
        total_ns: 0,
        max_ns: 0,
        min_ns: u64::MAX,
        hist: [0; HIST_SLOTS],
    };
}

impl LatencyStat {
    /// The aggregate with one more latency of `ns` (as the programs add it).
    pub fn with(&self, ns: u64) -> LatencyStat {
        let mut stat = *self;
        stat.count += 1;
        stat.total_ns += ns;
        stat.max_ns = stat.max_ns.max(ns);
        stat.min_ns = stat.min_ns.min(ns);
        stat.hist[log2_slot(ns)] += 1;
        stat
    }
}

/// floor(log2(ns)), clamped to the histogram (0 for 0 and 1).
#[inline(always)]
pub fn log2_slot(ns: u64) -> usize {
    log2_slot_of::<HIST_SLOTS>(ns)
}

/// floor(log2(value)), clamped to a histogram of `SLOTS` buckets (0 for 0 and 1).
/// Branch-free so the eBPF verifier sees a short straight line.
#[inline(always)]
pub fn log2_slot_of<const SLOTS: usize>(value: u64) -> usize {
    let mut value = value;
    let mut log = 0u32;
    // Halve the search each step: is the value 2^32 or more? then 2^16 in what is left...
    // (a constant trip count: the compiler unrolls it.)
    for bits in [32u32, 16, 8, 4, 2] {
        let shift = ((value >> bits != 0) as u32) * bits;
        value >>= shift;
        log |= shift;
    }
    log |= (value >> 1) as u32;
    let slot = log as usize;
    if slot >= SLOTS {
        SLOTS - 1
    } else {
        slot
    }
}

#[cfg(feature = "user")]
crate::impl_pod!(LatencyStat);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_adds_one_latency_like_the_programs() {
        let stat = LatencyStat::EMPTY.with(3).with(1024).with(0);
        assert_eq!(
            (stat.count, stat.total_ns, stat.max_ns, stat.min_ns),
            (3, 1027, 1024, 0)
        );
        assert_eq!((stat.hist[0], stat.hist[1], stat.hist[10]), (1, 1, 1));
        assert_eq!(stat.hist.iter().sum::<u64>(), 3);
    }

    #[test]
    fn log2_slots() {
        assert_eq!(log2_slot(0), 0);
        assert_eq!(log2_slot(1), 0);
        assert_eq!(log2_slot(2), 1);
        assert_eq!(log2_slot(3), 1);
        assert_eq!(log2_slot(4), 2);
        assert_eq!(log2_slot(1023), 9);
        assert_eq!(log2_slot(1024), 10);
        assert_eq!(log2_slot(100_000_000), 26);
        assert_eq!(log2_slot(u64::MAX), HIST_SLOTS - 1);
        for shift in 0..HIST_SLOTS {
            assert_eq!(log2_slot(1 << shift), shift);
        }
        // Every power of two, and its neighbours, against the integer log2.
        for shift in 1..64 {
            for value in [(1u64 << shift) - 1, 1 << shift, (1 << shift) + 1] {
                assert_eq!(log2_slot_of::<64>(value), value.ilog2() as usize, "{value}");
            }
        }
    }

    #[test]
    fn log2_slots_of_a_smaller_histogram() {
        assert_eq!(log2_slot_of::<32>(0), 0);
        assert_eq!(log2_slot_of::<32>(1_000), 9);
        assert_eq!(log2_slot_of::<32>((1 << 31) + 1), 31);
        assert_eq!(log2_slot_of::<32>(1 << 32), 31);
        assert_eq!(log2_slot_of::<32>(u64::MAX), 31);
    }
}
