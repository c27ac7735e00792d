//! Workload: CPU bound, no system calls while it runs. Threads mix a xorshift state in
//! chunks of 100k steps. `cpu-spin [--seconds S] [--threads N]`; prints `ops=N` (chunks).

use std::{
    hint::black_box,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

fn chunk(mut state: u64) -> u64 {
    for _ in 0..100_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
    }
    state
}

fn main() {
    let mut seconds = 3.0f64;
    let mut threads = 2usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().unwrap_or_default();
        match arg.as_str() {
            "--seconds" => seconds = value.parse().expect("--seconds takes a number"),
            "--threads" => threads = value.parse().expect("--threads takes a number"),
            other => panic!("unknown argument {other}"),
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for index in 0..threads {
        let stop = stop.clone();
        let ops = ops.clone();
        handles.push(std::thread::spawn(move || {
            let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ index as u64;
            let mut local = 0u64;
            while !stop.load(Ordering::Relaxed) {
                state = black_box(chunk(state));
                local += 1;
            }
            ops.fetch_add(local, Ordering::Relaxed);
        }));
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs_f64(seconds) {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.join().expect("worker panicked");
    }
    println!("ops={}", ops.load(Ordering::Relaxed));
}
