//! Record-time lock filters (`record --type`, `--lock-filter`, `--caller`), like
//! `perf lock contention -Y/-L/-S`: what the kernel can decide at the start of a
//! contention (the lock type, from the `LCB_F_*` flags; the lock address, given or
//! from a static lock's kernel symbol) goes into the load-time global `LOCK_FILTER`, and
//! a left-out contention costs the begin program a few global reads and nothing else.
//! What only user space knows (names given after the fact, such as a task's
//! `mmap_lock`; the callers, which need symbolized stacks) is applied when the maps are
//! drained. The drain applies the whole filter again, so the profile holds exactly the
//! rows `report` would keep with the same filters.

use anyhow::{bail, Result};
use lockpath_profile::filter::LockFilter;
use profiler_common::lock::{
    LockFilter as KernelFilter, LCB_F_MUTEX, LOCK_FILTER_ADDRS, LOCK_FILTER_MAX_ADDRS,
    LOCK_FILTER_TYPES,
};

use crate::{
    probes::{shared::StackResolver, FamilyArgs},
    profile::{HoldRow, LockRow},
    symbolize::KernelSymbols,
};

/// The filters of one recording.
#[derive(Debug, Clone, Default)]
pub struct RecordFilter {
    /// The kernel side's share (`LOCK_FILTER`); `enabled` 0 when nothing is filtered
    /// there.
    pub kernel: KernelFilter,
    /// Applied to the drained rows (empty: nothing to do).
    pub drain: LockFilter,
    /// `--lock-filter` values the kernel cannot check, for the note at start-up.
    pub drain_only: Vec<String>,
}

/// Whether any record-time lock filter is given.
pub fn asked(args: &FamilyArgs) -> bool {
    !args.lock.lock_filter.is_empty()
        || !args.lock.lock_type.is_empty()
        || !args.lock.caller.is_empty()
}

/// Checks what can be checked without the kernel's symbols: the types, the patterns,
/// the addresses. One clear line for each kind of mistake.
pub fn check(args: &FamilyArgs) -> Result<()> {
    LockFilter {
        locks: Vec::new(),
        types: args.lock.lock_type.clone(),
        callers: Vec::new(),
    }
    .check()?;
    if args.lock.caller.iter().any(String::is_empty) {
        bail!("--caller takes a pattern (a part of a function name), not an empty value");
    }
    for value in &args.lock.lock_filter {
        if value.is_empty() {
            bail!("--lock-filter takes a lock's name or address (0xffff...), not an empty value");
        }
        if is_hex(value) {
            parse_addr(value)?;
        }
    }
    Ok(())
}

fn is_hex(value: &str) -> bool {
    value.starts_with("0x") || value.starts_with("0X")
}

/// A lock address as a report's lock column prints it.
fn parse_addr(value: &str) -> Result<u64> {
    let Ok(addr) = u64::from_str_radix(&value[2..], 16) else {
        bail!(
            "--lock-filter {value}: not a hexadecimal address (take the lock column of a report)"
        );
    };
    if !crate::probes::shared::is_kernel_address(addr) {
        bail!("--lock-filter {value}: not a kernel address (take the lock column of a report)");
    }
    Ok(addr)
}

