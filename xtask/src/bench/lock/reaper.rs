//! Tools run as children that are always stopped and reaped, and their output files.

use std::{
    fs,
    path::Path,
    process::{Child, Command, ExitStatus},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

use crate::util;

/// A child that is stopped (SIGINT, then SIGKILL after `grace`) and reaped when dropped,
/// so that no tool, and none of the programs its descriptors hold, outlives an error.
pub(super) struct Reaper {
    pub(super) child: Child,
    pub(super) grace: Duration,
}

impl Reaper {
    pub(super) fn spawn(cmd: &mut Command, grace: Duration) -> Result<Reaper> {
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", util::describe(cmd)))?;
        Ok(Reaper { child, grace })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status once the child has exited (the status is kept after reaping, so
    /// the pid is never signalled once it may have been reused).
    pub(super) fn exited(&mut self) -> Result<Option<ExitStatus>> {
        self.child.try_wait().context("cannot wait for a child")
    }

    pub(super) fn stop(&mut self) -> Option<ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        // SAFETY: kill(2) on our own child, which has not been reaped yet.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + self.grace;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        self.child.wait().ok()
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last non-empty line of a file, for error messages.
pub(super) fn last_line(path: &Path) -> String {
    fs::read_to_string(path)
        .ok()
        .and_then(|text| {
            text.lines()
                .rev()
                .map(str::trim)
                .find(|line| !line.is_empty())
                .map(str::to_string)
        })
        .unwrap_or_else(|| "no error output".into())
}

pub(super) fn output_file(path: &Path) -> Result<fs::File> {
    fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))
}
