//! Waits that began before the recording: at its start, the threads of the targets that
//! are already blocked (D, and S with `--offcpu-all`) are read from `/proc`, and each
//! is handed to the off-CPU program as if it had seen the thread leave the CPU (an
//! `OFFCPU_START` entry), so the wait is followed until the thread runs again or the
//! recording ends, and is one wait with its whole length either way.
//!
//! Since when: the scheduler stamps a thread's `se.exec_start` when it takes the
//! thread off its run queue (`/proc/TID/sched`, in the run queue's task clock). That
//! clock is the CPU's scheduler clock less its interrupt and steal time where the
//! kernel accounts those; it is tied to CLOCK_MONOTONIC (the programs' clock) per CPU
//! by `SchedClock`, which watches a thread of its own leave each CPU. The error is the
//! interrupt and steal time the CPU accounted while the thread waited (none on a
//! kernel without IRQ_TIME_ACCOUNTING), plus about the cost of a system call.
//!
//! Stacks: the kernel stack from `/proc/TID/stack`; the user stack unwound (DWARF, like
//! `--cpu`'s) from the registers in `/proc/TID/syscall` and a copy of the stack's top
//! from `/proc/PID/mem`.

use std::{collections::HashMap, fs, os::unix::fs::FileExt, time::Duration};

use profiler_common::offcpu::{STATE_INTERRUPTIBLE, STATE_UNINTERRUPTIBLE};

use super::monotonic_ns;
use crate::{
    profile::Frame,
    symbolize::{
        unwind::{DwarfUnwinder, Regs},
        UserSymbols,
    },
};

/// Bytes of a blocked thread's user stack copied for the unwind.
const USER_STACK_BYTES: u64 = 32 * 1024;

/// A thread found blocked at the start of the recording.
#[derive(Debug, Clone)]
pub struct BlockedThread {
    pub tgid: u32,
    pub tid: u32,
    /// `STATE_UNINTERRUPTIBLE` or `STATE_INTERRUPTIBLE`.
    pub state: u32,
    /// When it left the CPU, in CLOCK_MONOTONIC nanoseconds.
    pub since_ns: u64,
    /// Its context switches when it was read: a change means it ran since.
    pub switches: u64,
    /// Kernel frames, leaf first (function names as the kernel prints them).
    pub kernel: Vec<Frame>,
    /// User return addresses, leaf first, and whether the unwind reached the outermost
    /// frame; empty for kernel threads and when the process could not be read.
    pub user: (Vec<u64>, bool),
}

/// What `/proc/TID/stat` says of a thread: its state letter, its process's parent and
/// its last CPU.
#[derive(Debug, PartialEq)]
pub struct ThreadStat {
    pub state: char,
    pub ppid: u32,
    pub cpu: u32,
}

/// Parses `/proc/TID/stat` (the name in parentheses may hold spaces and parentheses).
pub fn parse_stat(text: &str) -> Option<ThreadStat> {
    let after_name = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields after the name start at field 3 (state); the CPU is field 39.
    Some(ThreadStat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(4 - 3)?.parse().ok()?,
        cpu: fields.get(39 - 3)?.parse().ok()?,
    })
}

/// `se.exec_start` (ms with a fraction) and `nr_switches` of `/proc/TID/sched`, as
/// nanoseconds of the scheduler clock and a count.
pub fn parse_sched(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == name).then(|| value.trim().to_string())
        })
    };
    let exec_start_ms: f64 = field("se.exec_start")?.parse().ok()?;
    let switches: u64 = field("nr_switches")?.parse().ok()?;
    Some(((exec_start_ms * 1e6) as u64, switches))
}

/// Kernel frames of `/proc/TID/stack`: `[<0>] name+0x1a/0x80 [module]` lines.
pub fn parse_kernel_stack(text: &str) -> Vec<Frame> {
    text.lines()
        .filter_map(|line| {
            let rest = line.split_once("] ").map(|(_, rest)| rest)?.trim();
            let (symbol, module) = match rest.split_once(" [") {
                Some((symbol, module)) => (symbol, Some(module.trim_end_matches(']'))),
                None => (rest, None),
            };
            let name = symbol.split('+').next()?.trim();
            (!name.is_empty()).then(|| Frame {
                name: name.to_string(),
                module: module.map(str::to_string),
                kernel: true,
            })
        })
        .collect()
}

