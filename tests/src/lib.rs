//! Workload building blocks shared by the workload binaries in `src/bin/`.

/// A clock's time in nanoseconds (`libc::CLOCK_MONOTONIC`: the clock of lockpath's
/// time stamps; `CLOCK_THREAD_CPUTIME_ID`: the calling thread's CPU time).
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given, which lives on this stack.
    unsafe { libc::clock_gettime(clock, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// Creates and closes a pipe: takes kernel spinlocks (fd table, inode allocation).
pub fn pipe_cycle() {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the array; both are closed right after.
    unsafe {
        if libc::pipe(fds.as_mut_ptr()) == 0 {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }
}

/// Opens and closes /dev/null: takes the fd table's spinlock (`files_struct.file_lock`)
/// twice, in `alloc_fd` and `file_close_fd`.
pub fn open_cycle() {
    // SAFETY: a NUL-terminated path; the descriptor is closed right after.
    unsafe {
        let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
        if fd >= 0 {
            libc::close(fd);
        }
    }
}

/// Maps, touches and unmaps anonymous memory: takes the process's mmap_lock (rwsem).
pub fn mmap_cycle() {
    const LEN: usize = 64 * 1024;
    // SAFETY: an anonymous private mapping, touched within its length and unmapped.
    unsafe {
        let addr = libc::mmap(
            std::ptr::null_mut(),
            LEN,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if addr != libc::MAP_FAILED {
            *(addr as *mut u8) = 1;
            libc::munmap(addr, LEN);
        }
    }
}

/// A regular file holding `content`, open for reading and already removed (nothing is
/// left behind), named after the storm `mode` and the process.
fn shared_file(mode: &str, content: &[u8]) -> std::fs::File {
    let path = std::env::temp_dir().join(format!("lock-storm-{mode}-{}", std::process::id()));
    std::fs::write(&path, content).expect("write the shared file");
    let file = std::fs::File::open(&path).expect("open the shared file");
    let _ = std::fs::remove_file(&path);
    file
}

/// Seeks and reads one shared regular file: every thread of the process uses the same
/// descriptor, so each call takes the file's `f_pos_lock` (a mutex inside the `struct
/// file`, an object of the `filp` slab cache).
pub fn file_cycle() {
    static FILE: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();
    let file = FILE.get_or_init(|| shared_file("file", &[7u8; 4096]));
    let fd = std::os::fd::AsRawFd::as_raw_fd(file);
    let mut buf = [0u8; 4096];
    // SAFETY: a descriptor that stays open for the life of the process, and a live
    // buffer of the length passed.
    unsafe {
        libc::lseek(fd, 0, libc::SEEK_SET);
        libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
    }
}

/// The directory `dir_cycle` works in (set once, before the threads start).
pub static STORM_DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Creates and removes a file of the thread's own in one shared directory: each takes
/// the directory's `i_rwsem` for writing, which the threads (and other processes
/// given the same directory) contend, asleep.
pub fn dir_cycle() {
    thread_local! {
        static NAME: std::path::PathBuf = {
            let dir = STORM_DIR.get_or_init(|| {
                let dir = std::env::temp_dir().join(format!("lock-storm-dir-{}", std::process::id()));
                let _ = std::fs::create_dir_all(&dir);
                dir
            });
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            dir.join(format!("t{}-{tid}", std::process::id()))
        };
    }
    NAME.with(|name| {
        let _ = std::fs::File::create(name);
        let _ = std::fs::remove_file(name);
    });
}

/// Takes and drops an exclusive `flock` of one file through the thread's own open of
/// it: the threads wait for each other (asleep, off the CPU), and each take, wait and
/// wake-up takes the spinlock of the file's lock context (`flc_lock`, in an object of
/// the `file_lock_ctx` slab cache, which SLUB merges with other caches of its size),
/// which the threads contend.
pub fn flock_cycle() {
    static SHARED: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();
    thread_local! {
        // The thread's own open of the shared file (removed once open), through the
        // first descriptor's /proc/self/fd link.
        static FILE: std::fs::File = {
            let shared = SHARED.get_or_init(|| shared_file("flock", b"flock"));
            let fd = std::os::fd::AsRawFd::as_raw_fd(shared);
            std::fs::File::open(format!("/proc/self/fd/{fd}")).expect("open the shared file again")
        };
    }
    FILE.with(|file| {
        let fd = std::os::fd::AsRawFd::as_raw_fd(file);
        // SAFETY: flock on a descriptor this thread keeps open.
        unsafe {
            libc::flock(fd, libc::LOCK_EX);
            libc::flock(fd, libc::LOCK_UN);
        }
    });
}

/// Sets the calling thread's name (the process's comm when called from the main thread,
/// inherited by threads started later); the kernel keeps the first 15 bytes.
pub fn set_process_name(name: &str) {
    let mut bytes = name.as_bytes().to_vec();
    bytes.truncate(15);
    bytes.push(0);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, bytes.as_ptr() as libc::c_ulong, 0, 0, 0);
    }
}

pub mod block;
pub mod fuse;
pub mod lock_paths;

/// A workload's `--name value` arguments (and bare `--flag`s), checked against the
/// names it knows: an unknown one, or a value that does not parse, ends it with a panic.
pub struct Args {
    values: Vec<(String, String)>,
}

impl Args {
    /// Reads the process's arguments; `valued` take a value, `flags` do not.
    pub fn parse(valued: &[&str], flags: &[&str]) -> Args {
        let mut values = Vec::new();
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            if flags.contains(&arg.as_str()) {
                values.push((arg, String::new()));
            } else if valued.contains(&arg.as_str()) {
                let value = args.next().unwrap_or_default();
                values.push((arg, value));
            } else {
                panic!("unknown argument {arg}");
            }
        }
        Args { values }
    }

    /// The last value given for `name`, as text.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|(arg, _)| arg == name)
            .map(|(_, value)| value.as_str())
    }

    /// The value of `name` parsed, or `default` when it is not given.
    pub fn get<T: std::str::FromStr>(&self, name: &str, default: T) -> T {
        self.opt(name).unwrap_or(default)
    }

    /// The value of `name` parsed, if it is given.
    pub fn opt<T: std::str::FromStr>(&self, name: &str) -> Option<T> {
        self.text(name).map(|value| {
            value
                .parse()
                .unwrap_or_else(|_| panic!("{name} takes a number, not {value:?}"))
        })
    }

    pub fn flag(&self, name: &str) -> bool {
        self.text(name).is_some()
    }
}

