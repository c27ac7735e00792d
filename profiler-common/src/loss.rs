//! Loss counters: every event the kernel side could not record is counted in the
//! per-CPU array `LOSSES` at one slot. User space sums the CPUs.
//!
//! Each family declares its own losses, in its module (`<family>::losses`); this module
//! declares those the families share (stacks, thread names, the target filter, the
//! process watcher) and finds any loss by its slot or name ([`every_loss`]).

/// Number of slots in `LOSSES`: a loss's slot is below it, and no two losses share one
/// (the test `every_slot_is_named_once` names a clash and the free slots).
pub const LOSS_SLOTS: u32 = 64;

/// Declares losses once: each one's slot in `LOSSES` (a constant the programs count
/// with), its name in a profile and what it means; `ALL` lists them (slot, name,
/// meaning). A family's module declares its own with it, in `pub mod losses`.
macro_rules! losses {
    ($($name:ident = $slot:literal, $label:literal, $why:literal;)*) => {
        $(pub const $name: u32 = $slot;)*

        /// Every loss declared here: slot, name and meaning.
        pub const ALL: &[(u32, &str, &str)] = &[$(($slot, $label, $why),)*];
    };
}
pub(crate) use losses;

losses! {
    STACK_COLLISION = 0, "stack_collision",
        "stack map hash collision (-EEXIST) and the spare stacks full: stack not recorded";
    STACK_FAILED = 1, "stack_failed",
        "stack could not be taken (map full or walk failed)";
    TASK_MAP_FULL = 7, "task_map_full",
        "thread-name map full: thread shown without a name";
    TARGET_MAP_FULL = 8, "target_map_full",
        "target map full: a forked child was not followed";
    PROCESS_NOTE_LOST = 18, "process_note_lost",
        "new-process notice lost (ring buffer full): its memory map may be missing";
    PROCESS_SEEN_MAP_FULL = 19, "process_seen_map_full",
        "seen-process map full: a process's memory map may be missing";
    STACK_SPARE_BUSY = 52, "stack_spare_busy",
        "stack map hash collision in a program that interrupted programs already using every \
         spare stack scratch of the CPU: stack not recorded";
}

/// Name prefix of a program's `recursion_misses` in a profile's losses (user space reads
/// them from `bpf_prog_info`: runs the kernel skipped because another BPF program was
/// already running on that CPU).
pub const PROGRAM_MISS_PREFIX: &str = "prog_recursion_miss:";

/// Every loss: those declared here, then each family's (slot, name, meaning).
pub fn every_loss() -> impl Iterator<Item = &'static (u32, &'static str, &'static str)> {
    ALL.iter()
        .chain(crate::FAMILY_LOSSES.iter().flat_map(|losses| losses.iter()))
}

/// What a loss in a profile means, by its name.
pub fn loss_meaning(name: &str) -> &'static str {
    if name.starts_with(PROGRAM_MISS_PREFIX) {
        return "the kernel skipped this program (another BPF program was running on the CPU): \
                event lost";
    }
    every_loss()
        .find(|(_, known, _)| *known == name)
        .map_or("", |(_, _, why)| why)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slots below `LOSS_SLOTS` that no loss has.
    fn free_slots() -> impl core::fmt::Debug {
        struct Free;
        impl core::fmt::Debug for Free {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.debug_list()
                    .entries(
                        (0..LOSS_SLOTS).filter(|slot| every_loss().all(|loss| loss.0 != *slot)),
                    )
                    .finish()
            }
        }
        Free
    }

    #[test]
    fn every_slot_is_named_once() {
        for (index, (slot, name, _)) in every_loss().enumerate() {
            assert!(*slot < LOSS_SLOTS, "{name}: slot {slot} out of range");
            for (other_slot, other_name, _) in every_loss().skip(index + 1) {
                assert_ne!(
                    slot,
                    other_slot,
                    "{name} and {other_name} share a slot; free slots: {:?}",
                    free_slots()
                );
                assert_ne!(name, other_name);
            }
        }
    }
}
