//! Flamegraphs through inferno, from the samples of `folded.rs`: one kind of one
//! profile, or the differential flamegraph of two profiles.

use std::path::Path;

use anyhow::{Context, Result};

use crate::{
    export::formats::folded,
    kind::Kind,
    profile::{write_atomically, Profile},
    views::{FlameLabels, View},
};

/// The SVG of folded `lines` under `title`, in the units of `labels` and the view's
/// palette.
pub(crate) fn render_lines(
    lines: &[String],
    view: &dyn View,
    title: String,
    subtitle: Option<String>,
    labels: FlameLabels,
) -> Result<Vec<u8>> {
    let mut options = inferno::flamegraph::Options::default();
    options.title = title;
    options.count_name = labels.count_name.to_string();
    options.factor = labels.factor;
    options.name_type = "Function:".to_string();
    // Lines that come sorted (as `folded::lines` returns them) are not sorted again:
    // inferno's own sort costs seconds on big profiles. Checking is one cheap pass.
    options.no_sort = lines.windows(2).all(|pair| pair[0] <= pair[1]);
    if let Some(palette) = view.flame_palette() {
        options.colors = palette;
    }
    options.subtitle = subtitle;
    let mut svg = Vec::new();
    if lines.is_empty() {
        // inferno refuses empty input (and a total of 0); an empty profile still gets a
        // readable file: one placeholder frame of width 1, and the title says why.
        options.title = format!("{} (no samples recorded)", options.title);
        inferno::flamegraph::from_lines(
            &mut options,
            ["[nothing recorded] 1"].iter().copied(),
            &mut svg,
        )
        .context("cannot render the flamegraph")?;
        return Ok(svg);
    }
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut svg)
        .context("cannot render the flamegraph")?;
    Ok(svg)
}

pub fn render_svg(profile: &Profile, kind: Kind) -> Result<Vec<u8>> {
    use std::fmt::Write as _;
    let lines: Vec<String> = folded::lines(profile, kind)
        .into_iter()
        .map(|(mut line, value)| {
            // `stack value`, in the stack's own buffer.
            let _ = write!(line, " {value}");
            line
        })
        .collect();
    // The same drawing from fewer frames (export/flame_prune.rs).
    let min_width = inferno::flamegraph::Options::default().min_width;
    let lines = crate::export::formats::flame_prune::prune(&lines, min_width).unwrap_or(lines);
    let view = kind.view();
    let labels = view.flame_labels();
    let title = format!(
        "{} — {} — {:.1} s",
        labels.title, profile.host, profile.duration_s
    );
    let subtitle = view.flame_subtitle(profile);
    render_lines(&lines, view, title, subtitle, labels)
}

pub fn write_svg(profile: &Profile, kind: Kind, path: &Path) -> Result<()> {
    let svg = render_svg(profile, kind)?;
    write_atomically(path, &svg)
}

/// Differential folded lines `stack BASE NEW` (the flame value, undivided), both per second of each run's length.
pub fn diff_lines(base: &Profile, new: &Profile, kind: Kind) -> Vec<String> {
    let (index, _) = kind.view().flame_value();
    let per_second = |profile: &Profile| {
        let seconds = profile.duration_s.max(1e-3);
        folded::samples(profile, kind)
            .into_iter()
            .map(move |sample| {
                let value = sample.values.get(index).copied().unwrap_or(0) as f64;
                (sample.frames.join(";"), (value / seconds).round() as u64)
            })
    };
    let mut both: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for (stack, value) in per_second(base) {
        both.entry(stack).or_default().0 += value;
    }
    for (stack, value) in per_second(new) {
        both.entry(stack).or_default().1 += value;
    }
    both.into_iter()
        .filter(|(_, (before, after))| *before > 0 || *after > 0)
        .map(|(stack, (before, after))| format!("{stack} {before} {after}"))
        .collect()
}

