//! Any bytes given to the profile loader: an error or a profile, never a panic; and a
//! profile that loads renders in every exporter without panicking (indices validated).
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockpath_profile::{export, GroupBy, Kind, Profile};

fuzz_target!(|data: &[u8]| {
    let Ok(profile) = Profile::from_bytes(data) else {
        return;
    };
    let _ = export::formats::report::summary(&profile, 5);
    let _ = export::formats::report::text(&profile, GroupBy::Lock, 5);
    for by in GroupBy::ALL {
        let _ = export::formats::report::json(&profile, by, 0);
    }
    for kind in Kind::ALL {
        let _ = export::formats::folded::render(&profile, kind);
        let _ = export::formats::flamegraph::render_svg(&profile, kind);
        let _ = export::formats::pprof::render(&profile, kind);
        let _ = export::formats::json::render(&profile, kind);
        let _ = export::operations::diff::text(&profile, &profile, kind, 5);
        let _ = export::operations::diff::json(&profile, &profile, kind);
        let _ = export::formats::flamegraph::render_diff_svg(&profile, &profile, kind);
    }
    let _ = export::formats::html::render(&profile);
    let _ = export::formats::prometheus::render(&profile);
    let _ = export::operations::merge::merge(vec![profile.clone(), profile], vec!["fuzz".into()]);
});