/// The user stack pointer and instruction pointer of `/proc/TID/syscall` (the last two
/// fields; `running` has none).
pub fn parse_syscall_regs(text: &str) -> Option<(u64, u64)> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    if fields.len() < 3 {
        return None;
    }
    let hex = |text: &str| u64::from_str_radix(text.trim_start_matches("0x"), 16).ok();
    Some((
        hex(fields[fields.len() - 2])?,
        hex(fields[fields.len() - 1])?,
    ))
}

/// The scheduler's task clock of each CPU against CLOCK_MONOTONIC.
pub struct SchedClock {
    /// CPU -> (scheduler clock - CLOCK_MONOTONIC), in nanoseconds.
    offsets: HashMap<u32, i64>,
}

impl SchedClock {
    /// Measures the CPUs in `cpus`: on each, a thread of ours notes CLOCK_MONOTONIC and
    /// goes to sleep; the scheduler's stamp of that sleep, read while it sleeps, less
    /// the noted time is the offset (the smallest of three tries: the stamp comes a
    /// system call after the note).
    pub fn measure(cpus: &[u32]) -> SchedClock {
        let offsets = cpus
            .iter()
            .filter_map(|&cpu| Some((cpu, measure_cpu(cpu)?)))
            .collect();
        SchedClock { offsets }
    }

    /// A scheduler-clock stamp of `cpu` in CLOCK_MONOTONIC nanoseconds.
    pub fn to_monotonic(&self, cpu: u32, sched_ns: u64) -> Option<u64> {
        let offset = self
            .offsets
            .get(&cpu)
            .or_else(|| self.offsets.values().next())?;
        u64::try_from(sched_ns as i64 - offset).ok()
    }
}

fn measure_cpu(cpu: u32) -> Option<i64> {
    let mut best: Option<i64> = None;
    for _ in 0..3 {
        let (sender, receiver) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            // SAFETY: a zeroed cpu_set_t with one bit set, passed by reference to
            // sched_setaffinity for the calling thread (0).
            let pinned = unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu as usize, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
            };
            // SAFETY: gettid has no arguments.
            let tid = unsafe { libc::gettid() };
            // Let the migration to `cpu` finish before the measured sleep.
            std::thread::sleep(Duration::from_millis(1));
            let before = monotonic_ns();
            let _ = sender.send((pinned, tid, before));
            std::thread::sleep(Duration::from_millis(20));
        });
        let measured = receiver.recv().ok().and_then(|(pinned, tid, before)| {
            std::thread::sleep(Duration::from_millis(5));
            let text = fs::read_to_string(format!("/proc/self/task/{tid}/sched")).ok()?;
            let (exec_start, _) = parse_sched(&text)?;
            pinned.then(|| exec_start as i64 - before as i64)
        });
        let _ = sleeper.join();
        if let Some(offset) = measured {
            best = Some(best.map_or(offset, |best: i64| best.min(offset)));
        }
    }
    best
}

/// The threads blocked now whose process `is_target` admits, in a state of `states`
/// (`STATE_*` bits). Kernel threads count (a flusher stuck on IO is a wait like any).
pub fn scan(
    states: u32,
    is_target: &dyn Fn(u32) -> bool,
    user: &mut UserSymbols,
) -> Vec<BlockedThread> {
    let own = std::process::id();
    let mut found = Vec::new();
    for tgid in numbered_entries("/proc") {
        if tgid == own || !is_target(tgid) {
            continue;
        }
        for tid in numbered_entries(&format!("/proc/{tgid}/task")) {
            found.extend(read_one(tgid, tid, states));
        }
    }
    finish(found, user)
}

