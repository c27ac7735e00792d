//! Workload: heavy kernel lock contention for a known time.
//! `lock-storm [--seconds S] [--threads N] [--mode pipe|mmap|open|file|flock|dir|both] [--dir DIR] [--name COMM] [--rename COMM]`
//! pipe: threads create and close pipes (spinlock contention in the kernel);
//! mmap: threads map and unmap memory (mmap_lock rwsem contention);
//! open: threads open and close /dev/null (the fd table's spinlock);
//! file: threads seek and read one shared file (its `f_pos_lock` mutex, in a slab object);
//! flock: threads take and drop exclusive flocks of one file (its lock context's
//! spinlock, in an object of a cache SLUB merges with others).
//! dir: threads create and remove files in one directory (`--dir DIR`, default a new
//! one under the temporary directory): its `i_rwsem`, asleep; processes given the same
//! DIR contend with each other.
//! `--name` sets the process name (comm, 15 bytes at most) before the threads start,
//! e.g. to test that hostile names are escaped. `--rename` renames every thread, the
//! main one included, halfway through the run (after each has contended under its first
//! name), as programs that name their threads once they run do. Prints `ops=N` when
//! done.

fn main() {
    let args = lockpath_tests::Args::parse(
        &[
            "--seconds",
            "--threads",
            "--mode",
            "--name",
            "--dir",
            "--rename",
        ],
        &[],
    );
    if let Some(name) = args.text("--name") {
        lockpath_tests::set_process_name(name);
    }
    if let Some(dir) = args.text("--dir") {
        std::fs::create_dir_all(dir).expect("create the --dir directory");
        let _ = lockpath_tests::STORM_DIR.set(dir.into());
    }
    let mode = args.text("--mode").unwrap_or("both");
    let seconds = args.get("--seconds", 3.0);
    let rename = args.text("--rename").map(str::to_string);
    let (started, half) = (
        std::time::Instant::now(),
        std::time::Duration::from_secs_f64(seconds / 2.0),
    );
    let mut workers = lockpath_tests::Workers::new();
    for index in 0..args.get("--threads", 4usize) {
        let cycle: fn() = match mode {
            "pipe" => lockpath_tests::pipe_cycle,
            "mmap" => lockpath_tests::mmap_cycle,
            "open" => lockpath_tests::open_cycle,
            "file" => lockpath_tests::file_cycle,
            "flock" => lockpath_tests::flock_cycle,
            "dir" => lockpath_tests::dir_cycle,
            _ if index % 2 == 1 => lockpath_tests::mmap_cycle,
            _ => lockpath_tests::pipe_cycle,
        };
        let mut rename = rename.clone();
        workers.spawn_counted(move |_| {
            cycle();
            if started.elapsed() >= half {
                if let Some(name) = rename.take() {
                    lockpath_tests::set_process_name(&name);
                }
            }
            true
        });
    }
    match rename {
        Some(name) => {
            std::thread::sleep(half);
            lockpath_tests::set_process_name(&name);
            workers.run_for(seconds / 2.0)
        }
        None => workers.run_for(seconds),
    };
}
