//! The process watcher: memory-map snapshots of the processes whose user stacks are
//! recorded, taken as soon as the kernel notes them.

use anyhow::{Context, Result};
use aya::{maps::MapData, maps::RingBuf, Ebpf};
use profiler_common::shared::names;

use super::attach_tracepoint;
use crate::symbolize::UserSymbols;

/// Every mapped object of every profiled process is kept open until the end: allow as
/// many descriptors as the hard limit does (a failure only means falling back to paths).
fn raise_open_file_limit() {
    // SAFETY: getrlimit/setrlimit with a struct we own.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// Watches for processes whose user stacks are being recorded (the kernel notes each
/// one in `NEW_PROCESSES` the first time, and again after an exec) and snapshots their
/// memory maps at once, so they are symbolized even if they exit before the end.
pub struct ProcessWatcher {
    notes: RingBuf<MapData>,
    last_refresh: std::time::Instant,
}

impl ProcessWatcher {
    /// Attaches the exec hook and takes the notice ring out of the object.
    pub fn start(ebpf: &mut Ebpf) -> Result<ProcessWatcher> {
        raise_open_file_limit();
        attach_tracepoint(ebpf, names::PROCESSES_EXEC, "sched", "sched_process_exec")?;
        let map = ebpf
            .take_map(names::NEW_PROCESSES)
            .context("map NEW_PROCESSES missing from the eBPF object")?;
        let notes = RingBuf::try_from(map).context("NEW_PROCESSES has an unexpected type")?;
        Ok(ProcessWatcher {
            notes,
            last_refresh: std::time::Instant::now(),
        })
    }

    /// Snapshots every newly noted process into `symbols`; now and then, the known ones
    /// again (a library loaded later). Call often while recording.
    pub fn poll(&mut self, symbols: &mut UserSymbols) {
        while let Some(item) = self.notes.next() {
            if let Ok(bytes) = <[u8; 4]>::try_from(&item[..4.min(item.len())]) {
                let pid = u32::from_ne_bytes(bytes);
                drop(item);
                symbols.remember(pid);
            }
        }
        if self.last_refresh.elapsed() >= std::time::Duration::from_secs(1) {
            symbols.refresh();
            self.last_refresh = std::time::Instant::now();
        }
    }

    /// The last snapshots, for the symbolization at the end of the run.
    pub fn finish(mut self, symbols: &mut UserSymbols) {
        self.poll(symbols);
        symbols.refresh();
    }
}
