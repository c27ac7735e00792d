//! The README sections the bench rewrites between its markers.

use std::fs;

use anyhow::{Context as _, Result};

use crate::util;

pub(super) const README_START: &str = "<!-- bench:start (cargo xtask bench --readme) -->";

pub(super) const README_END: &str = "<!-- bench:end -->";

pub(super) const HOLD_README_START: &str =
    "<!-- bench-hold:start (cargo xtask bench --families hold --readme) -->";

pub(super) const HOLD_README_END: &str = "<!-- bench-hold:end -->";

/// Replaces a block of the README's performance section (between the markers; appended
/// if absent).
pub(super) fn update_readme(start_marker: &str, end_marker: &str, body: &str) -> Result<()> {
    let path = util::workspace_root().join("README.md");
    let readme = fs::read_to_string(&path)
        .with_context(|| format!("bench: cannot read {}", path.display()))?;
    let section = format!("{start_marker}\n{body}{end_marker}\n");
    let updated = match (readme.find(start_marker), readme.find(end_marker)) {
        (Some(start), Some(end)) if end > start => format!(
            "{}{section}{}",
            &readme[..start],
            readme[end + end_marker.len()..].trim_start_matches('\n')
        ),
        _ => format!(
            "{}\n{section}",
            readme.trim_end_matches('\n').to_string() + "\n"
        ),
    };
    fs::write(&path, updated).with_context(|| format!("bench: cannot write {}", path.display()))?;
    util::say(format!("performance section of {} updated", path.display()));
    Ok(())
}
