//! FUSE ground-truth workload: mounts the delaying fixture (lockpath_tests::fuse) at
//! MOUNTPOINT, runs one scenario against it, and writes its own measurements to
//! RESULTS as `name value` lines (times in nanoseconds).
//!
//! - `latency RESULTS MOUNTPOINT FILES CREATE_MS WRITE_MS`: FILES times create a file
//!   (CREATE delayed), write 4 KiB to it (WRITE delayed) and close it.
//! - `lockwait RESULTS MOUNTPOINT CREATE_MS HEADSTART_MS`: process A (a child) creates
//!   `a-1` (CREATE delayed: the kernel holds the directory's inode lock meanwhile);
//!   HEADSTART_MS later thread B creates `b-1` in the same directory and blocks on that
//!   lock, held by A.
//! - `serve STOPFILE MOUNTPOINT CREATE_MS`: mounts the fixture and keeps it until
//!   STOPFILE exists (for several recordings against one directory inode).
//! - `lockwait-client RESULTS DIR HEADSTART_MS TAG`: lockwait against a served mount,
//!   with files `a-TAG`, `b-TAG` (A in the cgroup `LOCKWAIT_A_CGROUP` names, if set).
//! - `holdchain RESULTS MOUNTPOINT CREATE_MS`: three threads create `t1`, `t2`, `t3` in
//!   the directory at 0, +40 ms and +80 ms; each CREATE is delayed, so each holds the
//!   directory's inode lock across it while the later ones wait. Writes when each create
//!   returned (`tN_end_ns`, from a common start) and the threads' ids (`tN_tid`).
//! - `holdchain-client RESULTS DIR TAG`: holdchain against a served mount, with files
//!   `t1-TAG`, `t2-TAG`, `t3-TAG`.
//! - `interrupted RESULTS MOUNTPOINT CREATE_MS WAIT_MS`: process A creates `a` (CREATE
//!   delayed: A holds the directory's inode lock); 50 ms later process B lists the
//!   directory and blocks on that lock (`down_read_killable` in `iterate_dir`); WAIT_MS
//!   after B said it was about to list, B is killed with SIGKILL, so its wait ends
//!   without the lock (`-EINTR`). Writes both pids and the time from B's word to the
//!   kill (`a_pid`, `b_pid`, `b_wait_ns`).
//! - `stuck RESULTS MOUNTPOINT CREATE_MS`: the hung client. Process A creates `a` (CREATE
//!   delayed: A holds the directory's inode lock across it); once A sleeps on the FUSE
//!   reply, process B creates `b` and blocks on that lock. When both are stuck it writes
//!   RESULTS.ready: `a_pid`, `b_pid`, `server_pid` and, in CLOCK_MONOTONIC nanoseconds,
//!   when each call began (`a_since_ns`, `b_since_ns`); when both returned, RESULTS with
//!   the same and each call's own time (`a_create_ns`, `b_create_ns`).

