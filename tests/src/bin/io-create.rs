//! Workload: file creation in a large directory (meant for ext4 on a loop device).
//! `io-create --dir DIR [--seconds S] [--threads N] [--prefill N] [--fsync-every N]`
//! First makes sure DIR holds `--prefill` files (kept between runs), then each thread
//! creates a file, writes 4 KiB, closes it and unlinks it; every `--fsync-every`-th file
//! is fsynced so the journal and the block layer see traffic. Prints `ops=N` (files).

use std::{ffi::CString, path::PathBuf};

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
    let args = lockpath_tests::Args::parse(
        &[
            "--seconds",
            "--threads",
            "--prefill",
            "--fsync-every",
            "--dir",
        ],
        &[],
    );
    let fsync_every = args.get("--fsync-every", 16u64);
    let dir = PathBuf::from(args.text("--dir").expect("--dir DIR is required"));
    std::fs::create_dir_all(&dir).expect("create --dir");
    let present = std::fs::read_dir(&dir).expect("read --dir").count();
    for index in present..args.get("--prefill", 20_000usize) {
        let path = dir.join(format!("fill-{index:08}"));
        std::fs::write(&path, b"x").expect("prefill");
    }
    let mut workers = lockpath_tests::Workers::new();
    for index in 0..args.get("--threads", 2usize) {
        let dir = dir.clone();
        workers.spawn_counted(move |done| {
            let path = dir.join(format!("new-{}-{index}-{done}", std::process::id()));
            create_file(&path, fsync_every > 0 && done.is_multiple_of(fsync_every));
            let _ = std::fs::remove_file(&path);
            true
        });
    }
    workers.run_for(args.get("--seconds", 3.0));
}
