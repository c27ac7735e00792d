//! Loading and saving a profile: JSON or the compact encoding, validated on load, written
//! atomically.

use std::{fs, io::Write, path::Path};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use super::{Profile, FORMAT};
use crate::presized::with_document_size;

impl Profile {
    /// Loads and validates a profile file.
    pub fn load(path: &Path) -> Result<Profile> {
        let file = fs::File::open(path)
            .with_context(|| format!("cannot read profile {}", path.display()))?;
        // An empty file cannot be mapped; it is read (and said to be empty).
        let mappable = file.metadata().is_ok_and(|m| m.is_file() && m.len() > 0);
        let parsed = if mappable {
            // Mapped, not read: a large profile is parsed straight from the page cache,
            // without a copy the size of the file that the kernel would first zero
            // (reading a 154 MiB profile that way was 40% of `report`'s time).
            // SAFETY: the mapping is only read while `map` lives. lockpath writes profiles
            // to a temporary file and renames it, so a profile is never changed in
            // place by lockpath; a file truncated by someone else while it is parsed
            // would fault (SIGBUS), as it would for any mmap reader.
            let map = unsafe { memmap2::Mmap::map(&file) }
                .with_context(|| format!("cannot read profile {}", path.display()))?;
            Self::from_bytes(&map)
        } else {
            // A pipe or a character device (`report /dev/stdin`) cannot be mapped.
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut &file, &mut bytes)
                .with_context(|| format!("cannot read profile {}", path.display()))?;
            Self::from_bytes(&bytes)
        };
        parsed.with_context(|| format!("{} is not a usable profile", path.display()))
    }

    /// Parses and validates a profile. It goes straight into the model (no intermediate
    /// JSON tree: a profile of a million rows loads in a fraction of a second); only when
    /// that fails is the file looked at again to say why in the most useful terms.
    pub fn from_bytes(bytes: &[u8]) -> Result<Profile> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            bail!("the file is empty; record it again");
        }
        // The compact encoding (`*.lpb`, binary.rs) is told apart by its first bytes.
        let mut profile = if crate::binary::is_compact(bytes) {
            crate::binary::decode(bytes, Self::parse_json)?
        } else {
            Self::parse_json(bytes)?
        };
        check_format(Some(&profile.format))?;
        profile.validate()?;
        Ok(profile)
    }

    /// Parses a JSON profile, not yet validated.
    fn parse_json(bytes: &[u8]) -> Result<Profile> {
        let parsed = with_document_size(bytes.len(), || serde_json::from_slice::<Profile>(bytes));
        parsed.map_err(|err| explain_parse_error(bytes, err))
    }

    /// Checks every index, so exporters can trust them.
    fn validate(&mut self) -> Result<()> {
        if !(self.duration_s.is_finite() && self.duration_s >= 0.0) {
            bail!("duration_s is {}, not a duration", self.duration_s);
        }
        for (index, stack) in self.stacks.iter().enumerate() {
            if let Some(bad) = stack
                .frames
                .iter()
                .find(|&&f| f as usize >= self.frames.len())
            {
                bail!(
                    "stack {index} refers to frame {bad}, but there are {} frames",
                    self.frames.len()
                );
            }
        }
        let stacks = self.stacks.len();
        let mut bad = None;
        self.visit_row_ids(&mut |row| {
            if bad.is_none() {
                let beyond = row
                    .stacks
                    .iter()
                    .find_map(|stack| stack.filter(|s| *s as usize >= stacks));
                bad = beyond.map(|stack| (row.what, stack));
            }
        });
        if let Some((what, stack)) = bad {
            bail!("{what} refers to stack {stack}, but there are {stacks} stacks");
        }
        if let Some(timeline) = &self.timeline {
            let intervals = timeline.ends_s.len();
            if let Some(bad) = timeline
                .series
                .iter()
                .find(|series| series.wait_ns.len() != intervals || series.count.len() != intervals)
            {
                bail!(
                    "timeline series {:?} has {} values, but there are {intervals} intervals",
                    bad.name,
                    bad.wait_ns.len()
                );
            }
        }
        Ok(())
    }
    /// Writes the profile atomically: a complete file or none (temporary file, fsync, rename).
    /// JSON, or the compact encoding (binary.rs) when the name ends in `.lpb`.
    pub fn save(&self, path: &Path) -> Result<()> {
        let compact = path
            .extension()
            .is_some_and(|extension| extension == crate::binary::EXTENSION);
        let bytes = if compact {
            crate::binary::encode(self)?
        } else {
            serde_json::to_vec(self).context("cannot serialize the profile")?
        };
        write_atomically(path, &bytes)
    }
}

/// Only the format field, to name a foreign or damaged file.
#[derive(Deserialize)]
struct FormatOnly {
    #[serde(default)]
    format: Option<serde_json::Value>,
}

