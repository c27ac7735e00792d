//! Shared by the profile crate's integration tests.

use std::path::{Path, PathBuf};

/// Every test profile: tests/golden/*.json and the loadable `ok_*` files of
/// tests/corpus/, sorted.
pub fn inputs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut inputs = Vec::new();
    for (dir, only_ok) in [(root.join("golden"), false), (root.join("corpus"), true)] {
        for entry in std::fs::read_dir(&dir).expect("test profile folder") {
            let path = entry.expect("entry").path();
            let name = path
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name.ends_with(".json") && (!only_ok || name.starts_with("ok_")) {
                inputs.push(path);
            }
        }
    }
    inputs.sort();
    inputs
}
