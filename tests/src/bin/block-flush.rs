//! Workload: block requests without a sector, and direct writes, on a block device.
//! `block-flush DEVICE FLUSHES WRITES`: opens DEVICE (a scratch loop device: it is
//! overwritten) with O_DIRECT, writes WRITES blocks of 64 KiB at increasing offsets, each
//! its own request, then calls fsync FLUSHES times: with nothing dirty, each fsync is one
//! empty flush request (`REQ_OP_FLUSH`, no sector, no data) on a device with a write-back
//! cache. Prints `pid=P flushes=F writes=W bytes=B`.

const BLOCK: usize = 64 * 1024;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, device, flushes, writes] = args.as_slice() else {
        eprintln!("usage: block-flush DEVICE FLUSHES WRITES");
        std::process::exit(2);
    };
    let flushes: u32 = flushes.parse().expect("FLUSHES is a number");
    let writes: usize = writes.parse().expect("WRITES is a number");
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
        "pid={} flushes={flushes} writes={writes} bytes={bytes}",
        std::process::id()
    );
}
