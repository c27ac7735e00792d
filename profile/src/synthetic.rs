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
