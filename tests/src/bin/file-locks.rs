//! Workload: processes contending on file locks of one file, each measuring its own
//! blocked time.
//! `file-locks [--kinds posix,ofd,flock,lease] [--procs N] [--rounds R] [--hold-us U] [--path P]`
//! starts N worker processes per kind (`posix`: fcntl F_SETLKW, `ofd`: fcntl
//! F_OFD_SETLKW, `flock`: flock LOCK_EX), all on the same file. Each worker takes its
//! lock R times, holds it U microseconds (sleeping), releases it and sleeps U/2
//! microseconds before the next round. POSIX and OFD
//! locks conflict with each other; flock locks only with flock locks.
//! `lease` (not among the default kinds) is a pair of processes: a holder
//! (`kind=lease-holder`) takes a read lease (F_SETLEASE) R times and gives it up after
//! U microseconds; its breaker (`kind=lease`) opens the file for writing each time,
//! which waits in the kernel until the lease is given up.
//! Each worker prints one line when done:
//! `file-locks pid=P kind=K rounds=R blocked_ns=T wall_ns=W`
//! where T is the time it spent off the CPU in the blocking lock calls, measured by
//! itself: their wall time minus its own CPU time in them (in a guest whose virtual CPU
//! the host preempts, that time passes while the task counts as running: it is not a
//! wait for the lock), and W their wall time (an off-CPU time cannot exceed it, whatever
//! the guest's clocks do).

use std::{
    fs::{File, OpenOptions},
    io::{Read, Write},
    os::fd::AsRawFd,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

struct Options {
    kinds: Vec<String>,
    procs: usize,
    rounds: u64,
    hold_us: u64,
    path: String,
    worker: Option<String>,
}

fn options() -> Options {
    let mut options = Options {
        kinds: vec!["posix".into(), "ofd".into(), "flock".into()],
        procs: 3,
        rounds: 50,
        hold_us: 2000,
        path: std::env::temp_dir()
            .join(format!("lockpath-file-locks-{}", std::process::id()))
            .to_string_lossy()
            .into_owned(),
        worker: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().unwrap_or_default();
        match arg.as_str() {
            "--kinds" => options.kinds = value.split(',').map(String::from).collect(),
            "--procs" => options.procs = value.parse().expect("--procs takes a number"),
            "--rounds" => options.rounds = value.parse().expect("--rounds takes a number"),
            "--hold-us" => options.hold_us = value.parse().expect("--hold-us takes a number"),
            "--path" => options.path = value,
            "--worker" => options.worker = Some(value),
            other => panic!("unknown argument {other}"),
        }
    }
    options
}

/// One blocking lock (`lock`) or unlock call of `kind` on `file`.
fn file_lock(file: &File, kind: &str, lock: bool) {
    let fd = file.as_raw_fd();
    let result = match kind {
        "flock" => {
            let op = if lock { libc::LOCK_EX } else { libc::LOCK_UN };
            // SAFETY: flock on a descriptor this process owns.
            unsafe { libc::flock(fd, op) }
        }
        "posix" | "ofd" => {
            // SAFETY: an all-zero flock struct is valid; the fields are set below.
            let mut range: libc::flock = unsafe { std::mem::zeroed() };
            range.l_type = if lock { libc::F_WRLCK } else { libc::F_UNLCK } as i16;
            range.l_whence = libc::SEEK_SET as i16;
            range.l_start = 0;
            range.l_len = 0;
            let cmd = if kind == "ofd" {
                libc::F_OFD_SETLKW
            } else {
                libc::F_SETLKW
            };
            // SAFETY: fcntl with a valid descriptor and a pointer to a live flock struct.
            unsafe { libc::fcntl(fd, cmd, &mut range as *mut libc::flock) }
        }
        other => panic!("unknown lock kind {other} (posix, ofd or flock)"),
    };
    if result != 0 {
        panic!(
            "{kind} {} failed: {}",
            if lock { "lock" } else { "unlock" },
            std::io::Error::last_os_error()
        );
    }
}

/// This thread's CPU time so far.
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the live timespec passed.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

fn worker(options: &Options, kind: &str) {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&options.path)
        .expect("open the lock file");
    // Start together: the parent closes our stdin once every worker is running.
    let mut byte = [0u8; 1];
    let _ = std::io::stdin().read(&mut byte);
    let (mut blocked, mut wall) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..options.rounds {
        let (start, cpu_start) = (Instant::now(), thread_cpu_time());
        file_lock(&file, kind, true);
        let elapsed = start.elapsed();
        wall += elapsed;
        blocked += elapsed.saturating_sub(thread_cpu_time().saturating_sub(cpu_start));
        std::thread::sleep(Duration::from_micros(options.hold_us));
        file_lock(&file, kind, false);
        // Let the others in: the releaser would otherwise often take the lock again
        // before the woken waiters run.
        std::thread::sleep(Duration::from_micros(options.hold_us / 2));
    }
    println!(
        "file-locks pid={} kind={kind} rounds={} blocked_ns={} wall_ns={}",
        std::process::id(),
        options.rounds,
        blocked.as_nanos(),
        wall.as_nanos()
    );
}

