//! Names and sizes of what every family shares: the stack map, the loss counters,
//! thread names and the process watcher.

/// Entries of the stack-trace map unless `--stack-entries` says otherwise.
pub const STACKS_ENTRIES: u32 = 16384;
/// The most entries a stack-trace map may have: a stack id fits in `STACK_TAG_SHIFT` bits.
pub const STACKS_MAX_ENTRIES: u32 = 1 << STACK_TAG_SHIFT;

/// Stack ids carry the stack generation they were walked in (`record --rotate`: each
/// period walks into one of two stack maps, `STACKS` in even generations and
/// `STACKS_ODD` in odd ones, and the map of the generation before last is emptied
/// before it is used again). An id is `index | tag << STACK_TAG_SHIFT`, where the tag
/// is the generation modulo `STACK_TAGS`; a recording without periods stays in
/// generation 0, where ids are plain indexes. Tagged ids stay below the ids of stacks
/// read from `/proc` (`offcpu::SCANNED_STACK_BASE`).
pub const STACK_TAG_SHIFT: u32 = 20;
/// Distinct generation tags (10 bits above the index).
pub const STACK_TAGS: u32 = 1 << 10;

/// The id of the stack at `index` of the map of `generation`.
pub const fn tagged_stack_id(index: i64, generation: u32) -> i64 {
    index | (((generation % STACK_TAGS) as i64) << STACK_TAG_SHIFT)
}

/// The generation tag of a (non-negative) stack id.
pub const fn stack_tag(id: i32) -> u32 {
    (id as u32 >> STACK_TAG_SHIFT) % STACK_TAGS
}

/// The index in its map of a (non-negative) stack id.
pub const fn stack_index(id: i32) -> u32 {
    id as u32 & (STACKS_MAX_ENTRIES - 1)
}
/// Entries of a family's overflow map (`LOCK_OVERFLOW`, `CPU_OVERFLOW`, `IO_OVERFLOW`, ...):
/// the rows, without stacks or files, of what its full aggregation map had no room for.
pub const OVERFLOW_ENTRIES: u32 = 4096;
/// Threads whose names are kept (`TASKS`).
pub const TASKS_ENTRIES: u32 = 16384;
/// Processes already noted for the process watcher (`PROCESSES_SEEN`).
pub const PROCESSES_SEEN_ENTRIES: u32 = 16384;
/// Bytes of the process watcher's notice ring (`NEW_PROCESSES`).
pub const NEW_PROCESSES_BYTES: u32 = 64 * 1024;

pub mod names {
    crate::define_names! {
        STACKS,
        STACKS_ODD,
        STACK_GENERATION,
        LOSSES,
        TASKS,
        PROCESSES_SEEN,
        NEW_PROCESSES,
        /// Program: `sched:sched_process_exec`, notes processes whose user stacks are recorded.
        PROCESSES_EXEC = processes_exec,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagged_ids_round_trip_and_stay_below_scanned_ids() {
        for generation in [0, 1, 2, STACK_TAGS - 1, STACK_TAGS, 3 * STACK_TAGS + 5] {
            for index in [0i64, 1, 16383, (STACKS_MAX_ENTRIES - 1) as i64] {
                let id = tagged_stack_id(index, generation) as i32;
                assert!((0..crate::offcpu::SCANNED_STACK_BASE).contains(&id));
                assert_eq!(stack_index(id) as i64, index);
                assert_eq!(stack_tag(id), generation % STACK_TAGS);
            }
        }
        // Generation 0 leaves ids as the kernel gave them.
        assert_eq!(tagged_stack_id(1234, 0), 1234);
    }
}
