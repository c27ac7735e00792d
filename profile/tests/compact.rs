//! The compact encoding (`*.lpb`) against JSON: every test profile (tests/golden/*.json
//! and the loadable `ok_*` files of tests/corpus/) loads from its compact encoding as the
//! same profile, so every output is the same.

mod common;

use common::inputs;

use lockpath_profile::{binary, Profile};

#[test]
fn every_test_profile_loads_the_same_from_its_compact_encoding() {
    let inputs = inputs();
    assert!(inputs.len() >= 5, "test profiles found: {inputs:?}");
    for path in inputs {
        let profile = Profile::load(&path).expect("JSON loads");
        let bytes = binary::encode(&profile).expect("encode");
        assert!(bytes.starts_with(binary::MAGIC));
        let compact =
            Profile::from_bytes(&bytes).unwrap_or_else(|err| panic!("{}: {err:#}", path.display()));
        assert!(compact == profile, "{}: another profile", path.display());
        // And back: the JSON written from the compact profile is the JSON of the profile.
        assert_eq!(
            serde_json::to_vec(&compact).expect("json"),
            serde_json::to_vec(&profile).expect("json"),
            "{}",
            path.display()
        );
    }
}
