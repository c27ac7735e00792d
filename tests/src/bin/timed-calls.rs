//! Function-latency ground truth.
//!
//! - `timed-calls calls RESULTS N MILLIS`: calls `lockpath_timed_work` N times; each call
//!   busy-waits MILLIS ms (so it stays on CPU and the time is exact). Each call's time is
//!   measured here and written to RESULTS as `call_ns VALUE` lines, with when it began
//!   (`call_since_ns`, CLOCK_MONOTONIC).
//! - `timed-calls reads RESULTS N`: N `read(2)` calls of one byte from /dev/zero (each
//!   goes through the kernel's `vfs_read`).
//! - `timed-calls pipe RESULTS N`: N rounds of writing one byte to a pipe and reading it
//!   back (each takes the pipe's mutex twice and wait-queue spinlocks); writes the mean
//!   time of a round, `ns_per_op` (for the cost of `--hold` on mutexes and spinlocks).
//! - `timed-calls mmap RESULTS N`: N rounds of mmap + munmap of one anonymous page (each
//!   takes the process's mmap_lock, an rwsem, for writing); writes `ns_per_op`.
//! - `timed-calls fsyncs RESULTS DIR FILES ROUNDS`: creates FILES files `fsyncI` in DIR;
//!   into each, ROUNDS times, writes 128 KiB and calls fsync(2). Writes each file's
//!   summed time in fsync, `fsyncI_ns`, measured around the call.

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
        eprintln!(
            "usage: timed-calls calls RESULTS N MILLIS | timed-calls reads|pipe|mmap RESULTS N \
             | timed-calls fsyncs RESULTS DIR FILES ROUNDS"
        );
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
                let since = lockpath_tests::clock_ns(libc::CLOCK_MONOTONIC);
                lines.push(format!("call_since_ns {since}"));
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
        Some("pipe") => {
            let rounds = number(2);
            let mut fds = [0 as libc::c_int; 2];
            // SAFETY: pipe(2) fills the two descriptors of a 2-element array we own.
            if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
                panic!("pipe: {}", std::io::Error::last_os_error());
            }
            let mut byte = [7u8; 1];
            let started = Instant::now();
            for _ in 0..rounds {
                // SAFETY: one byte to/from a buffer we own, on our own pipe.
                let (written, read) = unsafe {
                    (
                        libc::write(fds[1], byte.as_ptr().cast(), 1),
                        libc::read(fds[0], byte.as_mut_ptr().cast(), 1),
                    )
                };
                assert!(written == 1 && read == 1, "pipe round failed");
            }
            let elapsed = started.elapsed();
            lines.push(format!(
                "ns_per_op {}",
                elapsed.as_nanos() / u128::from(rounds.max(1))
            ));
        }
        Some("mmap") => {
            let rounds = number(2);
            let started = Instant::now();
            for _ in 0..rounds {
                // SAFETY: an anonymous private mapping of one page, unmapped at once; no
                // reference to it escapes.
                unsafe {
                    let page = libc::mmap(
                        std::ptr::null_mut(),
                        4096,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    );
                    assert!(page != libc::MAP_FAILED, "mmap failed");
                    libc::munmap(page, 4096);
                }
            }
            let elapsed = started.elapsed();
            lines.push(format!(
                "ns_per_op {}",
                elapsed.as_nanos() / u128::from(rounds.max(1))
            ));
        }
        Some("fsyncs") => {
            let dir = std::path::Path::new(args.get(2).unwrap_or_else(|| usage()));
            let (files, rounds) = (number(3), number(4));
            let block = vec![7u8; 128 * 1024];
            for index in 0..files {
                let mut file =
                    std::fs::File::create(dir.join(format!("fsync{index}"))).expect("create");
                let mut in_fsync = Duration::ZERO;
                for _ in 0..rounds {
                    std::io::Write::write_all(&mut file, &block).expect("write");
                    let started = Instant::now();
                    file.sync_all().expect("fsync");
                    in_fsync += started.elapsed();
                }
                lines.push(format!("fsync{index}_ns {}", in_fsync.as_nanos()));
            }
        }
        _ => usage(),
    }
    std::fs::write(results, lines.join("\n") + "\n").expect("write results");
}
