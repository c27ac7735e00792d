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