/// Starts this program as a worker of `kind`, its stdin and stdout piped.
fn spawn_worker(options: &Options, kind: &str) -> std::process::Child {
    Command::new(std::env::current_exe().expect("own executable"))
        .args(["--worker", kind])
        .args(["--rounds", &options.rounds.to_string()])
        .args(["--hold-us", &options.hold_us.to_string()])
        .args(["--path", &options.path])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start a worker")
}

/// `F_SETLEASE` with `kind` (F_RDLCK, F_UNLCK) on `file`; retries while a writer still
/// has the file open (EAGAIN).
fn set_lease(file: &File, kind: i32) {
    loop {
        // SAFETY: fcntl with a valid descriptor and an integer argument.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLEASE, kind) } == 0 {
            return;
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EAGAIN) {
            panic!("F_SETLEASE failed: {err}");
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The lease holder: takes a read lease, says `leased`, gives it up after `hold_us` and
/// waits for the breaker's `done` before the next round.
fn lease_holder(options: &Options) {
    // SAFETY: ignoring SIGIO, the lease-break signal (its default action ends the
    // process); the holder gives the lease up on its own clock.
    unsafe { libc::signal(libc::SIGIO, libc::SIG_IGN) };
    let file = File::open(&options.path).expect("open the lease file");
    let mut stdin = std::io::stdin().lines();
    for _ in 0..options.rounds {
        set_lease(&file, libc::F_RDLCK);
        println!("leased");
        std::thread::sleep(Duration::from_micros(options.hold_us));
        set_lease(&file, libc::F_UNLCK);
        match stdin.next() {
            Some(Ok(line)) if line == "done" => {}
            _ => panic!("the lease breaker went away"),
        }
    }
    println!(
        "file-locks pid={} kind=lease-holder rounds={} blocked_ns=0 wall_ns=0",
        std::process::id(),
        options.rounds
    );
}

/// The lease breaker: starts its holder, then opens the file for writing once per
/// lease, which waits until the holder gives the lease up.
fn lease_breaker(options: &Options) {
    use std::io::BufRead as _;
    let mut byte = [0u8; 1];
    let _ = std::io::stdin().read(&mut byte);
    let mut holder = spawn_worker(options, "lease-holder");
    let mut to_holder = holder.stdin.take().expect("holder stdin");
    let mut from_holder = std::io::BufReader::new(holder.stdout.take().expect("holder stdout"));
    let (mut blocked, mut wall) = (Duration::ZERO, Duration::ZERO);
    let mut line = String::new();
    for _ in 0..options.rounds {
        line.clear();
        from_holder.read_line(&mut line).expect("read the holder");
        assert_eq!(line.trim(), "leased", "the lease holder failed");
        let (start, cpu_start) = (Instant::now(), thread_cpu_time());
        let file = OpenOptions::new()
            .write(true)
            .open(&options.path)
            .expect("open the lease file for writing");
        let elapsed = start.elapsed();
        wall += elapsed;
        blocked += elapsed.saturating_sub(thread_cpu_time().saturating_sub(cpu_start));
        drop(file);
        writeln!(to_holder, "done").expect("tell the holder");
    }
    drop(to_holder);
    let mut rest = String::new();
    from_holder
        .read_to_string(&mut rest)
        .expect("read the holder");
    assert!(holder.wait().expect("wait for the holder").success());
    print!("{rest}");
    println!(
        "file-locks pid={} kind=lease rounds={} blocked_ns={} wall_ns={}",
        std::process::id(),
        options.rounds,
        blocked.as_nanos(),
        wall.as_nanos()
    );
}

fn main() {
    let options = options();
    match options.worker.as_deref() {
        Some("lease") => return lease_breaker(&options),
        Some("lease-holder") => return lease_holder(&options),
        Some(kind) => return worker(&options, kind),
        None => {}
    }
    File::create(&options.path).expect("create the lock file");
    let mut children = Vec::new();
    for kind in &options.kinds {
        for _ in 0..options.procs {
            children.push(spawn_worker(&options, kind));
        }
    }
    // Every worker is started: let them go at once.
    for child in &mut children {
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(b"g");
        }
    }
    let mut failed = false;
    for child in children {
        let output = child.wait_with_output().expect("wait for a worker");
        print!("{}", String::from_utf8_lossy(&output.stdout));
        failed |= !output.status.success();
    }
    let _ = std::fs::remove_file(&options.path);
    if failed {
        eprintln!("file-locks: a worker failed");
        std::process::exit(1);
    }
}