/// The filters of this recording, with the names resolved against the kernel's
/// symbols: a name that is neither a kernel data symbol nor a name lockpath gives a
/// lock after the fact fails here, before anything is loaded.
pub fn plan(args: &FamilyArgs, symbols: &KernelSymbols) -> Result<RecordFilter> {
    let asked = LockFilter {
        locks: Vec::new(),
        types: args.lock.lock_type.clone(),
        callers: args.lock.caller.clone(),
    };
    let mut filter = RecordFilter {
        drain: LockFilter {
            callers: args.lock.caller.clone(),
            ..Default::default()
        },
        ..Default::default()
    };
    if !args.lock.lock_type.is_empty() {
        let (exact, kept) = type_masks(&asked);
        filter.kernel.enabled |= LOCK_FILTER_TYPES;
        filter.kernel.type_mask = kept;
        // The drain checks types only where the kernel keeps more (mutexes).
        if kept != exact {
            filter.drain.types = args.lock.lock_type.clone();
        }
    }
    let mut addrs = Vec::new();
    let mut drain_locks = Vec::new();
    for value in &args.lock.lock_filter {
        match resolve(value, symbols)? {
            Some(addr) => {
                addrs.push(addr);
                drain_locks.push(format!("0x{addr:x}"));
            }
            None => {
                filter.drain_only.push(value.clone());
                drain_locks.push(value.clone());
            }
        }
    }
    addrs.sort_unstable();
    addrs.dedup();
    if filter.drain_only.is_empty() && addrs.len() > LOCK_FILTER_MAX_ADDRS {
        filter.drain_only.push(format!(
            "{} addresses (the kernel checks up to {LOCK_FILTER_MAX_ADDRS})",
            addrs.len()
        ));
    }
    if !addrs.is_empty() && filter.drain_only.is_empty() {
        filter.kernel.enabled |= LOCK_FILTER_ADDRS;
        filter.kernel.addr_count = addrs.len() as u32;
        filter.kernel.addrs[..addrs.len()].copy_from_slice(&addrs);
    } else {
        // A name known only after the fact: the kernel cannot narrow the locks down.
        filter.drain.locks = drain_locks;
    }
    Ok(filter)
}

/// The `LCB_F_*` combinations whose type the filter keeps (bit `f` for flags `f`), and
/// those the kernel keeps. A mutex wait may begin spinning (`mutex:spin`) and go on
/// sleeping (`mutex`) as one wait: the kernel keeps every mutex combination when any is
/// asked, so a wait's flags are followed to its end, and the drain then keeps the asked
/// ones exactly.
fn type_masks(filter: &LockFilter) -> (u64, u64) {
    let exact = type_mask(filter);
    let mutexes: u64 = (0..64u32)
        .filter(|flags| flags & LCB_F_MUTEX != 0)
        .fold(0, |mask, flags| mask | 1 << flags);
    match exact & mutexes {
        0 => (exact, exact),
        _ => (exact, exact | mutexes),
    }
}

/// Bit `f` set for every `LCB_F_*` combination `f` whose type the filter keeps.
fn type_mask(filter: &LockFilter) -> u64 {
    (0..64u32)
        .filter(|&flags| filter.type_matches(flags))
        .fold(0, |mask, flags| mask | 1 << flags)
}

/// The address of a `--lock-filter` value when the kernel can check it (an address, a
/// static lock's symbol, `symbol+0xOFFSET`); `None` for a name given after the fact.
fn resolve(value: &str, symbols: &KernelSymbols) -> Result<Option<u64>> {
    if is_hex(value) {
        return parse_addr(value).map(Some);
    }
    let (name, offset) = match value.split_once("+0x") {
        Some((name, hex)) => match u64::from_str_radix(hex, 16) {
            Ok(offset) => (name, offset),
            Err(_) => bail!("--lock-filter {value}: {hex} is not a hexadecimal offset"),
        },
        None => (value, 0),
    };
    // First the names lockpath gives: a row so named is kept by name whatever its
    // address, as `report --lock` keeps it.
    if offset == 0 && is_after_the_fact(value) {
        return Ok(None);
    }
    // A static lock without a symbol, named after the function that takes it.
    if let Some(function) = value.strip_prefix("static@") {
        if symbols.find_function(function, None).is_some() {
            return Ok(None);
        }
        let close = symbols.close_functions(function, 5);
        let close = match close.is_empty() {
            true => String::new(),
            false => format!("; close kernel functions: {}", close.join(", ")),
        };
        bail!("--lock-filter {value}: no kernel function {function} in /proc/kallsyms{close}");
    }
    if let Some(symbol) = symbols.find_data(name) {
        if symbol.addr == 0 {
            bail!(
                "--lock-filter {value}: /proc/kallsyms hides the kernel's addresses \
                 (kernel.kptr_restrict): run as root"
            );
        }
        return Ok(Some(symbol.addr + offset));
    }
    if symbols.find_function(name, None).is_some() {
        bail!(
            "--lock-filter {value}: {name} is a function, not a lock (give a static lock's \
             symbol, an address from a report's lock column, or {})",
            AFTER_THE_FACT.join(", ")
        );
    }
    let close = symbols.close_data(name, 5);
    let close = match close.is_empty() {
        true => String::new(),
        false => format!("; close kernel symbols: {}", close.join(", ")),
    };
    bail!(
        "--lock-filter {value}: no kernel data symbol {name} in /proc/kallsyms, and not a \
         lock name lockpath gives after the fact ({}, rq_lock:cpuN, NAME.wait_lock, \
         static@FUNCTION){close}",
        AFTER_THE_FACT.join(", ")
    )
}

