//! Stacks of every kind, merged once here: `samples()` turns the samples a kind's view
//! gives (`View::samples`) into root-first frame paths with one value per sample type,
//! merged by path; the flamegraph, the differential flamegraph, pprof and the folded /
//! JSON exports all start from it. The helpers the views build frames with are here too.

use std::collections::BTreeMap;

use crate::{kind::Kind, profile::Profile};

/// One kind's sample: frames from the root (process) to the leaf, one value per
/// entry of the kind's `View::sample_types`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub frames: Vec<String>,
    pub values: Vec<u64>,
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
    kind.view().samples(profile, &mut add);
    merged
        .into_iter()
        .map(|(frames, values)| Sample { frames, values })
        .collect()
}

/// Folded lines (`root;...;leaf`, value in the kind's folded unit), zero lines left out.
pub fn lines(profile: &Profile, kind: Kind) -> Vec<(String, u64)> {
    let view = kind.view();
    let (index, divisor) = view.flame_value();
    // A view may build the same lines faster than through `samples` (lock).
    let mut lines: Vec<(String, u64)> = view.folded_lines(profile).unwrap_or_else(|| {
        samples(profile, kind)
            .into_iter()
            .filter_map(|sample| {
                let value = sample.values.get(index).copied().unwrap_or(0) / divisor;
                (value > 0).then(|| (sample.frames.join(";"), value))
            })
            .collect()
    });
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
pub(crate) fn push_stack(parts: &mut Vec<String>, profile: &Profile, stack: Option<u32>) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::formats::report::tests::profile_with_two_locks;

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
        assert_eq!(spin.values.len(), Kind::Lock.view().sample_types().len());
    }

    #[test]
    fn offcpu_lines_have_process_class_and_stack_root_first() {
        let profile = crate::export::tables::offcpu::tests::profile_with_waits();
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
        let mut profile = crate::export::tables::offcpu::tests::profile_with_waits();
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
        assert_eq!(
            samples[0].values.len(),
            Kind::Io.view().sample_types().len()
        );
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
