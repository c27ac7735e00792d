//! Block IO: attach `block:block_rq_insert/issue/complete`, drain `IO_STATS`, name the
//! devices. (Percentiles of the histograms: `lockpath_profile::histogram`.)

use std::collections::HashMap as StdHashMap;

use anyhow::{Context, Result};
use aya::{maps::HashMap, Ebpf, EbpfLoader};
use profiler_common::io::{
    names, IoKey, IoStat, IO_INFLIGHT_ENTRIES, OP_DISCARD, OP_FLUSH, OP_READ, OP_WRITE,
};

use crate::{
    cli::{Kind, RecordArgs},
    probes::{
        progress_of,
        shared::{attach_tracepoint, MapSet},
        AttachContext, Drain, Family, MapSize, PlanContext, Planned, Registration,
    },
    profile::{IoRow, ProbeUse, Profile},
    tracefs,
};

pub const FAMILY: Registration = Registration {
    name: "io",
    asked: |args| args.io,
    check: |_| Ok(()),
    plan: plan_family,
    maps: &[
        (names::IO_STATS, MapSize::Stats),
        (names::IO_INFLIGHT, MapSize::Fixed(IO_INFLIGHT_ENTRIES)),
    ],
    names: names::ALL,
};

fn plan_family(args: &RecordArgs, _ctx: &mut PlanContext) -> Result<Planned> {
    if !args.io {
        return Ok(None);
    }
    Ok(Some(Box::new(IoFamily {
        globals: IoGlobals::read()?,
        devices: DeviceNames::scan(),
    })))
}

/// The block-IO family of one recording: offsets, and the device names seen.
struct IoFamily {
    globals: IoGlobals,
    devices: DeviceNames,
}

impl Family for IoFamily {
    fn name(&self) -> &'static str {
        FAMILY.name
    }

    fn configure<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        self.globals.apply(loader);
    }

    fn attach(&mut self, ebpf: &mut Ebpf, _ctx: &mut AttachContext) -> Result<Vec<ProbeUse>> {
        Ok(vec![attach(ebpf, &self.globals)?])
    }

    /// Devices that appeared during the run get their names too.
    fn stopped(&mut self) {
        self.devices.merge(DeviceNames::scan());
    }

    fn drain(&self, out: &mut Drain) -> Result<()> {
        out.profile.io = drain(out.maps, &self.devices)?;
        Ok(())
    }

    fn progress(&self, live: &Profile) -> Option<String> {
        progress_of(&live.io, |row| row.count, "IO requests")
    }

    fn flamegraph(&self) -> Option<Kind> {
        Some(Kind::Io)
    }
}

/// Load-time globals of the IO programs: record offsets from the format files.
pub struct IoGlobals {
    values: Vec<(&'static str, u32)>,
    /// `block_rq_insert` exists on this kernel.
    insert: bool,
}

/// (event, field, global) for every offset the programs read.
const OFFSETS: [(&str, &str, &str); 10] = [
    ("block_rq_issue", "dev", names::RQ_ISSUE_DEV_OFFSET),
    ("block_rq_issue", "sector", names::RQ_ISSUE_SECTOR_OFFSET),
    ("block_rq_issue", "bytes", names::RQ_ISSUE_BYTES_OFFSET),
    ("block_rq_issue", "rwbs", names::RQ_ISSUE_RWBS_OFFSET),
    ("block_rq_complete", "dev", names::RQ_COMPLETE_DEV_OFFSET),
    (
        "block_rq_complete",
        "sector",
        names::RQ_COMPLETE_SECTOR_OFFSET,
    ),
    ("block_rq_insert", "dev", names::RQ_INSERT_DEV_OFFSET),
    ("block_rq_insert", "sector", names::RQ_INSERT_SECTOR_OFFSET),
    ("block_rq_insert", "bytes", names::RQ_INSERT_BYTES_OFFSET),
    ("block_rq_insert", "rwbs", names::RQ_INSERT_RWBS_OFFSET),
];

impl IoGlobals {
    pub fn read() -> Result<Self> {
        let insert = tracefs::event_exists("block", "block_rq_insert");
        let mut values = Vec::new();
        for (event, field, global) in OFFSETS {
            if event == "block_rq_insert" && !insert {
                continue;
            }
            values.push((global, tracefs::field_offset("block", event, field)?));
        }
        Ok(IoGlobals { values, insert })
    }