/// The differential flamegraph (inferno draws it from the new profile's stacks, coloured
/// by the change against the base); an error that says so when the new profile has none.
pub fn render_diff_svg(base: &Profile, new: &Profile, kind: Kind) -> Result<Vec<u8>> {
    let view = kind.view();
    let labels = view.diff_flame_labels();
    let lines = diff_lines(base, new, kind);
    if !lines.iter().any(|line| !line.ends_with(" 0")) {
        anyhow::bail!(
            "the new profile has no {} events: a differential flamegraph is drawn from its \
             stacks, so there is none to draw (the text diff still compares the two)",
            kind.name()
        );
    }
    render_lines(&lines, view, labels.title.to_string(), None, labels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::formats::report::tests::profile_with_two_locks;

    #[test]
    fn svg_names_the_callers() {
        let svg = render_svg(&profile_with_two_locks(), Kind::Lock).expect("svg");
        let text = String::from_utf8(svg).expect("utf8");
        assert!(text.starts_with("<?xml"), "an SVG document");
        assert!(text.contains("do_pipe2"));
        assert!(text.contains("vm_mmap_pgoff"));
        assert!(text.contains("Lock wait time"));
    }

    /// The SVG of `lines` as inferno draws them, and of the pruned lines (`cuts`: the
    /// pruning must cut frames; else it may leave the lines as they are).
    fn both_ways(profile: &Profile, kind: Kind, cuts: bool) -> (Vec<u8>, Vec<u8>) {
        let lines: Vec<String> = folded::lines(profile, kind)
            .into_iter()
            .map(|(stack, value)| format!("{stack} {value}"))
            .collect();
        let min_width = inferno::flamegraph::Options::default().min_width;
        let pruned = match crate::export::formats::flame_prune::prune(&lines, min_width) {
            Some(pruned) => pruned,
            None if !cuts => lines.clone(),
            None => panic!("not prunable"),
        };
        let frames = |lines: &[String]| lines.iter().map(|l| l.matches(';').count()).sum::<usize>();
        if cuts {
            assert!(frames(&pruned) < frames(&lines), "some frames are cut");
        }
        let view = kind.view();
        let labels = view.flame_labels();
        // inferno's colors come from a generator seeded once per thread: one thread each.
        let draw = |lines: &[String]| {
            std::thread::scope(|scope| {
                scope
                    .spawn(|| {
                        render_lines(lines, view, labels.title.to_string(), None, labels)
                            .expect("svg")
                    })
                    .join()
                    .expect("thread")
            })
        };
        (draw(&lines), draw(&pruned))
    }

    #[test]
    fn pruned_lines_draw_the_same_svg() {
        let json = crate::synthetic::lock_profile_json(30_000);
        let mut profile = Profile::from_bytes(json.as_bytes()).expect("load");
        // Some wide paths among the narrow ones.
        for row in profile.locks.iter_mut().step_by(50) {
            row.total_ns *= 500;
        }
        let (plain, pruned) = both_ways(&profile, Kind::Lock, true);
        assert!(plain == pruned, "the pruned lines draw another SVG");
        let (plain, pruned) = both_ways(
            &crate::export::tables::offcpu::tests::profile_with_waits(),
            Kind::Offcpu,
            false,
        );
        assert!(plain == pruned, "the pruned lines draw another SVG");
    }

    #[test]
    fn pruning_changes_no_svg_of_the_test_profiles() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
        let mut tested = 0;
        for (dir, only_ok) in [("golden", false), ("corpus", true)] {
            for entry in std::fs::read_dir(root.join(dir)).expect("test profiles") {
                let path = entry.expect("entry").path();
                let name = path.file_name().unwrap_or_default().to_string_lossy();
                if !name.ends_with(".json") || (only_ok && !name.starts_with("ok_")) {
                    continue;
                }
                let profile = Profile::load(&path).expect("load");
                for kind in Kind::ALL {
                    let (plain, pruned) = both_ways(&profile, kind, false);
                    assert!(plain == pruned, "{name} {}: another SVG", kind.name());
                    tested += 1;
                }
            }
        }
        assert!(tested > 20, "{tested} flamegraphs compared");
    }

    #[test]
    fn diff_lines_are_per_second() {
        let (base, mut new) = crate::export::formats::report::tests::two_runs(2.0, 1.0);
        new.locks[2].total_ns *= 4;
        let lines = diff_lines(&base, &new, Kind::Lock);
        assert!(
            lines.contains(&"ior;spinlock;do_pipe2 3500000 7000000".to_string()),
            "{lines:?}"
        );
        assert!(
            lines.contains(&"ior;rwsem:W;mmap_lock;vm_mmap_pgoff 3000000 24000000".to_string()),
            "{lines:?}"
        );
        let svg = String::from_utf8(render_diff_svg(&base, &new, Kind::Lock).expect("svg"))
            .expect("utf8");
        assert!(svg.contains("vm_mmap_pgoff"));
        // A new profile without lock events: one clear error, not inferno's.
        new.locks.clear();
        let err = render_diff_svg(&base, &new, Kind::Lock).expect_err("nothing to draw");
        assert!(
            err.to_string()
                .contains("the new profile has no lock events"),
            "{err}"
        );
    }
}
