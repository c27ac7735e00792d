//! Embeds the eBPF object built by `cargo xtask build` as `$OUT_DIR/profiler-ebpf.o`.
//!
//! The object comes from `$LOCKPATH_EBPF_OBJ` (relative paths are taken from the
//! workspace root), else from profiler-ebpf/target/bpfel-unknown-none/release/profiler-ebpf.
//! Without it an empty file is written, so `cargo check/clippy/test` work without
//! the nightly toolchain; lockpath then reports at run time that it has no programs.

use std::{
    env, fs,
    path::{Path, PathBuf},
};

const OBJ_ENV: &str = "LOCKPATH_EBPF_OBJ";

fn main() -> Result<(), String> {
    println!("cargo:rerun-if-env-changed={OBJ_ENV}");
    let manifest_dir = env_path("CARGO_MANIFEST_DIR")?;
    let workspace = manifest_dir.parent().unwrap_or(&manifest_dir).to_path_buf();
    let obj = match env::var_os(OBJ_ENV).filter(|value| !value.is_empty()) {
        Some(value) => workspace.join(value), // join keeps absolute paths as they are
        None => workspace.join("profiler-ebpf/target/bpfel-unknown-none/release/profiler-ebpf"),
    };
    let out = env_path("OUT_DIR")?.join("profiler-ebpf.o");

    if obj.is_file() {
        println!("cargo:rerun-if-changed={}", obj.display());
        fs::copy(&obj, &out)
            .map_err(|err| format!("cannot copy {} to {}: {err}", obj.display(), out.display()))?;
    } else {
        // A missing file would make cargo rerun this script (and rebuild the crate)
        // on every build; watch the nearest existing directory instead, which
        // changes when the object appears.
        println!(
            "cargo:rerun-if-changed={}",
            watch_for(&obj, &workspace).display()
        );
        println!(
            "cargo:warning=no eBPF object at {}: lockpath is built without eBPF programs (use `cargo xtask build`)",
            obj.display()
        );
        fs::write(&out, b"").map_err(|err| format!("cannot write {}: {err}", out.display()))?;
    }
    Ok(())
}

fn env_path(name: &str) -> Result<PathBuf, String> {
    env::var_os(name)
        .map(PathBuf::from)
        .ok_or_else(|| format!("{name} is not set; build with cargo"))
}

/// The closest existing ancestor directory of `obj` that is inside the workspace
/// but is not the workspace itself (its target/ changes on every build), or the
/// parent directory of an object outside the workspace; else `obj` itself.
fn watch_for(obj: &Path, workspace: &Path) -> PathBuf {
    let parent = obj.parent();
    obj.ancestors()
        .skip(1)
        .take_while(|dir| *dir != workspace && (dir.starts_with(workspace) || Some(*dir) == parent))
        .find(|dir| dir.is_dir())
        .unwrap_or(obj)
        .to_path_buf()
}
