//! `lockpath convert` and the compact encoding (`*.lpb`) through the binary: every command
//! reads it and prints what it prints for the JSON; a cut compact file is one clear line.
//! Needs no privileges.

#[macro_use]
mod common;

use std::path::{Path, PathBuf};

use common::*;

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../profile/tests/golden")
        .join(name)
}

#[test]
fn compact_profiles_give_the_same_outputs_as_json() {
    let dir = or_skip!(lockpath_test("compact"));
    for name in ["lock_names.json", "lock_offcpu_cpu.json", "merged.json"] {
        let json = golden(name);
        let compact = dir.join(name).with_extension("lpb");
        lockpath_ok(&["convert", path_str(&json), "-o", path_str(&compact)]);
        let bytes = std::fs::read(&compact).expect("read compact");
        assert!(bytes.starts_with(b"lockpath/1 compact\n"), "{name}");
        assert!(
            bytes.len() < std::fs::metadata(&json).expect("stat").len() as usize * 2,
            "{name}: compact is not bloated"
        );
        let back = dir.join(name);
        lockpath_ok(&["convert", path_str(&compact), "-o", path_str(&back)]);
        for args in [
            vec!["report"],
            vec!["report", "--by", "caller"],
            vec!["report", "--format", "json"],
            vec!["export", "--format", "folded", "--kind", "lock"],
        ] {
            let run = |profile: &Path| {
                let mut full = vec![args[0], path_str(profile)];
                full.extend(&args[1..]);
                lockpath_ok(&full).stdout
            };
            let expected = run(&json);
            assert!(!expected.is_empty(), "{name} {args:?}");
            assert_eq!(run(&compact), expected, "{name} {args:?}: compact");
            assert_eq!(run(&back), expected, "{name} {args:?}: converted back");
        }
        let svg = |profile: &Path, out: &str| {
            let out = dir.join(out);
            lockpath_ok(&["flamegraph", path_str(profile), "-o", path_str(&out)]);
            std::fs::read(&out).expect("svg")
        };
        assert!(
            svg(&json, "a.svg") == svg(&compact, "b.svg"),
            "{name}: flamegraphs differ"
        );
    }
}

#[test]
fn a_cut_compact_profile_is_one_clear_line_and_no_output() {
    let dir = or_skip!(lockpath_test("compact-cut"));
    let compact = dir.join("p.lpb");
    lockpath_ok(&[
        "convert",
        path_str(&golden("lock_names.json")),
        "-o",
        path_str(&compact),
    ]);
    let bytes = std::fs::read(&compact).expect("read");
    for len in [10, bytes.len() / 2, bytes.len() - 1] {
        let cut = dir.join(format!("cut{len}.lpb"));
        std::fs::write(&cut, &bytes[..len]).expect("write");
        let stderr = fails_with(&["report", path_str(&cut)], "truncated");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        let out = dir.join(format!("out{len}.json"));
        fails_with(
            &["convert", path_str(&cut), "-o", path_str(&out)],
            "truncated",
        );
        assert!(!out.exists(), "no output from a cut profile");
    }
}
