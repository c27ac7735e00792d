//! Workload building blocks shared by the workload binaries in `src/bin/`.

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
pub mod fuse;