fn check_format(format: Option<&str>) -> Result<()> {
    match format {
        Some(FORMAT) => Ok(()),
        Some(other) => bail!(
            "its format is {other:?}, this lockpath reads {FORMAT:?}; use the lockpath version that wrote it"
        ),
        None => bail!("no \"format\" field: not a lockpath profile"),
    }
}

fn explain_parse_error(bytes: &[u8], err: serde_json::Error) -> anyhow::Error {
    use serde_json::error::Category;
    match err.classify() {
        Category::Eof => anyhow::anyhow!("the file is truncated ({err}); record it again"),
        Category::Syntax | Category::Io => anyhow::anyhow!("not JSON ({err})"),
        Category::Data => {
            let format = serde_json::from_slice::<FormatOnly>(bytes)
                .ok()
                .and_then(|header| header.format);
            let format_text = format.as_ref().map(|value| match value.as_str() {
                Some(text) => text.to_string(),
                None => value.to_string(),
            });
            match check_format(format_text.as_deref()) {
                Err(format_error) => format_error,
                Ok(()) => anyhow::anyhow!("a {FORMAT} profile with invalid fields ({err})"),
            }
        }
    }
}

/// The temporary file `write_atomically` writes before renaming it to `path`.
fn temporary_path(path: &Path) -> Result<std::path::PathBuf> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let file_name = path
        .file_name()
        .with_context(|| format!("{} is not a file path", path.display()))?;
    Ok(dir.join(format!(
        ".{}.tmp.{}",
        file_name.to_string_lossy(),
        std::process::id()
    )))
}

