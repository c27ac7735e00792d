//! Lock-row filters like `perf lock contention`'s: `--lock NAME|ADDR` (-L), `--type`
//! (-Y), `--caller PATTERN` (-S). A filtered profile keeps the lock rows (and the holds
//! under contention) that match every given filter, each filter matching when any of
//! its values matches; the other families' rows stay as they are.

use anyhow::{bail, Result};

use crate::{
    lock::lock_type_name,
    profile::{Frame, Profile},
};

/// The lock type names `--type` takes (a `rwsem`, `rwlock`... without `:R`/`:W` takes
/// both sides).
pub const TYPES: &[&str] = &[
    "spinlock",
    "rwlock:R",
    "rwlock:W",
    "rwsem:R",
    "rwsem:W",
    "mutex",
    "mutex:spin",
    "rt-mutex",
    "rwlock-rt:R",
    "rwlock-rt:W",
    "pcpu-sem:R",
    "pcpu-sem:W",
    "semaphore",
];

#[derive(Debug, Clone, Default)]
pub struct LockFilter {
    /// Lock names (`mmap_lock`, a static lock's symbol) or addresses (`0xffff...`).
    pub locks: Vec<String>,
    /// Lock types as reports print them.
    pub types: Vec<String>,
    /// Substrings (`*` is a wildcard) of a frame of the waiter's stack.
    pub callers: Vec<String>,
}

impl LockFilter {
    pub fn is_empty(&self) -> bool {
        self.locks.is_empty() && self.types.is_empty() && self.callers.is_empty()
    }

    /// Checks the values: one clear line for a type that does not exist or an empty
    /// pattern.
    pub fn check(&self) -> Result<()> {
        for kind in &self.types {
            if !TYPES
                .iter()
                .any(|known| known == kind || known.split(':').next() == Some(kind.as_str()))
            {
                bail!(
                    "--type {kind:?} is not a lock type; the types are {}",
                    TYPES.join(", ")
                );
            }
        }
        if self.locks.iter().chain(&self.callers).any(String::is_empty) {
            bail!("--lock and --caller take a non-empty name or pattern");
        }
        Ok(())
    }

    fn lock_matches(&self, name: &str, addr: u64) -> bool {
        self.locks.is_empty()
            || self.locks.iter().any(|wanted| {
                wanted == name
                    || wanted
                        .strip_prefix("0x")
                        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
                        .is_some_and(|wanted| wanted == addr)
            })
    }

    /// Whether a lock row is kept, given its stack's frames (for a profile being built,
    /// whose stack table does not exist yet: `record --caller`).
    pub fn keeps(&self, name: &str, addr: u64, flags: u32, frames: &[Frame]) -> bool {
        self.lock_matches(name, addr)
            && self.type_matches(flags)
            && (self.callers.is_empty()
                || frames.iter().any(|frame| {
                    self.callers
                        .iter()
                        .any(|pattern| wildcard_contains(&frame.name, pattern))
                }))
    }

    /// Whether waits of this type (`LCB_F_*` flags, with or without an outcome) are kept.
    pub fn type_matches(&self, flags: u32) -> bool {
        if self.types.is_empty() {
            return true;
        }
        let name = lock_type_name(flags);
        // `mutex !EINTR` is a mutex wait that ended without the lock.
        let base = name.split(' ').next().unwrap_or(name);
        self.types
            .iter()
            .any(|wanted| wanted == base || base.split(':').next() == Some(wanted.as_str()))
    }

    fn caller_matches(&self, profile: &Profile, stack: Option<u32>) -> bool {
        self.callers.is_empty()
            || profile.stack_frames(stack).iter().any(|frame| {
                self.callers
                    .iter()
                    .any(|pattern| wildcard_contains(&frame.name, pattern))
            })
    }

