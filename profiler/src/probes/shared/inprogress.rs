//! What the drains of waits in progress share: which process a thread belongs to, and
//! which processes serve a FUSE connection.

use std::fs;

/// Waits in progress shorter than this are not listed one by one (with `--offcpu-all`
/// every sleeping thread has a wait in progress at any moment).
pub const WAITING_MIN_NS: u64 = 100_000_000;

/// The process (tgid) of thread `tid`, from `/proc`; `None` once it has exited.
pub fn tgid_of(tid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Tgid:"))
        .and_then(|value| value.trim().parse().ok())
}

/// The processes that hold `/dev/fuse` open: the FUSE servers of this machine. With
/// one server, a request in flight is served by it; with several the connection is
/// not told apart here, and no server is named.
pub fn fuse_servers() -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut servers = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        if fds.flatten().any(|fd| {
            fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == "/dev/fuse")
        }) {
            servers.push(pid);
        }
    }
    servers
}