    pub fn apply<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        for (name, value) in &self.values {
            loader.override_global(name, value, true);
        }
    }
}

pub fn attach(ebpf: &mut Ebpf, globals: &IoGlobals) -> Result<ProbeUse> {
    let mut events = vec![
        (names::IO_RQ_ISSUE, "block_rq_issue"),
        (names::IO_RQ_COMPLETE, "block_rq_complete"),
    ];
    if globals.insert {
        events.insert(0, (names::IO_RQ_INSERT, "block_rq_insert"));
    }
    for (name, event) in &events {
        attach_tracepoint(ebpf, name, "block", event)?;
    }
    Ok(ProbeUse {
        family: FAMILY.name.into(),
        method: format!(
            "tracepoint {}",
            events
                .iter()
                .map(|(_, event)| format!("block:{event}"))
                .collect::<Vec<_>>()
                .join("/")
        ),
    })
}

/// Names of block devices by (major, minor), from /sys/dev/block. Taken at the start
/// and again at the end of a run, so a device that vanished mid-run keeps its name.
#[derive(Debug, Default, Clone)]
pub struct DeviceNames {
    names: StdHashMap<(u32, u32), String>,
}

impl DeviceNames {
    pub fn scan() -> Self {
        let mut names = StdHashMap::new();
        if let Ok(entries) = std::fs::read_dir("/sys/dev/block") {
            for entry in entries.flatten() {
                let file_name = entry.file_name();
                let Some((major, minor)) = file_name
                    .to_str()
                    .and_then(|text| text.split_once(':'))
                    .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
                else {
                    continue;
                };
                // The link points at .../block/<disk>[/<partition>]: its last component.
                if let Some(name) = std::fs::read_link(entry.path())
                    .ok()
                    .and_then(|target| target.file_name().map(|n| n.to_string_lossy().into_owned()))
                {
                    names.insert((major, minor), name);
                }
            }
        }
        DeviceNames { names }
    }

    /// Adds names from `later` that this scan does not have (devices that appeared).
    pub fn merge(&mut self, later: DeviceNames) {
        for (dev, name) in later.names {
            self.names.entry(dev).or_insert(name);
        }
    }

    pub fn name(&self, major: u32, minor: u32) -> String {
        self.names
            .get(&(major, minor))
            .cloned()
            .unwrap_or_else(|| format!("{major}:{minor}"))
    }
}

/// The kernel's `dev_t` in tracepoints: major << 20 | minor.
pub fn split_dev(dev: u32) -> (u32, u32) {
    (dev >> 20, dev & ((1 << 20) - 1))
}

pub fn op_name(op: u32) -> &'static str {
    match op {
        OP_READ => "read",
        OP_WRITE => "write",
        OP_FLUSH => "flush",
        OP_DISCARD => "discard",
        _ => "other",
    }
}

pub fn drain(maps: &MapSet, devices: &DeviceNames) -> Result<Vec<IoRow>> {
    let stats: HashMap<_, IoKey, IoStat> = maps.hash_map(names::IO_STATS)?;
    let mut rows = Vec::new();
    for entry in stats.iter() {
        let (key, stat) = entry.context("cannot read IO_STATS")?;
        let (major, minor) = split_dev(key.dev);
        let mut hist = stat.hist.to_vec();
        while hist.last() == Some(&0) {
            hist.pop();
        }
        rows.push(IoRow {
            major,
            minor,
            device: devices.name(major, minor),
            op: op_name(key.op).into(),
            pid: key.tgid,
            count: stat.count,
            bytes: stat.bytes,
            total_ns: stat.total_ns,
            max_ns: stat.max_ns,
            queued: stat.queued,
            queue_ns: stat.queue_ns,
            hist,
        });
    }
    rows.sort_by(|a, b| {
        (a.major, a.minor, &a.op, std::cmp::Reverse(a.count)).cmp(&(
            b.major,
            b.minor,
            &b.op,
            std::cmp::Reverse(b.count),
        ))
    });
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_t_split() {
        assert_eq!(split_dev((7 << 20) | 3), (7, 3));
        assert_eq!(split_dev((259 << 20) | 1), (259, 1));
    }

    #[test]
    fn device_names_fall_back_to_numbers() {
        let names = DeviceNames::default();
        assert_eq!(names.name(7, 42), "7:42");
    }
}