/// Names the drain gives locks from what the kernel side saw (the waiter's own
/// structures): the lock's address is not known before the contention.
const AFTER_THE_FACT: &[&str] = &[
    "mmap_lock",
    "page_table_lock",
    "file_lock",
    "siglock",
    "fs_lock",
    "pi_lock",
    "alloc_lock",
    "rq_lock",
    "cred_guard_mutex",
];

fn is_after_the_fact(name: &str) -> bool {
    if AFTER_THE_FACT.contains(&name) {
        return true;
    }
    if let Some(cpu) = name.strip_prefix("rq_lock:cpu") {
        return cpu.parse::<u32>().is_ok();
    }
    name.strip_suffix(".wait_lock")
        .is_some_and(|owner| !owner.is_empty())
}

impl RecordFilter {
    /// Whether the drained rows need filtering.
    pub fn at_drain(&self) -> bool {
        !self.drain.is_empty()
    }

    /// Keeps the rows (and holds under contention) the filters keep.
    pub fn apply(&self, rows: &mut Vec<LockRow>, holds: &mut Vec<HoldRow>, stacks: &StackResolver) {
        if !self.at_drain() {
            return;
        }
        rows.retain(|row| {
            let frames = stacks.interner.frames_of(row.stack);
            self.drain
                .keeps(&row.lock_name, row.lock_addr, row.flags, &frames)
        });
        holds.retain(|row| {
            let frames = stacks.interner.frames_of(row.stack);
            self.drain
                .keeps(&row.lock_name, row.lock_addr, row.flags, &frames)
        });
    }

