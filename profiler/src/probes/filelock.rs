//! The holders of file locks (off-CPU family): `filelock:posix_lock_inode` and
//! `filelock:flock_lock_inode` name the lock a thread is queued behind, and
//! `filelock:break_lease_block` the lease an open waits for; the kernel side
//! (profiler-ebpf/src/filelock.rs) follows it to the applied lock and its owner, which
//! the off-CPU key then carries (`OffcpuRow::held_by`). Where the tracepoints or the
//! layouts are missing, the off-CPU family records without holders and says why.

use anyhow::{bail, Context, Result};
use aya::{Ebpf, EbpfLoader};
use profiler_common::offcpu::names;

use crate::{btf::Btf, probes::shared::attach_tracepoint, profile::Unavailable, tracefs};

const GROUP: &str = "filelock";
/// The events of the `filelock_lock` record format, which carries the blocker.
const EVENTS: [&str; 2] = ["posix_lock_inode", "flock_lock_inode"];
/// The event of an open that waits for a lease to be broken (its own record format).
const LEASE_EVENT: &str = "break_lease_block";
/// What `unavailable` calls this part of the off-CPU family.
pub const WHAT: &str = "file-lock holders";

/// Load-time offsets of the file-lock program.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FilelockGlobals {
    tp_blocker: u32,
    tp_ret: u32,
    lock_blocker: u32,
    lock_pid: u32,
    /// The blocker's offset in the `break_lease_block` record; `None` without it.
    lease_blocker: Option<u32>,
}

impl FilelockGlobals {
    /// Offsets from the tracepoints' format files and the kernel's BTF, or why they
    /// cannot be had.
    pub fn read() -> Result<Self> {
        let (tp_blocker, tp_ret) = record_offsets(EVENTS[0])?;
        for event in &EVENTS[1..] {
            if tracefs::event_exists(GROUP, event) && record_offsets(event)? != (tp_blocker, tp_ret)
            {
                bail!(
                    "{GROUP}:{event} has another record layout than {GROUP}:{}",
                    EVENTS[0]
                );
            }
        }
        let btf = Btf::vmlinux()?;
        let (lock_blocker, lock_pid) = lock_offsets(btf)?;
        let lease_blocker = tracefs::event_exists(GROUP, LEASE_EVENT)
            .then(|| blocker_offset(LEASE_EVENT))
            .transpose()?;
        Ok(FilelockGlobals {
            tp_blocker,
            tp_ret,
            lock_blocker,
            lock_pid,
            lease_blocker,
        })
    }

    pub fn apply<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        loader
            .override_global(names::FILELOCK_TP_BLOCKER_OFFSET, &self.tp_blocker, true)
            .override_global(names::FILELOCK_TP_RET_OFFSET, &self.tp_ret, true)
            .override_global(
                names::FILELOCK_LOCK_BLOCKER_OFFSET,
                &self.lock_blocker,
                true,
            )
            .override_global(names::FILELOCK_LOCK_PID_OFFSET, &self.lock_pid, true);
        if let Some(lease_blocker) = &self.lease_blocker {
            loader.override_global(names::FILELOCK_LEASE_BLOCKER_OFFSET, lease_blocker, true);
        }
    }
}

/// (blocker, ret) offsets in the record of `event`.
fn record_offsets(event: &str) -> Result<(u32, u32)> {
    if !tracefs::event_exists(GROUP, event) {
        bail!("this kernel has no tracepoint {GROUP}:{event}");
    }
    let ret = tracefs::field_offset(GROUP, event, "ret")?;
    Ok((blocker_offset(event)?, ret))
}

/// The offset of the blocker in the record of `event`: `blocker` since 6.9 (a
/// `file_lock_core *`), `fl_blocker` before.
fn blocker_offset(event: &str) -> Result<u32> {
    tracefs::field_offset(GROUP, event, "blocker")
        .or_else(|_| tracefs::field_offset(GROUP, event, "fl_blocker"))
}

/// (blocker, pid) member offsets of a lock: `struct file_lock_core` since 6.9, `struct
/// file_lock` before.
fn lock_offsets(btf: &Btf) -> Result<(u32, u32)> {
    let core = btf
        .member_pointer_offset("file_lock_core", "flc_blocker")
        .and_then(|blocker| Ok((blocker, btf.member_offset("file_lock_core", "flc_pid")?)));
    core.or_else(|_| -> Result<(u32, u32)> {
        Ok((
            btf.member_pointer_offset("file_lock", "fl_blocker")?,
            btf.member_offset("file_lock", "fl_pid")?,
        ))
    })
    .context("the kernel's BTF describes no file lock blocker and pid")
}

/// Attaches the file-lock program to every event this kernel has; says how (a part of
/// the off-CPU family's method).
pub fn attach(ebpf: &mut Ebpf, globals: &FilelockGlobals) -> Result<String> {
    let mut attached = Vec::new();
    for event in EVENTS {
        if tracefs::event_exists(GROUP, event) {
            attach_tracepoint(ebpf, names::OFFCPU_FILELOCK, GROUP, event)?;
            attached.push(format!("{GROUP}:{event}"));
        }
    }
    if globals.lease_blocker.is_some() {
        attach_tracepoint(ebpf, names::OFFCPU_FILELOCK_LEASE, GROUP, LEASE_EVENT)?;
        attached.push(format!("{GROUP}:{LEASE_EVENT}"));
    }
    Ok(format!(
        "tracepoint {} (file-lock holders)",
        attached.join(", ")
    ))
}

/// The reason the holders are not recorded, as the profile's `unavailable` lists it
/// under `family` (the off-CPU family, whose waits they would complete).
pub fn unavailable(family: &str, err: &anyhow::Error) -> Unavailable {
    Unavailable {
        family: family.into(),
        what: WHAT.into(),
        reason: format!("{err:#}; file-lock waits are recorded without their holder"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_on_this_kernel_when_it_has_the_tracepoints() {
        if !tracefs::event_exists(GROUP, EVENTS[0]) {
            eprintln!(
                "no {GROUP}:{} here (tracefs not mounted or not root)",
                EVENTS[0]
            );
            return;
        }
        let globals = FilelockGlobals::read().expect("offsets");
        assert_ne!(globals.tp_blocker, globals.tp_ret);
        assert_ne!(globals.lock_blocker, globals.lock_pid);
    }
}
