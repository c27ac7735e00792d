//! pprof export: the gzipped protobuf `perftools.profiles.Profile` that `go tool pprof`,
//! Pyroscope and Parca read, encoded by prost from the schema's messages
//! (pprof_proto.rs); stacks come from `folded::samples`, one location and function per
//! distinct frame name.

use std::{collections::HashMap, io::Write};

use anyhow::{Context, Result};
use prost::Message as _;

use crate::export::formats::pprof_proto as proto;
use crate::{export::formats::folded, kind::Kind, profile::Profile};

/// The string table: index 0 is always "".
struct Strings {
    ids: HashMap<String, i64>,
    list: Vec<String>,
}

impl Strings {
    fn new() -> Self {
        Strings {
            ids: HashMap::from([(String::new(), 0)]),
            list: vec![String::new()],
        }
    }

    fn id(&mut self, text: &str) -> i64 {
        if let Some(&id) = self.ids.get(text) {
            return id;
        }
        let id = self.list.len() as i64;
        self.list.push(text.to_string());
        self.ids.insert(text.to_string(), id);
        id
    }
}

fn value_type(strings: &mut Strings, kind: &str, unit: &str) -> proto::ValueType {
    proto::ValueType {
        r#type: strings.id(kind),
        unit: strings.id(unit),
    }
}

/// pprof values are int64: a count beyond it (only a damaged profile has one) is cut.
fn int64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The profile as pprof's message.
pub fn message(profile: &Profile, kind: Kind) -> proto::Profile {
    let mut strings = Strings::new();
    let mut out = proto::Profile::default();
    let view = kind.view();
    let types = view.sample_types();
    for (name, unit) in types {
        out.sample_type.push(value_type(&mut strings, name, unit));
    }
    // One location (and function) per distinct frame name, ids from 1.
    let mut locations: HashMap<String, u64> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    for sample in folded::samples(profile, kind) {
        let location_id: Vec<u64> = sample
            .frames
            .iter()
            .rev() // pprof lists the leaf first
            .map(|frame| {
                *locations.entry(frame.clone()).or_insert_with(|| {
                    order.push(frame.clone());
                    order.len() as u64
                })
            })
            .collect();
        out.sample.push(proto::Sample {
            location_id,
            value: sample.values.iter().map(|&value| int64(value)).collect(),
            ..Default::default()
        });
    }
    for (index, name) in order.iter().enumerate() {
        let id = index as u64 + 1;
        out.location.push(proto::Location {
            id,
            line: vec![proto::Line {
                function_id: id,
                line: 0,
            }],
            ..Default::default()
        });
        let name_id = strings.id(name);
        out.function.push(proto::Function {
            id,
            name: name_id,
            system_name: name_id,
            ..Default::default()
        });
    }
    out.time_nanos = int64(profile.start_unix_s.saturating_mul(1_000_000_000));
    out.duration_nanos = (profile.duration_s * 1e9) as i64;
    let (flame_index, _) = view.flame_value();
    if let Some((name, unit)) = types.get(flame_index) {
        out.period_type = Some(value_type(&mut strings, name, unit));
        out.period = 1;
        out.default_sample_type = strings.id(name);
    }
    let comment = strings.id(&format!(
        "lockpath {} on {} ({})",
        profile.targets.mode, profile.host, profile.kernel
    ));
    out.comment.push(comment);
    out.string_table = strings.list;
    out
}

/// The uncompressed protobuf encoding.
pub fn encode(profile: &Profile, kind: Kind) -> Vec<u8> {
    message(profile, kind).encode_to_vec()
}

