//! Hold times of one lock: `--hold [TYPE:]LOCK`. The lock functions of the type (or of
//! every type) get fexit programs (acquired when they return) and the unlock functions
//! fentry programs, or kprobes where fentry is refused. Each program compares its lock
//! argument with the one lock first, so other locks cost one compare.
//!
//! A lock that cannot be resolved (no such symbol, a function, not a kernel address)
//! or a kernel without fentry and kprobes is one line on stderr and in the profile's
//! `unavailable`; the rest of the run goes on.

use anyhow::{bail, Context, Result};
use aya::{
    programs::{FEntry, FExit, KProbe},
    Btf, Ebpf, EbpfLoader,
};
use clap::Args;
use profiler_common::{
    hold::{
        names, HoldConfig, HoldKey, HoldSlot, HOLD_ACQUIRE_SLOTS, HOLD_OPEN_ENTRIES,
        HOLD_PENDING_ENTRIES, HOLD_RELEASE_SLOTS, HOLD_RET_ANY, HOLD_RET_ONE, HOLD_RET_ZERO,
    },
    lock::{LCB_F_MUTEX, LCB_F_READ, LCB_F_WRITE},
};

use super::func::FuncMethod;
use crate::{probes::prelude::*, profile::HoldRow};

pub const FAMILY: Registration = Registration {
    name: "hold",
    asked: |args| args.hold.hold.is_some(),
    check: |args| match &args.hold.hold {
        Some(spec) => parse(spec).map(|_| ()),
        None => Ok(()),
    },
    plan: plan_family,
    maps: &[
        (names::HOLD_STATS, MapSize::Stats),
        (names::HOLD_OVERFLOW, MapSize::Overflow),
        (names::HOLD_OPEN, MapSize::Fixed(HOLD_OPEN_ENTRIES)),
        (names::HOLD_PENDING, MapSize::Fixed(HOLD_PENDING_ENTRIES)),
    ],
    names: names::ALL,
};

/// Resolves the lock. When `--hold` is all that was asked for, a lock that cannot be
/// timed is the run's error; otherwise one line, and the run goes on without it.
fn plan_family(args: &FamilyArgs, ctx: &mut PlanContext) -> Result<Planned> {
    let Some(text) = &args.hold.hold else {
        return Ok(None);
    };
    let spec = parse(text)?;
    let only = ctx.asked == [FAMILY.name];
    match plan(&spec, ctx.symbols) {
        Ok(plan) => Ok(Some(Box::new(HoldFamily {
            plan,
            method: args.hold.hold_method,
            only,
        }))),
        Err(reason) if only => bail!("--hold {}: {reason}", spec.text),
        Err(reason) => {
            not_recorded(&spec.text, reason, ctx.unavailable);
            Ok(None)
        }
    }
}

/// The hold family of one recording.
struct HoldFamily {
    plan: HoldPlan,
    method: FuncMethod,
    /// `--hold` is the only thing asked for: failing to attach it fails the run.
    only: bool,
}

impl Family for HoldFamily {
    fn configure<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        loader.override_global(names::HOLD_CONFIG, &self.plan.config, true);
    }

    fn attach(&mut self, ebpf: &mut Ebpf, ctx: &mut AttachContext) -> Result<Vec<ProbeUse>> {
        Ok(attach(ebpf, self, ctx.unavailable)?.into_iter().collect())
    }

    fn drain(&self, out: &mut Drain) -> Result<()> {
        out.profile.holds = drain(out.maps, out.stacks, &self.plan)?;
        Ok(())
    }

    fn progress(&self, live: &Profile) -> Option<String> {
        progress_of(&live.holds, |row| row.latency.count, "holds")
    }

    fn finish(&self, profile: &Profile) {
        let attached = profile.recorded(FAMILY.name);
        if attached && profile.holds.is_empty() {
            eprintln!(
                "lockpath: --hold {}: {} was not taken (no acquisition seen in {:.1} s); \
                 check the address and the type against a report's lock and type columns",
                self.plan.spec, self.plan.lock_name, profile.duration_s
            );
        }
    }
}

