//! Stacks of every kind, built once here: `samples()` turns a profile into root-first
//! frame paths with one value per sample type; the flamegraph, the differential
//! flamegraph, pprof and the folded / JSON exports all start from it.

use std::collections::{BTreeMap, HashMap};

use crate::{
    kind::Kind,
    lock::{is_lock_internal, lock_type_name},
    profile::{CpuRow, Profile},
    waitclass::IO_CLASSES,
};

/// One kind's sample: frames from the root (process) to the leaf, one value per
/// entry of `sample_types(kind)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub frames: Vec<String>,
    pub values: Vec<u64>,
}

/// What the values of a kind's samples are, pprof style: (type, unit).
pub fn sample_types(kind: Kind) -> &'static [(&'static str, &'static str)] {
    match kind {
        Kind::Lock => &[("contentions", "count"), ("delay", "nanoseconds")],
        Kind::Rpc => &[("requests", "count"), ("latency", "nanoseconds")],
        Kind::Func => &[("calls", "count"), ("latency", "nanoseconds")],
        Kind::Cpu => &[("samples", "count")],
        Kind::Offcpu => &[("waits", "count"), ("off_cpu", "nanoseconds")],
        Kind::Io => &[("waits", "count"), ("io_wait", "nanoseconds")],
        Kind::Hold => &[("holds", "count"), ("hold", "nanoseconds")],
        Kind::Offwake => &[("waits", "count"), ("off_cpu", "nanoseconds")],
    }
}

/// Which sample value the flamegraph width is, and the divisor that turns it into the
/// folded unit (delay or time off CPU in nanoseconds, folded in microseconds).
pub fn flame_value(kind: Kind) -> (usize, u64) {
    if kind.weighs_time() {
        (1, 1_000)
    } else {
        (0, 1)
    }
}

/// Folded frames may not contain `;` (separator) or line breaks; the count follows the
/// last space, so frames keep their spaces.
pub fn clean(frame: &str) -> String {
    frame.replace([';', '\n', '\r'], "_")
}

/// The samples of `kind`, merged by frame path (sorted by it).
pub fn samples(profile: &Profile, kind: Kind) -> Vec<Sample> {
    let mut merged: BTreeMap<Vec<String>, Vec<u64>> = BTreeMap::new();
    let mut add = |frames: Vec<String>, values: &[u64]| {
        let slot = merged
            .entry(frames)
            .or_insert_with(|| vec![0; values.len()]);
        for (total, value) in slot.iter_mut().zip(values) {
            // Saturating: a damaged or hand-made profile must not wrap around.
            *total = total.saturating_add(*value);
        }
    };
    match kind {
        // Process; lock type; the lock, when it has a name (`mmap_lock`, `rq_lock:cpu1`,
        // a static symbol; an address is left out); stack from the outermost frame to
        // the caller (the locking code itself is left out, so the caller is on top).
        Kind::Lock => {
            // Sum by (process, type, named lock, stack) with integer keys first, then
            // build the frames of each distinct key once: rows (one per lock address)
            // far outnumber paths, and a million rows must not cost a million frame lists.
            let sums = crate::export::lock_lines::lock_sums(profile);
            let mut stack_parts: HashMap<Option<u32>, Vec<String>, rustc_hash::FxBuildHasher> =
                HashMap::default();
            let mut process_parts: HashMap<u32, String, rustc_hash::FxBuildHasher> =
                HashMap::default();
            for ((pid, flags, name, stack), values) in sums {
                let process = process_parts
                    .entry(pid)
                    .or_insert_with(|| clean(&profile.process_name(pid)));
                let stack_frames = stack_parts
                    .entry(stack)
                    .or_insert_with(|| lock_stack_frames(profile, stack));
                let mut frames = Vec::with_capacity(stack_frames.len() + 3);
                frames.push(process.clone());
                frames.push(clean(lock_type_name(flags)));
                if let Some(name) = name {
                    frames.push(clean(name));
                }
                frames.extend(stack_frames.iter().cloned());
                add(frames, &values);
            }
        }
        // Process; wait class; user stack from main inward; kernel stack from the
        // system call down to the scheduler. `io`: the IO wait classes only.
        Kind::Offcpu | Kind::Io => {
            for row in &profile.offcpu {
                if kind == Kind::Io && !IO_CLASSES.contains(&row.class.as_str()) {
                    continue;
                }
                let frames = offcpu_waiter_frames(profile, row);
                add(frames, &[row.count, row.total_ns]);
            }
        }
        Kind::Rpc => {
            // Who runs the completion path, weighted by the latency of the requests.
            for row in &profile.rpcs {
                let mut parts = vec![
                    clean(&profile.process_name(row.pid)),
                    clean(&format!("{} {}", row.provider, row.op_name)),
                ];
                push_stack(&mut parts, profile, row.end_stack);
                add(parts, &[row.latency.count, row.latency.total_ns]);
            }
        }
        Kind::Func => {
            for row in &profile.funcs {
                let mut parts = vec![clean(&profile.process_name(row.pid)), clean(&row.function)];
                push_stack(&mut parts, profile, row.stack);
                add(parts, &[row.latency.count, row.latency.total_ns]);
            }
        }
        Kind::Cpu => {
            for row in &profile.cpu {
                add(cpu_frames(profile, row), &[row.samples]);
            }
        }
        // Lock type and lock; holder process; the holder's acquisition stack from the
        // outermost frame to where it took the lock. Width: hold time under contention.
        Kind::Hold => {
            for row in &profile.contended_holds {
                let mut frames = vec![
                    clean(&format!("{} {}", lock_type_name(row.flags), row.lock_name)),
                    clean(&profile.process_name(row.pid)),
                ];
                frames.extend(lock_stack_frames(profile, row.stack));
                add(frames, &[row.latency.count, row.latency.total_ns]);
            }
        }
        // Waiter stack; `--`; the waker's stack upside down (export/wakers.rs).
        Kind::Offwake => crate::export::wakers::offwake_samples(profile, &mut add),
    }
    merged
        .into_iter()
        .map(|(frames, values)| Sample { frames, values })
        .collect()
}

