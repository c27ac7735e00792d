//! The large-directory create benchmark in miniature, for the IO-path tests.
//! `ext4-dir populate DIR N`: creates DIR with N files of 4 KiB.
//! `ext4-dir run DIR N`: looks up N missing names and creates N files, then lists DIR,
//! stats and reads every file, then syncs the file system (so no IO is left for later). Prints `listed=.. created=..`.
//! `ext4-dir block DEVICE FLUSHES WRITES [READERS READS]`: flushes, direct writes and
//! same-sector reads on a raw block device (see `lockpath_tests::block`).

use std::{
    fs,
    io::{Read, Write},
    os::unix::io::AsRawFd,
    path::Path,
};

fn populate(dir: &Path, count: usize) {
    fs::create_dir_all(dir).expect("create the directory");
    let block = vec![b'x'; 4096];
    for index in 0..count {
        let mut file = fs::File::create(dir.join(format!("f{index:07}"))).expect("create a file");
        file.write_all(&block).expect("write a file");
    }
}

fn run(dir: &Path, count: usize) {
    // Cold lookups and creates first: each probes the directory's hash tree, whose
    // blocks are read one by one through the buffer cache (no readahead there).
    for index in 0..count {
        let _ = fs::metadata(dir.join(format!("missing{index}")));
        let path = dir.join(format!("new{index:07}"));
        fs::File::create(&path)
            .and_then(|mut file| file.write_all(b"new"))
            .expect("create a file");
    }
    // Then the listing, with a stat and a read of every file (page-cache reads).
    let mut listed = 0usize;
    let mut buffer = Vec::with_capacity(4096);
    for entry in fs::read_dir(dir).expect("list the directory") {
        let entry = entry.expect("a directory entry");
        let _ = entry.metadata().expect("stat a file");
        buffer.clear();
        fs::File::open(entry.path())
            .and_then(|mut file| file.read_to_end(&mut buffer))
            .expect("read a file");
        listed += 1;
    }
    let handle = fs::File::open(dir).expect("open the directory");
    // SAFETY: syncfs on a valid descriptor we own.
    if unsafe { libc::syncfs(handle.as_raw_fd()) } != 0 {
        panic!("syncfs failed: {}", std::io::Error::last_os_error());
    }
    println!("listed={listed} created={count}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("block") {
        lockpath_tests::block::run(&args[2..]);
        return;
    }
    if args.len() != 4 {
        eprintln!("usage: ext4-dir populate|run DIR N");
        std::process::exit(2);
    }
    let dir = Path::new(&args[2]);
    let count: usize = args[3].parse().expect("N is a number");
    match args[1].as_str() {
        "populate" => populate(dir, count),
        "run" => run(dir, count),
        other => panic!("unknown mode {other}"),
    }
}
