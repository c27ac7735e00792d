//! Workload: file creation in a large directory (meant for ext4 on a loop device).
//! `io-create --dir DIR [--seconds S] [--threads N] [--prefill N] [--fsync-every N]`
//! First makes sure DIR holds `--prefill` files (kept between runs), then each thread
//! creates a file, writes 4 KiB, closes it and unlinks it; every `--fsync-every`-th file
//! is fsynced so the journal and the block layer see traffic. Prints `ops=N` (files).

use std::{
    ffi::CString,
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

fn c_path(path: &std::path::Path) -> CString {
    CString::new(path.as_os_str().as_encoded_bytes()).expect("path without NUL")
}

fn create_file(path: &std::path::Path, fsync: bool) {
    let name = c_path(path);
    let block = [0x5au8; 4096];
    // SAFETY: a NUL-terminated path; the descriptor is closed before returning.
    unsafe {
        let fd = libc::open(
            name.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            0o644,
        );
        assert!(fd >= 0, "cannot create {}", path.display());
        libc::write(fd, block.as_ptr().cast(), block.len());
        if fsync {
            libc::fsync(fd);
        }
        libc::close(fd);
    }
}

fn main() {
    let mut seconds = 3.0f64;
    let mut threads = 2usize;
    let mut prefill = 20_000usize;
    let mut fsync_every = 16u64;
    let mut dir: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().unwrap_or_default();
        match arg.as_str() {
            "--seconds" => seconds = value.parse().expect("--seconds takes a number"),
            "--threads" => threads = value.parse().expect("--threads takes a number"),
            "--prefill" => prefill = value.parse().expect("--prefill takes a number"),
            "--fsync-every" => fsync_every = value.parse().expect("--fsync-every takes a number"),
            "--dir" => dir = Some(PathBuf::from(value)),
            other => panic!("unknown argument {other}"),
        }
    }
    let dir = dir.expect("--dir DIR is required");
    std::fs::create_dir_all(&dir).expect("create --dir");
    let present = std::fs::read_dir(&dir).expect("read --dir").count();
    for index in present..prefill {
        let path = dir.join(format!("fill-{index:08}"));
        std::fs::write(&path, b"x").expect("prefill");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    let start = Instant::now();
    for index in 0..threads {
        let stop = stop.clone();
        let ops = ops.clone();
        let dir = dir.clone();
        handles.push(std::thread::spawn(move || {
            let mut local = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let path = dir.join(format!("new-{}-{index}-{local}", std::process::id()));
                create_file(&path, fsync_every > 0 && local.is_multiple_of(fsync_every));
                let _ = std::fs::remove_file(&path);
                local += 1;
            }
            ops.fetch_add(local, Ordering::Relaxed);
        }));
    }
    while start.elapsed() < Duration::from_secs_f64(seconds) {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.join().expect("worker panicked");
    }
    println!("ops={}", ops.load(Ordering::Relaxed));
}
