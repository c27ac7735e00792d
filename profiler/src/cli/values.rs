//! The grammar of `record`'s values that more than one option reads (durations are
//! `units::parse_duration`'s); a family's own values are beside its options, in
//! `cli/<family>.rs`.

use std::time::Duration;

use crate::units;

/// Parses `--min-wait`: nanoseconds of a duration (`500us`, `2ms`; the one grammar of
/// `units::parse_duration`).
pub fn parse_min_wait(text: &str) -> Result<u64, String> {
    let duration = crate::units::parse_duration(text)?;
    u64::try_from(duration.as_nanos()).map_err(|_| format!("{text:?} is too large"))
}

/// Shortest period: a period costs a drain and a file.
const MIN_PERIOD: Duration = Duration::from_secs(1);

/// `--rotate`: `90`, `90s`, `10m`, `1h`, `1d` (the one duration grammar,
/// `units::parse_duration`), at least `MIN_PERIOD`.
pub fn parse_period(text: &str) -> Result<Duration, String> {
    let period = units::parse_duration(text)?;
    if period < MIN_PERIOD {
        return Err(format!("{text:?}: the period must be at least 1 s"));
    }
    Ok(period)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_wait_units() {
        for (text, ns) in [
            ("500us", 500_000),
            ("2ms", 2_000_000),
            ("1.5s", 1_500_000_000),
            ("10ns", 10),
            ("0", 0),
        ] {
            assert_eq!(parse_min_wait(text), Ok(ns), "{text}");
        }
        assert!(parse_min_wait("garbage")
            .unwrap_err()
            .contains("not a duration"));
        // A bare number is seconds, as for every duration.
        assert_eq!(parse_min_wait("10"), Ok(10_000_000_000));
        assert!(parse_min_wait("5 parsecs").is_err());
        assert!(parse_min_wait("-3ms").is_err());
    }
    #[test]
    fn periods_parse_with_units() {
        assert_eq!(parse_period("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_period("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_period("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_period("1.5h"), Ok(Duration::from_secs(5400)));
        assert!(parse_period("0.5s").unwrap_err().contains("at least 1 s"));
        assert!(parse_period("10x").unwrap_err().contains("not a duration"));
        assert!(parse_period("soon").is_err());
    }
}