/// Lock types `--hold` times, by the prefix a user writes (the order of HOOKS).
const TYPES: [&str; 2] = ["mutex", "rwsem"];

/// Spinning locks are not timed: hooking `_raw_spin_lock*` and `_raw_spin_unlock*` hung
/// the lab's 6.1 guest, with fexit/fentry as with kprobes (after several clean runs), and
/// a profiler must not hang the machine it measures. Their contention is in `--lock`.
const SPINNING: [&str; 2] = ["spinlock", "rwlock"];

/// An acquire entry point: its name, the `LCB_F_*` flags of what it takes, and how its
/// return value says "acquired".
struct Acquire(&'static str, u32, u32);

/// Per type: acquire functions, release functions, and the two without which that type
/// cannot be timed at all (the kernel inlines them in some configurations).
struct TypeHooks {
    name: &'static str,
    acquire: &'static [Acquire],
    release: &'static [&'static str],
    required: &'static [&'static str],
}

const HOOKS: [TypeHooks; 2] = [
    TypeHooks {
        name: "mutex",
        acquire: &[
            Acquire("mutex_lock", LCB_F_MUTEX, HOLD_RET_ANY),
            Acquire("mutex_lock_io", LCB_F_MUTEX, HOLD_RET_ANY),
            Acquire("mutex_lock_nested", LCB_F_MUTEX, HOLD_RET_ANY),
            Acquire("mutex_lock_interruptible", LCB_F_MUTEX, HOLD_RET_ZERO),
            Acquire("mutex_lock_killable", LCB_F_MUTEX, HOLD_RET_ZERO),
            Acquire("mutex_trylock", LCB_F_MUTEX, HOLD_RET_ONE),
        ],
        release: &["mutex_unlock"],
        required: &["mutex_lock", "mutex_unlock"],
    },
    TypeHooks {
        name: "rwsem",
        acquire: &[
            Acquire("down_read", LCB_F_READ, HOLD_RET_ANY),
            Acquire("down_read_nested", LCB_F_READ, HOLD_RET_ANY),
            Acquire("down_read_killable", LCB_F_READ, HOLD_RET_ZERO),
            Acquire("down_read_interruptible", LCB_F_READ, HOLD_RET_ZERO),
            Acquire("down_read_trylock", LCB_F_READ, HOLD_RET_ONE),
            Acquire("down_write", LCB_F_WRITE, HOLD_RET_ANY),
            Acquire("down_write_nested", LCB_F_WRITE, HOLD_RET_ANY),
            Acquire("down_write_killable", LCB_F_WRITE, HOLD_RET_ZERO),
            Acquire("down_write_trylock", LCB_F_WRITE, HOLD_RET_ONE),
        ],
        release: &["up_read", "up_write"],
        required: &["down_write", "up_write"],
    },
];

/// `--hold` as written: the lock types to probe and the lock.
#[derive(Debug, Clone, PartialEq)]
pub struct HoldSpec {
    pub text: String,
    /// Indices into HOOKS.
    types: Vec<usize>,
    lock: String,
}

/// Parses `[TYPE:]LOCK`; a malformed flag is an error before anything runs.
pub fn parse(spec: &str) -> Result<HoldSpec> {
    let (types, lock) = match spec.split_once(':') {
        Some((kind, lock)) => {
            if SPINNING.contains(&kind) {
                bail!(
                    "--hold {spec}: {kind} holds are not timed: hooking the spinning-lock \
                     functions (_raw_spin_lock*, _raw_read_lock*, ...) can hang the kernel; \
                     their contention is in --lock, and --hold times mutex: and rwsem: locks"
                );
            }
            let Some(index) = TYPES.iter().position(|known| *known == kind) else {
                bail!(
                    "--hold {spec}: unknown lock type {kind:?}; use one of {}, or no type",
                    TYPES.join(", ")
                );
            };
            (vec![index], lock)
        }
        None => ((0..TYPES.len()).collect(), spec),
    };
    if lock.is_empty() {
        bail!("--hold {spec}: no lock given (a kernel symbol or an address such as 0xffff888100076af8)");
    }
    Ok(HoldSpec {
        text: spec.to_string(),
        types,
        lock: lock.to_string(),
    })
}

