//! Workload: one lock reached by two call paths through one non-inlined wrapper, one
//! path frequent with short holds, the other rare with long ones.
//!
//! The lock is a shared file's `f_pos_lock` mutex, which `fdget_pos` takes for `read`
//! and for `readv` (the threads share the descriptor table, so every call takes it) and
//! holds for the whole copy from the page cache. The threads alternate phases in step,
//! by the clock: in a `read` phase each call reads `--short` bytes (4 KiB), in a
//! `readv` phase `--long` bytes (1 MiB by default); `--long-percent` of each
//! `--phase-us` period (half of 2 ms) is a `readv` phase. A `readv` holds the lock many
//! times as long as a `read` (about ten times for 96 KiB, a hundred for 1 MiB), so its phases have far fewer calls and contentions than the `read` phases
//! of the same length, and much longer waits.
//!
//! `lock-paths [--seconds S] [--threads N] [--short B] [--long B] [--phase-us U]
//! [--long-percent P] [--results FILE]` writes to FILE (`name value` lines):
//! - `hold_read_ns`, `hold_readv_ns`: the mean time of one call of each kind with one
//!   thread alone, measured before the threads start: the hold times (the lock is held
//!   for nearly all of the call);
//! - `read_calls`, `readv_calls`, `lseek_calls`: calls made by the threads (an `lseek`
//!   rewinds the file at its end, through the same wrapper);
//! - `read_ns`, `readv_ns`: the time the threads spent inside each kind of call, waits
//!   for the lock included (a wait on the lock lies within its call).

use std::{
    os::fd::AsRawFd,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

/// Size of the shared file: rewound after every 32 `readv` of 1 MiB.
const FILE_BYTES: usize = 32 << 20;

#[derive(Default)]
struct Totals {
    read_calls: AtomicU64,
    readv_calls: AtomicU64,
    lseek_calls: AtomicU64,
    read_ns: AtomicU64,
    readv_ns: AtomicU64,
}

/// One call of the kind `long` selects on `fd` into `buf` (`len` bytes); rewinds the file
/// at its end. Returns the nanoseconds the call took.
fn call(fd: i32, buf: &mut [u8], len: usize, long: bool, totals: &Totals) -> u64 {
    let len = len.min(buf.len());
    let started = Instant::now();
    let got = if long {
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: len,
        };
        // SAFETY: one iovec over a live buffer of at least `len` bytes; `fd` stays open
        // for the life of the process.
        unsafe { libc::readv(fd, &iov, 1) }
    } else {
        // SAFETY: as above, for read.
        unsafe { libc::read(fd, buf.as_mut_ptr().cast(), len) }
    };
    let took = started.elapsed().as_nanos() as u64;
    if got < len as isize {
        // SAFETY: rewinding an open descriptor.
        unsafe { libc::lseek(fd, 0, libc::SEEK_SET) };
        totals.lseek_calls.fetch_add(1, Ordering::Relaxed);
    }
    took
}

fn main() {
    let args = lockpath_tests::Args::parse(
        &[
            "--seconds",
            "--threads",
            "--short",
            "--long",
            "--phase-us",
            "--long-percent",
            "--results",
        ],
        &[],
    );
    let seconds: f64 = args.get("--seconds", 5.0);
    let threads: usize = args.get("--threads", 4);
    let short: usize = args.get("--short", 4096);
    let long: usize = args.get("--long", 1 << 20);
    let period_ns: u64 = args.get("--phase-us", 2000u64) * 1000;
    let long_ns = period_ns * args.get("--long-percent", 50u64).min(100) / 100;

    let path = std::env::temp_dir().join(format!("lock-paths-{}", std::process::id()));
    std::fs::write(&path, vec![7u8; FILE_BYTES]).expect("write the shared file");
    let file = Arc::new(std::fs::File::open(&path).expect("open the shared file"));
    let _ = std::fs::remove_file(&path);
    let fd = file.as_raw_fd();
    let totals = Arc::new(Totals::default());

    // The hold times: one thread alone (no contention), the page cache warm.
    let mut buf = vec![0u8; short.max(long)];
    let mut hold = |len: usize, long_call: bool| -> u64 {
        let scratch = Totals::default();
        for _ in 0..200 {
            call(fd, &mut buf, len, long_call, &scratch);
        }
        let rounds = 2000u64;
        let total: u64 = (0..rounds)
            .map(|_| call(fd, &mut buf, len, long_call, &scratch))
            .sum();
        total / rounds
    };
    let hold_read_ns = hold(short, false);
    let hold_readv_ns = hold(long, true);

    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (stop, totals, file) = (stop.clone(), totals.clone(), file.clone());
            std::thread::spawn(move || {
                let fd = file.as_raw_fd();
                let mut buf = vec![0u8; short.max(long)];
                while !stop.load(Ordering::Relaxed) {
                    let long_phase = (start.elapsed().as_nanos() as u64 % period_ns) < long_ns;
                    let (len, calls, time) = if long_phase {
                        (long, &totals.readv_calls, &totals.readv_ns)
                    } else {
                        (short, &totals.read_calls, &totals.read_ns)
                    };
                    let took = call(fd, &mut buf, len, long_phase, &totals);
                    calls.fetch_add(1, Ordering::Relaxed);
                    time.fetch_add(took, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.join().expect("worker panicked");
    }
    let text = format!(
        "hold_read_ns {hold_read_ns}\nhold_readv_ns {hold_readv_ns}\nread_calls {}\n\
         readv_calls {}\nlseek_calls {}\nread_ns {}\nreadv_ns {}\n",
        totals.read_calls.load(Ordering::Relaxed),
        totals.readv_calls.load(Ordering::Relaxed),
        totals.lseek_calls.load(Ordering::Relaxed),
        totals.read_ns.load(Ordering::Relaxed),
        totals.readv_ns.load(Ordering::Relaxed),
    );
    print!("{text}");
    if let Some(results) = args.text("--results") {
        std::fs::write(results, text).expect("write the results");
    }
}
