//! pprof export: the gzipped protobuf `perftools.profiles.Profile` that `go tool pprof`,
//! Pyroscope and Parca read. Encoded by hand (the schema is small and stable); stacks
//! come from `folded::samples`, one location and function per distinct frame name.

use std::{collections::HashMap, io::Write};

use anyhow::{Context, Result};

use crate::{export::folded, kind::Kind, profile::Profile};

/// Protobuf wire encoding of the few field shapes profile.proto needs.
#[derive(Default)]
struct Message(Vec<u8>);

impl Message {
    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.0.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.0.push(value as u8);
    }

    fn key(&mut self, field: u32, wire_type: u8) {
        self.varint(((field as u64) << 3) | wire_type as u64);
    }

    /// An int64/uint64 field; zero is the default and is left out.
    fn uint(&mut self, field: u32, value: u64) {
        if value != 0 {
            self.key(field, 0);
            self.varint(value);
        }
    }

    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        self.key(field, 2);
        self.varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    fn message(&mut self, field: u32, message: Message) {
        self.bytes(field, &message.0);
    }

    fn packed(&mut self, field: u32, values: &[u64]) {
        let mut inner = Message::default();
        for &value in values {
            inner.varint(value);
        }
        self.bytes(field, &inner.0);
    }
}

/// The string table: index 0 is always "".
struct Strings {
    ids: HashMap<String, u64>,
    list: Vec<String>,
}

impl Strings {
    fn new() -> Self {
        Strings {
            ids: HashMap::from([(String::new(), 0)]),
            list: vec![String::new()],
        }
    }

    fn id(&mut self, text: &str) -> u64 {
        if let Some(&id) = self.ids.get(text) {
            return id;
        }
        let id = self.list.len() as u64;
        self.list.push(text.to_string());
        self.ids.insert(text.to_string(), id);
        id
    }
}

// Field numbers of perftools.profiles.Profile and its messages.
const PROFILE_SAMPLE_TYPE: u32 = 1;
const PROFILE_SAMPLE: u32 = 2;
const PROFILE_LOCATION: u32 = 4;
const PROFILE_FUNCTION: u32 = 5;
const PROFILE_STRING_TABLE: u32 = 6;
const PROFILE_TIME_NANOS: u32 = 9;
const PROFILE_DURATION_NANOS: u32 = 10;
const PROFILE_PERIOD_TYPE: u32 = 11;
const PROFILE_PERIOD: u32 = 12;
const PROFILE_COMMENT: u32 = 13;
const PROFILE_DEFAULT_SAMPLE_TYPE: u32 = 14;
const VALUE_TYPE_TYPE: u32 = 1;
const VALUE_TYPE_UNIT: u32 = 2;
const SAMPLE_LOCATION_ID: u32 = 1;
const SAMPLE_VALUE: u32 = 2;
const LOCATION_ID: u32 = 1;
const LOCATION_LINE: u32 = 4;
const LINE_FUNCTION_ID: u32 = 1;
const FUNCTION_ID: u32 = 1;
const FUNCTION_NAME: u32 = 2;
const FUNCTION_SYSTEM_NAME: u32 = 3;

fn value_type(strings: &mut Strings, kind: &str, unit: &str) -> Message {
    let mut message = Message::default();
    message.uint(VALUE_TYPE_TYPE, strings.id(kind));
    message.uint(VALUE_TYPE_UNIT, strings.id(unit));
    message
}

/// The uncompressed protobuf encoding.
pub fn encode(profile: &Profile, kind: Kind) -> Vec<u8> {
    let mut strings = Strings::new();
    let mut out = Message::default();
    let types = folded::sample_types(kind);
    for (name, unit) in types {
        let message = value_type(&mut strings, name, unit);
        out.message(PROFILE_SAMPLE_TYPE, message);
    }
    // One location (and function) per distinct frame name, ids from 1.
    let mut locations: HashMap<String, u64> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    for sample in folded::samples(profile, kind) {
        let ids: Vec<u64> = sample
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
        let mut message = Message::default();
        message.packed(SAMPLE_LOCATION_ID, &ids);
        message.packed(SAMPLE_VALUE, &sample.values);
        out.message(PROFILE_SAMPLE, message);
    }
    for (index, name) in order.iter().enumerate() {
        let id = index as u64 + 1;
        let mut line = Message::default();
        line.uint(LINE_FUNCTION_ID, id);
        let mut location = Message::default();
        location.uint(LOCATION_ID, id);
        location.message(LOCATION_LINE, line);
        out.message(PROFILE_LOCATION, location);
        let mut function = Message::default();
        function.uint(FUNCTION_ID, id);
        let name_id = strings.id(name);
        function.uint(FUNCTION_NAME, name_id);
        function.uint(FUNCTION_SYSTEM_NAME, name_id);
        out.message(PROFILE_FUNCTION, function);
    }
    out.uint(
        PROFILE_TIME_NANOS,
        profile.start_unix_s.saturating_mul(1_000_000_000),
    );
    out.uint(PROFILE_DURATION_NANOS, (profile.duration_s * 1e9) as u64);
    let (flame_index, _) = folded::flame_value(kind);
    if let Some((name, unit)) = types.get(flame_index) {
        let period_type = value_type(&mut strings, name, unit);
        out.message(PROFILE_PERIOD_TYPE, period_type);
        out.uint(PROFILE_PERIOD, 1);
        out.uint(PROFILE_DEFAULT_SAMPLE_TYPE, strings.id(name));
    }
    let comment = strings.id(&format!(
        "lockpath {} on {} ({})",
        profile.targets.mode, profile.host, profile.kernel
    ));
    out.uint(PROFILE_COMMENT, comment);
    for text in &strings.list {
        out.bytes(PROFILE_STRING_TABLE, text.as_bytes());
    }
    out.0
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
    use crate::export::report::tests::profile_with_two_locks;

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
    fn offcpu_and_io_sample_types() {
        let profile = crate::export::offcpu::tests::profile_with_waits_and_io();
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
