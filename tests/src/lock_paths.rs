//! Reading lock-paths' recordings: the waits of its shared file's `f_pos_lock` per call
//! path (`read`, `readv`, `lseek`), for the root test and the lab check that compare the
//! stack caches with exact walks.

use std::collections::BTreeMap;

use serde_json::Value;

/// `LCB_F_MUTEX`: the lock-type bit of a mutex in a lock row's flags.
const LCB_F_MUTEX: u64 = 0x20;
/// The outcome bits of a lock row's flags (0: the lock was acquired).
const OUTCOME_MASK: u64 = !0xffff;

/// The lock-paths call a stack (frame names, leaf first) belongs to: a stack through
/// `fdget_pos` (`__fdget_pos` on older kernels) and the system call.
pub fn call_of(frames: &[String]) -> Option<&'static str> {
    if !frames.iter().any(|name| name.contains("fdget_pos")) {
        return None;
    }
    frames.iter().find_map(|name| match name.as_str() {
        "ksys_read" | "__x64_sys_read" | "__arm64_sys_read" => Some("read"),
        "do_readv" | "__x64_sys_readv" | "__arm64_sys_readv" => Some("readv"),
        "ksys_lseek" | "__x64_sys_lseek" | "__arm64_sys_lseek" => Some("lseek"),
        _ => None,
    })
}

/// Frame names of a profile's stack `id`, leaf first.
pub fn stack_names(profile: &Value, id: u64) -> Vec<String> {
    let frames = &profile["frames"];
    profile["stacks"][id as usize]["frames"]
        .as_array()
        .map(|ids| {
            ids.iter()
                .filter_map(Value::as_u64)
                .filter_map(|frame| frames[frame as usize]["name"].as_str())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// Per call of lock-paths: (acquired mutex waits, their total ns), from the lock rows
/// of process `pid`.
pub fn waits_by_call(profile: &Value, pid: u64) -> BTreeMap<&'static str, (u64, u64)> {
    let mut by_call = BTreeMap::new();
    let rows = profile["locks"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for row in rows
        .iter()
        .filter(|row| row["pid"].as_u64() == Some(pid))
        .filter(|row| {
            let flags = row["flags"].as_u64().unwrap_or(0);
            flags & LCB_F_MUTEX != 0 && flags & OUTCOME_MASK == 0
        })
    {
        let Some(call) = row["stack"]
            .as_u64()
            .and_then(|id| call_of(&stack_names(profile, id)))
        else {
            continue;
        };
        let entry: &mut (u64, u64) = by_call.entry(call).or_default();
        entry.0 += row["count"].as_u64().unwrap_or(0);
        entry.1 += row["total_ns"].as_u64().unwrap_or(0);
    }
    by_call
}

/// `readv`'s share, in percent, of the `read` and `readv` waits (`wait`: of their wait
/// time, else of their count).
pub fn readv_share(split: &BTreeMap<&str, (u64, u64)>, wait: bool) -> f64 {
    let of = |call: &str| {
        split
            .get(call)
            .map_or(0, |(count, ns)| if wait { *ns } else { *count }) as f64
    };
    100.0 * of("readv") / (of("read") + of("readv")).max(1.0)
}

/// How much longer, per wait, the recording `exact` timed the `read` path's waits than
/// `cached` did (ns, negative when shorter). The two recordings see the same waits, but
/// their programs run one after the other at each begin and end, so each one's wait is
/// shifted by part of the other's program: a constant of a few hundred ns per wait,
/// nothing next to a long wait and a sixth of a short `read` wait.
pub fn read_wait_offset(
    exact: &BTreeMap<&str, (u64, u64)>,
    cached: &BTreeMap<&str, (u64, u64)>,
) -> f64 {
    let mean = |split: &BTreeMap<&str, (u64, u64)>| {
        split
            .get("read")
            .map_or(0.0, |(count, ns)| *ns as f64 / (*count).max(1) as f64)
    };
    mean(exact) - mean(cached)
}

/// `readv`'s share of the wait time in `cached` once each of its waits is shifted by
/// `offset_ns` (see [`read_wait_offset`]): what is left of a difference from `exact`'s
/// share is waits charged to the other path.
pub fn readv_wait_share_shifted(split: &BTreeMap<&str, (u64, u64)>, offset_ns: f64) -> f64 {
    let shifted = |call: &str| {
        split.get(call).map_or(0.0, |(count, ns)| {
            (*ns as f64 + offset_ns * *count as f64).max(0.0)
        })
    };
    100.0 * shifted("readv") / (shifted("read") + shifted("readv")).max(1.0)
}

/// The spare stacks' check of a lock-paths recording with a stack map of one bucket
/// (`--stack-entries 1`: every call path but the first collides in it): both calls'
/// waits are named by their stacks, no wait of process `pid` is without a stack but
/// those whose walk failed or found the spare stacks busy, and the profile reports no
/// stack lost to a collision. `Ok` says what was seen.
pub fn check_spare_stacks(profile: &Value, pid: u64) -> Result<String, String> {
    let by_call = waits_by_call(profile, pid);
    let seen = format!("waits by call: {by_call:?}; losses: {}", profile["losses"]);
    for call in ["read", "readv"] {
        if by_call.get(call).map_or(0, |(count, _)| *count) == 0 {
            return Err(format!("no {call} wait with its stack; {seen}"));
        }
    }
    let rows = profile["locks"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let stackless: u64 = rows
        .iter()
        .filter(|row| row["pid"].as_u64() == Some(pid) && row["stack"].is_null())
        .filter_map(|row| row["count"].as_u64())
        .sum();
    // A walk the kernel could not make (its callchain buffer busy in an interrupt), or
    // a collision in a program nested in programs holding every spare scratch slot of
    // its CPU, is no collision the spare stacks missed: each is reported as such, and
    // its wait has no stack.
    let loss = |name: &str| profile["losses"][name].as_u64().unwrap_or(0);
    let excused = loss("stack_failed") + loss("stack_spare_busy");
    if stackless > excused {
        return Err(format!(
            "{stackless} waits without a stack, {excused} walks failed or found the spare \
             stacks busy; {seen}"
        ));
    }
    let collisions = profile["losses"]["stack_collision"].as_u64().unwrap_or(0);
    if collisions > 0 {
        return Err(format!("{collisions} stacks lost to collisions; {seen}"));
    }
    Ok(seen)
}

/// The pid of the lock-paths process of a profile.
pub fn pid_of(profile: &Value) -> Option<u64> {
    profile["processes"]
        .as_array()?
        .iter()
        .find(|process| process["comm"].as_str() == Some("lock-paths"))?["pid"]
        .as_u64()
}
