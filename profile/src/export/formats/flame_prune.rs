//! Folded lines cut down to what inferno draws. inferno merges every line into frames
//! and only then drops those narrower than its minimum width (0.1% of the total by
//! default); on a big profile nearly all of its work is frames it then drops. A frame
//! is never wider than its parent, so the frames drawn for a line are a leading part of
//! it: each line is cut after its last frame that will be drawn (and after the frames
//! that keep the lines in order, below), which gives inferno the same total, the same
//! drawn frames with the same start and end times in the same order, and so the same
//! SVG byte for byte (tested in flamegraph.rs). Whenever that argument needs an assumption the input
//! does not meet (unsorted lines, odd whitespace, a count that is not an integer), the
//! lines are left as they are.

/// The stack and the count of a folded line as inferno reads them: the line trimmed,
/// the count after the last space (digits only), the stack before it trimmed.
fn parse(line: &str) -> Option<(&str, u64)> {
    let line = line.trim();
    let space = line.rfind(' ')?;
    let count = &line[space + 1..];
    if count.is_empty() || !count.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let stack = line[..space].trim_end();
    (!stack.is_empty()).then_some((stack, count.parse().ok()?))
}

fn sorted<T: PartialOrd>(items: &[T]) -> bool {
    items.windows(2).all(|pair| pair[0] <= pair[1])
}

/// `lines` (`stack count`, sorted) with each stack cut after its last frame wider than
/// `min_width` percent of the total, as inferno's `Options::min_width` means it; `None`
/// when the lines must be drawn as they are.
pub(crate) fn prune(lines: &[String], min_width: f64) -> Option<Vec<String>> {
    let parsed: Vec<(&str, u64)> = lines
        .iter()
        .map(|line| parse(line))
        .collect::<Option<_>>()?;
    if !sorted(lines) || !parsed.windows(2).all(|pair| pair[0].0 <= pair[1].0) {
        return None;
    }
    let total = parsed
        .iter()
        .try_fold(0u64, |sum, (_, count)| sum.checked_add(*count))?;
    if total == 0 {
        return None;
    }
    // inferno's own arithmetic for the cut-off.
    let width_per_time_pct = 100.0 / total as f64;
    let min_width_time = min_width / width_per_time_pct;
    // Frames each line shares with the one before it (0 for the first).
    let shared: Vec<usize> = (0..parsed.len())
        .map(|index| match index.checked_sub(1) {
            Some(previous) => parsed[previous]
                .0
                .split(';')
                .zip(parsed[index].0.split(';'))
                .take_while(|(a, b)| a == b)
                .count(),
            None => 0,
        })
        .collect();
    // Frames to keep per line: at least one, so every line keeps its count.
    let mut keep = vec![1usize; parsed.len()];
    // Open frames by depth: (start time, first line).
    let mut open: Vec<(u64, usize)> = Vec::new();
    let mut time = 0u64;
    let mut close = |open: &mut Vec<(u64, usize)>, depth: usize, time: u64, line: usize| {
        for (at, &(start, first)) in open.iter().enumerate().skip(depth) {
            if ((time - start) as f64) >= min_width_time {
                for kept in &mut keep[first..line] {
                    *kept = (*kept).max(at + 1);
                }
            }
        }
        open.truncate(depth);
    };
    for (index, &(stack, count)) in parsed.iter().enumerate() {
        close(&mut open, shared[index], time, index);
        let frames = stack.bytes().filter(|&byte| byte == b';').count() + 1;
        for _ in shared[index]..frames {
            open.push((time, index));
        }
        time += count;
    }
    close(&mut open, 0, time, parsed.len());
    // inferno needs sorted lines, and cutting a line right after a frame whose name is
    // the start of its neighbour's (`f` and `f1`) could swap them: each line keeps the
    // frame where it parts from each neighbour and the one after it, so every pair
    // still compares at the same byte.
    for index in 1..parsed.len() {
        let parted = shared[index] + 2;
        keep[index - 1] = keep[index - 1].max(parted);
        keep[index] = keep[index].max(parted);
    }

    let mut pruned: Vec<(&str, u64)> = Vec::with_capacity(parsed.len());
    for (&(stack, count), keep) in parsed.iter().zip(keep) {
        // The first `keep` frames: the stack up to its keep-th `;`.
        let end = stack
            .match_indices(';')
            .nth(keep - 1)
            .map_or(stack.len(), |(at, _)| at);
        let stack = &stack[..end];
        if stack.trim() != stack {
            return None;
        }
        match pruned.last_mut() {
            Some((last, sum)) if *last == stack => *sum = sum.checked_add(count)?,
            _ => pruned.push((stack, count)),
        }
    }
    let stacks_sorted = pruned.windows(2).all(|pair| pair[0].0 <= pair[1].0);
    let pruned: Vec<String> = pruned
        .into_iter()
        .map(|(stack, count)| format!("{stack} {count}"))
        .collect();
    (stacks_sorted && sorted(&pruned)).then_some(pruned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_frames_are_cut_but_lines_stay_in_order() {
        let mut lines: Vec<String> = vec!["a;b;c;d 500".into(), "a;b;e;f 499".into()];
        for i in 0..1000 {
            lines.push(format!("a;x{i:04};y;z 1"));
        }
        // `f1` sorts before `f;..`: cut after `f`, the line would come first.
        lines.push("a;f1 1".into());
        lines.push("a;f;g;h 1".into());
        lines.sort();
        let pruned = prune(&lines, 0.1).expect("pruned");
        // a;b;c;d and a;b;e;f are wide; every x is 1 of 2001 (narrow): x and y stay
        // (where the lines part, and the frame after), z goes.
        assert_eq!(&pruned[..3], ["a;b;c;d 500", "a;b;e;f 499", "a;f1 1"]);
        assert_eq!(&pruned[3..4], ["a;f;g 1"]);
        assert_eq!(pruned[4], "a;x0000;y 1");
        assert_eq!(pruned.len(), lines.len());
    }

    #[test]
    fn unsorted_or_odd_lines_are_left_alone() {
        assert_eq!(prune(&["b 1".into(), "a 1".into()], 0.1), None);
        assert_eq!(prune(&["a 1.5".into()], 0.1), None);
        assert_eq!(prune(&["a;b 1".into(), "a;b c".into()], 0.1), None);
    }
}
