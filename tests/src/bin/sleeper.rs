//! Known-answer off-CPU workload: one thread sleeps `--count` times `--ms` milliseconds
//! with nanosleep and prints its thread id and the sleep time it measured itself:
//! `sleeper tid=<tid> slept_ns=<total>`.

use std::time::{Duration, Instant};

fn main() {
    let args = lockpath_tests::Args::parse(&["--count", "--ms"], &[]);
    let count = args.get("--count", 20u64);
    let ms = args.get("--ms", 50u64);
    let sleeper = std::thread::Builder::new()
        .name("sleeper".into())
        .spawn(move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            let mut slept = Duration::ZERO;
            for _ in 0..count {
                let start = Instant::now();
                std::thread::sleep(Duration::from_millis(ms));
                slept += start.elapsed();
            }
            (tid, slept)
        })
        .expect("spawn the sleeping thread");
    let (tid, slept) = sleeper.join().expect("join the sleeping thread");
    println!("sleeper tid={tid} slept_ns={}", slept.as_nanos());
}
