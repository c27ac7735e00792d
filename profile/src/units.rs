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

/// A duration as every option takes it (`-d`, `--rotate`, `--interval`, `--min-wait`):
/// jiff's friendly format (`10m`, `500ms`, `100us`, `1.5h`, `1h30m`, `2 days`; a day is
/// 24 hours) or a bare number of seconds (`30`, `0.5`).
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<f64>() {
        return std::time::Duration::try_from_secs_f64(seconds).map_err(|_| {
            format!("{text:?}: a duration is a positive number of seconds or e.g. 10m")
        });
    }
    let span: jiff::Span = text
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 30, 500ms, 100us, 10m, 1h30m)"))?;
    let duration = span
        .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .map_err(|_| format!("{text:?}: months and years are not durations here; use days"))?;
    std::time::Duration::try_from(duration)
        .map_err(|_| format!("{text:?}: a duration cannot be negative"))
}

/// A duration of the one grammar (`parse_duration`) in nanoseconds (`--min-wait 500us`,
/// `--interval 1s`).
pub fn parse_duration_ns(text: &str) -> Result<u64, String> {
    let duration = parse_duration(text)?;
    u64::try_from(duration.as_nanos()).map_err(|_| format!("{text:?} is too large"))
}

fn utc(unix_s: u64) -> jiff::civil::DateTime {
    let timestamp = i64::try_from(unix_s)
        .ok()
        .and_then(|seconds| jiff::Timestamp::from_second(seconds).ok())
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    timestamp.to_zoned(jiff::tz::TimeZone::UTC).datetime()
}

/// ISO 8601 in UTC: `2026-12-03T08:12:40Z`.
pub fn iso8601_utc(unix_s: u64) -> String {
    utc(unix_s).strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The same, without separators, for file names: `20261203T081240Z`.
pub fn compact_utc(unix_s: u64) -> String {
    utc(unix_s).strftime("%Y%m%dT%H%M%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_readable_units() {
        for (ns, text) in [
            (0, "0 ns"),
            (999, "999 ns"),
            (1_500, "1.50 us"),
            (25_300_000, "25.3 ms"),
            (153_000_000, "153 ms"),
            (2_000_000_000, "2.00 s"),
        ] {
            assert_eq!(format_ns(ns), text);
        }
    }

    #[test]
    fn unix_times_in_iso_8601() {
        assert_eq!(iso8601_utc(0), "1970-01-01T00:00:00Z");
        // `date -u -d @1796272703`: the start the issue saw as a raw number.
        assert_eq!(iso8601_utc(1_796_272_703), "2026-12-03T04:38:23Z");
        assert_eq!(iso8601_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(compact_utc(1_709_210_096), "20240229T123456Z");
    }

    #[test]
    fn one_grammar_for_durations() {
        let secs = |text: &str| parse_duration(text).map(|d| d.as_secs_f64());
        for (text, seconds) in [
            ("30", 30.0),
            ("0.5", 0.5),
            ("0", 0.0),
            ("90s", 90.0),
            ("10m", 600.0),
            ("1.5h", 5400.0),
            ("1h30m", 5400.0),
            ("2h 30m", 9000.0),
            ("1d", 86_400.0),
            ("500ms", 0.5),
            ("100us", 1e-4),
            ("100µs", 1e-4),
            ("10ns", 1e-8),
        ] {
            assert_eq!(secs(text), Ok(seconds), "{text}");
        }
        for text in ["soon", "10x", "5 parsecs", "-3ms", "-3", "1mo", ""] {
            assert!(parse_duration(text).is_err(), "{text} was accepted");
        }
        assert!(parse_duration("1mo").unwrap_err().contains("use days"));
    }

    #[test]
    fn durations_in_nanoseconds() {
        for (text, ns) in [
            ("500us", 500_000),
            ("2ms", 2_000_000),
            ("1.5s", 1_500_000_000),
            ("10ns", 10),
            ("0", 0),
        ] {
            assert_eq!(parse_duration_ns(text), Ok(ns), "{text}");
        }
        assert!(parse_duration_ns("garbage")
            .unwrap_err()
            .contains("not a duration"));
        // A bare number is seconds, as for every duration.
        assert_eq!(parse_duration_ns("10"), Ok(10_000_000_000));
        assert!(parse_duration_ns("5 parsecs").is_err());
        assert!(parse_duration_ns("-3ms").is_err());
    }
}
