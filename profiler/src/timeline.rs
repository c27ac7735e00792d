//! `record --interval DUR`: reads the lock, off-CPU and IO aggregates at every interval
//! boundary and keeps the differences (the design, and why not in the kernel, is in
//! the profile crate's timeline.rs).

use std::time::Duration;

use anyhow::{bail, Result};

use lockpath_profile::timeline::{totals, Builder};

use crate::{cli::RecordArgs, profile::Profile};

/// Shortest interval: the maps are read (and new stacks symbolized) at every boundary,
/// and the recording loop wakes every 10 to 50 ms.
pub const MIN_INTERVAL_NS: u64 = 100_000_000;

/// Checks `--interval` against the families asked for (`asked`; lock is recorded when
/// nothing is asked).
pub fn check(args: &RecordArgs, asked: &[&str]) -> Result<()> {
    let Some(interval) = args.interval else {
        return Ok(());
    };
    if interval < MIN_INTERVAL_NS {
        bail!("--interval must be at least 100ms (the aggregates are read at every interval)");
    }
    let lock = args.families.lock.lock || asked.is_empty() || asked.contains(&"lock");
    if !lock && !asked.contains(&"offcpu") && !asked.contains(&"io") {
        bail!(
            "--interval keeps lock and off-CPU wait time and block-IO writes over the run: \
             add --lock, --offcpu or --io"
        );
    }
    Ok(())
}

/// The timeline of one recording.
pub struct Recorder {
    interval: Duration,
    next: Duration,
    builder: Builder,
}

impl Recorder {
    pub fn new(interval_ns: u64) -> Self {
        let interval = Duration::from_nanos(interval_ns);
        Recorder {
            interval,
            next: interval,
            builder: Builder::new(interval.as_secs_f64()),
        }
    }

    /// Whether a boundary has passed at `elapsed` since the start of the recording.
    pub fn due(&self, elapsed: Duration) -> bool {
        elapsed >= self.next
    }

    /// Closes the interval with a live snapshot (`live.duration_s`: when it was read).
    pub fn sample(&mut self, live: &Profile) {
        self.builder.add(live.duration_s, totals(live));
        // The next boundary on the grid, skipping any a slow read overran.
        let elapsed = Duration::from_secs_f64(live.duration_s.max(0.0));
        while self.next <= elapsed {
            self.next += self.interval;
        }
    }

    /// The last interval ends with the final profile; the sum over the intervals is
    /// then each total of the profile.
    pub fn finish(self, profile: &mut Profile) {
        profile.timeline = Some(self.builder.finish(profile));
    }
}
