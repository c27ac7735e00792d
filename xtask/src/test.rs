//! `cargo xtask test [-- CARGO_TEST_ARGS]`: test tools, build, then
//! `cargo test --release --workspace` against the freshly built binary.

use std::ffi::OsString;

use anyhow::Result;

use crate::{
    build::{self, Profile, EBPF_OBJ_ENV},
    setup, util,
};

/// Env var through which the test crate finds the lockpath binary.
const BIN_ENV: &str = "LOCKPATH_BIN";

pub fn test(args: Vec<OsString>) -> Result<()> {
    setup::ensure_test_tools();
    let artifacts = build::build(Profile::Release)?;
    let mut cmd = util::host_cargo();
    cmd.args(["test", "--release", "--workspace"])
        .args(&args)
        .env(BIN_ENV, &artifacts.lockpath)
        .env(EBPF_OBJ_ENV, &artifacts.ebpf_obj);
    util::say(format!("running {}", util::describe(&cmd)));
    util::run(&mut cmd, "test", "see the failing tests above")
}