/// Frames of a lock stack from the outermost to the caller (the locking code itself
/// is left out, so the caller is on top), or `[stack lost]`.
fn lock_stack_frames(profile: &Profile, stack: Option<u32>) -> Vec<String> {
    if stack.is_none() {
        return vec!["[stack lost]".to_string()];
    }
    let frames = profile.stack_frames(stack);
    let outside_lock = frames
        .iter()
        .position(|frame| !is_lock_internal(&frame.name))
        .unwrap_or(frames.len());
    frames[outside_lock..]
        .iter()
        .rev()
        .map(|frame| clean(&frame.display()))
        .collect()
}

/// Suffix of kernel frames in CPU stacks, as perf and inferno write it (inferno's
/// palettes color such frames apart).
pub const KERNEL_SUFFIX: &str = "_[k]";

/// On-CPU sample: process; user frames from the outermost; kernel frames (`_[k]`) from
/// the system call or interrupt entry to the leaf. A user stack that stops short of the
/// program's entry point starts with `[truncated]`, so it does not pose as complete.
pub fn cpu_frames(profile: &Profile, row: &CpuRow) -> Vec<String> {
    let mut frames = vec![clean(&profile.process_name(row.pid))];
    let user = profile.stack_frames(row.user_stack);
    if row.user_stack.is_some() && profile.stack_truncated(row.user_stack) {
        frames.push("[truncated]".into());
    }
    frames.extend(user.iter().rev().map(|frame| clean(&frame.display())));
    let kernel = profile.stack_frames(row.kernel_stack);
    frames.extend(
        kernel
            .iter()
            .rev()
            .map(|frame| format!("{}{KERNEL_SUFFIX}", clean(&frame.display()))),
    );
    if user.is_empty() && kernel.is_empty() {
        frames.push("[stack lost]".into());
    }
    frames
}

