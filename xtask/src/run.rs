//! `cargo xtask run -- ARGS`: build, then become `lockpath ARGS`.

use std::{ffi::OsString, os::unix::process::CommandExt as _, process::Command};

use anyhow::{anyhow, bail, Context as _, Result};

use crate::{
    build::{self, Profile},
    util,
};

pub fn run(args: Vec<OsString>) -> Result<()> {
    // Checked first so nobody waits for a build that cannot be used.
    if !util::is_root().context("run: cannot tell whether we are root")? {
        bail!("run: lockpath needs root (it loads eBPF programs and reads tracefs); rerun as root, e.g. `sudo -E cargo xtask run -- ...`");
    }
    let artifacts = build::build(Profile::Release)?;
    let mut cmd = Command::new(&artifacts.lockpath);
    cmd.args(&args);
    // exec only returns on failure; on success lockpath's exit code is ours.
    let err = cmd.exec();
    Err(anyhow!(
        "run: cannot execute `{}` ({err}); rerun `cargo xtask build`",
        util::describe(&cmd)
    ))
}