    /// One line on what is filtered where, for the start of the recording.
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.kernel.enabled != 0 {
            let mut what = Vec::new();
            if self.kernel.enabled & LOCK_FILTER_TYPES != 0 {
                what.push("types");
            }
            if self.kernel.enabled & LOCK_FILTER_ADDRS != 0 {
                what.push("lock addresses");
            }
            parts.push(format!("in the kernel: {}", what.join(" and ")));
        }
        let mut later = Vec::new();
        if !self.drain_only.is_empty() {
            later.push(format!("--lock-filter {}", self.drain_only.join(", ")));
        }
        if !self.drain.types.is_empty() {
            later.push(format!(
                "--type {} (the kernel keeps every mutex wait)",
                self.drain.types.join(", ")
            ));
        }
        if !self.drain.callers.is_empty() {
            later.push(format!("--caller {}", self.drain.callers.join(", ")));
        }
        if !later.is_empty() {
            parts.push(format!("when the maps are drained: {}", later.join("; ")));
        }
        (!parts.is_empty()).then(|| format!("lockpath: lock filters {}", parts.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockpath_profile::lock::lock_type_name;
    use profiler_common::lock::{LCB_F_READ, LCB_F_SPIN, LCB_F_WRITE};

    fn filter(types: &[&str]) -> LockFilter {
        LockFilter {
            types: types.iter().map(|kind| kind.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_kernel_mask_keeps_the_types_reports_keep() {
        let spin = type_mask(&filter(&["spinlock"]));
        assert_eq!(spin, 1 << LCB_F_SPIN);
        let rwsem = type_mask(&filter(&["rwsem"]));
        assert_eq!(rwsem, 1 << LCB_F_READ | 1 << LCB_F_WRITE);
        let writer = type_mask(&filter(&["rwsem:W"]));
        assert_eq!(writer, 1 << LCB_F_WRITE);
        // Every flags value the mask keeps is named like a type asked for (mutexes
        // aside: see type_mask).
        for kinds in [&["rwlock"][..], &["semaphore", "rt-mutex"], &["pcpu-sem:R"]] {
            let mask = type_mask(&filter(kinds));
            for flags in 0..64u32 {
                let name = lock_type_name(flags);
                let asked = kinds
                    .iter()
                    .any(|kind| name == *kind || name.split(':').next() == Some(kind));
                assert_eq!(mask >> flags & 1 == 1, asked, "{kinds:?} {flags} {name}");
            }
        }
    }

    #[test]
    fn a_mutex_type_keeps_every_mutex_wait_in_the_kernel() {
        let (exact, mask) = type_masks(&filter(&["mutex:spin"]));
        assert_eq!(exact, 1 << (LCB_F_MUTEX | LCB_F_SPIN));
        assert!(mask & 1 << LCB_F_MUTEX != 0);
        assert!(mask & 1 << (LCB_F_MUTEX | LCB_F_SPIN) != 0);
        assert_eq!(mask & 1 << LCB_F_SPIN, 0);
        // The drain keeps only mutex:spin rows.
        assert!(!filter(&["mutex:spin"]).type_matches(LCB_F_MUTEX));
        let (exact, kept) = type_masks(&filter(&["spinlock", "rwsem"]));
        assert_eq!(exact, kept);
    }

    fn symbols() -> KernelSymbols {
        KernelSymbols::parse(
            "ffffffff81000000 T _stext\n\
             ffffffff81001000 T do_work\n\
             ffffffff82000000 D _sdata\n\
             ffffffff82001000 D tasklist_lock\n\
             ffffffff82001040 D jiffies_lock\n\
             ffffffff82002000 B _end\n",
        )
    }

    #[test]
    fn names_resolve_to_addresses_or_to_the_drain() {
        let symbols = symbols();
        assert_eq!(
            resolve("tasklist_lock", &symbols).unwrap(),
            Some(0xffff_ffff_8200_1000)
        );
        assert_eq!(
            resolve("jiffies_lock+0x8", &symbols).unwrap(),
            Some(0xffff_ffff_8200_1048)
        );
        assert_eq!(
            resolve("0xffff88810a2b3c40", &symbols).unwrap(),
            Some(0xffff_8881_0a2b_3c40)
        );
        assert_eq!(resolve("mmap_lock", &symbols).unwrap(), None);
        assert_eq!(resolve("rq_lock:cpu3", &symbols).unwrap(), None);
        assert_eq!(resolve("mmap_lock.wait_lock", &symbols).unwrap(), None);
        assert_eq!(resolve("static@do_work", &symbols).unwrap(), None);
        let err = resolve("static@do_wrk", &symbols).unwrap_err().to_string();
        assert!(err.contains("no kernel function do_wrk"), "{err}");
        assert!(err.contains("close kernel functions: do_work"), "{err}");
        let err = resolve("tasklist_lok", &symbols).unwrap_err().to_string();
        assert!(err.contains("no kernel data symbol tasklist_lok"), "{err}");
        assert!(err.contains("close kernel symbols: tasklist_lock"), "{err}");
        let err = resolve("do_work", &symbols).unwrap_err().to_string();
        assert!(err.contains("is a function, not a lock"), "{err}");
        assert!(resolve("0xzz", &symbols).is_err());
        assert!(resolve("0x1000", &symbols).is_err());
    }
}
