//! The lock kind's folded lines without going through `folded::samples`: sums by
//! (process, type, named lock, stack) with integer keys, then one line of text per
//! distinct key, built from pieces joined once per stack and per process. The plain
//! path (a `Vec<String>` of frames per key, merged in a `BTreeMap`) gives the same lines
//! (tested below); this one spares a million-row profile most of its allocations.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use crate::{
    export::formats::folded,
    kind::Kind,
    lock::{is_lock_internal, lock_type_name},
    profile::Profile,
};

/// (process, lock type, the lock's name when it has one, stack) of a lock row.
pub(crate) type LockKey<'a> = (u32, u32, Option<&'a str>, Option<u32>);

/// [count, total ns] per distinct (process, type, named lock, stack), with integer keys:
/// rows (one per lock address) far outnumber paths. An address is not a name.
pub(crate) fn lock_sums(profile: &Profile) -> HashMap<LockKey<'_>, [u64; 2], FxBuildHasher> {
    let mut sums: HashMap<LockKey, [u64; 2], FxBuildHasher> = HashMap::default();
    for row in &profile.locks {
        let name = (!row.lock_name.starts_with("0x") && !row.lock_name.is_empty())
            .then_some(row.lock_name.as_str());
        let sum = sums
            .entry((row.pid, row.flags, name, row.stack))
            .or_default();
        sum[0] = sum[0].saturating_add(row.count);
        sum[1] = sum[1].saturating_add(row.total_ns);
    }
    sums
}

/// Unsorted `(root;...;leaf, value)` lines of the lock kind, zero lines left out.
pub(crate) fn lock_lines(profile: &Profile) -> Vec<(String, u64)> {
    let (index, divisor) = Kind::Lock.view().flame_value();
    let sums = lock_sums(profile);
    // `;` and the stack's frames from the outermost, joined once per stack (empty when
    // the stack has no frame outside the locking code).
    let mut stack_text: HashMap<Option<u32>, String, FxBuildHasher> = HashMap::default();
    let mut process_text: HashMap<u32, String, FxBuildHasher> = HashMap::default();
    let mut type_text: HashMap<u32, String, FxBuildHasher> = HashMap::default();
    let mut frame_text: Vec<Option<String>> = vec![None; profile.frames.len()];
    // Keys that differ can give the same frames (two pids of one name): merged here by
    // the line's text, which is the frames joined (no frame contains `;`).
    let mut merged: HashMap<String, u64, FxBuildHasher> =
        HashMap::with_capacity_and_hasher(sums.len(), FxBuildHasher);
    for ((pid, flags, name, stack), values) in sums {
        let process = process_text
            .entry(pid)
            .or_insert_with(|| folded::clean(&profile.process_name(pid)));
        let lock_type = type_text
            .entry(flags)
            .or_insert_with(|| folded::clean(lock_type_name(flags)));
        let frames = stack_text
            .entry(stack)
            .or_insert_with(|| stack_frames_text(profile, stack, &mut frame_text));
        let name = name.map(folded::clean);
        let mut line = String::with_capacity(
            process.len()
                + lock_type.len()
                + name.as_ref().map_or(0, |n| n.len() + 1)
                + frames.len()
                + 1,
        );
        line.push_str(process);
        line.push(';');
        line.push_str(lock_type);
        if let Some(name) = &name {
            line.push(';');
            line.push_str(name);
        }
        line.push_str(frames);
        let total = merged.entry(line).or_default();
        *total = total.saturating_add(values[index]);
    }
    merged
        .into_iter()
        .filter_map(|(line, value)| {
            let value = value / divisor;
            (value > 0).then_some((line, value))
        })
        .collect()
}

/// `;` and each frame of `views::lock::lock_stack_frames`, each frame's text made once.
fn stack_frames_text(
    profile: &Profile,
    stack: Option<u32>,
    frame_text: &mut [Option<String>],
) -> String {
    let Some(stack) = stack else {
        return ";[stack lost]".to_string();
    };
    // As `Profile::stack_frames`: indices past the frames are left out.
    let ids: Vec<usize> = profile
        .stacks
        .get(stack as usize)
        .map(|stack| {
            stack
                .frames
                .iter()
                .map(|&id| id as usize)
                .filter(|&id| id < profile.frames.len())
                .collect()
        })
        .unwrap_or_default();
    let outside_lock = ids
        .iter()
        .position(|&id| !is_lock_internal(&profile.frames[id].name))
        .unwrap_or(ids.len());
    let mut text = String::new();
    for &id in ids[outside_lock..].iter().rev() {
        let frame =
            frame_text[id].get_or_insert_with(|| folded::clean(&profile.frames[id].display()));
        text.push(';');
        text.push_str(frame);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::formats::report::tests::profile_with_two_locks;

    /// The plain path: `folded::samples`, joined.
    fn plain(profile: &Profile) -> Vec<(String, u64)> {
        let (index, divisor) = Kind::Lock.view().flame_value();
        let mut lines: Vec<(String, u64)> = folded::samples(profile, Kind::Lock)
            .into_iter()
            .filter_map(|sample| {
                let value = sample.values.get(index).copied().unwrap_or(0) / divisor;
                (value > 0).then(|| (sample.frames.join(";"), value))
            })
            .collect();
        lines.sort_unstable();
        lines
    }

    fn fast(profile: &Profile) -> Vec<(String, u64)> {
        let mut lines = lock_lines(profile);
        lines.sort_unstable();
        lines
    }

    #[test]
    fn same_lines_as_the_samples_path() {
        let profile = profile_with_two_locks();
        assert!(!fast(&profile).is_empty());
        assert_eq!(fast(&profile), plain(&profile));
    }

    #[test]
    fn same_lines_on_a_synthetic_profile_with_merges_and_lost_stacks() {
        let json = crate::synthetic::lock_profile_json(20_000);
        let mut profile = Profile::from_bytes(json.as_bytes()).expect("load");
        // Two processes of one name (merged by text), named locks, lost stacks, a
        // separator in a name, and rows below one microsecond.
        for process in profile.processes.iter_mut().take(4) {
            process.comm = "same;name".into();
        }
        for (i, row) in profile.locks.iter_mut().enumerate() {
            match i % 7 {
                0 => row.stack = None,
                1 => row.lock_name = "mmap_lock".into(),
                2 => row.lock_name = format!("rq_lock:cpu{}", i % 3).into(),
                3 => row.total_ns = 999,
                _ => {}
            }
        }
        assert_eq!(fast(&profile), plain(&profile));
    }
}