/// What will be attached: the lock's address and an entry point per slot.
#[derive(Debug)]
pub struct HoldPlan {
    pub spec: String,
    pub lock_name: String,
    /// Acquire functions, by slot.
    acquire: Vec<&'static str>,
    /// Release functions, by fentry slot.
    release: Vec<&'static str>,
    /// Entry points of the probed types that this kernel does not have.
    missing: Vec<&'static str>,
    pub config: HoldConfig,
}

/// Resolves the lock and picks the entry points this kernel has. `Err` is the one-line
/// reason the hold cannot be recorded (the run goes on without it).
pub fn plan(spec: &HoldSpec, symbols: &KernelSymbols) -> Result<HoldPlan, String> {
    let (lock_addr, lock_name) = resolve_lock(&spec.lock, symbols)?;
    let mut config = HoldConfig::DISABLED;
    config.lock_addr = lock_addr;
    let mut acquire = Vec::new();
    let mut release = Vec::new();
    let mut missing = Vec::new();
    let mut unusable = Vec::new();
    for &index in &spec.types {
        let hooks = &HOOKS[index];
        let absent: Vec<&str> = hooks
            .required
            .iter()
            .copied()
            .filter(|name| !symbols.has_function(name))
            .collect();
        if !absent.is_empty() {
            unusable.push(format!(
                "{} holds need {}, which this kernel inlines or lacks",
                hooks.name,
                absent.join(" and ")
            ));
            continue;
        }
        for entry in hooks.acquire {
            if !symbols.has_function(entry.0) {
                missing.push(entry.0);
                continue;
            }
            let Some(slot) = config.slots.get_mut(acquire.len()) else {
                return Err(format!(
                    "more than {HOLD_ACQUIRE_SLOTS} lock functions to probe: give a type (mutex:LOCK, ...)"
                ));
            };
            *slot = HoldSlot {
                flags: entry.1,
                ret: entry.2,
            };
            acquire.push(entry.0);
        }
        for &name in hooks.release {
            if !symbols.has_function(name) {
                missing.push(name);
                continue;
            }
            if release.len() == HOLD_RELEASE_SLOTS {
                return Err(format!(
                    "more than {HOLD_RELEASE_SLOTS} unlock functions to probe: give a type (mutex:LOCK, ...)"
                ));
            }
            release.push(name);
        }
    }
    if acquire.is_empty() {
        return Err(unusable.join("; "));
    }
    if !unusable.is_empty() {
        eprintln!(
            "lockpath: --hold {}: {}; the other types are probed",
            spec.text,
            unusable.join("; ")
        );
    }
    Ok(HoldPlan {
        spec: spec.text.clone(),
        lock_name,
        acquire,
        release,
        missing,
        config,
    })
}

/// The lock's address and display name: a hex address, or a data symbol of the kernel
/// image. A function, an unknown name or a user-space address is refused, with why.
fn resolve_lock(lock: &str, symbols: &KernelSymbols) -> Result<(u64, String), String> {
    if let Some(hex) = lock.strip_prefix("0x").or_else(|| lock.strip_prefix("0X")) {
        let addr = u64::from_str_radix(hex, 16)
            .map_err(|_| format!("{lock} is not a hexadecimal address"))?;
        if !crate::probes::shared::is_kernel_address(addr) {
            return Err(format!(
                "{lock} is not a kernel address (take the lock column of a lockpath report)"
            ));
        }
        let name = symbols
            .data_name(addr)
            .unwrap_or_else(|| format!("0x{addr:x}"));
        return Ok((addr, name));
    }
    if let Some(symbol) = symbols.find_data(lock) {
        return Ok((symbol.addr, symbol.name.clone()));
    }
    if symbols.find_function(lock, None).is_some() {
        return Err(format!(
            "{lock} is a function, not a lock (give a lock: a static lock's symbol such as \
             tasklist_lock, or an address from a report's lock column)"
        ));
    }
    let close = symbols.close_data(lock, 5);
    if close.is_empty() {
        Err(format!("no kernel symbol {lock} in /proc/kallsyms"))
    } else {
        Err(format!(
            "no kernel symbol {lock} in /proc/kallsyms; close matches: {}",
            close.join(", ")
        ))
    }
}

