//! The values of `record`'s options that are more than a number or a name: their types
//! and their grammar (durations are `units::parse_duration`'s). The families read them
//! from `RecordArgs`.

use std::time::Duration;

use profiler_common::cpu::USER_STACK_MAX;

use crate::units;

/// One side of a `--span`.
#[derive(Debug, Clone, PartialEq)]
pub enum SpanPoint {
    /// `tp:GROUP:EVENT:FIELD`: the key is FIELD of the record.
    Tracepoint {
        group: String,
        event: String,
        field: String,
    },
    /// `kprobe:SYMBOL[:ARG]`: the key is argument ARG (0 = first) of SYMBOL.
    Kprobe { symbol: String, arg: u32 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct SpanSpec {
    pub text: String,
    pub begin: SpanPoint,
    pub end: SpanPoint,
}

impl SpanSpec {
    pub fn parse(text: &str) -> Result<SpanSpec, String> {
        let (begin, end) = text.split_once(',').ok_or_else(|| {
            format!("--span {text:?}: expected BEGIN,END (e.g. kprobe:ptl_send_rpc:0,kprobe:after_reply:0)")
        })?;
        let spec = SpanSpec {
            text: text.to_string(),
            begin: parse_point(begin)?,
            end: parse_point(end)?,
        };
        if std::mem::discriminant(&spec.begin) != std::mem::discriminant(&spec.end) {
            return Err(format!(
                "--span {text:?}: BEGIN and END must both be tracepoints (tp:) or both kprobes (kprobe:)"
            ));
        }
        Ok(spec)
    }
}

fn parse_point(text: &str) -> Result<SpanPoint, String> {
    let parts: Vec<&str> = text.split(':').collect();
    match parts.as_slice() {
        ["tp" | "tracepoint", group, event, field]
            if !group.is_empty() && !event.is_empty() && !field.is_empty() =>
        {
            Ok(SpanPoint::Tracepoint {
                group: group.to_string(),
                event: event.to_string(),
                field: field.to_string(),
            })
        }
        ["kprobe", symbol] if !symbol.is_empty() => Ok(SpanPoint::Kprobe {
            symbol: symbol.to_string(),
            arg: 0,
        }),
        ["kprobe", symbol, arg] if !symbol.is_empty() => {
            let arg: u32 = arg
                .parse()
                .ok()
                .filter(|&arg| arg < 6)
                .ok_or_else(|| format!("{text:?}: the argument index must be 0..=5"))?;
            Ok(SpanPoint::Kprobe {
                symbol: symbol.to_string(),
                arg,
            })
        }
        _ => Err(format!(
            "{text:?}: expected tp:GROUP:EVENT:FIELD or kprobe:SYMBOL[:ARG]"
        )),
    }
}

/// Bytes of user stack copied per sample unless `--user-stack-bytes` says otherwise
/// (see docs/how-it-works.md, user stacks, for the measured cost).
pub const DEFAULT_USER_STACK_BYTES: u32 = USER_STACK_MAX as u32;

/// `--user-stack-bytes`: 0 (frame pointers only) up to what one sample can carry.
pub fn parse_user_stack_bytes(text: &str) -> Result<u32, String> {
    let bytes: u64 = text.trim().parse().map_err(|_| {
        format!("{text:?} is not a number of bytes (0 turns stack copies off; default {DEFAULT_USER_STACK_BYTES})")
    })?;
    if bytes > USER_STACK_MAX as u64 {
        return Err(format!(
            "--user-stack-bytes {bytes} is more than one sample can carry ({USER_STACK_MAX}): choose a smaller size"
        ));
    }
    // Whole stack slots.
    Ok((bytes as u32) & !7)
}

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
    fn span_specs_parse() {
        let spec = SpanSpec::parse("kprobe:ptl_send_rpc,kprobe:after_reply:0").expect("parse");
        assert_eq!(
            spec.begin,
            SpanPoint::Kprobe {
                symbol: "ptl_send_rpc".into(),
                arg: 0
            }
        );
        let spec =
            SpanSpec::parse("tp:fuse:fuse_request_send:unique,tp:fuse:fuse_request_end:unique")
                .expect("parse");
        assert!(matches!(spec.end, SpanPoint::Tracepoint { ref field, .. } if field == "unique"));
        assert!(SpanSpec::parse("kprobe:a").is_err(), "no END");
        assert!(SpanSpec::parse("kprobe:a,tp:b:c:d").is_err(), "mixed kinds");
        assert!(
            SpanSpec::parse("kprobe:a:9,kprobe:b").is_err(),
            "argument index"
        );
        assert!(SpanSpec::parse("uprobe:a,uprobe:b").is_err());
    }

    #[test]
    fn stack_bytes_are_checked_and_rounded() {
        // Multiples of 8 bytes, rounded down.
        for (text, bytes) in [("0", 0), ("8192", 8192), ("1001", 1000)] {
            assert_eq!(parse_user_stack_bytes(text), Ok(bytes), "{text}");
        }
        let err = parse_user_stack_bytes("70000").unwrap_err();
        assert!(err.contains(&USER_STACK_MAX.to_string()), "{err}");
        assert!(parse_user_stack_bytes("8k").is_err());
    }

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
