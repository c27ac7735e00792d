//! The grammar of the values of `record`'s options for the recording as a whole
//! (durations are `units::parse_duration`'s); a family's own values are beside its
//! options, in `probes/<family>.rs`.

use std::time::Duration;

use crate::units;

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
