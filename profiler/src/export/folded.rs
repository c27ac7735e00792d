//! Folded stacks (`root;...;leaf value`), the input of inferno and flamegraph.pl, built
//! once here for every kind; the flamegraph and `export --format folded` both use it.

use std::collections::BTreeMap;

use crate::{
    cli::Kind,
    probes::lock::{is_lock_internal, lock_type_name},
    profile::{CpuRow, Profile},
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
        Kind::Cpu => {
            for row in &profile.cpu {
                *folded.entry(cpu_stack(profile, row)).or_default() += row.samples;
            }
        }
    }
    folded.into_iter().collect()
}

/// Suffix of kernel frames in CPU stacks, as perf and inferno write it (inferno's
/// palettes color such frames apart).
pub const KERNEL_SUFFIX: &str = "_[k]";

/// On-CPU sample: process; user frames from the outermost; kernel frames (`_[k]`) from
/// the system call or interrupt entry to the leaf. A user stack that stops short of the
/// program's entry point starts with `[truncated]`, so it does not pose as complete.
pub fn cpu_stack(profile: &Profile, row: &CpuRow) -> String {
    let mut parts = vec![clean(&profile.process_name(row.pid))];
    let user = profile.stack_frames(row.user_stack);
    if row.user_stack.is_some() && profile.stack_truncated(row.user_stack) {
        parts.push("[truncated]".into());
    }
    parts.extend(user.iter().rev().map(|frame| clean(&frame.display())));
    let kernel = profile.stack_frames(row.kernel_stack);
    parts.extend(
        kernel
            .iter()
            .rev()
            .map(|frame| format!("{}{KERNEL_SUFFIX}", clean(&frame.display()))),
    );
    if user.is_empty() && kernel.is_empty() {
        parts.push("[stack lost]".into());
    }
    parts.join(";")
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
    fn cpu_lines_put_user_under_kernel_and_mark_truncation() {
        use crate::profile::{CpuRow, Frame, Process, StackInterner};
        let mut profile = Profile::new();
        let mut interner = StackInterner::default();
        let user = |name: &str| Frame {
            name: name.into(),
            module: Some("/bin/app".into()),
            kernel: false,
        };
        let kernel = |name: &str| Frame {
            name: name.into(),
            module: None,
            kernel: true,
        };
        let complete = interner.stack(vec![user("app::hot"), user("main"), user("_start")], false);
        let cut = interner.stack(vec![user("app::cold"), user("0x1234")], true);
        let syscall = interner.stack(vec![kernel("_raw_spin_lock"), kernel("do_pipe2")], false);
        interner.finish(&mut profile);
        profile.processes = vec![Process {
            pid: 5,
            comm: "app".into(),
            ..Default::default()
        }];
        let row = |user_stack, kernel_stack, samples| CpuRow {
            pid: 5,
            tid: 5,
            kernel_stack,
            user_stack,
            samples,
        };
        profile.cpu = vec![
            row(Some(complete), Some(syscall), 7),
            row(Some(cut), None, 3),
            row(None, Some(syscall), 2),
        ];
        let text = render(&profile, Kind::Cpu);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines.contains(&"app;_start;main;app::hot;do_pipe2_[k];_raw_spin_lock_[k] 7"),
            "{text}"
        );
        assert!(
            lines.contains(&"app;[truncated];0x1234;app::cold 3"),
            "{text}"
        );
        assert!(
            lines.contains(&"app;do_pipe2_[k];_raw_spin_lock_[k] 2"),
            "{text}"
        );
    }

    #[test]
    fn separators_in_names_are_replaced() {
        assert_eq!(clean("a;b\nc"), "a_b_c");
    }
}