/// Thread `tid` of `tgid` if it sleeps (D or S): a lock's holder followed from its
/// waiter, whatever the states recorded.
pub fn read(tgid: u32, tid: u32, user: &mut UserSymbols) -> Option<BlockedThread> {
    let found = read_one(tgid, tid, STATE_UNINTERRUPTIBLE | STATE_INTERRUPTIBLE)?;
    finish(vec![found], user).pop()
}

/// A thread read from `/proc` with its CPU and its scheduler stamp, when it sleeps in
/// one of `states`.
fn read_one(tgid: u32, tid: u32, states: u32) -> Option<(BlockedThread, u32, u64)> {
    let dir = format!("/proc/{tgid}/task/{tid}");
    let stat = parse_stat(&fs::read_to_string(format!("{dir}/stat")).ok()?)?;
    let state = match stat.state {
        'D' => STATE_UNINTERRUPTIBLE,
        'S' => STATE_INTERRUPTIBLE,
        _ => return None,
    };
    if state & states == 0 {
        return None;
    }
    let (exec_start, switches) = parse_sched(&fs::read_to_string(format!("{dir}/sched")).ok()?)?;
    let kernel = fs::read_to_string(format!("{dir}/stack"))
        .map(|text| parse_kernel_stack(&text))
        .unwrap_or_default();
    let thread = BlockedThread {
        tgid,
        tid,
        state,
        since_ns: 0,
        switches,
        kernel,
        user: (Vec::new(), false),
    };
    Some((thread, stat.cpu, exec_start))
}

/// The threads with their start in CLOCK_MONOTONIC and their user stacks.
fn finish(found: Vec<(BlockedThread, u32, u64)>, user: &mut UserSymbols) -> Vec<BlockedThread> {
    let mut cpus: Vec<u32> = found.iter().map(|(_, cpu, _)| *cpu).collect();
    cpus.sort_unstable();
    cpus.dedup();
    let clock = SchedClock::measure(&cpus);
    log::debug!("scheduler clock offsets by CPU: {:?}", clock.offsets);
    let now = monotonic_ns();
    let mut unwinder = DwarfUnwinder::new();
    found
        .into_iter()
        .filter_map(|(mut thread, cpu, exec_start)| {
            thread.since_ns = clock.to_monotonic(cpu, exec_start)?.min(now);
            thread.user = user_stack(&mut unwinder, user, thread.tgid, thread.tid);
            Some(thread)
        })
        .collect()
}

/// Whether `thread` has not run since it was read (same context switches, still
/// blocked): its wait is the one the scan saw.
pub fn still_blocked(thread: &BlockedThread) -> bool {
    let dir = format!("/proc/{}/task/{}", thread.tgid, thread.tid);
    let stat = fs::read_to_string(format!("{dir}/stat"))
        .ok()
        .and_then(|text| parse_stat(&text));
    let sched = fs::read_to_string(format!("{dir}/sched"))
        .ok()
        .and_then(|text| parse_sched(&text));
    matches!((stat, sched), (Some(stat), Some((_, switches)))
        if matches!(stat.state, 'D' | 'S') && switches == thread.switches)
}

/// The user stack of a blocked thread: its registers from `/proc/TID/syscall`, the top
/// of its stack from `/proc/PID/mem`, unwound with the process's unwind tables.
fn user_stack(
    unwinder: &mut DwarfUnwinder,
    user: &mut UserSymbols,
    tgid: u32,
    tid: u32,
) -> (Vec<u64>, bool) {
    let Some((sp, ip)) = fs::read_to_string(format!("/proc/{tgid}/task/{tid}/syscall"))
        .ok()
        .and_then(|text| parse_syscall_regs(&text))
    else {
        return (Vec::new(), false);
    };
    if !user.knows(tgid) && !user.remember(tgid) {
        return (vec![ip], false);
    }
    let mut bytes = vec![0u8; USER_STACK_BYTES as usize];
    let copied = fs::File::open(format!("/proc/{tgid}/mem"))
        .and_then(|mem| read_some_at(&mem, &mut bytes, sp))
        .unwrap_or(0);
    bytes.truncate(copied);
    match unwinder.unwind(
        user,
        tgid,
        Regs {
            ip,
            sp,
            bp: 0,
            lr: 0,
        },
        &bytes,
    ) {
        Some(unwound) if !unwound.addrs.is_empty() => (unwound.addrs, unwound.complete),
        _ => (vec![ip], false),
    }
}

