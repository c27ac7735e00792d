//! The probe families as the benchmark sees them, and the workloads they are aimed at.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Result};

use crate::util;

/// A probe family as the benchmark sees it.
pub(super) struct Family {
    pub(super) name: &'static str,
    /// `lockpath record` flags that select it; the first one is looked for in `--help`.
    pub(super) flags: &'static [&'static str],
    /// Workloads the family is aimed at: peers run there, and the per-event cost is
    /// measured on the first.
    pub(super) aimed_at: &'static [&'static str],
    /// A bpftrace script doing the same aggregation; `cpid` is the started command.
    pub(super) bpftrace: Option<&'static str>,
    /// A perf command that records the same thing: args before `-o FILE -- CMD`.
    pub(super) perf: Option<&'static [&'static str]>,
    /// Target: at most this much slower than the baseline on `aimed_at[0]`.
    pub(super) target_overhead: Option<f64>,
}

pub(super) const BPFTRACE_LOCK: &str = r#"
tracepoint:lock:contention_begin /pid == cpid/ { @start[tid] = nsecs; @lock[tid] = args->lock_addr; @flags[tid] = args->flags; }
tracepoint:lock:contention_end /@start[tid]/ {
  $wait = nsecs - @start[tid];
  @wait[kstack, pid, @lock[tid], @flags[tid]] = stats($wait);
  @max[kstack, pid, @lock[tid], @flags[tid]] = max($wait);
  delete(@start[tid]); delete(@lock[tid]); delete(@flags[tid]);
}
"#;

pub(super) const BPFTRACE_OFFCPU: &str = r#"
tracepoint:sched:sched_switch {
  if (pid == cpid) { @start[tid] = nsecs; @stack[tid] = kstack; }
  $since = @start[args->next_pid];
  if ($since) {
    @offcpu[@stack[args->next_pid], args->next_pid] = stats(nsecs - $since);
    delete(@start[args->next_pid]); delete(@stack[args->next_pid]);
  }
}
"#;

pub(super) const BPFTRACE_CPU: &str = r#"
profile:hz:99 /pid == cpid/ { @samples[kstack, ustack, pid] = count(); }
"#;

pub(super) const BPFTRACE_IO: &str = r#"
tracepoint:block:block_rq_issue { @start[args->dev, args->sector] = nsecs; @stack[args->dev, args->sector] = kstack; }
tracepoint:block:block_rq_complete /@start[args->dev, args->sector]/ {
  @io[@stack[args->dev, args->sector], args->dev] = hist(nsecs - @start[args->dev, args->sector]);
  delete(@start[args->dev, args->sector]); delete(@stack[args->dev, args->sector]);
}
"#;

pub(super) const FAMILIES: &[Family] = &[
    Family {
        name: "lock",
        flags: &["--lock"],
        aimed_at: &["spinlock", "rwsem"],
        bpftrace: Some(BPFTRACE_LOCK),
        perf: Some(&["lock", "record"]),
        target_overhead: Some(0.10),
    },
    Family {
        name: "offcpu",
        flags: &["--offcpu"],
        aimed_at: &["switch"],
        bpftrace: Some(BPFTRACE_OFFCPU),
        perf: Some(&["sched", "record"]),
        target_overhead: Some(0.10),
    },
    Family {
        // `--wakers` on top of `--offcpu`: next to the row above, the cost of naming
        // who woke each wait (sched_waking plus the join at switch-in).
        name: "wakers",
        flags: &["--wakers", "--offcpu"],
        aimed_at: &["switch"],
        bpftrace: None,
        perf: None,
        target_overhead: None,
    },
    Family {
        // The ping-pong's pipe waits are S sleeps: with --offcpu (D only) the two rows
        // above price the path of a wake-up that ends no recorded wait; these two the
        // full path (every wait recorded and joined to its waker).
        name: "offcpu-all",
        flags: &["--offcpu-all"],
        aimed_at: &["switch"],
        bpftrace: None,
        perf: None,
        target_overhead: None,
    },
    Family {
        name: "wakers-all",
        flags: &["--wakers", "--offcpu-all"],
        aimed_at: &["switch"],
        bpftrace: None,
        perf: None,
        target_overhead: None,
    },
    Family {
        name: "cpu",
        flags: &["--cpu"],
        aimed_at: &["cpu"],
        bpftrace: Some(BPFTRACE_CPU),
        perf: Some(&["record", "-F", "99", "-g"]),
        target_overhead: Some(0.01),
    },
    Family {
        // On-CPU sampling with frame-pointer user stacks only (no stack copies): the
        // `cpu` row above copies 64 KiB of user stack per user-mode sample (the default).
        name: "cpu-fp",
        flags: &["--cpu", "--user-stack-bytes", "0"],
        aimed_at: &["cpu"],
        bpftrace: None,
        perf: None,
        target_overhead: Some(0.01),
    },
    Family {
        // No workload here speaks FUSE: this row is the cost of the armed probes and
        // of lockpath itself; a FUSE file system workload would be its aimed-at one.
        name: "rpc",
        flags: &["--rpc", "fuse"],
        aimed_at: &[],
        bpftrace: None,
        perf: None,
        target_overhead: None,
    },
    Family {
        name: "io",
        flags: &["--io"],
        aimed_at: &["io"],
        bpftrace: Some(BPFTRACE_IO),
        perf: None,
        target_overhead: None,
    },
    Family {
        // Block IO with the file calls: every read, write, fsync and open of every
        // process enters a program (a target test), the targets' are timed per file.
        name: "io-calls",
        flags: &["--io", "--file-calls"],
        aimed_at: &["io"],
        bpftrace: None,
        perf: None,
        target_overhead: None,
    },
];