/// fexit on every acquire function and fentry on every release function; on any
/// failure every hold program is unloaded again and the reason returned.
fn try_fentry(ebpf: &mut Ebpf, plan: &HoldPlan) -> Result<(), String> {
    let btf = Btf::from_sys_fs().map_err(|err| format!("no kernel BTF ({err})"))?;
    let result = (|| -> Result<()> {
        for (slot, function) in plan.acquire.iter().enumerate() {
            // A function whose return value does not matter may return nothing at all:
            // its program must not read the return value.
            let name = if plan.config.slots[slot].ret == HOLD_RET_ANY {
                format!("{}{slot}", names::HOLD_FEXIT_VOID_)
            } else {
                format!("{}{slot}", names::HOLD_FEXIT_)
            };
            let fexit: &mut FExit = program(ebpf, &name)?;
            fexit
                .load(function, &btf)
                .with_context(|| format!("fexit load on {function}"))?;
            fexit
                .attach()
                .with_context(|| format!("fexit attach to {function}"))?;
        }
        for (slot, function) in plan.release.iter().enumerate() {
            let fentry: &mut FEntry = program(ebpf, &format!("{}{slot}", names::HOLD_FENTRY_))?;
            fentry
                .load(function, &btf)
                .with_context(|| format!("fentry load on {function}"))?;
            fentry
                .attach()
                .with_context(|| format!("fentry attach to {function}"))?;
        }
        Ok(())
    })();
    result.map_err(|err| {
        unload_all(ebpf);
        explain(&format!("{err:#}"))
    })
}

/// kprobe + kretprobe on every acquire function, one kprobe on every release function.
fn try_kprobe(ebpf: &mut Ebpf, plan: &HoldPlan) -> Result<(), String> {
    if let Some(why) = kprobes_unavailable() {
        return Err(why);
    }
    let result = (|| -> Result<()> {
        for (slot, function) in plan.acquire.iter().enumerate() {
            let (entry, ret) = (
                format!("{}{slot}", names::HOLD_KPROBE_),
                format!("{}{slot}", names::HOLD_KRETPROBE_),
            );
            for name in [&entry, &ret] {
                let kprobe: &mut KProbe = program(ebpf, name)?;
                kprobe.load().context("kprobe load")?;
            }
            attach_kprobe_pair(ebpf, &entry, &ret, function)?;
        }
        let release: &mut KProbe = program(ebpf, names::HOLD_RELEASE_KPROBE)?;
        release.load().context("kprobe load")?;
        for function in &plan.release {
            release
                .attach(function, 0)
                .with_context(|| format!("cannot attach a kprobe to {function}"))?;
        }
        Ok(())
    })();
    result.map_err(|err| {
        unload_all(ebpf);
        explain(&format!("{err:#}"))
    })
}

/// Unloads every hold program (their links go with them).
fn unload_all(ebpf: &mut Ebpf) {
    let names: Vec<String> = ebpf
        .programs()
        .map(|(name, _)| name.to_string())
        .filter(|name| name.starts_with(names::HOLD_))
        .collect();
    for name in names {
        if let Some(program) = ebpf.program_mut(&name) {
            let _ = match program {
                aya::programs::Program::FEntry(p) => p.unload(),
                aya::programs::Program::FExit(p) => p.unload(),
                aya::programs::Program::KProbe(p) => p.unload(),
                _ => Ok(()),
            };
        }
    }
}

