//! `record`'s options of the on-CPU sampling family, and their grammar.

use clap::Args;
use profiler_common::cpu::USER_STACK_MAX;

#[derive(Debug, Args)]
pub struct CpuArgs {
    /// Sample what runs on the CPUs (kernel and user stacks) with a perf CPU clock.
    #[arg(long)]
    pub cpu: bool,

    /// On-CPU sampling frequency in Hz, on every CPU (with --cpu).
    #[arg(long, value_name = "HZ", default_value_t = 99, requires = "cpu",
          value_parser = parse_freq)]
    pub freq: u64,

    /// Bytes of user stack copied with each on-CPU sample taken in user mode, to unwind
    /// code built without frame pointers from its .eh_frame/.debug_frame (with --cpu);
    /// 0: frame-pointer stacks only. At most 65480.
    #[arg(long, value_name = "BYTES", requires = "cpu",
          default_value_t = DEFAULT_USER_STACK_BYTES,
          value_parser = parse_user_stack_bytes)]
    pub user_stack_bytes: u32,
}

/// `--freq`: a whole number of Hz (an `Hz` suffix is allowed), at least 1.
fn parse_freq(text: &str) -> Result<u64, String> {
    let hz: u64 = text
        .trim_end_matches("Hz")
        .parse()
        .map_err(|_| format!("{text:?} is not a frequency in Hz (a whole number)"))?;
    if hz == 0 {
        return Err("the sampling frequency must be at least 1 Hz (99 is the default)".into());
    }
    Ok(hz)
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