/// A workload binary of the `lockpath-tests` crate and its arguments (without
/// `--seconds`); each prints `ops=N`.
pub(super) struct Workload {
    pub(super) name: &'static str,
    pub(super) what: &'static str,
    pub(super) binary: &'static str,
    pub(super) args: Vec<String>,
}

pub(super) fn workloads(io_dir: Option<&Path>) -> Vec<Workload> {
    let strings = |args: &[&str]| args.iter().map(|arg| arg.to_string()).collect();
    let mut list = vec![
        Workload {
            name: "spinlock",
            what: "4 threads create+close pipes",
            binary: "lock-storm",
            args: strings(&["--mode", "pipe", "--threads", "4"]),
        },
        Workload {
            name: "rwsem",
            what: "4 threads mmap+munmap",
            binary: "lock-storm",
            args: strings(&["--mode", "mmap", "--threads", "4"]),
        },
        Workload {
            name: "switch",
            what: "pipe ping-pong, 2 threads",
            binary: "ping-pong",
            args: strings(&["--pairs", "1"]),
        },
        Workload {
            name: "cpu",
            what: "2 threads xorshift, no syscalls",
            binary: "cpu-spin",
            args: strings(&["--threads", "2"]),
        },
    ];
    if let Some(dir) = io_dir {
        list.push(Workload {
            name: "io",
            what: "create+write+unlink in a 20k-file dir, ext4 on loop",
            binary: "io-create",
            args: vec![
                "--dir".into(),
                dir.display().to_string(),
                "--threads".into(),
                "2".into(),
            ],
        });
    }
    list
}

pub(super) fn wanted(filter: Option<&[String]>, name: &str) -> bool {
    filter.is_none_or(|names| names.iter().any(|n| n == name))
}

/// Families whose flag appears in `lockpath record --help`.
pub(super) fn available_families(
    lockpath: &Path,
    filter: Option<&[String]>,
) -> Result<Vec<&'static Family>> {
    let help = util::capture(
        Command::new(lockpath).args(["record", "--help"]),
        "bench: asking lockpath for its probe families",
        "build lockpath with `cargo xtask build`",
    )?;
    let offered = |flag: &str| {
        help.split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '[')
            .any(|word| word == flag)
    };
    let families: Vec<&Family> = FAMILIES
        .iter()
        .filter(|family| offered(family.flags[0]) && wanted(filter, family.name))
        .collect();
    if families.is_empty() {
        bail!("bench: lockpath offers none of the requested probe families");
    }
    Ok(families)
}

/// An ext4 file system on a loop device, mounted in a unique directory; unmounted and
/// deleted on drop.
pub(super) struct LoopExt4 {
    pub(super) image: PathBuf,
    pub(super) mount_point: PathBuf,
}

impl LoopExt4 {
    pub(super) fn mount(scratch: &Path) -> Result<LoopExt4> {
        let image = scratch.join("ext4.img");
        let mount_point = scratch.join("mnt");
        fs::create_dir_all(&mount_point)?;
        let file = fs::File::create(&image)?;
        file.set_len(512 * 1024 * 1024)?;
        drop(file);
        util::capture(
            Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image),
            "bench: mkfs.ext4",
            "install e2fsprogs",
        )?;
        util::capture(
            Command::new("mount")
                .args(["-o", "loop"])
                .arg(&image)
                .arg(&mount_point),
            "bench: mounting the ext4 image",
            "the io workload needs loop devices (modprobe loop)",
        )?;
        Ok(LoopExt4 { image, mount_point })
    }
}

impl Drop for LoopExt4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount_point).status();
        let _ = fs::remove_file(&self.image);
    }
}
