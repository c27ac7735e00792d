//! Never show a garbage user stack. A frame-pointer walk through code built without
//! frame pointers follows whatever the frame-pointer register holds: it leaves the code
//! of the process (addresses in no executable mapping), or falls into a loop of the same
//! few addresses until the kernel's depth limit. Such a walk is cut at its last good
//! frame and marked with an `[unwind stopped]` frame at the root end.

use crate::profile::Frame;

/// The outermost frame of a user stack whose walk was cut at its last good frame.
pub const UNWIND_STOPPED: &str = "[unwind stopped]";

/// The marker frame (a user frame without module).
pub fn unwind_stopped_frame() -> Frame {
    Frame {
        name: UNWIND_STOPPED.into(),
        module: None,
        kernel: false,
    }
}

/// How many of a user stack's addresses (leaf first) are good, or `None` when all are.
///
/// `in_code(addr)` says whether an address lies in an executable mapping of the process
/// (`None` when the process's mappings are unknown: then only the cycle check applies).
/// Return addresses (every address but the leaf) are checked one byte back, inside the
/// call instruction. An address cycle is a tail of the stack that repeats the same run of
/// addresses at least twice until the end: a walk that loops, not a recursion (a real
/// recursion ends in its callers). The first run of the cycle is kept.
pub fn good_prefix(addrs: &[u64], in_code: Option<&dyn Fn(u64) -> bool>) -> Option<usize> {
    let mut cut = addrs.len();
    if let Some(in_code) = in_code {
        if let Some(bad) = addrs.iter().enumerate().position(|(index, &addr)| {
            let lookup = if index == 0 {
                addr
            } else {
                addr.wrapping_sub(1)
            };
            addr == 0 || !in_code(lookup)
        }) {
            cut = bad;
        }
    }
    if let Some(cycle_end) = cycle_start(&addrs[..cut]) {
        cut = cut.min(cycle_end);
    }
    (cut < addrs.len()).then_some(cut)
}

/// Where the second run of a repeating tail begins (the end of what is kept), if the
/// stack ends in one: the smallest start, then the shortest period.
fn cycle_start(addrs: &[u64]) -> Option<usize> {
    let n = addrs.len();
    for start in 0..n {
        for period in 1..=(n - start) / 2 {
            if (start + period..n).all(|index| addrs[index] == addrs[index - period]) {
                return Some(start + period);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_ranges(addr: u64) -> bool {
        (0x1000..0x2000).contains(&addr) || (0x7000..0x8000).contains(&addr)
    }

    #[test]
    fn a_clean_stack_is_kept_whole() {
        let stack = [0x1010, 0x1100, 0x7010, 0x7200];
        assert_eq!(good_prefix(&stack, Some(&in_ranges)), None);
        // A recursion that ends in its callers is not a cycle.
        let recursion = [0x1010, 0x1100, 0x1100, 0x1100, 0x1200, 0x7010];
        assert_eq!(good_prefix(&recursion, Some(&in_ranges)), None);
        let mutual = [0x1010, 0x1100, 0x1200, 0x1100, 0x1200, 0x1300, 0x7010];
        assert_eq!(good_prefix(&mutual, Some(&in_ranges)), None);
    }

    #[test]
    fn a_walk_out_of_the_code_is_cut_before_it_leaves() {
        // 0x7f2300153000 - 1 lies in no executable mapping (a stack or heap address).
        let stack = [0x1010, 0x1100, 0x5000_0000, 0x1100, 0x7010];
        assert_eq!(good_prefix(&stack, Some(&in_ranges)), Some(2));
        // A return address at the very start of a mapping was a call from before it.
        assert_eq!(good_prefix(&[0x1010, 0x7000], Some(&in_ranges)), Some(1));
        // The leaf itself is checked as is.
        assert_eq!(good_prefix(&[0x2000, 0x1100], Some(&in_ranges)), Some(0));
        assert_eq!(good_prefix(&[0x1010, 0], Some(&in_ranges)), Some(1));
    }

    #[test]
    fn a_looping_walk_keeps_one_run_of_the_cycle() {
        // What fio's stacks looked like: a few addresses again and again to the limit.
        let mut stack = vec![0x1010, 0x1020];
        for _ in 0..40 {
            stack.extend([0x1930, 0x1900, 0x18d0]);
        }
        assert_eq!(good_prefix(&stack, Some(&in_ranges)), Some(5));
        // Without mappings, the cycle alone is found.
        assert_eq!(good_prefix(&stack, None), Some(5));
        // A single address repeated.
        assert_eq!(good_prefix(&[0x1010, 0x1100, 0x1100], None), Some(2));
    }

    #[test]
    fn an_unknown_process_is_only_checked_for_cycles() {
        let stack = [0x1010, 0x5000_0000, 0x1100];
        assert_eq!(good_prefix(&stack, None), None);
    }
}
