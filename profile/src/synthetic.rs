//! Synthetic profiles for measurements: the shape of a long system-wide recording.

use std::{fmt::Write as _, fs, path::Path};

use anyhow::{Context, Result};

/// A lockpath/1 profile with `rows` lock rows over 100,000 lock addresses, 20,000 stacks
/// of 12 of 5,000 frames, and 200 processes (each stack in up to 3 of them): the shape of
/// a long system-wide recording, or of many merged ones.
pub fn write_lock_profile(path: &Path, rows: usize) -> Result<()> {
    fs::write(path, lock_profile_json(rows))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The JSON text of [`write_lock_profile`]'s profile.
pub fn lock_profile_json(rows: usize) -> String {
    const FRAMES: usize = 5_000;
    const STACKS: usize = 20_000;
    const PROCESSES: u32 = 200;
    let mut json = String::with_capacity(rows * 160);
    json.push_str(
        r#"{"format":"lockpath/1","host":"bench","kernel":"synthetic","start_unix_s":0,"duration_s":600.0,"command_line":["lockpath","record","-a"],"targets":{"mode":"system"},"probes":[{"family":"lock","method":"synthetic"}],"losses":{},"processes":["#,
    );
    for pid in 1..=PROCESSES {
        if pid > 1 {
            json.push(',');
        }
        let _ = write!(json, r#"{{"pid":{pid},"comm":"proc{pid}","threads":[]}}"#);
    }
    json.push_str(r#"],"frames":["#);
    for frame in 0..FRAMES {
        if frame > 0 {
            json.push(',');
        }
        let _ = write!(
            json,
            r#"{{"name":"kernel_function_{frame}","kernel":true}}"#
        );
    }
    json.push_str(r#"],"stacks":["#);
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for stack in 0..STACKS {
        if stack > 0 {
            json.push(',');
        }
        json.push_str(r#"{"frames":["#);
        for depth in 0..12 {
            if depth > 0 {
                json.push(',');
            }
            let _ = write!(json, "{}", next() as usize % FRAMES);
        }
        json.push_str("]}");
    }
    json.push_str(r#"],"locks":["#);
    for row in 0..rows {
        if row > 0 {
            json.push(',');
        }
        let random = next();
        let lock_addr = 0xffff_8880_0000_0000u64 + (random % 100_000) * 64;
        let count = 1 + random % 1000;
        // A call path takes one kind of lock and runs in a few processes; what varies
        // most between rows is the lock instance (per-inode, per-socket locks).
        let stack = (random >> 8) as usize % STACKS;
        let pid = 1 + (stack as u32 * 7 + (random >> 40) as u32 % 3) % PROCESSES;
        let _ = write!(
            json,
            r#"{{"pid":{pid},"lock_addr":{lock_addr},"lock_name":"0x{lock_addr:x}","flags":{},"stack":{stack},"count":{count},"total_ns":{},"max_ns":{},"min_ns":{}}}"#,
            [1u32, 2, 4, 32][stack % 4],
            count * 1500,
            5000 + random % 100_000,
            100 + random % 1000
        );
    }
    json.push_str("]}");
    json
}

/// The host of [`write_fleet`]'s fleet that stands out, and the lock it waits on.
pub const FLEET_OUTLIER: (&str, &str) = ("node0007", "rpc_reply_lock");

/// A fleet of `hosts` 30-second profiles for `outliers`, written into `dir` in the
/// compact encoding (`.lpb`) or as JSON: each host with 20 processes, 400 lock rows
/// over 40 locks (their wait a little different on every host), 100 off-CPU rows and
/// 200 stacks of 12 frames; host [`FLEET_OUTLIER`] also waits on one more spinlock.
pub fn write_fleet(dir: &Path, hosts: usize, compact: bool) -> Result<()> {
    use crate::profile::{Frame, LockRow, OffcpuRow, Process, Profile, Stack};
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    const CLASSES: [&str; 5] = ["buffer", "page", "block-io", "journal", "lock"];
    for host in 0..hosts {
        let name = format!("node{host:04}");
        let mut profile = Profile::new();
        profile.host = name.clone();
        profile.duration_s = 30.0;
        profile.frames = (0..300)
            .map(|frame| Frame::kernel(&format!("kernel_function_{frame}")))
            .collect();
        profile.stacks = (0..200u32)
            .map(|stack| Stack {
                frames: (0..12)
                    .map(|depth| (stack * 7 + depth * 13) % 300)
                    .collect(),
                truncated: false,
            })
            .collect();
        profile.processes = (1..=20)
            .map(|pid| Process {
                pid,
                comm: format!("ior{pid}"),
                cgroup: Some(format!(
                    "/system.slice/slurmstepd.scope/job_{}/step_0",
                    pid % 4
                )),
                ..Default::default()
            })
            .collect();
        // A host's own small difference: a few percent, the same on every run.
        let jitter = 1.0 + ((host * 37) % 11) as f64 / 100.0;
        for row in 0..400u32 {
            let lock = row % 40;
            let total_ns = ((1_000_000 + u64::from(lock) * 50_000) as f64 * jitter) as u64;
            profile.locks.push(LockRow {
                pid: 1 + row % 20,
                lock_addr: 0xffff_8881_0000_0000 + u64::from(lock) * 64,
                lock_name: format!("lock_{lock}").into(),
                lock_name_source: "kallsyms".into(),
                flags: profiler_common::lock::LCB_F_SPIN,
                stack: Some(row % 200),
                count: 1000,
                total_ns,
                max_ns: total_ns / 100,
                min_ns: 100,
                ..Default::default()
            });
        }
        for row in 0..100u32 {
            profile.offcpu.push(OffcpuRow {
                pid: 1 + row % 20,
                tid: 1 + row % 20,
                state: "D".into(),
                class: CLASSES[row as usize % CLASSES.len()].into(),
                stack: Some(row % 200),
                count: 100,
                total_ns: (2_000_000.0 * jitter) as u64,
                max_ns: 100_000,
                ..Default::default()
            });
        }
        if name == FLEET_OUTLIER.0 {
            profile.locks.push(LockRow {
                pid: 3,
                lock_addr: 0xffff_8881_1000_0000,
                lock_name: FLEET_OUTLIER.1.into(),
                lock_name_source: "kallsyms".into(),
                flags: profiler_common::lock::LCB_F_SPIN,
                stack: Some(5),
                count: 3_000_000,
                total_ns: 7_500_000_000,
                max_ns: 50_000,
                min_ns: 100,
                ..Default::default()
            });
        }
        let extension = if compact { "lpb" } else { "json" };
        profile.save(&dir.join(format!("{name}.{extension}")))?;
    }
    Ok(())
}
