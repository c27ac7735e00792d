//! Workload: a new user call path every step. The path number is the number of steps
//! since the start; its bits, low bit first, choose `left` (0) or `right` (1) at each of
//! `--depth` levels of calls, and the bottom spins until the step is over. So the call
//! path of any moment is known from the clock: `(t - start) / step`.
//! `--sleep-us U`: the bottom sleeps U microseconds at a time instead of spinning, and
//! measures the time it spent in those sleeps.
//! `stack-spread [--seconds S] [--step-ms M] [--depth D] [--sleep-us U]`; prints
//! `start_unix_ns=N step_ns=N depth=D paths=N slept_ns=N` (paths: the steps it went
//! through; slept_ns: the time in sleeps, by the thread's own clock).

use std::{
    cell::Cell,
    hint::black_box,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

struct Walk {
    start: Instant,
    step: Duration,
    depth: u32,
    end: Instant,
    sleep: Option<Duration>,
    slept: Cell<Duration>,
}

impl Walk {
    fn path_now(&self) -> u64 {
        (self.start.elapsed().as_nanos() / self.step.as_nanos()) as u64
    }

    /// Descends one level on the path's bit at `level`; spins at the bottom.
    #[inline(never)]
    fn descend(&self, level: u32, path: u64) -> u64 {
        if level == self.depth {
            return self.bottom(path);
        }
        match (path >> level) & 1 {
            0 => left(self, level, path),
            _ => right(self, level, path),
        }
    }

    #[inline(never)]
    fn bottom(&self, path: u64) -> u64 {
        let mut state = path | 1;
        if let Some(sleep) = self.sleep {
            while self.path_now() == path && Instant::now() < self.end {
                let before = Instant::now();
                std::thread::sleep(sleep);
                self.slept.set(self.slept.get() + before.elapsed());
            }
            return state;
        }
        while self.path_now() == path && Instant::now() < self.end {
            for _ in 0..1000 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
            }
            state = black_box(state);
        }
        state
    }
}

// Not tail calls (the result is used after the call), so each level keeps its frame.
#[inline(never)]
fn left(walk: &Walk, level: u32, path: u64) -> u64 {
    black_box(walk.descend(level + 1, path)).wrapping_add(1)
}

#[inline(never)]
fn right(walk: &Walk, level: u32, path: u64) -> u64 {
    black_box(walk.descend(level + 1, path)).wrapping_add(2)
}

fn main() {
    let args =
        lockpath_tests::Args::parse(&["--seconds", "--step-ms", "--depth", "--sleep-us"], &[]);
    let seconds: f64 = args.get("--seconds", 5.0);
    let step = Duration::from_secs_f64(args.get("--step-ms", 10.0) / 1000.0);
    let depth: u32 = args.get("--depth", 16);
    let start_unix_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let start = Instant::now();
    let walk = Walk {
        start,
        step,
        depth,
        end: start + Duration::from_secs_f64(seconds),
        sleep: args.opt::<u64>("--sleep-us").map(Duration::from_micros),
        slept: Cell::new(Duration::ZERO),
    };
    let mut paths = 0u64;
    let mut sum = 0u64;
    while Instant::now() < walk.end {
        sum = sum.wrapping_add(walk.descend(0, walk.path_now()));
        paths += 1;
    }
    black_box(sum);
    println!(
        "start_unix_ns={start_unix_ns} step_ns={} depth={depth} paths={paths} slept_ns={}",
        step.as_nanos(),
        walk.slept.get().as_nanos()
    );
}
