//! Function latency: `--func [MODULE:]SYMBOL` (fentry/fexit where the kernel and BTF
//! allow, else kprobe/kretprobe) and `--ufunc BINARY:SYMBOL` (uprobe/uretprobe). One
//! program pair per slot; the profile says which method each function got.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use aya::{
    programs::{uprobe::UProbeScope, FEntry, FExit, KProbe, UProbe},
    Btf, Ebpf,
};
use clap::{Args, ValueEnum};
use profiler_common::func::{
    names, FuncCall, FuncEntry, FuncKey, FUNC_CALLS_ENTRIES, FUNC_SLOTS, UFUNC_SLOT_BASE,
};

use crate::{
    probes::prelude::*,
    profile::{FuncRow, WaitingRow},
    symbolize::kallsyms::check_kernel_function,
};

pub const FAMILY: Registration = Registration {
    name: "func",
    asked: |args| !args.func.func.is_empty() || !args.func.ufunc.is_empty(),
    check: |_| Ok(()),
    plan: plan_family,
    maps: &[
        (names::FUNC_STATS, MapSize::Stats),
        (names::FUNC_OVERFLOW, MapSize::Overflow),
        (names::FUNC_CALLS, MapSize::Fixed(FUNC_CALLS_ENTRIES)),
    ],
    names: names::ALL,
};

/// Recorded when kernel or user functions are named (checked here, before loading).
fn plan_family(args: &FamilyArgs, ctx: &mut PlanContext) -> Result<Planned> {
    let ufuncs = validate(&args.func.func, &args.func.ufunc, ctx.symbols)?;
    if args.func.func.is_empty() && ufuncs.is_empty() {
        return Ok(None);
    }
    Ok(Some(Box::new(FuncFamily {
        funcs: args.func.func.clone(),
        method: args.func.func_method,
        ufuncs,
        targets: Vec::new(),
    })))
}

/// The function-latency family of one recording (`--func` and `--ufunc`).
struct FuncFamily {
    funcs: Vec<String>,
    method: FuncMethod,
    ufuncs: Vec<UserFunction>,
    /// The functions attached, by slot (known once attached).
    targets: Vec<FuncTarget>,
}

impl Family for FuncFamily {
    fn user_stacks(&self) -> bool {
        !self.ufuncs.is_empty()
    }

    fn attach(&mut self, ebpf: &mut Ebpf, ctx: &mut AttachContext) -> Result<Vec<ProbeUse>> {
        let (used, targets) = attach(
            ebpf,
            &self.funcs,
            self.method,
            &self.ufuncs,
            ctx.unavailable,
        )?;
        self.targets = targets;
        Ok(used)
    }

    fn drain(&self, out: &mut Drain) -> Result<()> {
        out.profile.funcs = drain(out.maps, out.stacks, &self.targets)?;
        let waiting = drain_calls_in_progress(out.maps, out.stacks, &self.targets, out.moment)?;
        out.profile.waiting.extend(waiting);
        Ok(())
    }

    fn progress(&self, live: &Profile) -> Option<String> {
        progress_of(&live.funcs, |row| row.latency.count, "calls")
    }
}

/// A traced function and its slot in the kernel maps.
#[derive(Debug, Clone)]
pub struct FuncTarget {
    pub slot: u32,
    /// `vfs_read`, `ptlrpc:after_reply`, `/usr/bin/x:work`.
    pub name: String,
    pub user: bool,
}

/// A user function: the binary (resolved through PATH) and the symbol.
#[derive(Debug, Clone, PartialEq)]
pub struct UserFunction {
    pub binary: PathBuf,
    pub symbol: String,
}

/// Checks the flags before anything is loaded: known kernel functions (with close
/// matches when not), existing binaries, and at most FUNC_SLOTS of each.
pub fn validate(
    funcs: &[String],
    ufuncs: &[String],
    symbols: &KernelSymbols,
) -> Result<Vec<UserFunction>> {
    if funcs.len() > FUNC_SLOTS as usize || ufuncs.len() > FUNC_SLOTS as usize {
        bail!("at most {FUNC_SLOTS} --func and {FUNC_SLOTS} --ufunc per recording");
    }
    for spec in funcs {
        check_kernel_function(symbols, spec).with_context(|| format!("--func {spec}"))?;
    }
    ufuncs.iter().map(|spec| parse_ufunc(spec)).collect()
}