use std::{
    fs::OpenOptions,
    io::Write,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use lockpath_tests::fuse::{FuseFixture, FUSE_CREATE, FUSE_WRITE};

fn usage() -> ! {
    eprintln!(
        "usage: fuse-workload latency RESULTS MOUNTPOINT FILES CREATE_MS WRITE_MS\n       \
         fuse-workload lockwait RESULTS MOUNTPOINT CREATE_MS HEADSTART_MS\n       \
         fuse-workload serve STOPFILE MOUNTPOINT CREATE_MS\n       \
         fuse-workload lockwait-client RESULTS DIR HEADSTART_MS TAG\n       \
         fuse-workload holdchain RESULTS MOUNTPOINT CREATE_MS\n       \
         fuse-workload holdchain-client RESULTS DIR TAG\n       \
         fuse-workload interrupted RESULTS MOUNTPOINT CREATE_MS WAIT_MS\n       \
         fuse-workload stuck RESULTS MOUNTPOINT CREATE_MS"
    );
    std::process::exit(2)
}

fn number(text: Option<&String>) -> u64 {
    text.and_then(|text| text.parse().ok())
        .unwrap_or_else(|| usage())
}

/// The FUSE fixture mounted at `mountpoint`, answering CREATE after `create_delay`.
fn mount_delaying_create(mountpoint: &Path, create_delay: Duration) -> FuseFixture {
    FuseFixture::mount(mountpoint, &[(FUSE_CREATE, create_delay)]).expect("mount the FUSE fixture")
}

fn create(path: &Path) -> std::fs::File {
    OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(path)
        .unwrap_or_else(|err| panic!("create {}: {err}", path.display()))
}

/// Process A creates `a-TAG` in DIR (its CREATE delayed: the kernel holds DIR's inode
/// lock meanwhile); HEADSTART later thread B of this process creates `b-TAG` there and
/// blocks on that lock, held by A. With `LOCKWAIT_A_CGROUP=DIR` in the environment, A
/// starts in that cgroup v2 directory (moved there before it runs).
fn lock_wait(dir: &Path, headstart: Duration, tag: &str, lines: &mut Vec<String>) {
    use std::os::unix::{ffi::OsStrExt, process::CommandExt};
    let exe = std::env::current_exe().expect("own executable");
    let mut command = std::process::Command::new(exe);
    command
        .arg("create-one")
        .arg("-")
        .arg(dir.join(format!("a-{tag}")))
        .stdout(std::process::Stdio::piped());
    if let Some(cgroup) = std::env::var_os("LOCKWAIT_A_CGROUP") {
        let procs = std::ffi::CString::new(
            Path::new(&cgroup)
                .join("cgroup.procs")
                .as_os_str()
                .as_bytes(),
        )
        .expect("a cgroup path without NUL");
        // SAFETY: between fork and exec the closure calls only open, write and close
        // (async-signal-safe), on a path built before the fork; writing 0 to
        // cgroup.procs moves the writing process.
        unsafe {
            command.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
                match written {
                    1 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                }
            });
        }
    }
    let a = command.spawn().expect("spawn A");
    let a_pid = a.id();
    std::thread::sleep(headstart);
    wait_in_fuse_request(a_pid);
    let b_path = dir.join(format!("b-{tag}"));
    let b = std::thread::Builder::new()
        .name("creator-b".into())
        .spawn(move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            let started = Instant::now();
            drop(create(&b_path));
            (tid, started.elapsed())
        })
        .expect("spawn B");
    let a_out = a.wait_with_output().expect("wait for A");
    let (b_tid, b_time) = b.join().expect("B");
    let a_ns = String::from_utf8_lossy(&a_out.stdout).trim().to_string();
    lines.push(format!("a_create_ns {a_ns}"));
    lines.push(format!("a_pid {a_pid}"));
    lines.push(format!("b_create_ns {}", b_time.as_nanos()));
    lines.push(format!("b_tid {b_tid}"));
}

/// CLOCK_MONOTONIC in nanoseconds (the clock of lockpath's time stamps).
fn monotonic_ns() -> u64 {
    lockpath_tests::clock_ns(libc::CLOCK_MONOTONIC)
}

