//! Flamegraphs through inferno, from the folded lines of `folded.rs`.

use std::path::Path;

use anyhow::{Context, Result};

use crate::{cli::Kind, export::folded, profile::write_atomically, profile::Profile};

/// Title, count unit and the factor applied to the folded values (microseconds).
fn labels(kind: Kind) -> (&'static str, &'static str, f64) {
    match kind {
        Kind::Lock => ("Lock wait time (width: time waiting, ms)", "ms", 0.001),
    }
}

pub fn render_svg(profile: &Profile, kind: Kind) -> Result<Vec<u8>> {
    let lines: Vec<String> = folded::lines(profile, kind)
        .into_iter()
        .map(|(stack, value)| format!("{stack} {value}"))
        .collect();
    let (title, count_name, factor) = labels(kind);
    let mut options = inferno::flamegraph::Options::default();
    options.title = format!("{title} — {} — {:.1} s", profile.host, profile.duration_s);
    options.count_name = count_name.to_string();
    options.factor = factor;
    options.name_type = "Function:".to_string();
    // `folded::lines` returns sorted lines; sorting them again costs seconds on big profiles.
    options.no_sort = true;
    let mut svg = Vec::new();
    if lines.is_empty() {
        // inferno refuses empty input; an empty profile still gets a readable file.
        options.title = format!("{} (no samples recorded)", options.title);
        inferno::flamegraph::from_lines(
            &mut options,
            ["[nothing recorded] 0"].iter().copied(),
            &mut svg,
        )
        .context("cannot render the flamegraph")?;
        return Ok(svg);
    }
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut svg)
        .context("cannot render the flamegraph")?;
    Ok(svg)
}

pub fn write_svg(profile: &Profile, kind: Kind, path: &Path) -> Result<()> {
    let svg = render_svg(profile, kind)?;
    write_atomically(path, &svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::report::tests::profile_with_two_locks;

    #[test]
    fn svg_names_the_callers() {
        let svg = render_svg(&profile_with_two_locks(), Kind::Lock).expect("svg");
        let text = String::from_utf8(svg).expect("utf8");
        assert!(text.starts_with("<?xml"), "an SVG document");
        assert!(text.contains("do_pipe2"));
        assert!(text.contains("vm_mmap_pgoff"));
        assert!(text.contains("Lock wait time"));
    }
}
