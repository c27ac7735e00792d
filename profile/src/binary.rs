//! The compact encoding of a profile (files named `*.lpb`, docs/profile-format.md): the
//! same `lockpath/1` profile, its lock rows as fixed-size binary records and the rest as
//! the JSON it always is. JSON stays the default and the documented contract; this
//! encoding exists for profiles of millions of lock rows, which load in a fraction of
//! the time (no text to parse per row). Every command reads both: a profile is told
//! apart by its first bytes, not by its name.

use anyhow::{bail, Context, Result};

use crate::profile::{CompactString, LockRow, Profile};

/// The first bytes of a compact profile (a line of text: `head -1` names it).
pub const MAGIC: &[u8] = b"lockpath/1 compact\n";

/// The file name extension `Profile::save` writes the compact encoding for.
pub const EXTENSION: &str = "lpb";

/// Bytes of one lock row record.
const ROW_BYTES: usize = 72;

const HAS_STACK: u32 = 1;
const HAS_OWNER_PID: u32 = 2;
const HAS_OWNER_STACK: u32 = 4;

/// Whether `bytes` start like a compact profile (or are a cut-off start of one).
pub(crate) fn is_compact(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC) || (!bytes.is_empty() && MAGIC.starts_with(bytes))
}

/// Encodes a profile: MAGIC; the JSON of the profile without its lock rows (u64 length,
/// then the text); the lock names (u32 count, then u32 length and UTF-8 bytes each);
/// the lock rows (u64 count, then `ROW_BYTES` each). Integers are little-endian.
pub fn encode(profile: &Profile) -> Result<Vec<u8>> {
    let header = Profile {
        locks: Vec::new(),
        ..profile.clone()
    };
    let json = serde_json::to_vec(&header).context("cannot serialize the profile")?;
    // Lock names and name sources, each stored once; rows refer to them by index.
    let mut names: Vec<&str> = Vec::new();
    let mut ids: std::collections::HashMap<&str, u32, rustc_hash::FxBuildHasher> =
        Default::default();
    let mut rows = Vec::with_capacity(profile.locks.len() * ROW_BYTES);
    for row in &profile.locks {
        let [name, source] = [&row.lock_name, &row.lock_name_source].map(|text| {
            *ids.entry(text.as_str()).or_insert_with(|| {
                names.push(text.as_str());
                (names.len() - 1) as u32
            })
        });
        let present = row.stack.map_or(0, |_| HAS_STACK)
            | row.owner_pid.map_or(0, |_| HAS_OWNER_PID)
            | row.owner_stack.map_or(0, |_| HAS_OWNER_STACK);
        for value in [row.pid, row.flags] {
            rows.extend_from_slice(&value.to_le_bytes());
        }
        rows.extend_from_slice(&row.lock_addr.to_le_bytes());
        for value in [
            name,
            source,
            present,
            row.stack.unwrap_or(0),
            row.owner_pid.unwrap_or(0),
            row.owner_stack.unwrap_or(0),
        ] {
            rows.extend_from_slice(&value.to_le_bytes());
        }
        for value in [row.count, row.total_ns, row.max_ns, row.min_ns] {
            rows.extend_from_slice(&value.to_le_bytes());
        }
    }
    let mut out = Vec::with_capacity(MAGIC.len() + 8 + json.len() + rows.len() + 16);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&(names.len() as u32).to_le_bytes());
    for name in &names {
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
    }
    out.extend_from_slice(&(profile.locks.len() as u64).to_le_bytes());
    out.extend_from_slice(&rows);
    Ok(out)
}

/// Reads the parts of a compact profile in order; running out of bytes is a truncated
/// file.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize, what: &str) -> Result<&'a [u8]> {
        if self.bytes.len() < len {
            bail!("the file is truncated (compact profile, in {what}); record it again");
        }
        let (taken, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(taken)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        let mut word = [0; 4];
        word.copy_from_slice(self.take(4, what)?);
        Ok(u32::from_le_bytes(word))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        let mut word = [0; 8];
        word.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_le_bytes(word))
    }
}

fn le_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

fn le_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// Decodes a compact profile (not yet validated: `Profile::from_bytes` does that).
/// `parse_json` parses the JSON part as a JSON profile is parsed.
pub(crate) fn decode(
    bytes: &[u8],
    parse_json: impl FnOnce(&[u8]) -> Result<Profile>,
) -> Result<Profile> {
    let mut reader = Reader { bytes };
    reader.take(MAGIC.len(), "its first line")?;
    let json_len = reader.u64("the length of its JSON part")?;
    let json_len = usize::try_from(json_len)
        .ok()
        .filter(|&len| len <= reader.bytes.len())
        .with_context(|| {
            format!("the file is truncated (compact profile: a JSON part of {json_len} bytes); record it again")
        })?;
    let mut profile = parse_json(reader.take(json_len, "its JSON part")?)?;
    if !profile.locks.is_empty() {
        bail!("a compact profile with lock rows in its JSON part: not written by lockpath");
    }
    let count = reader.u32("the number of lock names")? as usize;
    // Each name takes at least its 4-byte length: a count beyond that is a cut file.
    let mut names: Vec<CompactString> = Vec::with_capacity(count.min(reader.bytes.len() / 4));
    for _ in 0..count {
        let len = reader.u32("the lock names")? as usize;
        let text = std::str::from_utf8(reader.take(len, "the lock names")?)
            .context("a lock name of the compact profile is not UTF-8")?;
        names.push(CompactString::from(text));
    }
    let rows = reader.u64("the number of lock rows")?;
    let rows = usize::try_from(rows)
        .ok()
        .filter(|&rows| rows.checked_mul(ROW_BYTES) == Some(reader.bytes.len()));
    let Some(rows) = rows else {
        bail!(
            "the file is truncated (compact profile: {} bytes of lock rows, not a whole number of {ROW_BYTES}-byte rows as its count says); record it again",
            reader.bytes.len()
        );
    };
    let name = |id: u32| {
        names.get(id as usize).with_context(|| {
            format!(
                "a lock row refers to name {id}, but there are {} names",
                names.len()
            )
        })
    };
    let mut locks = Vec::with_capacity(rows);
    for record in reader.bytes.chunks_exact(ROW_BYTES) {
        let present = le_u32(record, 24);
        let optional = |bit: u32, at: usize| (present & bit != 0).then(|| le_u32(record, at));
        locks.push(LockRow {
            pid: le_u32(record, 0),
            flags: le_u32(record, 4),
            lock_addr: le_u64(record, 8),
            lock_name: name(le_u32(record, 16))?.clone(),
            lock_name_source: name(le_u32(record, 20))?.clone(),
            stack: optional(HAS_STACK, 28),
            owner_pid: optional(HAS_OWNER_PID, 32),
            owner_stack: optional(HAS_OWNER_STACK, 36),
            count: le_u64(record, 40),
            total_ns: le_u64(record, 48),
            max_ns: le_u64(record, 56),
            min_ns: le_u64(record, 64),
        });
    }
    profile.locks = locks;
    Ok(profile)
}
