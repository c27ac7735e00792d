//! Names and sizes of what every family shares: the stack map, the loss counters,
//! thread names and the process watcher.

/// Entries of the stack-trace map unless `--stack-entries` says otherwise.
pub const STACKS_ENTRIES: u32 = 16384;
/// The most entries a stack-trace map may have: its indexes are the lower half of the
/// `STACK_TAG_SHIFT` bits of a stack id; the upper half names spare stacks.
pub const STACKS_MAX_ENTRIES: u32 = 1 << (STACK_TAG_SHIFT - 1);

/// A stack the stack-trace map turned away because another stack holds its hash
/// bucket (`-EEXIST`) is kept in `STACKS_SPARE` instead, keyed by its frames, under an
/// index from `SPARE_INDEX_BASE` up: without it every event of that call path would
/// lose its stack for the rest of the recording.
pub const SPARE_INDEX_BASE: u32 = STACKS_MAX_ENTRIES;
/// Frames a spare stack keeps (a hash map key may have at most 512 bytes); a deeper
/// stack loses its outermost frames and is marked truncated.
pub const SPARE_STACK_DEPTH: usize = 64;
/// Entries of `STACKS_SPARE`: one spare stack per this many entries of `STACKS`, at
/// least `SPARE_MIN_ENTRIES` (hash collisions grow with the square of the stacks).
pub const SPARE_ENTRIES_DIVISOR: u32 = 8;
/// The fewest entries of `STACKS_SPARE`.
pub const SPARE_MIN_ENTRIES: u32 = 1024;

/// The frames of a spare stack, leaf first, zero after the last: the key of
/// `STACKS_SPARE`, whose value is the stack's id.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpareStack {
    pub frames: [u64; SPARE_STACK_DEPTH],
}

/// Entries of `STACKS_SPARE` for a stack map of `stack_entries`.
pub const fn spare_entries(stack_entries: u32) -> u32 {
    let scaled = stack_entries / SPARE_ENTRIES_DIVISOR;
    match scaled > SPARE_MIN_ENTRIES {
        true => scaled,
        false => SPARE_MIN_ENTRIES,
    }
}

/// Programs on one CPU nest (an interrupt's program runs inside a task's, an NMI's
/// inside both): each CPU has this many spare stack scratch slots, one per level.
pub const SPARE_DEPTHS: u32 = 3;

/// Spare stack ids are handed out per scratch slot (CPU and nesting level), without
/// atomics (the BPF instruction set of older kernels has no fetch-and-add): slot `s`
/// numbers its spare stacks of a generation from `s * per_slot`. User space sets
/// `per_slot` (`SPARE_IDS_PER_SLOT`) for the machine's CPUs with `spare_ids_per_slot`;
/// this default fits 1024 CPUs.
pub const SPARE_IDS_PER_SLOT_DEFAULT: u32 = SPARE_INDEX_BASE / (1024 * SPARE_DEPTHS);

/// Spare stack ids per scratch slot on a machine with `cpus` possible CPUs.
pub const fn spare_ids_per_slot(cpus: u32) -> u32 {
    match cpus {
        0 => SPARE_IDS_PER_SLOT_DEFAULT,
        cpus => SPARE_INDEX_BASE / (cpus * SPARE_DEPTHS),
    }
}

/// The scratch slot of nesting level `depth` on CPU `cpu`.
pub const fn spare_slot(cpu: u32, depth: u32) -> u32 {
    cpu * SPARE_DEPTHS + depth
}

/// The id of spare stack `n` of scratch slot `slot` in `generation`, with `per_slot`
/// ids per slot; `None` when that slot has used all of its ids.
pub const fn spare_stack_id(slot: u32, n: u32, per_slot: u32, generation: u32) -> Option<i64> {
    if per_slot == 0 || n >= per_slot || slot >= SPARE_INDEX_BASE / per_slot {
        return None;
    }
    Some(tagged_stack_id(
        (SPARE_INDEX_BASE + slot * per_slot + n) as i64,
        generation,
    ))
}

/// Whether a (non-negative) stack id names a spare stack.
pub const fn is_spare(id: i32) -> bool {
    stack_index(id) >= SPARE_INDEX_BASE
}

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
    id as u32 & ((1 << STACK_TAG_SHIFT) - 1)
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

#[cfg(feature = "user")]
crate::impl_pod!(SpareStack);

pub mod names {
    crate::define_names! {
        STACKS,
        STACKS_ODD,
        STACKS_SPARE,
        SPARE_SCRATCH,
        /// Global: spare stack ids per scratch slot (`spare_ids_per_slot`).
        SPARE_IDS_PER_SLOT,
        STACK_GENERATION,
        LOSSES,
        TASKS,
        PROCESSES_SEEN,
        NEW_PROCESSES,
        /// Program: `sched:sched_process_exec`, notes processes whose user stacks are recorded.
        PROCESSES_EXEC = processes_exec,
        /// Globals: where `task:task_rename`'s record has the renamed thread and its name.
        TASK_RENAME_PID_OFFSET,
        TASK_RENAME_NEWCOMM_OFFSET,
        /// Program: `task:task_rename`, renames the threads already named.
        TASKS_RENAME = tasks_rename,
        /// Moves of tasks between cgroups seen (one counter; see `tasks_cgroup_move`).
        TASKS_MOVED,
        /// Program: `cgroup:cgroup_attach_task`, counts the moves (`TASKS_MOVED`).
        TASKS_CGROUP_MOVE = tasks_cgroup_move,
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

    #[test]
    fn spare_ids_are_apart_from_map_indexes_and_keep_their_generation() {
        for (cpus, generation) in [(1, 0), (2, 1), (7, STACK_TAGS + 3), (1024, 5)] {
            let per_slot = spare_ids_per_slot(cpus);
            let mut ids = [0i32; 27];
            let mut slots = [(0u32, 0u32); 27];
            let mut made = 0;
            for cpu in [0, cpus / 2, cpus - 1] {
                for depth in 0..SPARE_DEPTHS {
                    let slot = spare_slot(cpu, depth);
                    for n in [0, 1, per_slot - 1] {
                        let id = spare_stack_id(slot, n, per_slot, generation).unwrap() as i32;
                        assert!((0..crate::offcpu::SCANNED_STACK_BASE).contains(&id));
                        assert!(is_spare(id));
                        assert_eq!(stack_tag(id), generation % STACK_TAGS);
                        ids[made] = id;
                        slots[made] = (slot, n);
                        made += 1;
                    }
                    // A slot that used its ids gets no more.
                    assert_eq!(spare_stack_id(slot, per_slot, per_slot, generation), None);
                }
            }
            for i in 0..made {
                for j in 0..i {
                    assert_eq!(
                        ids[i] == ids[j],
                        slots[i] == slots[j],
                        "{:?}",
                        (slots[i], slots[j])
                    );
                }
            }
            let walked = tagged_stack_id((STACKS_MAX_ENTRIES - 1) as i64, generation) as i32;
            assert!(!is_spare(walked));
        }
        assert_eq!(spare_entries(16384), 2048);
        assert_eq!(spare_entries(100), SPARE_MIN_ENTRIES);
        // A spare stack is a hash map key: at most 512 bytes.
        assert!(core::mem::size_of::<SpareStack>() <= 512);
    }
}
