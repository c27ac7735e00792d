//! Loading and attaching programs, with one error path: a refused object or program
//! is one line (a verifier log goes to a file), an attach failure names what failed.

use anyhow::{Context, Result};
use aya::{programs::TracePoint, Ebpf, EbpfLoader};

use crate::{btf::Btf, ebpf_object::built_object};

pub use crate::tracefs::kprobes_unavailable;

/// Loads lockpath's eBPF object with `loader`'s map sizes and globals: every map is
/// made, no program is loaded yet. The caller has checked the privileges.
pub fn load_object(loader: &mut EbpfLoader) -> Result<Ebpf> {
    let object = super::kfunc::patch_object(built_object()?, Btf::vmlinux().ok())?;
    loader
        .load(&object)
        .map_err(|err| object_load_error(&err.to_string()))
}

/// The error of an object the kernel would not load, in one line (a BTF or verifier log
/// goes to a file). Load and attach errors of programs: `load_error`, `explain`.
pub fn object_load_error(err: &str) -> anyhow::Error {
    // A BTF or verifier log can follow the message: first line only, the rest to a file.
    let (first, rest) = err.split_once('\n').unwrap_or((err, ""));
    let err = if rest.trim().is_empty() {
        first.to_string()
    } else {
        log::debug!("eBPF object load error in full:\n{err}");
        let path = std::env::temp_dir().join(format!("lockpath-load-{}.log", std::process::id()));
        match std::fs::write(&path, err) {
            Ok(()) => format!("{} (full log in {})", first.trim(), path.display()),
            Err(_) => format!("{} (RUST_LOG=debug prints the full log)", first.trim()),
        }
    };
    if err.contains("Operation not permitted") || err.contains("EPERM") {
        anyhow::anyhow!("the kernel refused to load lockpath's eBPF programs ({err}): run as root, or with CAP_BPF and CAP_PERFMON")
    } else {
        anyhow::anyhow!("cannot load lockpath's eBPF programs: {err}")
    }
}

/// The error of a program the kernel would not load, in one line. A verifier rejection
/// carries a log of hundreds of lines: it goes to a file (named in the message) and to
/// the debug log (`RUST_LOG=debug`), never into the one-line error.
pub fn load_error(name: &str, err: aya::programs::ProgramError) -> anyhow::Error {
    match err {
        aya::programs::ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            let log = verifier_log.to_string();
            log::debug!("verifier log of {name}:\n{log}");
            let path = std::env::temp_dir().join(format!(
                "lockpath-verifier-{name}-{}.log",
                std::process::id()
            ));
            let saved = std::fs::write(&path, &log).is_ok().then_some(path);
            anyhow::anyhow!(verifier_message(
                name,
                &io_error.to_string(),
                verdict(&log),
                saved.as_deref()
            ))
        }
        other => anyhow::anyhow!(
            "the kernel refused to load {name}: {}",
            one_line(&other.to_string())
        ),
    }
}

/// The verifier's reason: the last line of its log before the statistics it ends with.
fn verdict(log: &str) -> Option<&str> {
    log.lines().rev().map(str::trim).find(|line| {
        !line.is_empty()
            && !line.starts_with("processed ")
            && !line.starts_with("verification time")
            && !line.starts_with("stack depth")
    })
}

fn verifier_message(
    name: &str,
    io_error: &str,
    verdict: Option<&str>,
    log: Option<&std::path::Path>,
) -> String {
    let where_log = match log {
        Some(path) => format!("its log is in {}", path.display()),
        None => "run with RUST_LOG=debug to see its log".into(),
    };
    let verdict = verdict.map_or(String::new(), |line| format!(": {}", one_line(line)));
    format!(
        "the kernel's verifier rejected the eBPF program {name} ({}){verdict}; {where_log}; \
         report it with the output of `uname -r`",
        one_line(io_error)
    )
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A program of the object by name, as its type (`FEntry`, `KProbe`, ...).
pub fn program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    ebpf.program_mut(name)
        .with_context(|| format!("program {name} missing from the eBPF object"))?
        .try_into()
        .with_context(|| format!("program {name} has an unexpected type"))
}

/// Loads the tracepoint program `name` (unless it is loaded already) and attaches it to
/// `group:event`. Every tracepoint of every family goes through here.
pub fn attach_tracepoint(ebpf: &mut Ebpf, name: &str, group: &str, event: &str) -> Result<()> {
    let program: &mut TracePoint = program(ebpf, name)?;
    if program.fd().is_err() {
        program.load().map_err(|err| load_error(name, err))?;
    }
    program
        .attach(group, event)
        .with_context(|| format!("cannot attach to {group}:{event}"))?;
    Ok(())
}

/// Loads the raw tracepoint program `name` and attaches it to `event`. Every raw
/// tracepoint of every family goes through here.
pub fn attach_raw_tracepoint(ebpf: &mut Ebpf, name: &str, event: &str) -> Result<()> {
    load_raw_tracepoint(ebpf, name)?;
    attach_loaded_raw_tracepoint(ebpf, name, event)
}

/// Loads (verifies) raw tracepoint program `name` without attaching it, so that programs
/// that work in pairs can be attached one right after the other
/// (`attach_loaded_raw_tracepoint`).
pub fn load_raw_tracepoint(ebpf: &mut Ebpf, name: &str) -> Result<()> {
    let program: &mut aya::programs::RawTracePoint = program(ebpf, name)?;
    program.load().map_err(|err| load_error(name, err))
}

