//! Known-answer off-CPU workload: one thread sleeps `--count` times `--ms` milliseconds
//! with nanosleep and prints its thread id and the sleep time it measured itself:
//! `sleeper tid=<tid> slept_ns=<total>`.

use std::time::{Duration, Instant};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

fn main() {
    let count = arg("--count", 20);
    let ms = arg("--ms", 50);
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