/// The gzipped protobuf, as pprof files are stored.
pub fn render(profile: &Profile, kind: Kind) -> Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder
        .write_all(&encode(profile, kind))
        .context("cannot compress the pprof profile")?;
    encoder
        .finish()
        .context("cannot compress the pprof profile")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::formats::report::tests::profile_with_two_locks;

    // Field numbers of profile.proto that the tests decode by hand.
    const PROFILE_SAMPLE: u32 = 2;
    const PROFILE_STRING_TABLE: u32 = 6;
    const SAMPLE_VALUE: u32 = 2;

    /// Reads (field, wire type, varint or bytes) of one protobuf message.
    fn fields(mut bytes: &[u8]) -> Vec<(u32, u64, Vec<u8>)> {
        fn varint(bytes: &mut &[u8]) -> u64 {
            let mut value = 0u64;
            let mut shift = 0;
            loop {
                let byte = bytes[0];
                *bytes = &bytes[1..];
                value |= ((byte & 0x7f) as u64) << shift;
                if byte < 0x80 {
                    return value;
                }
                shift += 7;
            }
        }
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let key = varint(&mut bytes);
            let field = (key >> 3) as u32;
            match key & 7 {
                0 => out.push((field, varint(&mut bytes), Vec::new())),
                2 => {
                    let len = varint(&mut bytes) as usize;
                    out.push((field, 0, bytes[..len].to_vec()));
                    bytes = &bytes[len..];
                }
                other => panic!("unexpected wire type {other}"),
            }
        }
        out
    }

    #[test]
    fn encodes_sample_types_strings_and_values() {
        let bytes = encode(&profile_with_two_locks(), Kind::Lock);
        let top = fields(&bytes);
        let strings: Vec<String> = top
            .iter()
            .filter(|(field, _, _)| *field == PROFILE_STRING_TABLE)
            .map(|(_, _, bytes)| String::from_utf8(bytes.clone()).expect("utf8"))
            .collect();
        assert_eq!(strings[0], "");
        for expected in [
            "contentions",
            "count",
            "delay",
            "nanoseconds",
            "do_pipe2",
            "ior",
        ] {
            assert!(
                strings.iter().any(|s| s == expected),
                "{expected} in {strings:?}"
            );
        }
        let samples: Vec<&Vec<u8>> = top
            .iter()
            .filter(|(field, _, _)| *field == PROFILE_SAMPLE)
            .map(|(_, _, bytes)| bytes)
            .collect();
        assert_eq!(samples.len(), 2);
        for sample in samples {
            let values = fields(sample)
                .into_iter()
                .find(|(field, _, _)| *field == SAMPLE_VALUE)
                .expect("values")
                .2;
            // Values are packed varints: count and delay.
            let mut packed = values.as_slice();
            let mut decoded = Vec::new();
            while !packed.is_empty() {
                let mut value = 0u64;
                let mut shift = 0;
                loop {
                    let byte = packed[0];
                    packed = &packed[1..];
                    value |= ((byte & 0x7f) as u64) << shift;
                    if byte < 0x80 {
                        break;
                    }
                    shift += 7;
                }
                decoded.push(value);
            }
            assert!(
                decoded == vec![150, 7_000_000] || decoded == vec![10, 6_000_000],
                "{decoded:?}"
            );
        }
        let gz = render(&profile_with_two_locks(), Kind::Lock).expect("gzip");
        assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip magic");
    }

    #[test]
    fn decodes_back_to_the_same_message() {
        let profile = profile_with_two_locks();
        let decoded =
            proto::Profile::decode(encode(&profile, Kind::Lock).as_slice()).expect("decode");
        assert_eq!(decoded, message(&profile, Kind::Lock));
        assert_eq!(decoded.sample.len(), 2);
        assert_eq!(decoded.string_table[0], "");
        // Every sample's locations and every location's function exist.
        let ids: Vec<u64> = decoded
            .location
            .iter()
            .map(|location| location.id)
            .collect();
        for sample in &decoded.sample {
            assert!(sample.location_id.iter().all(|id| ids.contains(id)));
            assert_eq!(sample.value.len(), decoded.sample_type.len());
        }
        for location in &decoded.location {
            assert!(decoded
                .function
                .iter()
                .any(|function| function.id == location.line[0].function_id));
        }
    }

    #[test]
    fn offcpu_and_io_sample_types() {
        let profile = crate::export::tables::offcpu::tests::profile_with_waits_and_io();
        for (kind, expected, samples) in [
            (Kind::Offcpu, ["waits", "off_cpu", "__wait_on_buffer"], 2),
            (Kind::Io, ["waits", "io_wait", "ext4_bread"], 1),
        ] {
            let top = fields(&encode(&profile, kind));
            let strings: Vec<String> = top
                .iter()
                .filter(|(field, _, _)| *field == PROFILE_STRING_TABLE)
                .map(|(_, _, bytes)| String::from_utf8(bytes.clone()).expect("utf8"))
                .collect();
            for name in expected.iter().chain(&["nanoseconds", "count", "mdtest"]) {
                assert!(strings.iter().any(|s| s == name), "{name} in {strings:?}");
            }
            let count = top
                .iter()
                .filter(|(field, _, _)| *field == PROFILE_SAMPLE)
                .count();
            assert_eq!(count, samples, "{kind:?}");
        }
    }
}
