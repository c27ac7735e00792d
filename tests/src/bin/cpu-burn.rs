//! Workload: two hot functions with known shares of the CPU.
//! `cpu-burn [--seconds S | --cpu-seconds C] [--seventy N] [--thirty M] [--fork]`
//! (`--cpu-seconds`: run until the two functions used C seconds of CPU, however busy the
//! machine is.)
//! Each round calls `burn_seventy` for N units of work and `burn_thirty` for M units
//! (default 7 and 3: about 70% and 30%), each call stretched or shrunk by a random factor
//! between 0.5 and 1.5 so that the rounds have no period a sampling clock could alias with
//! (a round of about 1 ms against 999 Hz sampling would otherwise hit the same phase for
//! hundreds of samples). It measures the thread CPU time of each function itself and prints `seventy_ns=A thirty_ns=B rounds=R pid=P` when done.
//! `--fork`: a child process does the work; the parent waits and passes on its status.
//! `--late-thread MS`: sleep MS milliseconds, then do the work in a new thread (prints
//! `tid=T` too).

use std::time::{Duration, Instant};

/// One unit of work: a fixed number of rounds of integer mixing.
const UNIT: u64 = 200_000;

/// `iterations` rounds of integer mixing from `seed`. Always inlined: the samples belong to the
/// named frames that call it (`burn_seventy`, `burn_thirty`), whose constants differ so
/// that the linker cannot merge the two.
#[inline(always)]
fn mix(iterations: u64, seed: u64, rotate: u32, multiplier: u64) -> u64 {
    let mut x = std::hint::black_box(seed);
    for i in 0..iterations {
        x = x.rotate_left(rotate) ^ i.wrapping_mul(multiplier);
    }
    std::hint::black_box(x)
}

#[inline(never)]
fn burn_seventy(iterations: u64) -> u64 {
    mix(iterations, 0x9E37_79B9_7F4A_7C15, 5, 0xBF58_476D_1CE4_E5B9)
}

#[inline(never)]
fn burn_thirty(iterations: u64) -> u64 {
    mix(iterations, 0x94D0_49BB_1331_11EB, 7, 0x2545_F491_4F6C_DD1D)
}

/// A xorshift generator: the jitter needs no quality beyond breaking any period.
struct Jitter(u64);

impl Jitter {
    fn new() -> Self {
        Self((0x9E37_79B9_7F4A_7C15 ^ thread_cpu_ns() ^ (u64::from(std::process::id()) << 32)) | 1)
    }

    /// `units` of work scaled by a factor between 0.5 and 1.5.
    fn iterations(&mut self, units: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        units * UNIT * (512 + self.0 % 1024) / 1024
    }
}

fn thread_cpu_ns() -> u64 {
    lockpath_tests::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn work(seconds: f64, cpu_seconds: Option<f64>, seventy: u64, thirty: u64) {
    let start = Instant::now();
    let (mut seventy_ns, mut thirty_ns, mut rounds) = (0u64, 0u64, 0u64);
    let done = |seventy_ns: u64, thirty_ns: u64| match cpu_seconds {
        Some(cpu) => (seventy_ns + thirty_ns) as f64 >= cpu * 1e9,
        None => start.elapsed() >= Duration::from_secs_f64(seconds),
    };
    let mut jitter = Jitter::new();
    while !done(seventy_ns, thirty_ns) {
        let (seventy_iterations, thirty_iterations) =
            (jitter.iterations(seventy), jitter.iterations(thirty));
        let t0 = thread_cpu_ns();
        burn_seventy(seventy_iterations);
        let t1 = thread_cpu_ns();
        burn_thirty(thirty_iterations);
        let t2 = thread_cpu_ns();
        seventy_ns += t1 - t0;
        thirty_ns += t2 - t1;
        rounds += 1;
    }
    println!(
        "seventy_ns={seventy_ns} thirty_ns={thirty_ns} rounds={rounds} pid={}",
        std::process::id()
    );
}

fn main() {
    let args = lockpath_tests::Args::parse(
        &[
            "--seconds",
            "--seventy",
            "--thirty",
            "--cpu-seconds",
            "--late-thread",
        ],
        &["--fork"],
    );
    let seconds = args.get("--seconds", 3.0f64);
    let seventy = args.get("--seventy", 7u64);
    let thirty = args.get("--thirty", 3u64);
    let fork = args.flag("--fork");
    let cpu_seconds = args.opt("--cpu-seconds");
    let late_thread_ms: Option<u64> = args.opt("--late-thread");
    if let Some(ms) = late_thread_ms {
        std::thread::sleep(Duration::from_millis(ms));
        let worker = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            println!("tid={}", unsafe { libc::gettid() });
            work(seconds, cpu_seconds, seventy, thirty);
        });
        worker.join().expect("worker panicked");
        return;
    }
    if !fork {
        work(seconds, cpu_seconds, seventy, thirty);
        return;
    }
    // SAFETY: single-threaded process; the child only runs Rust code of this program.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        work(seconds, cpu_seconds, seventy, thirty);
        std::process::exit(0);
    }
    let mut status = 0;
    // SAFETY: waiting for our own child with a valid status pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    std::process::exit(if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        1
    });
}