/// Attaches the programs of the hold `family` (fentry/fexit, else kprobes, as its
/// `method` allows). When neither works: an error if the hold is all that was asked for
/// (`only`), else `None` with the reason printed and kept in `unavailable`.
fn attach(
    ebpf: &mut Ebpf,
    family: &HoldFamily,
    unavailable: &mut Vec<Unavailable>,
) -> Result<Option<ProbeUse>> {
    let (plan, method, only) = (&family.plan, family.method, family.only);
    let fentry = match method {
        FuncMethod::Kprobe => Err("not tried (--hold-method kprobe)".to_string()),
        _ => try_fentry(ebpf, plan),
    };
    let used = match fentry {
        Ok(()) => Ok("fexit/fentry".to_string()),
        Err(fentry_why) if method == FuncMethod::Fentry => {
            Err(format!("fentry/fexit: {fentry_why} (--hold-method fentry)"))
        }
        Err(fentry_why) => match try_kprobe(ebpf, plan) {
            Ok(()) => Ok(format!(
                "kprobe/kretprobe (fentry unavailable: {fentry_why})"
            )),
            Err(kprobe_why) => Err(format!(
                "fentry/fexit: {fentry_why}; kprobe/kretprobe: {kprobe_why}"
            )),
        },
    };
    match used {
        Ok(method) => {
            let mut text = format!(
                "{} ({}): {method} on {} lock and {} unlock functions",
                plan.spec,
                plan.lock_name,
                plan.acquire.len(),
                plan.release.len()
            );
            if !plan.missing.is_empty() {
                text.push_str(&format!(
                    "; not in this kernel: {}",
                    plan.missing.join(", ")
                ));
            }
            Ok(Some(ProbeUse {
                family: FAMILY.name.into(),
                method: text,
            }))
        }
        Err(reason) if only => bail!(
            "--hold {}: cannot be recorded on this kernel, which allows neither fentry/fexit nor kprobes on the lock functions ({reason})",
            plan.spec
        ),
        Err(reason) => {
            not_recorded(&plan.spec, reason, unavailable);
            Ok(None)
        }
    }
}

/// One line on stderr and an `unavailable` entry: the hold is not recorded, and the
/// rest of the run goes on.
pub fn not_recorded(spec: &str, reason: String, unavailable: &mut Vec<Unavailable>) {
    eprintln!("lockpath: --hold {spec}: not recorded: {reason}; the rest of the run goes on");
    unavailable.push(Unavailable {
        family: FAMILY.name.into(),
        what: spec.to_string(),
        reason,
    });
}

/// Reads the aggregate out of the kernel.
pub fn drain(maps: &MapSet, stacks: &mut StackResolver, plan: &HoldPlan) -> Result<Vec<HoldRow>> {
    let split = |key: &HoldKey, _: &mut StackResolver| {
        let lock = HeldLock {
            addr: plan.config.lock_addr,
            name: plan.lock_name.clone(),
            tid: None,
        };
        (*key, lock)
    };
    let holds = (names::HOLD_STATS, names::HOLD_OVERFLOW);
    drain_hold_map(maps, stacks, holds, split)
}

/// The lock a row of holds is of, and the thread that held it where the map keeps
/// threads apart (`None`: the row counts the holds of a whole process).
pub struct HeldLock {
    pub addr: u64,
    pub name: String,
    pub tid: Option<u32>,
}

/// The rows of a map of holds and of its overflow map (`stats`, `overflow`), the
/// longest total first: `split` reads a key as the acquisitions it counts (their
/// process, kernel stack and mode, as a `HoldKey` has them) and the lock they hold.
/// `--hold` drains its map with it, and the lock family its holds under contention.
pub fn drain_hold_map<K: aya::Pod>(
    maps: &MapSet,
    stacks: &mut StackResolver,
    (stats, overflow): (&str, &str),
    mut split: impl FnMut(&K, &mut StackResolver) -> (HoldKey, HeldLock),
) -> Result<Vec<HoldRow>> {
    maps.latency_rows(stats, overflow, |key: K, latency| {
        let (acquired, lock) = split(&key, stacks);
        Some(HoldRow {
            lock_addr: lock.addr,
            lock_name: lock.name,
            flags: acquired.flags,
            pid: acquired.tgid,
            tid: lock.tid,
            stack: stacks.kernel_stack(acquired.kstack_id),
            latency,
        })
    })
}

// `record`'s options of the hold family: how long one lock is held.