fn parse_ufunc(spec: &str) -> Result<UserFunction> {
    let Some((binary, symbol)) = spec
        .rsplit_once(':')
        .filter(|(b, s)| !b.is_empty() && !s.is_empty())
    else {
        bail!("--ufunc {spec:?}: expected BINARY:SYMBOL (e.g. /usr/bin/ior:aiori_posix_xfer)");
    };
    let binary = resolve_binary(binary).with_context(|| {
        format!("--ufunc {spec}: no binary {binary} (give a path, or a name on PATH)")
    })?;
    check_user_symbol(&binary, symbol).with_context(|| format!("--ufunc {spec}"))?;
    Ok(UserFunction {
        binary,
        symbol: symbol.to_string(),
    })
}

/// A clear error when `symbol` is not a function of `binary`, with close names.
fn check_user_symbol(binary: &Path, symbol: &str) -> Result<()> {
    use object::{Object, ObjectSymbol};
    let data =
        std::fs::read(binary).with_context(|| format!("cannot read {}", binary.display()))?;
    let file = object::File::parse(&*data)
        .map_err(|err| anyhow::anyhow!("{} is not an ELF object ({err})", binary.display()))?;
    let names: Vec<&str> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|candidate| {
            candidate.kind() == object::SymbolKind::Text && candidate.is_definition()
        })
        .filter_map(|candidate| candidate.name().ok())
        .collect();
    if names.contains(&symbol) {
        return Ok(());
    }
    let close = crate::symbolize::kallsyms::close_names(symbol, names.iter().copied(), 8);
    if close.is_empty() {
        bail!(
            "no function {symbol} in {} (and nothing close; stripped binary?)",
            binary.display()
        );
    }
    bail!(
        "no function {symbol} in {}; close matches: {}",
        binary.display(),
        close.join(", ")
    )
}

