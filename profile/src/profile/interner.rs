//! Frames and stacks interned while a profile is built.

use super::{frames_in, Frame, Profile, Stack};

/// Interns frames and stacks while a profile is built.
#[derive(Default)]
pub struct StackInterner {
    frame_ids: std::collections::HashMap<Frame, u32>,
    stack_ids: std::collections::HashMap<(Vec<u32>, bool), u32>,
    pub frames: Vec<Frame>,
    pub stacks: Vec<Stack>,
}

impl StackInterner {
    pub fn frame(&mut self, frame: Frame) -> u32 {
        if let Some(&id) = self.frame_ids.get(&frame) {
            return id;
        }
        let id = self.frames.len() as u32;
        self.frames.push(frame.clone());
        self.frame_ids.insert(frame, id);
        id
    }

    pub fn stack(&mut self, frames: Vec<Frame>, truncated: bool) -> u32 {
        let ids: Vec<u32> = frames.into_iter().map(|frame| self.frame(frame)).collect();
        let key = (ids, truncated);
        if let Some(&id) = self.stack_ids.get(&key) {
            return id;
        }
        let id = self.stacks.len() as u32;
        self.stacks.push(Stack {
            frames: key.0.clone(),
            truncated,
        });
        self.stack_ids.insert(key, id);
        id
    }

    /// Frames of an interned stack, leaf first (empty for `None`).
    pub fn frames_of(&self, stack: Option<u32>) -> Vec<Frame> {
        frames_in(&self.stacks, &self.frames, stack)
            .cloned()
            .collect()
    }

    /// Copies the frames and stacks so far into `profile` (live snapshots while recording).
    pub fn copy_into(&self, profile: &mut Profile) {
        profile.frames = self.frames.clone();
        profile.stacks = self.stacks.clone();
    }

    pub fn finish(self, profile: &mut Profile) {
        profile.frames = self.frames;
        profile.stacks = self.stacks;
    }
}
