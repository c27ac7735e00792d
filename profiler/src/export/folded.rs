//! Stacks of every kind, built once here: `samples()` turns a profile into root-first
//! frame paths with one value per sample type; the flamegraph, the differential
//! flamegraph, pprof and the folded / JSON exports all start from it.

use std::collections::BTreeMap;

use crate::{
    cli::Kind,
    probes::lock::{is_lock_internal, lock_type_name},
    profile::Profile,
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
        Kind::Offcpu => &[("waits", "count"), ("off_cpu", "nanoseconds")],
        Kind::Io => &[("waits", "count"), ("io_wait", "nanoseconds")],
    }
}

/// Which sample value the flamegraph width is, and the divisor that turns it into the
/// folded unit (delay or time off CPU in nanoseconds, folded in microseconds).
pub fn flame_value(kind: Kind) -> (usize, u64) {
    match kind {
        Kind::Lock | Kind::Offcpu | Kind::Io => (1, 1_000),
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
            *total += value;
        }
    };
    match kind {
        // Process; lock type; stack from the outermost frame to the caller (the locking
        // code itself is left out, so the caller is on top).
        Kind::Lock => {
            for row in &profile.locks {
                let mut frames = vec![
                    clean(&profile.process_name(row.pid)),
                    clean(lock_type_name(row.flags)),
                ];
                let stack = profile.stack_frames(row.stack);
                if row.stack.is_none() {
                    frames.push("[stack lost]".into());
                }
                let outside_lock = stack
                    .iter()
                    .position(|frame| !is_lock_internal(&frame.name))
                    .unwrap_or(stack.len());
                frames.extend(
                    stack[outside_lock..]
                        .iter()
                        .rev()
                        .map(|frame| clean(&frame.display())),
                );
                add(frames, &[row.count, row.total_ns]);
            }
        }
        // Process; wait class; user stack from main inward; kernel stack from the
        // system call down to the scheduler. `io`: the IO wait classes only.
        Kind::Offcpu | Kind::Io => {
            for row in &profile.offcpu {
                if kind == Kind::Io && !IO_CLASSES.contains(&row.class.as_str()) {
                    continue;
                }
                let mut frames = vec![clean(&profile.process_name(row.pid)), clean(&row.class)];
                frames.extend(
                    profile
                        .stack_frames(row.ustack)
                        .iter()
                        .rev()
                        .map(|frame| clean(&frame.display())),
                );
                if row.stack.is_none() {
                    frames.push("[stack lost]".into());
                }
                frames.extend(
                    profile
                        .stack_frames(row.stack)
                        .iter()
                        .rev()
                        .map(|frame| clean(&frame.display())),
                );
                add(frames, &[row.count, row.total_ns]);
            }
        }
    }
    merged
        .into_iter()
        .map(|(frames, values)| Sample { frames, values })
        .collect()
}

/// Folded lines (`root;...;leaf`, value in the kind's folded unit), zero lines left out.
pub fn lines(profile: &Profile, kind: Kind) -> Vec<(String, u64)> {
    let (index, divisor) = flame_value(kind);
    samples(profile, kind)
        .into_iter()
        .filter_map(|sample| {
            let value = sample.values.get(index).copied().unwrap_or(0) / divisor;
            (value > 0).then(|| (sample.frames.join(";"), value))
        })
        .collect()
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
    fn separators_in_names_are_replaced() {
        assert_eq!(clean("a;b\nc"), "a_b_c");
    }
}
