//! Regression corpus of the profile loader: damaged, truncated and hostile files (hand
//! made, and any input the cargo-fuzz target in fuzz/ found). Each must be refused with
//! one clear line, never a panic; and the exporters must survive whatever loads.

use std::path::Path;

use lockpath_profile::{export, profile::Profile, GroupBy, Kind};

#[test]
fn every_corpus_file_is_refused_with_one_clear_line() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/corpus exists") {
        let path = entry.expect("entry").path();
        let bytes = std::fs::read(&path).expect("read corpus file");
        let name = path.display();
        match Profile::from_bytes(&bytes) {
            Ok(profile) => {
                // Files named `ok_*` are valid but odd; everything must render.
                assert!(
                    path.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("ok_")),
                    "{name} loaded but should have been refused"
                );
                let _ = export::formats::report::summary(&profile, 5);
                for by in GroupBy::ALL {
                    export::formats::report::json(&profile, by, 0).expect("json report");
                }
                for kind in Kind::ALL {
                    let _ = export::formats::folded::render(&profile, kind);
                    export::formats::flamegraph::render_svg(&profile, kind).expect("svg");
                    export::formats::pprof::render(&profile, kind).expect("pprof");
                    export::formats::json::render(&profile, kind).expect("json tree");
                    let _ = export::operations::diff::text(&profile, &profile, kind, 5);
                }
                export::formats::html::render(&profile).expect("html");
                export::operations::merge::merge(
                    vec![profile.clone(), profile],
                    vec!["test".into()],
                )
                .expect("merge of a profile with itself");
            }
            Err(err) => {
                let text = format!("{err:#}");
                assert_eq!(text.lines().count(), 1, "{name}: one line: {text}");
                assert!(text.len() > 10, "{name}: a real explanation: {text}");
            }
        }
        checked += 1;
    }
    assert!(checked >= 10, "the corpus has its files ({checked})");
}

#[test]
fn specific_damage_is_named() {
    let cases: &[(&[u8], &str)] = &[
        (b"", "empty"),
        (b"{\"format\":\"lockpath/1\",", "truncated"),
        (b"\x00\xff", "not JSON"),
        (b"[1,2]", "not a lockpath profile"),
        (b"{\"format\":7}", "7"),
        (
            b"{\"format\":\"lockpath/1\",\"host\":\"h\"}",
            "invalid fields",
        ),
    ];
    for (bytes, expect) in cases {
        let err = Profile::from_bytes(bytes).expect_err("must be refused");
        let text = format!("{err:#}");
        assert!(
            text.contains(expect),
            "{:?}: expected {expect:?} in {text}",
            String::from_utf8_lossy(bytes)
        );
    }
}

/// Found by the fuzzer: merging a profile whose loss counter is near u64::MAX with itself
/// overflowed (a panic in debug builds, a wrapped-around small number in release).
#[test]
fn merged_counters_saturate_instead_of_wrapping() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/ok_fuzz_crash_merge_losses_overflow.json");
    let profile = Profile::from_bytes(&std::fs::read(path).expect("read")).expect("loads");
    let merged =
        export::operations::merge::merge(vec![profile.clone(), profile], vec!["test".into()])
            .expect("merge");
    assert_eq!(merged.losses.get("x"), Some(&u64::MAX));
}
