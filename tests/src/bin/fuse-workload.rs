//! FUSE ground-truth workload: mounts the delaying fixture (lockpath_tests::fuse) at
//! MOUNTPOINT, runs one scenario against it, and writes its own measurements to
//! RESULTS as `name value` lines (times in nanoseconds).
//!
//! - `latency RESULTS MOUNTPOINT FILES CREATE_MS WRITE_MS`: FILES times create a file
//!   (CREATE delayed), write 4 KiB to it (WRITE delayed) and close it.
//! - `lockwait RESULTS MOUNTPOINT CREATE_MS HEADSTART_MS`: thread A creates `a` (CREATE
//!   delayed: the kernel holds the directory's inode lock meanwhile); HEADSTART_MS later
//!   thread B creates `b` in the same directory and blocks on that lock.

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
         fuse-workload lockwait RESULTS MOUNTPOINT CREATE_MS HEADSTART_MS"
    );
    std::process::exit(2)
}

fn number(text: Option<&String>) -> u64 {
    text.and_then(|text| text.parse().ok())
        .unwrap_or_else(|| usage())
}

fn create(path: &Path) -> std::fs::File {
    OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(path)
        .unwrap_or_else(|err| panic!("create {}: {err}", path.display()))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        usage();
    }
    let results = PathBuf::from(&args[1]);
    let mountpoint = PathBuf::from(&args[2]);
    let mut lines = Vec::new();
    match args[0].as_str() {
        "latency" => {
            let files = number(args.get(3));
            let create_delay = Duration::from_millis(number(args.get(4)));
            let write_delay = Duration::from_millis(number(args.get(5)));
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
            let create_delay = Duration::from_millis(number(args.get(3)));
            let headstart = Duration::from_millis(number(args.get(4)));
            let fixture = FuseFixture::mount(&mountpoint, &[(FUSE_CREATE, create_delay)])
                .expect("mount the FUSE fixture");
            let dir = fixture.path().to_path_buf();
            let a_path = dir.join("a");
            let a = std::thread::Builder::new()
                .name("creator-a".into())
                .spawn(move || {
                    let started = Instant::now();
                    drop(create(&a_path));
                    started.elapsed()
                })
                .expect("spawn A");
            std::thread::sleep(headstart);
            let b_path = dir.join("b");
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
            let a_time = a.join().expect("A");
            let (b_tid, b_time) = b.join().expect("B");
            lines.push(format!("a_create_ns {}", a_time.as_nanos()));
            lines.push(format!("b_create_ns {}", b_time.as_nanos()));
            lines.push(format!("b_tid {b_tid}"));
            drop(fixture);
        }
        _ => usage(),
    }
    lines.push(format!("pid {}", std::process::id()));
    std::fs::write(&results, lines.join("\n") + "\n").expect("write results");
}