/// Attaches raw tracepoint program `name`, already loaded, to `event`.
pub fn attach_loaded_raw_tracepoint(ebpf: &mut Ebpf, name: &str, event: &str) -> Result<()> {
    let program: &mut aya::programs::RawTracePoint = program(ebpf, name)?;
    program
        .attach(event)
        .with_context(|| format!("cannot attach to raw tracepoint {event}"))?;
    Ok(())
}

/// Attaches the loaded kprobe `entry` and kretprobe `ret` to `function`, the return
/// probe first: the kernel runs the handlers of one address newest first, so the entry
/// program walks the stack before the kretprobe replaces the return address (5.10's
/// unwinder stops at `kretprobe_trampoline`). Every entry/return pair goes through here.
pub fn attach_kprobe_pair(ebpf: &mut Ebpf, entry: &str, ret: &str, function: &str) -> Result<()> {
    for name in [ret, entry] {
        let program: &mut aya::programs::KProbe = program(ebpf, name)?;
        program
            .attach(function, 0)
            .with_context(|| format!("cannot attach {name} to {function}"))?;
    }
    Ok(())
}

/// Shortens the loader's error chains of fentry/kprobe attachments to what a user
/// needs to read.
pub fn explain(err: &str) -> String {
    if err.contains("Operation not permitted") {
        let step = err.split(':').next().unwrap_or("load");
        format!(
            "{step} refused by the kernel with EPERM: BPF tracing programs are not allowed here"
        )
    } else if (err.contains("fentry attach") || err.contains("fexit attach"))
        && err.contains("os error 524")
    {
        // ENOTSUPP from the trampoline: the architecture cannot attach to kernel
        // functions (arm64 before 6.4 has no ftrace direct calls).
        "fentry/fexit cannot attach to kernel functions on this kernel (ENOTSUPP: arm64 \
         before Linux 6.4); kprobes can (the default method falls back to them)"
            .to_string()
    } else {
        err.replace(". Verifier output: ", ": ")
    }
}

/// Runs each loaded program missed because another BPF program was already running on
/// the CPU (`recursion_misses` of `bpf_prog_info`, Linux 5.12+): events lost before any
/// of lockpath's code ran, so no in-kernel counter can see them. Read before detaching.
pub fn program_misses(ebpf: &aya::Ebpf) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for (name, program) in ebpf.programs() {
        let Ok(fd) = program.fd() else {
            continue; // not loaded: this family was not recorded
        };
        let misses =
            prog_info(std::os::fd::AsFd::as_fd(fd)).map_or(0, |info| info.recursion_misses);
        if misses > 0 {
            *out.entry(format!(
                "{}{name}",
                profiler_common::loss::PROGRAM_MISS_PREFIX
            ))
            .or_insert(0) += misses;
        }
    }
    out
}

/// `BPF_OBJ_GET_INFO_BY_FD` for a program; aya 0.14's `ProgramInfo` does not expose
/// `recursion_misses`.
fn prog_info(fd: std::os::fd::BorrowedFd<'_>) -> Option<aya_obj::generated::bpf_prog_info> {
    use std::os::fd::AsRawFd;
    #[repr(C)]
    struct InfoAttr {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    // SAFETY: bpf_prog_info is plain data (integers and pointers the kernel leaves 0
    // when their lengths are 0); all-zero is a valid value.
    let mut info: aya_obj::generated::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut attr = InfoAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: std::mem::size_of::<aya_obj::generated::bpf_prog_info>() as u32,
        info: &raw mut info as u64,
    };
    // SAFETY: the attribute points at `info`, which outlives the call and is as large as
    // `info_len` says; the kernel writes at most that many bytes.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            &raw mut attr,
            std::mem::size_of::<InfoAttr>(),
        )
    };
    (ret == 0).then_some(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fentry_refused_by_the_architecture_says_so() {
        // As the arm64 6.1 lab guest answers.
        let err = "fentry attach: `bpf_raw_tracepoint_open` failed: No error information \
                   (os error 524)";
        let text = explain(err);
        assert!(text.contains("arm64 before Linux 6.4"), "{text}");
        assert!(!text.contains("524"), "{text}");
        // Other errors pass through.
        assert_eq!(explain("kprobe load: EINVAL"), "kprobe load: EINVAL");
    }

    #[test]
    fn verifier_rejection_is_one_line_naming_the_log() {
        let path = std::path::Path::new("/tmp/lockpath-verifier-x-1.log");
        let log = "0: (bf) r6 = r1\n12: (79) r1 = *(u64 *)(r0 +0)\n\
                   R0 invalid mem access 'map_value_or_null'\n\
                   processed 13 insns (limit 1000000) max_states_per_insn 0\n";
        let text = verifier_message(
            "offcpu_sched_switch",
            "Permission denied\n(os error 13)",
            verdict(log),
            Some(path),
        );
        assert!(!text.contains('\n'), "{text}");
        assert!(text.contains("offcpu_sched_switch"), "{text}");
        assert!(
            text.contains(": R0 invalid mem access 'map_value_or_null';"),
            "{text}"
        );
        assert!(text.contains("/tmp/lockpath-verifier-x-1.log"), "{text}");
        let text = verifier_message("p", "EINVAL", None, None);
        assert!(text.contains("RUST_LOG=debug"), "{text}");
    }
}
