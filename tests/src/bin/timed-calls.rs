//! Function-latency ground truth.
//!
//! - `timed-calls calls RESULTS N MILLIS`: calls `lockpath_timed_work` N times; each call
//!   busy-waits MILLIS ms (so it stays on CPU and the time is exact). Each call's time is
//!   measured here and written to RESULTS as `call_ns VALUE` lines.
//! - `timed-calls reads RESULTS N`: N `read(2)` calls of one byte from /dev/zero (each
//!   goes through the kernel's `vfs_read`).

use std::{
    io::Read,
    time::{Duration, Instant},
};

/// The function under test: a stable symbol, never inlined.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn lockpath_timed_work(millis: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_millis(millis);
    let mut spins = 0u64;
    while Instant::now() < deadline {
        spins = std::hint::black_box(spins + 1);
    }
    spins
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || -> ! {
        eprintln!("usage: timed-calls calls RESULTS N MILLIS | timed-calls reads RESULTS N");
        std::process::exit(2)
    };
    let number = |index: usize| -> u64 {
        args.get(index)
            .and_then(|text| text.parse().ok())
            .unwrap_or_else(|| usage())
    };
    let Some(results) = args.get(1) else { usage() };
    let mut lines = vec![format!("pid {}", std::process::id())];
    match args.first().map(String::as_str) {
        Some("calls") => {
            let (calls, millis) = (number(2), number(3));
            for _ in 0..calls {
                let started = Instant::now();
                std::hint::black_box(lockpath_timed_work(std::hint::black_box(millis)));
                lines.push(format!("call_ns {}", started.elapsed().as_nanos()));
            }
        }
        Some("reads") => {
            let reads = number(2);
            let mut zero = std::fs::File::open("/dev/zero").expect("open /dev/zero");
            let mut byte = [0u8; 1];
            for _ in 0..reads {
                zero.read_exact(&mut byte).expect("read /dev/zero");
            }
            lines.push(format!("reads {reads}"));
        }
        _ => usage(),
    }
    std::fs::write(results, lines.join("\n") + "\n").expect("write results");
}
