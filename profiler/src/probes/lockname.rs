//! Lock names (lock family): the struct offsets the kernel side needs to tell what a
//! lock is (profiler-ebpf/src/lockname.rs), and the names of the classes it reports.
//! What the kernel side cannot tell is named from kallsyms data symbols where the
//! kernel has them, else stays an address; every row says which method named it
//! (`LockRow::lock_name_source`).

use std::collections::HashMap;

use anyhow::Result;
use aya::maps::Array;
use profiler_common::{
    lock::{LOCK_CLASS_MMAP_LOCK, LOCK_CLASS_UNKNOWN},
    lockname::{
        names, LockNameLayout, LOCK_CLASS_ALLOC_LOCK, LOCK_CLASS_CRED_GUARD, LOCK_CLASS_FILE_LOCK,
        LOCK_CLASS_FS_LOCK, LOCK_CLASS_PAGE_TABLE_LOCK, LOCK_CLASS_PI_LOCK, LOCK_CLASS_RQ_LOCK,
        LOCK_CLASS_SIGLOCK, NO_OFFSET,
    },
};

use crate::{
    btf::Btf,
    probes::shared::{MapSet, StackResolver},
};

/// Naming methods, as `lock_name_source` says them.
pub const SOURCE_TASK: &str = "task";
pub const SOURCE_OTHER_TASK: &str = "task_struct";
pub const SOURCE_RUNQUEUE: &str = "runqueue";
pub const SOURCE_KALLSYMS: &str = "kallsyms";
pub const SOURCE_ADDRESS: &str = "address";

/// Offsets from the kernel's BTF; members a kernel lacks are `NO_OFFSET` (their check
/// is skipped). Without BTF, naming is off.
pub fn layout() -> LockNameLayout {
    let btf = match Btf::from_sys_fs() {
        Ok(btf) => btf,
        Err(err) => {
            log::warn!("lock names from the kernel's structures are off: {err:#}");
            return LockNameLayout::OFF;
        }
    };
    let member = |name: &str, path: &str| btf.member_offset(name, path).unwrap_or(NO_OFFSET);
    let pointer =
        |name: &str, path: &str| btf.member_pointer_offset(name, path).unwrap_or(NO_OFFSET);
    // The runqueue lock is `__lock` since 5.14, `lock` before.
    let rq_lock = btf
        .member_offset("rq", "__lock")
        .or_else(|_| btf.member_offset("rq", "lock"))
        .unwrap_or(NO_OFFSET);
    LockNameLayout {
        enabled: 1,
        task_mm: pointer("task_struct", "mm"),
        task_files: pointer("task_struct", "files"),
        task_sighand: pointer("task_struct", "sighand"),
        task_fs: pointer("task_struct", "fs"),
        task_signal: pointer("task_struct", "signal"),
        task_pi_lock: member("task_struct", "pi_lock"),
        task_alloc_lock: member("task_struct", "alloc_lock"),
        task_group_leader: pointer("task_struct", "group_leader"),
        task_tgid: member("task_struct", "tgid"),
        task_se_cfs_rq: pointer("task_struct", "se.cfs_rq"),
        mm_mmap_lock: member("mm_struct", "mmap_lock"),
        mm_page_table_lock: member("mm_struct", "page_table_lock"),
        files_file_lock: member("files_struct", "file_lock"),
        sighand_siglock: member("sighand_struct", "siglock"),
        fs_lock: member("fs_struct", "lock"),
        signal_cred_guard: member("signal_struct", "cred_guard_mutex"),
        cfs_rq_rq: pointer("cfs_rq", "rq"),
        rq_lock,
    }
}

/// Names the locks of one drain: the kernel side's classes, the runqueue locks it
/// noted, kallsyms data symbols, else the address.
pub struct LockNamer {
    /// Runqueue lock address -> CPU.
    rq_locks: HashMap<u64, u32>,
}

impl LockNamer {
    pub fn new(maps: &MapSet) -> Result<LockNamer> {
        let mut rq_locks = HashMap::new();
        let array: Array<_, u64> = Array::try_from(maps.get(names::LOCK_RQ_ADDRS)?)?;
        for (cpu, addr) in array.iter().enumerate() {
            let addr = addr?;
            if addr != 0 {
                rq_locks.insert(addr, cpu as u32);
            }
        }
        Ok(LockNamer { rq_locks })
    }

    /// (name, source) of the lock at `addr` of kernel class `class`.
    pub fn name(&self, class: u32, addr: u64, stacks: &StackResolver) -> (String, &'static str) {
        if let Some(name) = class_name(class) {
            let source = if class == LOCK_CLASS_PI_LOCK || class == LOCK_CLASS_ALLOC_LOCK {
                SOURCE_OTHER_TASK
            } else if class == LOCK_CLASS_RQ_LOCK {
                SOURCE_RUNQUEUE
            } else {
                SOURCE_TASK
            };
            if class == LOCK_CLASS_RQ_LOCK {
                if let Some(cpu) = self.rq_locks.get(&addr) {
                    return (format!("rq_lock:cpu{cpu}"), source);
                }
            }
            return (name.to_string(), source);
        }
        if let Some(cpu) = self.rq_locks.get(&addr) {
            return (format!("rq_lock:cpu{cpu}"), SOURCE_RUNQUEUE);
        }
        let name = stacks.lock_name(addr);
        let source = if name.starts_with("0x") {
            SOURCE_ADDRESS
        } else {
            SOURCE_KALLSYMS
        };
        (name, source)
    }
}

/// The name of a kernel-side class, `None` for `LOCK_CLASS_UNKNOWN`.
pub fn class_name(class: u32) -> Option<&'static str> {
    Some(match class {
        LOCK_CLASS_UNKNOWN => return None,
        LOCK_CLASS_MMAP_LOCK => "mmap_lock",
        LOCK_CLASS_PAGE_TABLE_LOCK => "page_table_lock",
        LOCK_CLASS_FILE_LOCK => "file_lock",
        LOCK_CLASS_SIGLOCK => "siglock",
        LOCK_CLASS_FS_LOCK => "fs_lock",
        LOCK_CLASS_PI_LOCK => "pi_lock",
        LOCK_CLASS_ALLOC_LOCK => "alloc_lock",
        LOCK_CLASS_RQ_LOCK => "rq_lock",
        LOCK_CLASS_CRED_GUARD => "cred_guard_mutex",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_has_a_distinct_name() {
        let names: Vec<&str> = (0..16).filter_map(class_name).collect();
        assert_eq!(names.len(), 9);
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
    }

    #[test]
    fn layout_on_this_kernel() {
        if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            eprintln!("no kernel BTF here");
            return;
        }
        let layout = layout();
        assert_eq!(layout.enabled, 1);
        for offset in [
            layout.task_mm,
            layout.task_files,
            layout.task_pi_lock,
            layout.files_file_lock,
            layout.mm_mmap_lock,
        ] {
            assert_ne!(offset, NO_OFFSET, "{layout:?}");
        }
    }
}