/// Threads that repeat an operation until the workload's time is up, and the count of
/// operations they did.
#[derive(Default)]
pub struct Workers {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ops: std::sync::Arc<std::sync::atomic::AtomicU64>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl Workers {
    pub fn new() -> Workers {
        Workers::default()
    }

    /// A thread that calls `op(done so far)` until the time is up or `op` returns false;
    /// each call that returned true counts.
    pub fn spawn_counted(&mut self, mut op: impl FnMut(u64) -> bool + Send + 'static) {
        use std::sync::atomic::Ordering;
        let (stop, ops) = (self.stop.clone(), self.ops.clone());
        self.handles.push(std::thread::spawn(move || {
            let mut local = 0u64;
            while !stop.load(Ordering::Relaxed) && op(local) {
                local += 1;
            }
            ops.fetch_add(local, Ordering::Relaxed);
        }));
    }

    /// A helper thread that counts nothing; it must end by itself once the counted
    /// threads have stopped.
    pub fn spawn(&mut self, work: impl FnOnce() + Send + 'static) {
        self.handles.push(std::thread::spawn(work));
    }

    /// Lets the threads run for `seconds`, stops and joins them, and prints `ops=N`.
    pub fn run_for(self, seconds: f64) -> u64 {
        use std::sync::atomic::Ordering;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_secs_f64(seconds) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        self.stop.store(true, Ordering::Relaxed);
        for handle in self.handles {
            handle.join().expect("worker panicked");
        }
        let ops = self.ops.load(Ordering::Relaxed);
        println!("ops={ops}");
        ops
    }
}