/// Checks, before a long recording, that `write_atomically(path, ..)` can create its
/// temporary file: creates it and removes it.
pub fn check_writable(path: &Path) -> Result<()> {
    let tmp = temporary_path(path)?;
    fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    fs::remove_file(&tmp).with_context(|| format!("cannot remove {}", tmp.display()))
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename,
/// so a reader (or a crash) never sees a half-written file.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temporary_path(path)?;
    let result = (|| -> Result<()> {
        let mut file =
            fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        file.write_all(bytes)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        file.sync_all()
            .with_context(|| format!("cannot sync {}", tmp.display()))?;
        fs::rename(&tmp, path)
            .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Frame, LockRow, StackInterner};

    fn sample() -> Profile {
        let mut profile = Profile::new();
        profile.host = "node1".into();
        let mut interner = StackInterner::default();
        let frame = Frame::kernel;
        let stack = interner.stack(vec![frame("_raw_spin_lock"), frame("do_pipe2")], false);
        let again = interner.stack(vec![frame("_raw_spin_lock"), frame("do_pipe2")], false);
        assert_eq!(stack, again);
        interner.finish(&mut profile);
        profile.locks.push(LockRow {
            pid: 7,
            lock_addr: 0xffff_0000,
            lock_name: "0xffff0000".into(),
            lock_name_source: "address".into(),
            flags: 1,
            stack: Some(stack),
            count: 3,
            total_ns: 300,
            max_ns: 200,
            min_ns: 50,
            owner_pid: Some(9),
            owner_stack: Some(stack),
        });
        profile
    }

    #[test]
    fn json_round_trip_keeps_everything() {
        let profile = sample();
        let bytes = serde_json::to_vec(&profile).expect("serialize");
        let loaded = Profile::from_bytes(&bytes).expect("load");
        assert_eq!(loaded, profile);
        assert_eq!(loaded.frames.len(), 2, "frames are interned once");
    }

    #[test]
    fn truncated_file_says_truncated() {
        let bytes = serde_json::to_vec(&sample()).expect("serialize");
        let err = Profile::from_bytes(&bytes[..bytes.len() / 2]).expect_err("must fail");
        assert!(format!("{err:#}").contains("truncated"), "{err:#}");
    }

    #[test]
    fn every_truncation_is_a_clear_error() {
        assert_every_truncation_fails(&serde_json::to_vec(&sample()).expect("serialize"));
    }

    /// Every proper prefix of `bytes` fails to load with one line naming the cut.
    fn assert_every_truncation_fails(bytes: &[u8]) {
        for len in 0..bytes.len() {
            let err = Profile::from_bytes(&bytes[..len]).expect_err("a cut file must fail");
            let text = format!("{err:#}");
            assert!(
                text.contains("truncated") || text.contains("empty"),
                "cut at {len}: {text}"
            );
            assert_eq!(text.lines().count(), 1, "one line: {text}");
        }
    }

    #[test]
    fn compact_round_trip_keeps_everything() {
        let mut profile = sample();
        let mut row = profile.locks[0].clone();
        row.stack = None;
        row.owner_pid = None;
        row.owner_stack = None;
        row.lock_name = "a lock name longer than twenty-four bytes".into();
        row.lock_name_source = "".into();
        profile.locks.push(row);
        let bytes = crate::binary::encode(&profile).expect("encode");
        assert!(bytes.starts_with(crate::binary::MAGIC));
        assert_eq!(Profile::from_bytes(&bytes).expect("load"), profile);
    }

    #[test]
    fn compact_profile_of_the_synthetic_shape_loads_as_its_json() {
        let dir = std::env::temp_dir().join(format!("lockpath-compact-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("mkdir");
        let json = dir.join("p.json");
        crate::synthetic::write_lock_profile(&json, 5_000).expect("write");
        let profile = Profile::load(&json).expect("load json");
        let compact = dir.join("p.lpb");
        profile.save(&compact).expect("save compact");
        let size = |path: &Path| fs::metadata(path).expect("stat").len();
        assert!(size(&compact) < size(&json), "compact is smaller");
        assert_eq!(Profile::load(&compact).expect("load compact"), profile);
        fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn every_truncation_of_a_compact_profile_is_a_clear_error() {
        assert_every_truncation_fails(&crate::binary::encode(&sample()).expect("encode"));
    }

    #[test]
    fn any_damaged_byte_of_a_compact_profile_loads_or_is_one_clear_line() {
        let bytes = crate::binary::encode(&sample()).expect("encode");
        for at in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut damaged = bytes.clone();
                damaged[at] ^= flip;
                if let Err(err) = Profile::from_bytes(&damaged) {
                    let text = format!("{err:#}");
                    assert_eq!(text.lines().count(), 1, "byte {at}: {text}");
                }
            }
        }
    }

    #[test]
    fn bad_compact_rows_are_rejected() {
        let mut profile = sample();
        profile.locks[0].stack = Some(99);
        let bytes = crate::binary::encode(&profile).expect("encode");
        let err = Profile::from_bytes(&bytes).expect_err("bad stack");
        assert!(format!("{err:#}").contains("stack 99"), "{err:#}");
        // A name index past the names.
        let mut bytes = crate::binary::encode(&sample()).expect("encode");
        let row = bytes.len() - 72;
        bytes[row + 16..row + 20].copy_from_slice(&7u32.to_le_bytes());
        let err = Profile::from_bytes(&bytes).expect_err("bad name");
        assert!(format!("{err:#}").contains("name 7"), "{err:#}");
    }

    #[test]
    fn foreign_format_is_named() {
        let err = Profile::from_bytes(br#"{"format":"lockpath/0"}"#).expect_err("must fail");
        assert!(format!("{err:#}").contains("lockpath/0"), "{err:#}");
        let err = Profile::from_bytes(br#"{"a":1}"#).expect_err("must fail");
        assert!(
            format!("{err:#}").contains("not a lockpath profile"),
            "{err:#}"
        );
    }

    #[test]
    fn bad_index_is_rejected() {
        let mut profile = sample();
        profile.locks[0].stack = Some(99);
        let bytes = serde_json::to_vec(&profile).expect("serialize");
        assert!(Profile::from_bytes(&bytes).is_err());
    }

    /// Loading checks the stacks of every kind of rows (`Profile::visit_row_ids`), nested
    /// rows included, and says which row is wrong.
    #[test]
    fn a_bad_stack_in_any_kind_of_row_is_named() {
        use crate::profile::{ChainLinkRow, ChainRow, CpuRow, OffcpuRow, WaitingRow, WakerRow};
        type Damage = fn(&mut Profile);
        let cases: [(&str, Damage); 5] = [
            ("a lock row", |p| p.locks[0].owner_stack = Some(99)),
            ("a cpu row", |p| {
                p.cpu.push(CpuRow {
                    user_stack: Some(99),
                    ..Default::default()
                })
            }),
            ("an offcpu row's waker", |p| {
                p.offcpu.push(OffcpuRow {
                    wakers: vec![WakerRow {
                        ustack: Some(99),
                        ..Default::default()
                    }],
                    ..Default::default()
                })
            }),
            ("a chain's link", |p| {
                p.chains.push(ChainRow {
                    links: vec![ChainLinkRow {
                        stack: Some(99),
                        ..Default::default()
                    }],
                    ..Default::default()
                })
            }),
            ("a waiting row", |p| {
                p.waiting.push(WaitingRow {
                    ustack: Some(99),
                    ..Default::default()
                })
            }),
        ];
        for (what, damage) in cases {
            let mut profile = sample();
            damage(&mut profile);
            let bytes = serde_json::to_vec(&profile).expect("serialize");
            let err = Profile::from_bytes(&bytes).expect_err(what).to_string();
            assert_eq!(
                err,
                format!("{what} refers to stack 99, but there are 1 stacks")
            );
        }
    }

    #[test]
    fn atomic_write_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("lockpath-test-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("p.json");
        sample().save(&path).expect("save");
        let names: Vec<_> = fs::read_dir(&dir)
            .expect("readdir")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("p.json")]);
        assert_eq!(Profile::load(&path).expect("load"), sample());
        fs::remove_dir_all(&dir).expect("cleanup");
    }
}