    /// Keeps the matching lock rows and holds under contention.
    pub fn apply(&self, profile: &mut Profile) {
        if self.is_empty() {
            return;
        }
        let locks = std::mem::take(&mut profile.locks);
        let holds = std::mem::take(&mut profile.contended_holds);
        let keeps = |name: &str, addr: u64, flags: u32, stack: Option<u32>| {
            self.lock_matches(name, addr)
                && self.type_matches(flags)
                && self.caller_matches(profile, stack)
        };
        let kept: Vec<_> = locks
            .into_iter()
            .filter(|row| keeps(&row.lock_name, row.lock_addr, row.flags, row.stack))
            .collect();
        let kept_holds: Vec<_> = holds
            .into_iter()
            .filter(|row| keeps(&row.lock_name, row.lock_addr, row.flags, row.stack))
            .collect();
        profile.locks = kept;
        profile.contended_holds = kept_holds;
    }
}

/// Whether `text` contains `pattern`, where `*` in the pattern matches any run of
/// characters (`ext4_*_write` matches in `ext4_file_write_iter`).
/// The parts between the `*`s occur one after the other, without overlapping; the
/// wildcard matching of `--caller` patterns, and of `--wait-class` rules (`glob_match`).
pub fn wildcard_contains(text: &str, pattern: &str) -> bool {
    let mut rest = text;
    for part in pattern.split('*') {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::LockRow;

    fn row(name: &str, addr: u64, flags: u32, stack: Option<u32>) -> LockRow {
        LockRow {
            pid: 1,
            lock_addr: addr,
            lock_name: name.into(),
            lock_name_source: "address".into(),
            flags,
            stack,
            count: 1,
            total_ns: 10,
            max_ns: 10,
            min_ns: 10,
            owner_pid: None,
            owner_stack: None,
        }
    }

    fn profile() -> Profile {
        let (mut profile, [pipe, mmap]) = crate::fixtures::with_kernel_stacks([
            &["queued_spin_lock_slowpath", "pipe_write"],
            &["down_write", "vm_mmap_pgoff"],
        ]);
        profile.locks = vec![
            row("0xffff1", 0xffff1, 1, Some(pipe)),   // LCB_F_SPIN
            row("mmap_lock", 0xffff2, 4, Some(mmap)), // LCB_F_WRITE
            row("mmap_lock", 0xffff2, 2, Some(mmap)), // LCB_F_READ
        ];
        profile
    }

    fn kept(filter: LockFilter) -> Vec<(String, u32)> {
        let mut profile = profile();
        filter.check().expect("valid filter");
        filter.apply(&mut profile);
        profile
            .locks
            .iter()
            .map(|row| (row.lock_name.to_string(), row.flags))
            .collect()
    }

    #[test]
    fn filters_by_type_lock_and_caller() {
        let strings = |values: &[&str]| values.iter().map(|value| value.to_string()).collect();
        let filter = |locks: &[&str], types: &[&str], callers: &[&str]| LockFilter {
            locks: strings(locks),
            types: strings(types),
            callers: strings(callers),
        };
        // A filter (--lock, --type, --caller), and the (lock, flags) of the rows it keeps.
        let cases = [
            (filter(&[], &["spinlock"], &[]), vec![("0xffff1", 1)]),
            (
                filter(&[], &["rwsem"], &[]),
                vec![("mmap_lock", 4), ("mmap_lock", 2)],
            ),
            (
                filter(&["0xffff2"], &["rwsem:W"], &[]),
                vec![("mmap_lock", 4)],
            ),
            (filter(&[], &[], &["pipe_*"]), vec![("0xffff1", 1)]),
        ];
        for (filter, expected) in cases {
            let expected: Vec<(String, u32)> = expected
                .into_iter()
                .map(|(lock, flags)| (lock.to_string(), flags))
                .collect();
            assert_eq!(kept(filter.clone()), expected, "{filter:?}");
        }
    }

    #[test]
    fn a_wrong_type_is_one_clear_error() {
        let err = LockFilter {
            types: vec!["spinlok".into()],
            ..Default::default()
        }
        .check()
        .expect_err("unknown type");
        assert!(err.to_string().contains("spinlock, rwlock:R"), "{err}");
    }
}
