//! Workload: context-switch heavy. Pairs of threads bounce one byte over two pipes, so
//! every round trip is two sleeps and two wake-ups.
//! `ping-pong [--seconds S] [--pairs N]`; prints `ops=N` (round trips) when done.

fn pipe() -> [i32; 2] {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the array.
    let rc = unsafe { libc::pipe(fds.as_mut_ptr()) };
    assert_eq!(rc, 0, "pipe failed");
    fds
}

fn write_byte(fd: i32) -> bool {
    let byte = [1u8];
    // SAFETY: writes one byte from a live buffer.
    unsafe { libc::write(fd, byte.as_ptr().cast(), 1) == 1 }
}

fn read_byte(fd: i32) -> bool {
    let mut byte = [0u8];
    // SAFETY: reads one byte into a live buffer.
    unsafe { libc::read(fd, byte.as_mut_ptr().cast(), 1) == 1 }
}

/// A pipe end, closed when the thread that owns it is done with it.
struct End(i32);

impl End {
    /// The descriptor; a method, so that a closure using it owns the whole `End`.
    fn fd(&self) -> i32 {
        self.0
    }
}

impl Drop for End {
    fn drop(&mut self) {
        // SAFETY: closing a descriptor this value owns.
        unsafe { libc::close(self.0) };
    }
}

fn main() {
    let args = lockpath_tests::Args::parse(&["--seconds", "--pairs"], &[]);
    let mut workers = lockpath_tests::Workers::new();
    for _ in 0..args.get("--pairs", 1usize) {
        let ping = pipe();
        let pong = pipe();
        // Echo thread: returns every byte until the pinger closes its end.
        let (ping_in, pong_out) = (ping[0], End(pong[1]));
        workers.spawn(move || {
            while read_byte(ping_in) {
                if !write_byte(pong_out.fd()) {
                    break;
                }
            }
        });
        // The pinger: dropping its write end of ping (when it stops) ends the echo thread.
        let (ping_out, pong_in) = (End(ping[1]), pong[0]);
        workers.spawn_counted(move |_| write_byte(ping_out.fd()) && read_byte(pong_in));
    }
    workers.run_for(args.get("--seconds", 3.0));
}
