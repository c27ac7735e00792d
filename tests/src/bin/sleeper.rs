//! Known-answer off-CPU workload: one thread sleeps `--count` times `--ms` milliseconds
//! with nanosleep and prints its thread id, the sleep time it measured itself and how
//! many of the sleeps left the CPU voluntarily:
//! `sleeper tid=<tid> slept_ns=<total> waits=<n> waits_ns=<their time>`.
//!
//! `waits` is the ground truth of an off-CPU profiler's count: a sleep is one S-state
//! wait when the kernel counted a voluntary context switch for it (the thread's
//! `nvcsw`, the same test `__schedule` makes before it reports a state in
//! `sched_switch`). A sleep that does not is one during which the thread was preempted
//! just before it went to sleep and its timer expired before it ran again: its time
//! was spent runnable, which is no sleep.

use std::time::{Duration, Instant};

/// Voluntary context switches of the calling thread so far.
fn voluntary_switches() -> i64 {
    // SAFETY: an all-zero rusage is a valid value; getrusage only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_THREAD with a valid pointer to a rusage of this thread's stack.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } != 0 {
        panic!("getrusage: {}", std::io::Error::last_os_error());
    }
    usage.ru_nvcsw
}

fn main() {
    let args = lockpath_tests::Args::parse(&["--count", "--ms"], &[]);
    let count = args.get("--count", 20u64);
    let ms = args.get("--ms", 50u64);
    let sleeper = std::thread::Builder::new()
        .name("sleeper".into())
        .spawn(move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            let (mut slept, mut waited, mut waits) = (Duration::ZERO, Duration::ZERO, 0u64);
            for _ in 0..count {
                let switches = voluntary_switches();
                let start = Instant::now();
                std::thread::sleep(Duration::from_millis(ms));
                let took = start.elapsed();
                slept += took;
                if voluntary_switches() > switches {
                    waits += 1;
                    waited += took;
                }
            }
            (tid, slept, waits, waited)
        })
        .expect("spawn the sleeping thread");
    let (tid, slept, waits, waited) = sleeper.join().expect("join the sleeping thread");
    println!(
        "sleeper tid={tid} slept_ns={} waits={waits} waits_ns={}",
        slept.as_nanos(),
        waited.as_nanos()
    );
}
