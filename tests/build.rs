//! Marks the root integration tests as ignored in a build by a user other than root
//! (`cfg(lockpath_not_root)`), so that `cargo test` reports them as ignored, with the
//! reason, instead of passing without running. Under `CI=true` nothing is ignored: a
//! test that cannot load its programs fails there.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(lockpath_not_root)");
    // sudo changes USER; CI decides whether a skip may happen at all.
    println!("cargo::rerun-if-env-changed=USER");
    println!("cargo::rerun-if-env-changed=SUDO_USER");
    println!("cargo::rerun-if-env-changed=CI");
    let ci = std::env::var("CI").is_ok_and(|value| value == "true" || value == "1");
    if !ci && effective_uid() != Some(0) {
        println!("cargo::rustc-cfg=lockpath_not_root");
    }
}

/// The effective user id of the build, from /proc/self/status (`Uid: real effective ...`).
fn effective_uid() -> Option<u32> {
    std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
