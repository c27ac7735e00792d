//! Workload: block requests without a sector, direct writes and same-sector reads on a
//! raw block device, run as `ext4-dir block DEVICE FLUSHES WRITES [READERS READS]` (a mode
//! of an existing binary: the lab's initramfs does not grow by another one).
//!
//! Opens DEVICE (a scratch loop device: it is overwritten) with O_DIRECT, writes WRITES
//! blocks of 64 KiB at increasing offsets, each its own request; then READERS threads each
//! read the first 4 KiB READS times with O_DIRECT, so requests for the same sector are in
//! flight at the same time; then it calls fsync FLUSHES times: with nothing dirty, each
//! fsync is one empty flush request (`REQ_OP_FLUSH`, no sector, no data) on a device with
//! a write-back cache. Prints `pid=P flushes=F writes=W bytes=B reads=R`.

const BLOCK: usize = 64 * 1024;

/// `args`: DEVICE FLUSHES WRITES [READERS READS].
pub fn run(args: &[String]) {
    let (device, flushes, writes, readers, reads) = match args {
        [device, flushes, writes] => (device, flushes, writes, "0", "0"),
        [device, flushes, writes, readers, reads] => {
            (device, flushes, writes, readers.as_str(), reads.as_str())
        }
        _ => {
            eprintln!("usage: ext4-dir block DEVICE FLUSHES WRITES [READERS READS]");
            std::process::exit(2);
        }
    };
    let flushes: u32 = flushes.parse().expect("FLUSHES is a number");
    let writes: usize = writes.parse().expect("WRITES is a number");
    let readers: usize = readers.parse().expect("READERS is a number");
    let reads: usize = reads.parse().expect("READS is a number");
    let path = std::ffi::CString::new(device.as_str()).expect("path without NUL");
    // SAFETY: a NUL-terminated path; checked below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_DIRECT) };
    assert!(
        fd >= 0,
        "cannot open {device}: {}",
        std::io::Error::last_os_error()
    );
    // O_DIRECT wants an aligned buffer: a 4 KiB-aligned allocation.
    let layout = std::alloc::Layout::from_size_align(BLOCK, 4096).expect("layout");
    // SAFETY: a non-zero size; freed at the end.
    let buffer = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!buffer.is_null(), "out of memory");
    let mut bytes = 0;
    for index in 0..writes {
        // SAFETY: `buffer` holds BLOCK bytes; `fd` is open.
        let written =
            unsafe { libc::pwrite(fd, buffer.cast(), BLOCK, (index * BLOCK) as libc::off_t) };
        assert_eq!(
            written,
            BLOCK as isize,
            "pwrite: {}",
            std::io::Error::last_os_error()
        );
        bytes += BLOCK;
    }
    let threads: Vec<_> = (0..readers)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || read_first_block(&path, reads))
        })
        .collect();
    for thread in threads {
        thread.join().expect("reader thread");
    }
    for _ in 0..flushes {
        // SAFETY: `fd` is open.
        let done = unsafe { libc::fsync(fd) };
        assert_eq!(done, 0, "fsync: {}", std::io::Error::last_os_error());
    }
    // SAFETY: allocated above with the same layout; `fd` is open.
    unsafe {
        std::alloc::dealloc(buffer, layout);
        libc::close(fd);
    }
    println!(
        "pid={} flushes={flushes} writes={writes} bytes={bytes} reads={}",
        std::process::id(),
        readers * reads
    );
}

/// Reads the device's first 4 KiB `reads` times with O_DIRECT (no page cache).
fn read_first_block(path: &std::ffi::CStr, reads: usize) {
    const SIZE: usize = 4096;
    // SAFETY: a NUL-terminated path; checked below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_DIRECT) };
    assert!(fd >= 0, "open: {}", std::io::Error::last_os_error());
    let layout = std::alloc::Layout::from_size_align(SIZE, SIZE).expect("layout");
    // SAFETY: a non-zero size; freed at the end.
    let buffer = unsafe { std::alloc::alloc(layout) };
    assert!(!buffer.is_null(), "out of memory");
    for _ in 0..reads {
        // SAFETY: `buffer` holds SIZE bytes; `fd` is open.
        let done = unsafe { libc::pread(fd, buffer.cast(), SIZE, 0) };
        assert_eq!(
            done,
            SIZE as isize,
            "pread: {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: allocated above with the same layout; `fd` is open.
    unsafe {
        std::alloc::dealloc(buffer, layout);
        libc::close(fd);
    }
}
