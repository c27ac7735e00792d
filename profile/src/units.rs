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

/// `(year, month, day, hour, minute, second)` in UTC of a Unix time (the proleptic
/// Gregorian calendar, days counted from 1970-01-01).
pub fn utc_fields(unix_s: u64) -> (i64, u32, u32, u32, u32, u32) {
    let days = (unix_s / 86_400) as i64;
    let seconds = (unix_s % 86_400) as u32;
    // Days to a civil date: eras of 400 years (146097 days) from 0000-03-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (
        year,
        month,
        day,
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60,
    )
}

/// ISO 8601 in UTC: `2026-12-03T08:12:40Z`.
pub fn iso8601_utc(unix_s: u64) -> String {
    let (year, month, day, hour, minute, second) = utc_fields(unix_s);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
}

/// The same, without separators, for file names: `20261203T081240Z`.
pub fn compact_utc(unix_s: u64) -> String {
    let (year, month, day, hour, minute, second) = utc_fields(unix_s);
    format!("{year:04}{month:02}{day:02}T{hour:02}{minute:02}{second:02}Z")
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
}
