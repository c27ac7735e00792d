//! Folded stacks (`root;...;leaf value`), the input of inferno and flamegraph.pl, built
//! once here for every kind; the flamegraph and `export --format folded` both use it.

use std::collections::HashMap;

use crate::{
    cli::Kind,
    probes::lock::{is_lock_internal, lock_type_name},
    profile::Profile,
};

/// Folded frames may not contain `;` (separator) or line breaks; the count follows the
/// last space, so frames keep their spaces.
fn clean(frame: &str) -> String {
    frame.replace([';', '\n', '\r'], "_")
}

/// Lock wait: process; lock type; stack from the outermost frame to the caller (the
/// locking code itself is left out, so the caller is on top). Values in microseconds.
pub fn lines(profile: &Profile, kind: Kind) -> Vec<(String, u64)> {
    let mut folded: HashMap<String, u64> = HashMap::new();
    match kind {
        Kind::Lock => {
            // Sum by (process, type, stack) first with integer keys, then build each
            // distinct line once: rows (one per lock address) far outnumber lines.
            let mut sums: HashMap<(u32, u32, Option<u32>), u64> = HashMap::new();
            for row in &profile.locks {
                let sum = sums.entry((row.pid, row.flags, row.stack)).or_default();
                *sum = sum.saturating_add(row.total_ns / 1_000);
            }
            let mut stack_parts: HashMap<Option<u32>, String> = HashMap::new();
            let mut process_parts: HashMap<u32, String> = HashMap::new();
            for ((pid, flags, stack), micros) in sums {
                if micros == 0 {
                    continue;
                }
                let process = process_parts
                    .entry(pid)
                    .or_insert_with(|| clean(&profile.process_name(pid)));
                let frames = stack_parts
                    .entry(stack)
                    .or_insert_with(|| lock_stack_part(profile, stack));
                let line = format!("{process};{}{frames}", clean(lock_type_name(flags)));
                let value = folded.entry(line).or_default();
                *value = value.saturating_add(micros);
            }
        }
    }
    // Sorted (inferno expects it, and export output stays stable); sorting once is far
    // cheaper than keeping a sorted map of a million long strings.
    let mut lines: Vec<(String, u64)> = folded.into_iter().collect();
    lines.sort_unstable();
    lines
}

/// `;outermost;...;caller` of a lock stack (the locking code itself is left out, so
/// the caller is on top), or `;[stack lost]`.
fn lock_stack_part(profile: &Profile, stack: Option<u32>) -> String {
    if stack.is_none() {
        return ";[stack lost]".to_string();
    }
    let frames = profile.stack_frames(stack);
    let outside_lock = frames
        .iter()
        .position(|frame| !is_lock_internal(&frame.name))
        .unwrap_or(frames.len());
    let mut part = String::new();
    for frame in frames[outside_lock..].iter().rev() {
        part.push(';');
        part.push_str(&clean(&frame.display()));
    }
    part
}

pub fn render(profile: &Profile, kind: Kind) -> String {
    lines(profile, kind)
        .into_iter()
        .map(|(stack, value)| format!("{stack} {value}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::report::tests::profile_with_two_locks;

    #[test]
    fn lock_lines_have_process_type_and_caller_on_top() {
        let text = render(&profile_with_two_locks(), Kind::Lock);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.contains(&"ior;spinlock;do_pipe2 7000"), "{text}");
        assert!(lines.contains(&"ior;rwsem:W;vm_mmap_pgoff 6000"), "{text}");
        assert!(
            !text.contains("_raw_spin_lock"),
            "lock internals are left out: {text}"
        );
    }

    #[test]
    fn separators_in_names_are_replaced() {
        assert_eq!(clean("a;b\nc"), "a_b_c");
    }
}
