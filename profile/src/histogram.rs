//! Log2 latency histograms: bucket bounds and percentiles.

/// Latency (ns) below which `fraction` of the requests of a log2 microsecond histogram
/// fall, interpolated linearly inside the bucket (so within a factor of 2).
pub fn percentile_ns(hist: &[u64], fraction: f64) -> u64 {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return 0;
    }
    let rank = fraction * total as f64;
    let mut seen = 0.0;
    for (slot, &count) in hist.iter().enumerate() {
        if count == 0 {
            continue;
        }
        if seen + count as f64 >= rank {
            let (low, high) = bucket_us(slot);
            let inside = (rank - seen) / count as f64;
            return ((low as f64 + inside * (high - low) as f64) * 1000.0) as u64;
        }
        seen += count as f64;
    }
    let (_, high) = bucket_us(hist.len().saturating_sub(1));
    high * 1000
}

/// Adds histogram `add` to `sum` bucket by bucket, growing `sum` to `add`'s length.
pub fn add_into(sum: &mut Vec<u64>, add: &[u64]) {
    if sum.len() < add.len() {
        sum.resize(add.len(), 0);
    }
    for (mine, theirs) in sum.iter_mut().zip(add) {
        *mine += theirs;
    }
}

/// A kernel histogram as a profile keeps it: trailing empty buckets left out.
pub fn trimmed(hist: &[u64]) -> Vec<u64> {
    let used = hist
        .iter()
        .rposition(|&count| count != 0)
        .map_or(0, |last| last + 1);
    hist[..used].to_vec()
}

/// Bounds of bucket `slot` in microseconds, [low, high): [0, 2) for slot 0, then
/// [2^slot, 2^(slot+1)).
pub fn bucket_us(slot: usize) -> (u64, u64) {
    if slot == 0 {
        (0, 2)
    } else {
        (1u64 << slot, 1u64 << (slot + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_from_buckets() {
        // 100 requests in [64, 128) us, 1 in [1024, 2048) us.
        let mut hist = vec![0u64; 12];
        hist[6] = 100;
        hist[10] = 1;
        let p50 = percentile_ns(&hist, 0.5);
        assert!((64_000..128_000).contains(&p50), "{p50}");
        let p99 = percentile_ns(&hist, 0.99);
        assert!((64_000..=128_000).contains(&p99), "{p99}");
        let p100 = percentile_ns(&hist, 1.0);
        assert!((1_024_000..=2_048_000).contains(&p100), "{p100}");
        assert_eq!(percentile_ns(&[], 0.5), 0);
    }

    #[test]
    fn histograms_add_and_trim() {
        let mut sum = vec![1, 2];
        add_into(&mut sum, &[1, 0, 3]);
        assert_eq!(sum, vec![2, 2, 3]);
        assert_eq!(trimmed(&[0, 4, 0, 0]), vec![0, 4]);
        assert!(trimmed(&[0, 0]).is_empty());
    }
}