fn resolve_binary(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let path = Path::new(name);
        return path
            .is_file()
            .then(|| path.canonicalize().unwrap_or(path.to_path_buf()));
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

/// fentry + fexit on `name`; on failure nothing stays attached and the reason is returned.
fn try_fentry(
    ebpf: &mut Ebpf,
    slot: u32,
    name: &str,
    btf: &Result<Btf, String>,
) -> Result<(), String> {
    let btf = btf.as_ref().map_err(|why| why.clone())?;
    let entry = format!("{}{slot}", names::FUNC_FENTRY_);
    let exit = format!("{}{slot}", names::FUNC_FEXIT_);
    let result = (|| -> Result<()> {
        let fentry: &mut FEntry = program(ebpf, &entry)?;
        fentry.load(name, btf).context("fentry load")?;
        let fexit: &mut FExit = program(ebpf, &exit)?;
        fexit.load(name, btf).context("fexit load")?;
        program::<FEntry>(ebpf, &entry)?
            .attach()
            .context("fentry attach")?;
        program::<FExit>(ebpf, &exit)?
            .attach()
            .context("fexit attach")?;
        Ok(())
    })();
    result.map_err(|err| {
        if let Ok(fentry) = program::<FEntry>(ebpf, &entry) {
            let _ = fentry.unload();
        }
        if let Ok(fexit) = program::<FExit>(ebpf, &exit) {
            let _ = fexit.unload();
        }
        explain(&format!("{err:#}"))
    })
}

fn try_kprobe(ebpf: &mut Ebpf, slot: u32, name: &str) -> Result<(), String> {
    if let Some(why) = kprobes_unavailable() {
        return Err(why);
    }
    let entry = format!("{}{slot}", names::FUNC_KPROBE_);
    let exit = format!("{}{slot}", names::FUNC_KRETPROBE_);
    let result = (|| -> Result<()> {
        for program_name in [&entry, &exit] {
            let kprobe: &mut KProbe = program(ebpf, program_name)?;
            kprobe.load().context("kprobe load")?;
        }
        attach_kprobe_pair(ebpf, &entry, &exit, name)?;
        Ok(())
    })();
    result.map_err(|err| {
        for program_name in [&entry, &exit] {
            if let Ok(kprobe) = program::<KProbe>(ebpf, program_name) {
                let _ = kprobe.unload();
            }
        }
        explain(&format!("{err:#}"))
    })
}

/// Attaches every kernel function (fentry, else kprobe) and user function. A kernel
/// function neither method can reach is reported in one line and left out.
pub fn attach(
    ebpf: &mut Ebpf,
    funcs: &[String],
    method: FuncMethod,
    ufuncs: &[UserFunction],
    unavailable: &mut Vec<Unavailable>,
) -> Result<(Vec<ProbeUse>, Vec<FuncTarget>)> {
    let mut used = Vec::new();
    let mut targets = Vec::new();
    let btf = if funcs.is_empty() {
        Err(String::new())
    } else {
        Btf::from_sys_fs().map_err(|err| format!("no kernel BTF ({err})"))
    };
    for (slot, spec) in funcs.iter().enumerate() {
        let slot = slot as u32;
        let (module, name) = match spec.split_once(':') {
            Some((module, name)) => (Some(module), name),
            None => (None, spec.as_str()),
        };
        // Module functions: kprobes (out-of-tree modules such as Lustre's ship no BTF).
        let fentry = match (module, method) {
            (_, FuncMethod::Kprobe) => Err("not tried (--func-method kprobe)".to_string()),
            (Some(module), _) => Err(format!(
                "{module} is a module (fentry is used for vmlinux functions)"
            )),
            (None, _) => try_fentry(ebpf, slot, name, &btf),
        };
        let used_method = match fentry {
            Ok(()) => Some("fentry/fexit".to_string()),
            Err(fentry_why) if method == FuncMethod::Fentry => {
                let reason = format!("fentry/fexit: {fentry_why} (--func-method fentry)");
                eprintln!(
                    "lockpath: --func {spec}: not recorded: {reason}; the rest of the run goes on"
                );
                unavailable.push(Unavailable {
                    family: FAMILY.name.into(),
                    what: spec.clone(),
                    reason,
                });
                None
            }
            Err(fentry_why) => match try_kprobe(ebpf, slot, name) {
                Ok(()) => Some(format!(
                    "kprobe/kretprobe (fentry unavailable: {fentry_why})"
                )),
                Err(kprobe_why) => {
                    let reason =
                        format!("fentry/fexit: {fentry_why}; kprobe/kretprobe: {kprobe_why}");
                    eprintln!("lockpath: --func {spec}: not recorded: {reason}; the rest of the run goes on");
                    unavailable.push(Unavailable {
                        family: FAMILY.name.into(),
                        what: spec.clone(),
                        reason,
                    });
                    None
                }
            },
        };
        if let Some(method) = used_method {
            used.push(ProbeUse {
                family: FAMILY.name.into(),
                method: format!("{spec}: {method}"),
            });
            targets.push(FuncTarget {
                slot,
                name: spec.clone(),
                user: false,
            });
        }
    }
    for (index, function) in ufuncs.iter().enumerate() {
        let slot = index as u32;
        let name = format!("{}:{}", function.binary.display(), function.symbol);
        for (program_name, what) in [
            (format!("{}{slot}", names::UFUNC_ENTRY_), "uprobe"),
            (format!("{}{slot}", names::UFUNC_RETURN_), "uretprobe"),
        ] {
            let uprobe: &mut UProbe = program(ebpf, &program_name)?;
            uprobe
                .load()
                .with_context(|| format!("the kernel refused to load {program_name}"))?;
            uprobe
                .attach(
                    function.symbol.as_str(),
                    &function.binary,
                    UProbeScope::AllProcesses,
                )
                .map_err(|err| {
                    anyhow::anyhow!("--ufunc {name}: cannot attach a {what}: {err:#}")
                })?;
        }
        used.push(ProbeUse {
            family: "ufunc".into(),
            method: format!("{name}: uprobe/uretprobe"),
        });
        targets.push(FuncTarget {
            slot: UFUNC_SLOT_BASE + slot,
            name,
            user: true,
        });
    }
    Ok((used, targets))
}

/// The calls still in progress at the drain (`FUNC_CALLS`), as waits of the threads
/// in them. Their time enters the latency rows when they return.
fn drain_calls_in_progress(
    maps: &MapSet,
    stacks: &mut StackResolver,
    targets: &[FuncTarget],
    moment: DrainMoment,
) -> Result<Vec<WaitingRow>> {
    use super::{blocked::tgid_of, shared::inprogress::drain_listed};
    let start_ns = |entry: &FuncEntry| entry.start_ns;
    let row = |call: FuncCall, entry: FuncEntry, age_ns| {
        let target = targets.iter().find(|target| target.slot == call.slot)?;
        let pid = tgid_of(call.tid).unwrap_or(call.tid);
        let stack = match target.user {
            true => stacks.user_stack(pid, entry.stack_id),
            false => stacks.kernel_stack(entry.stack_id),
        };
        Some(WaitingRow {
            kind: "func".into(),
            pid,
            tid: call.tid,
            since_ns: entry.start_ns,
            age_ns,
            class: target.name.clone(),
            stack: stack.filter(|_| !target.user),
            ustack: stack.filter(|_| target.user),
            ..Default::default()
        })
    };
    drain_listed(maps, names::FUNC_CALLS, moment, start_ns, row)
}

/// Reads the aggregate out of the kernel.
pub fn drain(
    maps: &MapSet,
    stacks: &mut StackResolver,
    targets: &[FuncTarget],
) -> Result<Vec<FuncRow>> {
    let row = |key: FuncKey, latency| {
        let target = targets.iter().find(|target| target.slot == key.slot)?;
        let stack = if target.user {
            stacks.user_stack(key.tgid, key.stack_id)
        } else {
            stacks.kernel_stack(key.stack_id)
        };
        Some(FuncRow {
            function: target.name.clone(),
            user: target.user,
            pid: key.tgid,
            stack,
            latency,
        })
    };
    maps.latency_rows(names::FUNC_STATS, names::FUNC_OVERFLOW, row)
}

// `record`'s options of the function-latency family: kernel functions (`--func`) and
// user-space functions (`--ufunc`).

#[derive(Debug, Args)]
pub struct FuncArgs {
    /// Record the latency of a kernel function, entry to return (repeatable; up to 8).
    /// fentry/fexit where the kernel allows, else kprobe/kretprobe.
    #[arg(long = "func", value_name = "[MODULE:]SYMBOL")]
    pub func: Vec<String>,

    /// How `--func` hooks kernel functions: `auto` tries fentry/fexit, then
    /// kprobe/kretprobe; the other values force one method (for tests of each).
    #[arg(long, value_enum, value_name = "METHOD", default_value_t = FuncMethod::Auto)]
    pub func_method: FuncMethod,

    /// Record the latency of a user-space function with uprobes (repeatable; up to 8).
    #[arg(long = "ufunc", value_name = "BINARY:SYMBOL")]
    pub ufunc: Vec<String>,
}

/// How a kernel function is hooked (`--func-method`, and `--hold-method` for the lock
/// functions of `--hold`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FuncMethod {
    Auto,
    Fentry,
    Kprobe,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ufunc_specs() {
        let exe = std::env::current_exe().expect("test executable");
        let function = parse_ufunc(&format!("{}:main", exe.display())).expect("parse");
        assert_eq!(function.symbol, "main");
        assert!(function.binary.is_absolute());
        let err = parse_ufunc(&format!("{}:mian", exe.display())).expect_err("no such symbol");
        assert!(
            format!("{err:#}").contains("close matches: main"),
            "{err:#}"
        );
        assert!(resolve_binary("sh").is_some(), "found on PATH");
        assert!(parse_ufunc("main").is_err());
        assert!(parse_ufunc("/no/such/binary:main").is_err());
        assert!(parse_ufunc("/bin/sh:").is_err());
    }
}
