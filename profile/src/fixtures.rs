//! Test fixtures shared by the unit tests: stack tables built from frame names.

use crate::profile::{Frame, Profile, StackInterner};

/// Kernel frames of the image, leaf first.
pub(crate) fn kernel(names: &[&str]) -> Vec<Frame> {
    names.iter().map(|name| Frame::kernel(name)).collect()
}

/// User frames of `module` (`None`: no module known), leaf first.
pub(crate) fn user(module: Option<&str>, names: &[&str]) -> Vec<Frame> {
    names
        .iter()
        .map(|name| Frame {
            name: name.to_string(),
            module: module.map(str::to_string),
            kernel: false,
        })
        .collect()
}

/// Replaces `profile`'s frames and stacks with `stacks` (frames leaf first, and whether
/// the walk was truncated); their stack ids, in order.
pub(crate) fn set_stacks<const N: usize>(
    profile: &mut Profile,
    stacks: [(Vec<Frame>, bool); N],
) -> [u32; N] {
    let mut interner = StackInterner::default();
    let ids = stacks.map(|(frames, truncated)| interner.stack(frames, truncated));
    interner.finish(profile);
    ids
}

/// A new profile whose stacks are complete kernel stacks of these frame names (leaf
/// first), and their stack ids.
pub(crate) fn with_kernel_stacks<const N: usize>(stacks: [&[&str]; N]) -> (Profile, [u32; N]) {
    let mut profile = Profile::new();
    let ids = set_stacks(&mut profile, stacks.map(|names| (kernel(names), false)));
    (profile, ids)
}
