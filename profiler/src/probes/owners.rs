//! After the drain: the holders of the locks that waits in progress wait on, and the
//! servers of their FUSE requests, read from the kernel (`blocked_on::KernelReader`)
//! and `/proc`.

use std::fs;

use crate::{
    probes::blocked_on::{BlockedOn, KernelReader},
    profile::WaitingRow,
};

/// The processes that hold `/dev/fuse` open, with those descriptors: the FUSE servers
/// of this machine.
pub fn fuse_servers() -> Vec<(u32, Vec<u32>)> {
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
        let open: Vec<u32> = fds
            .flatten()
            .filter(|fd| {
                fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == "/dev/fuse")
            })
            .filter_map(|fd| fd.file_name().to_str()?.parse().ok())
            .collect();
        if !open.is_empty() {
            servers.push((pid, open));
        }
    }
    servers
}

/// The holder of each sleeping lock waited for (`kind` lock, found by the lock
/// programs, which keep only the holder's process): the waiting thread is looked up in
/// kernel memory, and when it is queued on that very lock, its holder's thread (and a
/// verified name, where the lock had only its address) are taken from there.
pub fn resolve_lock_owners(reader: Option<&mut KernelReader>, waiting: &mut [WaitingRow]) {
    let Some(reader) = reader else {
        return;
    };
    for row in waiting.iter_mut() {
        if row.kind != "lock" || row.owner_tid.is_some() {
            continue;
        }
        let Ok(stack) = crate::probes::blocked_on::kernel_stack(row.tid) else {
            continue;
        };
        let frames: Vec<&str> = stack.iter().map(String::as_str).collect();
        let Some(BlockedOn::Lock {
            lock_addr,
            owner,
            name,
            ..
        }) = reader.blocked_on(row.tid, &frames)
        else {
            continue;
        };
        if Some(lock_addr) != row.lock_addr {
            continue;
        }
        if let Some(owner) = owner {
            row.owner_pid = Some(owner.tgid);
            row.owner_tid = Some(owner.tid);
        }
        if let (Some(name), true) = (name, row.what.starts_with("0x")) {
            row.what = name;
        }
    }
}

/// Names the server of each FUSE request in flight (`kind` rpc with a request id):
/// the process whose `/dev/fuse` descriptor belongs to the request's connection, read
/// from kernel memory. Without the kernel reader no server is named (with several FUSE
/// servers on a machine, a guess could name the wrong one).
pub fn name_fuse_servers(reader: Option<&mut KernelReader>, waiting: &mut [WaitingRow]) {
    let Some(reader) = reader else {
        return;
    };
    let mut servers: Option<Vec<(u32, Vec<u32>)>> = None;
    for row in waiting.iter_mut() {
        let Some(request) = row
            .request
            .filter(|_| row.kind == "rpc" && row.class.starts_with("FUSE "))
        else {
            continue;
        };
        let candidates = servers.get_or_insert_with(fuse_servers);
        row.owner_pid = reader.fuse_server_of(request, candidates);
    }
}
