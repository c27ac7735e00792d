//! Workload: CPU bound, no system calls while it runs. Threads mix a xorshift state in
//! chunks of 100k steps. `cpu-spin [--seconds S] [--threads N]`; prints `ops=N` (chunks).

use std::hint::black_box;

fn chunk(mut state: u64) -> u64 {
    for _ in 0..100_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
    }
    state
}

fn main() {
    let args = lockpath_tests::Args::parse(&["--seconds", "--threads"], &[]);
    let mut workers = lockpath_tests::Workers::new();
    for index in 0..args.get("--threads", 2usize) {
        let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ index as u64;
        workers.spawn_counted(move |_| {
            state = black_box(chunk(state));
            true
        });
    }
    workers.run_for(args.get("--seconds", 3.0));
}