#[derive(Debug, Args)]
pub struct HoldArgs {
    /// Record how long one lock is held, acquisition to release, per holder stack and
    /// process: LOCK is a kernel symbol (a static lock) or an address from a report's
    /// lock column, optionally typed (mutex: or rwsem:; without a type both are probed).
    /// Spinlocks and rwlocks are refused: hooking their functions can hang the kernel.
    /// COST: it hooks the lock and unlock functions of the type (mutex_lock*/mutex_unlock,
    /// down_*/up_*), among the hottest functions of the kernel: every operation on every
    /// mutex or rwsem in the system pays a trampoline (fentry) or a breakpoint (kprobe)
    /// and one compare. Needs fentry or kprobes (not every kernel has them); docs/performance.md
    /// has the measured cost.
    #[arg(long, value_name = "[TYPE:]LOCK")]
    pub hold: Option<String>,

    /// How `--hold` hooks the lock functions: `auto` tries fentry/fexit, then kprobes.
    #[arg(long, value_enum, value_name = "METHOD", default_value_t = FuncMethod::Auto)]
    pub hold_method: FuncMethod,
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &str = "\
ffffffff81000000 T _stext
ffffffff81100000 T mutex_lock
ffffffff81100100 T mutex_unlock
ffffffff81100200 T mutex_trylock
ffffffff81100300 T down_write
ffffffff81100400 T up_write
ffffffff81100500 T down_read
ffffffff81100600 T up_read
ffffffff81100700 T _raw_spin_lock
ffffffff81100800 T vfs_read
ffffffff82000000 D tasklist_lock
ffffffff82000040 d uevent_sock_mutex
ffffffff82001000 B _end
";

    #[test]
    fn specs_parse() {
        let spec = parse("mutex:uevent_sock_mutex").expect("typed");
        assert_eq!(spec.types, vec![0]);
        assert_eq!(spec.lock, "uevent_sock_mutex");
        assert_eq!(parse("0xffff888100076af8").expect("untyped").types.len(), 2);
        assert!(format!("{:#}", parse("semaphore:x").unwrap_err()).contains("unknown lock type"));
        assert!(format!("{:#}", parse("mutex:").unwrap_err()).contains("no lock given"));
        let spinning = format!("{:#}", parse("spinlock:tasklist_lock").unwrap_err());
        assert!(
            spinning.contains("spinlock holds are not timed"),
            "{spinning}"
        );
    }

    #[test]
    fn plans_pick_what_the_kernel_has() {
        let symbols = KernelSymbols::parse(KALLSYMS);
        let mutex = plan(&parse("mutex:uevent_sock_mutex").expect("spec"), &symbols).expect("plan");
        assert_eq!(mutex.config.lock_addr, 0xffff_ffff_8200_0040);
        assert_eq!(mutex.acquire, vec!["mutex_lock", "mutex_trylock"]);
        assert_eq!(mutex.release, vec!["mutex_unlock"]);
        assert_eq!(mutex.config.slots[1].ret, HOLD_RET_ONE);
        assert!(mutex.missing.contains(&"mutex_lock_killable"));
        // A type whose unlock function the kernel inlines (or lacks) cannot be timed.
        let symbols_without_up_write =
            KernelSymbols::parse(&KALLSYMS.replace(" up_write", " up_wrote"));
        let err = plan_err("rwsem:tasklist_lock", &symbols_without_up_write);
        assert!(err.contains("up_write"), "{err}");
        // Untyped: mutex and rwsem.
        let all = plan(&parse("0xffff888100076af8").expect("spec"), &symbols).expect("plan");
        assert_eq!(all.acquire.len(), 4);
        assert_eq!(all.lock_name, "0xffff888100076af8");
    }

    fn plan_err(spec: &str, symbols: &KernelSymbols) -> String {
        plan(&parse(spec).expect("spec"), symbols).expect_err("refused")
    }

    #[test]
    fn bad_locks_say_why() {
        let symbols = KernelSymbols::parse(KALLSYMS);
        assert!(plan_err("vfs_read", &symbols).contains("is a function, not a lock"));
        let unknown = plan_err("mutex:tasklist_lok", &symbols);
        assert!(
            unknown.contains("close matches: tasklist_lock"),
            "{unknown}"
        );
        assert!(plan_err("mutex:0x1234", &symbols).contains("not a kernel address"));
        assert!(plan_err("mutex:0xzz", &symbols).contains("not a hexadecimal address"));
    }
}