/// A child process that creates `path` and prints when the call began (CLOCK_MONOTONIC
/// ns) before it makes it, then the call's own time.
fn spawn_stamped_creator(path: &Path) -> (std::process::Child, u64) {
    use std::io::BufRead;
    let exe = std::env::current_exe().expect("own executable");
    let mut child = std::process::Command::new(exe)
        .arg("create-stamped")
        .arg("-")
        .arg(path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn a creator");
    let stdout = child.stdout.as_mut().expect("the creator's output");
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the creator's start");
    let since = line.trim().parse().expect("a start time");
    (child, since)
}

/// Waits (at most 5 s) until process `pid` is in uninterruptible sleep (D).
fn wait_in_d_state(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next());
        if state == Some("D") {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    eprintln!("fuse-workload: process {pid} never blocked within 5 s");
}

/// The hung client (see `stuck` above).
fn stuck(dir: &Path, results: &Path, lines: &mut Vec<String>) {
    let (a, a_since) = spawn_stamped_creator(&dir.join("a"));
    wait_in_fuse_request(a.id());
    let (b, b_since) = spawn_stamped_creator(&dir.join("b"));
    wait_in_d_state(b.id());
    lines.push(format!("a_pid {}", a.id()));
    lines.push(format!("b_pid {}", b.id()));
    lines.push(format!("server_pid {}", std::process::id()));
    lines.push(format!("a_since_ns {a_since}"));
    lines.push(format!("b_since_ns {b_since}"));
    let ready = results.with_extension("ready");
    std::fs::write(&ready, lines.join("\n") + "\n").expect("write the ready file");
    for (name, child) in [("a", a), ("b", b)] {
        let output = child.wait_with_output().expect("wait for a creator");
        let create_ns = String::from_utf8_lossy(&output.stdout).trim().to_string();
        lines.push(format!("{name}_create_ns {create_ns}"));
    }
}

/// Waits (at most 5 s) until process `pid` sleeps on a FUSE reply (its kernel stack in
/// `/proc/PID/stack`, else `/proc/PID/wchan`, which x86 kernels before 5.16 leave at 0
/// without frame pointers): from then on it holds the directory's inode lock, so B
/// queues behind A even when the headstart passed before A got a CPU (a starved guest).
fn wait_in_fuse_request(pid: u32) {
    let in_fuse = |text: &str| text.contains("fuse_") || text.contains("request_wait_answer");
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let stack = std::fs::read_to_string(format!("/proc/{pid}/stack"));
        let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan"));
        match (stack, wchan) {
            (Err(_), Err(_)) => return, // A is gone: B finds out by itself
            (Ok(text), _) | (_, Ok(text)) if in_fuse(&text) => return,
            _ => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    eprintln!("fuse-workload: process {pid} never slept on a FUSE reply within 5 s");
}

/// Three threads create `t1TAG`, `t2TAG`, `t3TAG` in DIR at 0, +40 and +80 ms; with the
/// CREATE delayed, each holds DIR's inode lock across its own create while the later
/// ones wait. Notes when each create returned (from a common start) and the thread ids.
fn hold_chain(dir: &Path, tag: &str, lines: &mut Vec<String>) {
    let start = Instant::now();
    let creators: Vec<_> = (1..=3u64)
        .map(|index| {
            let path = dir.join(format!("t{index}{tag}"));
            std::thread::Builder::new()
                .name(format!("creator-{index}"))
                .spawn(move || {
                    std::thread::sleep(Duration::from_millis(40 * (index - 1)));
                    // SAFETY: gettid has no preconditions.
                    let tid = unsafe { libc::gettid() };
                    drop(create(&path));
                    (index, tid, start.elapsed())
                })
                .expect("spawn a creator")
        })
        .collect();
    for creator in creators {
        let (index, tid, end) = creator.join().expect("creator");
        lines.push(format!("t{index}_end_ns {}", end.as_nanos()));
        lines.push(format!("t{index}_tid {tid}"));
    }
}

/// Process B of `interrupted`: lists DIR while A's create holds DIR's inode lock, and is
/// killed while it waits. It says "listing" on stdout just before the wait.
fn interrupted(dir: &Path, wait: Duration, lines: &mut Vec<String>) {
    use std::io::{BufRead, BufReader};
    let exe = std::env::current_exe().expect("own executable");
    let mut a = std::process::Command::new(&exe)
        .arg("create-one")
        .arg("-")
        .arg(dir.join("a"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn A");
    std::thread::sleep(Duration::from_millis(50));
    wait_in_fuse_request(a.id());
    let mut b = std::process::Command::new(&exe)
        .arg("list-one")
        .arg("-")
        .arg(dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn B");
    let mut word = String::new();
    let stdout = b.stdout.take().expect("B's stdout");
    BufReader::new(stdout)
        .read_line(&mut word)
        .expect("B's word");
    let said = Instant::now();
    std::thread::sleep(wait);
    b.kill().expect("kill B");
    let waited = said.elapsed();
    let status = b.wait().expect("reap B");
    a.wait().expect("wait for A");
    assert!(
        word.trim() == "listing" && !status.success(),
        "B must have been killed while listing (said {word:?}, {status})"
    );
    lines.push(format!("a_pid {}", a.id()));
    lines.push(format!("b_pid {}", b.id()));
    lines.push(format!("b_wait_ns {}", waited.as_nanos()));
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        usage();
    }
    let results = PathBuf::from(&args[1]);
    let mountpoint = PathBuf::from(&args[2]);
    let millis = |index: usize| Duration::from_millis(number(args.get(index)));
    let mut lines = Vec::new();
    match args[0].as_str() {
        "latency" => {
            let files = number(args.get(3));
            let create_delay = millis(4);
            let write_delay = millis(5);
            let fixture = FuseFixture::mount(
                &mountpoint,
                &[(FUSE_CREATE, create_delay), (FUSE_WRITE, write_delay)],
            )
            .expect("mount the FUSE fixture");
            for index in 0..files {
                let path = fixture.path().join(format!("file{index}"));
                let started = Instant::now();
                let mut file = create(&path);
                lines.push(format!("create_ns {}", started.elapsed().as_nanos()));
                let started = Instant::now();
                file.write_all(&[7u8; 4096]).expect("write");
                lines.push(format!("write_ns {}", started.elapsed().as_nanos()));
            }
            drop(fixture);
        }
        "lockwait" => {
            let create_delay = millis(3);
            let headstart = millis(4);
            let fixture = mount_delaying_create(&mountpoint, create_delay);
            lock_wait(fixture.path(), headstart, "1", &mut lines);
            drop(fixture);
        }
        "stuck" => {
            let fixture = mount_delaying_create(&mountpoint, millis(3));
            stuck(fixture.path(), &results, &mut lines);
            drop(fixture);
        }
        "holdchain" => {
            let fixture = mount_delaying_create(&mountpoint, millis(3));
            hold_chain(fixture.path(), "", &mut lines);
            drop(fixture);
        }
        "interrupted" => {
            let create_delay = millis(3);
            let wait = millis(4);
            let fixture = mount_delaying_create(&mountpoint, create_delay);
            interrupted(fixture.path(), wait, &mut lines);
            drop(fixture);
        }
        "list-one" => {
            // B's side of interrupted: lists the directory (blocks on its inode lock).
            println!("listing");
            std::io::stdout().flush().expect("flush");
            let entries = std::fs::read_dir(&mountpoint).expect("open the directory");
            println!("listed {}", entries.count());
            return;
        }
        "holdchain-client" => {
            let tag = args.get(3).unwrap_or_else(|| usage());
            hold_chain(&mountpoint, &format!("-{tag}"), &mut lines);
        }
        "lockwait-client" => {
            let headstart = millis(3);
            let tag = args.get(4).unwrap_or_else(|| usage());
            lock_wait(&mountpoint, headstart, tag, &mut lines);
        }
        "serve" => {
            let fixture = mount_delaying_create(&mountpoint, millis(3));
            // RESULTS is the stop file here: its appearance ends the service.
            println!("serving {}", fixture.path().display());
            while !results.exists() {
                std::thread::sleep(Duration::from_millis(20));
            }
            drop(fixture);
            return;
        }
        "create-stamped" => {
            // A creator of `stuck`: when the call began, then its own time.
            println!("{}", monotonic_ns());
            std::io::stdout().flush().expect("flush");
            let started = Instant::now();
            // A test ends a stuck call by killing the server: the call fails then.
            if let Err(err) = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&mountpoint)
            {
                eprintln!("fuse-workload: create {}: {err}", mountpoint.display());
                std::process::exit(1);
            }
            println!("{}", started.elapsed().as_nanos());
            return;
        }
        "create-one" => {
            // A's side of lockwait, in a process of its own: prints its create time.
            let started = Instant::now();
            drop(create(&mountpoint));
            println!("{}", started.elapsed().as_nanos());
            return;
        }
        _ => usage(),
    }
    lines.push(format!("pid {}", std::process::id()));
    std::fs::write(&results, lines.join("\n") + "\n").expect("write results");
}
