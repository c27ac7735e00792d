//! Workload: context-switch heavy. Pairs of threads bounce one byte over two pipes, so
//! every round trip is two sleeps and two wake-ups.
//! `ping-pong [--seconds S] [--pairs N]`; prints `ops=N` (round trips) when done.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

fn pipe() -> [i32; 2] {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the array.
    let rc = unsafe { libc::pipe(fds.as_mut_ptr()) };
    assert_eq!(rc, 0, "pipe failed");
    fds
}

fn write_byte(fd: i32) -> bool {
    let byte = [1u8];
    // SAFETY: writes one byte from a live buffer.
    unsafe { libc::write(fd, byte.as_ptr().cast(), 1) == 1 }
}

fn read_byte(fd: i32) -> bool {
    let mut byte = [0u8];
    // SAFETY: reads one byte into a live buffer.
    unsafe { libc::read(fd, byte.as_mut_ptr().cast(), 1) == 1 }
}

fn main() {
    let mut seconds = 3.0f64;
    let mut pairs = 1usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().unwrap_or_default();
        match arg.as_str() {
            "--seconds" => seconds = value.parse().expect("--seconds takes a number"),
            "--pairs" => pairs = value.parse().expect("--pairs takes a number"),
            other => panic!("unknown argument {other}"),
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for _ in 0..pairs {
        let ping = pipe();
        let pong = pipe();
        // Echo thread: returns every byte until the pinger closes its end.
        handles.push(std::thread::spawn(move || {
            while read_byte(ping[0]) {
                if !write_byte(pong[1]) {
                    break;
                }
            }
            // SAFETY: closing descriptors this thread owns from here on.
            unsafe { libc::close(pong[1]) };
        }));
        let stop = stop.clone();
        let ops = ops.clone();
        handles.push(std::thread::spawn(move || {
            let mut local = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if !write_byte(ping[1]) || !read_byte(pong[0]) {
                    break;
                }
                local += 1;
            }
            ops.fetch_add(local, Ordering::Relaxed);
            // SAFETY: closing the ping write end ends the echo thread.
            unsafe { libc::close(ping[1]) };
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
