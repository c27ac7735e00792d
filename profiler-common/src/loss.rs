//! Loss counters: every event the kernel side could not record is counted in the
//! per-CPU array `LOSSES` at one slot. User space sums the CPUs.
//!
//! Each family declares its own losses, in its module (`<family>::losses`); this module
//! declares those the families share (stacks, thread names, the target filter, the
//! process watcher) and finds any loss by its slot or name ([`every_loss`]).

/// Number of slots in `LOSSES`: a loss's slot is below it, and no two losses share one
/// (the test `every_slot_is_named_once` names a clash and the free slots).
pub const LOSS_SLOTS: u32 = 64;

/// One loss counter: its slot in `LOSSES`, its name in a profile and what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loss {
    pub slot: u32,
    pub name: &'static str,
    pub meaning: &'static str,
    /// Whether what it counts is missing from the rows (or from their detail). A few
    /// counters lose nothing: they count a slower path the programs took instead
    /// (a stack walked where a cache could not serve), declared `nothing_lost`.
    pub loses_events: bool,
}

/// Declares losses once: each one's slot in `LOSSES` (a constant the programs count
/// with), its name in a profile and what it means, and `ALL`, every [`Loss`] declared.
/// A counter that loses nothing ends with `, nothing_lost`. A family's module declares
/// its own with it, in `pub mod losses`.
macro_rules! losses {
    (@loses_events) => {
        true
    };
    (@loses_events nothing_lost) => {
        false
    };
    ($($name:ident = $slot:literal, $label:literal, $why:literal $(, $kept:ident)?;)*) => {
        $(pub const $name: u32 = $slot;)*

        /// Every loss declared here.
        pub const ALL: &[$crate::loss::Loss] = &[$($crate::loss::Loss {
            slot: $slot,
            name: $label,
            meaning: $why,
            loses_events: $crate::loss::losses!(@loses_events $($kept)?),
        },)*];
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
pub fn every_loss() -> impl Iterator<Item = &'static Loss> {
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
        .find(|loss| loss.name == name)
        .map_or("", |loss| loss.meaning)
}

/// Whether the counter of this name counts events missing from the rows (every one but
/// those declared `nothing_lost`; a name no loss has, from another version, counts as
/// lost).
pub fn loses_events(name: &str) -> bool {
    every_loss()
        .find(|loss| loss.name == name)
        .is_none_or(|loss| loss.loses_events)
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
                        (0..LOSS_SLOTS).filter(|slot| every_loss().all(|loss| loss.slot != *slot)),
                    )
                    .finish()
            }
        }
        Free
    }

    #[test]
    fn only_slower_paths_lose_nothing() {
        let mut kept = every_loss().filter(|loss| !loss.loses_events);
        assert_eq!(
            kept.next().map(|loss| loss.name),
            Some("lock_stack_cache_failed")
        );
        assert_eq!(
            kept.next().map(|loss| loss.name),
            Some("lock_stack_fingerprint_short")
        );
        assert_eq!(kept.next(), None);
        assert!(!loses_events("lock_stack_fingerprint_short"));
        assert!(loses_events("lock_map_full"));
        assert!(loses_events("prog_recursion_miss:lock_contention_end"));
        assert!(loses_events("a_counter_of_another_version"));
    }

    #[test]
    fn every_slot_is_named_once() {
        for (index, Loss { slot, name, .. }) in every_loss().enumerate() {
            assert!(*slot < LOSS_SLOTS, "{name}: slot {slot} out of range");
            for Loss {
                slot: other_slot,
                name: other_name,
                ..
            } in every_loss().skip(index + 1)
            {
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
