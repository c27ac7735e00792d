//! Numbers for humans: durations in ns/us/ms/s with three significant digits.

pub fn format_ns(ns: u64) -> String {
    let value = ns as f64;
    let (scaled, unit) = if ns < 1_000 {
        return format!("{ns} ns");
    } else if ns < 1_000_000 {
        (value / 1e3, "us")
    } else if ns < 1_000_000_000 {
        (value / 1e6, "ms")
    } else {
        (value / 1e9, "s")
    };
    if scaled >= 100.0 {
        format!("{scaled:.0} {unit}")
    } else if scaled >= 10.0 {
        format!("{scaled:.1} {unit}")
    } else {
        format!("{scaled:.2} {unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::format_ns;

    #[test]
    fn picks_readable_units() {
        assert_eq!(format_ns(0), "0 ns");
        assert_eq!(format_ns(999), "999 ns");
        assert_eq!(format_ns(1_500), "1.50 us");
        assert_eq!(format_ns(25_300_000), "25.3 ms");
        assert_eq!(format_ns(153_000_000), "153 ms");
        assert_eq!(format_ns(2_000_000_000), "2.00 s");
    }
}
