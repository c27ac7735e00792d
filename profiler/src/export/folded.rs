//! Folded stacks (`root;...;leaf value`), the input of inferno and flamegraph.pl, built
//! once here for every kind; the flamegraph and `export --format folded` both use it.

use std::collections::BTreeMap;

use crate::{
    cli::Kind,
    probes::lock::{is_lock_internal, lock_type_name},
    profile::Profile,
    waitclass::IO_CLASSES,
};

/// Folded frames may not contain `;` (separator) or line breaks; the count follows the
/// last space, so frames keep their spaces.
fn clean(frame: &str) -> String {
    frame.replace([';', '\n', '\r'], "_")
}

/// Lock wait: process; lock type; stack from the outermost frame to the caller (the
/// locking code itself is left out, so the caller is on top). Values in microseconds.
pub fn lines(profile: &Profile, kind: Kind) -> Vec<(String, u64)> {
    let mut folded: BTreeMap<String, u64> = BTreeMap::new();
    match kind {
        Kind::Lock => {
            for row in &profile.locks {
                let mut parts = vec![
                    clean(&profile.process_name(row.pid)),
                    clean(lock_type_name(row.flags)),
                ];
                let frames = profile.stack_frames(row.stack);
                if row.stack.is_none() {
                    parts.push("[stack lost]".into());
                }
                let outside_lock = frames
                    .iter()
                    .position(|frame| !is_lock_internal(&frame.name))
                    .unwrap_or(frames.len());
                parts.extend(
                    frames[outside_lock..]
                        .iter()
                        .rev()
                        .map(|frame| clean(&frame.display())),
                );
                let micros = row.total_ns / 1_000;
                if micros > 0 {
                    *folded.entry(parts.join(";")).or_default() += micros;
                }
            }
        }
        Kind::Offcpu | Kind::Io => {
            for row in &profile.offcpu {
                if kind == Kind::Io && !IO_CLASSES.contains(&row.class.as_str()) {
                    continue;
                }
                let mut parts = vec![clean(&profile.process_name(row.pid)), clean(&row.class)];
                // Root first: user frames from main inward, then the kernel from the
                // system call down to the scheduler.
                parts.extend(
                    profile
                        .stack_frames(row.ustack)
                        .iter()
                        .rev()
                        .map(|frame| clean(&frame.display())),
                );
                if row.stack.is_none() {
                    parts.push("[stack lost]".into());
                }
                parts.extend(
                    profile
                        .stack_frames(row.stack)
                        .iter()
                        .rev()
                        .map(|frame| clean(&frame.display())),
                );
                let micros = row.total_ns / 1_000;
                if micros > 0 {
                    *folded.entry(parts.join(";")).or_default() += micros;
                }
            }
        }
    }
    folded.into_iter().collect()
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
    fn offcpu_lines_have_process_class_and_stack_root_first() {
        let profile = crate::export::offcpu::tests::profile_with_waits();
        let text = render(&profile, Kind::Offcpu);
        assert!(
            text.contains(
                "mdtest;buffer;ext4_bread;ext4_read_bh;__wait_on_buffer;io_schedule;__schedule 60000"
            ),
            "{text}"
        );
        assert!(
            text.contains("mdtest;sleep;do_nanosleep;schedule 40000"),
            "{text}"
        );
        let io = render(&profile, Kind::Io);
        assert!(io.contains("buffer") && !io.contains("sleep"), "{io}");
    }

    #[test]
    fn separators_in_names_are_replaced() {
        assert_eq!(clean("a;b\nc"), "a_b_c");
    }
}
