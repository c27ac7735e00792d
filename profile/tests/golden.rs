//! Golden outputs: the text report, the end-of-record summary, the folded, JSON, CSV,
//! pprof (its message, as text) and HTML exports, and the diff (text, JSON, HTML) against
//! one base profile, of every test profile (tests/golden/*.json and the loadable `ok_*`
//! files of tests/corpus/) are compared byte for byte with the files in
//! tests/golden/expected/. A change that moves one byte of output shows here.
//!
//! Refresh after an intended change: `UPDATE_GOLDEN=1 cargo test --release -p lockpath-profile
//! --test golden`, then read `git diff profile/tests/golden/expected`.

mod common;

use common::inputs;
use std::path::Path;

use lockpath_profile::{
    export,
    profile::{GroupBy, Kind, Profile},
};

/// Every output of one profile, by expected file name.
fn outputs(profile: &Profile) -> Vec<(&'static str, String)> {
    let mut report = String::new();
    for by in GroupBy::ALL {
        report.push_str(&format!("==== report --by {}\n", by.name()));
        report.push_str(&export::formats::report::text(profile, by, 20));
    }
    report.push_str("==== record summary\n");
    report.push_str(&export::formats::report::summary(profile, 20));
    let mut folded = String::new();
    let mut json = String::new();
    for kind in Kind::ALL {
        folded.push_str(&format!(
            "==== export --format folded --kind {}\n",
            kind.name()
        ));
        folded.push_str(&export::formats::folded::render(profile, kind));
        json.push_str(&format!(
            "==== export --format json --kind {}\n",
            kind.name()
        ));
        json.push_str(&export::formats::json::render(profile, kind).expect("JSON export"));
        json.push('\n');
    }
    json.push_str("==== report --format json\n");
    json.push_str(&export::formats::report::json(profile, GroupBy::Lock, 20).expect("JSON report"));
    json.push('\n');
    let mut csv = String::new();
    for by in GroupBy::ALL {
        csv.push_str(&format!("==== report --format csv --by {}\n", by.name()));
        csv.push_str(&export::formats::csv::render(profile, by, 20).expect("CSV report"));
    }
    let mut pprof = String::new();
    for kind in Kind::ALL {
        pprof.push_str(&format!(
            "==== export --format pprof --kind {} (the message)\n",
            kind.name()
        ));
        pprof.push_str(&format!(
            "{:#?}\n",
            export::formats::pprof::message(profile, kind)
        ));
    }
    let html = constant_parts_out(&export::formats::html::render(profile).expect("HTML report"));
    vec![
        ("report.txt", report),
        ("folded.txt", folded),
        ("json.txt", json),
        ("csv.txt", csv),
        ("pprof.txt", pprof),
        ("html.txt", html),
    ]
}

/// An HTML page without its style sheets and scripts (the page's own and those of each
/// flamegraph, escaped in its frame): constants of the code, the same on every page, which
/// would make most of every golden page. What the profile decides stays.
fn constant_parts_out(html: &str) -> String {
    let mut out = html.to_string();
    // (start of the opening tag, end of a tag, closing tag)
    for (open, tag_end, close) in [
        ("<style", ">", "</style>"),
        ("<script", ">", "</script>"),
        ("&lt;style", "&gt;", "&lt;/style&gt;"),
        ("&lt;script", "&gt;", "&lt;/script&gt;"),
    ] {
        let mut kept = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(start) = rest.find(open) {
            let Some(body) = rest[start..]
                .find(tag_end)
                .map(|at| start + at + tag_end.len())
            else {
                break;
            };
            let Some(end) = rest[body..].find(close) else {
                break;
            };
            kept.push_str(&rest[..body]);
            kept.push_str("[constant]");
            rest = &rest[body + end..];
        }
        kept.push_str(rest);
        out = kept;
    }
    out
}

/// The base every profile is compared with by `diff`.
fn diff_base() -> Profile {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/lock_offcpu_cpu.json");
    Profile::load(&path).expect("the diff base loads")
}

/// `diff BASE PROFILE` of every kind as text and JSON, and the lock kind's HTML page.
fn diff_outputs(base: &Profile, profile: &Profile) -> Vec<(&'static str, String)> {
    let mut text = String::new();
    for kind in Kind::ALL {
        text.push_str(&format!("==== diff --kind {}\n", kind.name()));
        text.push_str(&export::operations::diff::text(base, profile, kind, 20));
        text.push_str(&format!("==== diff --format json --kind {}\n", kind.name()));
        text.push_str(&export::operations::diff::json(base, profile, kind).expect("diff JSON"));
        text.push('\n');
    }
    let html = constant_parts_out(
        &export::formats::html::render_diff(base, profile, Kind::Lock).expect("diff HTML"),
    );
    vec![("diff.txt", text), ("diff.html.txt", html)]
}

#[test]
fn outputs_match_the_golden_files() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let expected_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/expected");
    let inputs = inputs();
    assert!(inputs.len() >= 5, "the test profiles are there: {inputs:?}");
    let mut differ = Vec::new();
    let base = diff_base();
    let golden_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    for input in &inputs {
        let profile = Profile::load(input).expect("a test profile loads");
        let stem = input
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut all = outputs(&profile);
        all.extend(diff_outputs(&base, &profile));
        // The pages of the recorded profiles; the corpus's small hand-made ones add
        // pages that differ from those in a few numbers.
        if !input.starts_with(&golden_dir) {
            all.retain(|(suffix, _)| !suffix.contains("html"));
        }
        for (suffix, actual) in all {
            let path = expected_dir.join(format!("{stem}.{suffix}"));
            if update {
                std::fs::create_dir_all(&expected_dir).expect("expected folder");
                std::fs::write(&path, &actual).expect("write a golden file");
                continue;
            }
            let expected = std::fs::read_to_string(&path).unwrap_or_else(|err| {
                panic!(
                    "{}: {err} (UPDATE_GOLDEN=1 cargo test -p lockpath-profile --test golden writes it)",
                    path.display()
                )
            });
            if expected != actual {
                let line = expected
                    .lines()
                    .zip(actual.lines())
                    .position(|(a, b)| a != b)
                    .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
                differ.push(format!(
                    "{} differs from line {}: expected {:?}, got {:?}",
                    path.display(),
                    line + 1,
                    expected.lines().nth(line).unwrap_or("<end>"),
                    actual.lines().nth(line).unwrap_or("<end>")
                ));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "golden outputs changed (UPDATE_GOLDEN=1 to accept an intended change):\n{}",
        differ.join("\n")
    );
}
