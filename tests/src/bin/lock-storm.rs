//! Workload: heavy kernel lock contention for a known time.
//! `lock-storm [--seconds S] [--threads N] [--mode pipe|mmap|open|both] [--name COMM]`
//! pipe: threads create and close pipes (spinlock contention in the kernel);
//! mmap: threads map and unmap memory (mmap_lock rwsem contention);
//! open: threads open and close /dev/null (the fd table's spinlock).
//! `--name` sets the process name (comm, 15 bytes at most) before the threads start,
//! e.g. to test that hostile names are escaped. Prints `ops=N` when done.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

fn main() {
    let mut seconds = 3.0f64;
    let mut threads = 4usize;
    let mut mode = String::from("both");
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().unwrap_or_default();
        match arg.as_str() {
            "--seconds" => seconds = value.parse().expect("--seconds takes a number"),
            "--threads" => threads = value.parse().expect("--threads takes a number"),
            "--mode" => mode = value,
            "--name" => lockpath_tests::set_process_name(&value),
            other => panic!("unknown argument {other}"),
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for index in 0..threads {
        let stop = stop.clone();
        let ops = ops.clone();
        let cycle: fn() = match mode.as_str() {
            "pipe" => lockpath_tests::pipe_cycle,
            "mmap" => lockpath_tests::mmap_cycle,
            "open" => lockpath_tests::open_cycle,
            _ if index % 2 == 1 => lockpath_tests::mmap_cycle,
            _ => lockpath_tests::pipe_cycle,
        };
        handles.push(std::thread::spawn(move || {
            let mut local = 0u64;
            while !stop.load(Ordering::Relaxed) {
                cycle();
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