/// Folded lines (`root;...;leaf`, value in the kind's folded unit), zero lines left out.
pub fn lines(profile: &Profile, kind: Kind) -> Vec<(String, u64)> {
    let (index, divisor) = flame_value(kind);
    let mut lines: Vec<(String, u64)> = if kind == Kind::Lock {
        // The same lines, without a frame list per path (a million rows, export/lock_lines.rs).
        crate::export::lock_lines::lock_lines(profile)
    } else {
        samples(profile, kind)
            .into_iter()
            .filter_map(|sample| {
                let value = sample.values.get(index).copied().unwrap_or(0) / divisor;
                (value > 0).then(|| (sample.frames.join(";"), value))
            })
            .collect()
    };
    // Sorted as text (not as frame lists): inferno is told the input is sorted, which
    // spares it a second sort of a possibly huge input.
    lines.sort_unstable();
    lines
}

/// A stack's frames as folded frames, leaf first (none when `stack` is `None`); `.rev()`
/// gives them outermost first.
pub(crate) fn clean_frames(
    profile: &Profile,
    stack: Option<u32>,
) -> impl DoubleEndedIterator<Item = String> + '_ {
    profile
        .stack_frames(stack)
        .into_iter()
        .map(|frame| clean(&frame.display()))
}

/// Appends a stack, outermost frame first (`[stack lost]` when it was lost).
fn push_stack(parts: &mut Vec<String>, profile: &Profile, stack: Option<u32>) {
    if stack.is_none() {
        parts.push("[stack lost]".into());
        return;
    }
    parts.extend(clean_frames(profile, stack).rev());
}

pub fn render(profile: &Profile, kind: Kind) -> String {
    lines(profile, kind)
        .into_iter()
        .map(|(stack, value)| format!("{stack} {value}\n"))
        .collect()
}

/// An off-CPU wait's frames from the root: process; wait class; user stack from main
/// inward; kernel stack from the system call down to the scheduler.
pub(crate) fn offcpu_waiter_frames(
    profile: &Profile,
    row: &crate::profile::OffcpuRow,
) -> Vec<String> {
    let mut frames = vec![clean(&profile.process_name(row.pid)), clean(&row.class)];
    if row.ustack.is_some() && profile.stack_truncated(row.ustack) {
        frames.push("[truncated]".into());
    }
    frames.extend(clean_frames(profile, row.ustack).rev());
    push_stack(&mut frames, profile, row.stack);
    frames
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
        assert!(
            lines.contains(&"ior;rwsem:W;mmap_lock;vm_mmap_pgoff 6000"),
            "{text}"
        );
        assert!(
            !text.contains("_raw_spin_lock"),
            "lock internals are left out: {text}"
        );
    }

    #[test]
    fn samples_carry_every_value() {
        let samples = samples(&profile_with_two_locks(), Kind::Lock);
        let spin = samples
            .iter()
            .find(|sample| sample.frames.last().map(String::as_str) == Some("do_pipe2"))
            .expect("spin sample");
        assert_eq!(spin.values, vec![150, 7_000_000]);
        assert_eq!(spin.values.len(), sample_types(Kind::Lock).len());
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
    fn offcpu_lines_sum_nanoseconds_and_round_once() {
        let mut profile = crate::export::offcpu::tests::profile_with_waits();
        // Two threads on the same path, 1.5 us each: one line of 3 us, not 2.
        for row in &mut profile.offcpu {
            if row.class == "buffer" {
                row.total_ns = 1_500;
            }
        }
        let text = render(&profile, Kind::Offcpu);
        assert!(text.contains("__schedule 3\n"), "{text}");
        let samples = samples(&profile, Kind::Io);
        assert_eq!(samples.len(), 1, "IO classes only");
        assert_eq!(samples[0].values, vec![8, 3_000]);
        assert_eq!(samples[0].values.len(), sample_types(Kind::Io).len());
    }

    #[test]
    fn cpu_lines_put_user_under_kernel_and_mark_truncation() {
        use crate::{
            fixtures::{kernel, set_stacks, user},
            profile::{CpuRow, Process},
        };
        let mut profile = Profile::new();
        let app = |names: &[&str]| user(Some("/bin/app"), names);
        let [complete, cut, syscall] = set_stacks(
            &mut profile,
            [
                (app(&["app::hot", "main", "_start"]), false),
                (app(&["app::cold", "0x1234"]), true),
                (kernel(&["_raw_spin_lock", "do_pipe2"]), false),
            ],
        );
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
