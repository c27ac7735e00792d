//! Any bytes given to the profile loader: an error or a profile, never a panic; and a
//! profile that loads renders in every exporter without panicking (indices validated).
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockpath::{
    cli::{GroupBy, Kind},
    export,
    profile::Profile,
};

fuzz_target!(|data: &[u8]| {
    let Ok(profile) = Profile::from_bytes(data) else {
        return;
    };
    let _ = export::report::summary(&profile, 5);
    for by in [GroupBy::Lock, GroupBy::Caller, GroupBy::Process, GroupBy::Host] {
        let _ = export::report::json(&profile, by, 0);
    }
    for kind in [Kind::Lock] {
        let _ = export::folded::render(&profile, kind);
        let _ = export::flamegraph::render_svg(&profile, kind);
        let _ = export::pprof::render(&profile, kind);
        let _ = export::json::render(&profile, kind);
        let _ = export::diff::text(&profile, &profile, kind, 5);
    }
    let _ = export::html::render(&profile);
    let _ = export::merge::merge(vec![profile.clone(), profile], vec!["fuzz".into()]);
});