/// Reads what there is at `offset`, up to the buffer's size (a stack ends before).
fn read_some_at(file: &fs::File, buffer: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buffer.len() {
        match file.read_at(&mut buffer[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(read) => done += read,
            Err(_) if done > 0 => break,
            Err(err) => return Err(err),
        }
    }
    Ok(done)
}

/// The numbered entries of a `/proc` directory (processes, or a process's threads).
fn numbered_entries(dir: &str) -> Vec<u32> {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The process (tgid) of thread `tid`, from `/proc`; `None` once it has exited.
pub fn tgid_of(tid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Tgid:"))
        .and_then(|value| value.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_state_and_cpu_past_a_strange_name() {
        let text = "1234 (a (b) c) D 1 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 \
                    4242 1000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(
            parse_stat(text),
            Some(ThreadStat {
                state: 'D',
                ppid: 1,
                cpu: 1
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn sched_exec_start_in_nanoseconds() {
        let text = "bash (9426, #threads: 1)\n-------\nse.exec_start   :   2992951.874557\n\
                    se.vruntime : 1.0\nnr_switches   :   17\nnr_voluntary_switches : 16\n";
        assert_eq!(parse_sched(text), Some((2_992_951_874_557, 17)));
        assert_eq!(parse_sched("se.exec_start : x\n"), None);
    }

    #[test]
    fn kernel_stack_lines_with_and_without_modules() {
        let frames = parse_kernel_stack(
            "[<0>] request_wait_answer+0x1a3/0x2f0 [fuse]\n[<0>] fuse_simple_request+0x10/0x90\n\
             [<0>] entry_SYSCALL_64_after_hwframe+0x76/0x7e\n",
        );
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[0].name, "request_wait_answer");
        assert_eq!(frames[0].module.as_deref(), Some("fuse"));
        assert_eq!(frames[1].module, None);
        assert!(frames.iter().all(|frame| frame.kernel));
    }

    #[test]
    fn syscall_registers() {
        assert_eq!(
            parse_syscall_regs("230 0x0 0x0 0x7ffe 0x7ffd 0x0 0x0 0x7ffefd5c6f78 0x7f44fe70d503"),
            Some((0x7ffefd5c6f78, 0x7f44fe70d503))
        );
        assert_eq!(
            parse_syscall_regs("-1 0x7ffefd5c6f78 0x7f44fe70d503"),
            Some((0x7ffefd5c6f78, 0x7f44fe70d503))
        );
        assert_eq!(parse_syscall_regs("running"), None);
    }

    #[test]
    fn the_scheduler_clock_of_this_machine_is_tied_to_the_monotonic_clock() {
        // A child that sleeps from a known moment: its stamp, converted, is that moment.
        let clock = SchedClock::measure(&[0]);
        let before = monotonic_ns();
        let mut child = std::process::Command::new("sleep")
            .arg("1")
            .spawn()
            .expect("spawn sleep");
        std::thread::sleep(Duration::from_millis(300));
        let dir = format!("/proc/{}", child.id());
        let stat = parse_stat(&fs::read_to_string(format!("{dir}/stat")).expect("stat"))
            .expect("parse stat");
        let (exec_start, _) =
            parse_sched(&fs::read_to_string(format!("{dir}/sched")).expect("sched"))
                .expect("parse sched");
        let _ = child.wait();
        let clock = match clock.offsets.contains_key(&stat.cpu) {
            true => clock,
            false => SchedClock::measure(&[stat.cpu]),
        };
        let since = clock.to_monotonic(stat.cpu, exec_start).expect("offset");
        // The child starts sleeping after fork and exec: within 250 ms of `before`.
        assert!(
            since >= before && since < before + 250_000_000,
            "since {since} before {before}"
        );
    }
}
