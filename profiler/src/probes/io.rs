//! Block IO: attach the block raw tracepoints (requests keyed by their `struct request`
//! pointer, fields read through offsets from BTF), drain `IO_STATS`, name the devices.
//! (Percentiles of the histograms: `lockpath_profile::histogram`.)

use std::collections::HashMap as StdHashMap;

use anyhow::{bail, Context, Result};
use aya::{Ebpf, EbpfLoader};
use profiler_common::io::{
    names, IoInFlight, IoKey, IoLayout, IoStat, IO_INFLIGHT_ENTRIES, IO_NO_OFFSET, IO_NO_OP,
    OP_DISCARD, OP_FLUSH, OP_PASSTHROUGH, OP_READ, OP_WRITE,
};

use crate::{
    btf::Btf,
    probes::prelude::*,
    profile::{IoRow, WaitingRow},
};

pub const FAMILY: Registration = Registration {
    name: "io",
    asked: |args| args.io.io,
    check: |_| Ok(()),
    plan: plan_family,
    maps: &[
        (names::IO_STATS, MapSize::Stats),
        (names::IO_INFLIGHT, MapSize::Fixed(IO_INFLIGHT_ENTRIES)),
    ],
    names: names::ALL,
};

fn plan_family(args: &RecordArgs, _ctx: &mut PlanContext) -> Result<Planned> {
    if !args.io.io {
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
        let waiting = drain_in_flight(out.maps, &self.devices, out.moment)?;
        out.profile.waiting.extend(waiting);
        Ok(())
    }

    fn progress(&self, live: &Profile) -> Option<String> {
        progress_of(&live.io, |row| row.count, "IO requests")
    }

    fn flamegraph(&self) -> Option<Kind> {
        Some(Kind::Io)
    }
}

/// Load-time layout of the IO programs, from the kernel's BTF, and which of the optional
/// raw tracepoints this kernel has.
pub struct IoGlobals {
    layout: IoLayout,
    /// (program, raw tracepoint) to attach, in order (the completion first, so no
    /// request is admitted that could not be closed).
    events: Vec<(&'static str, &'static str)>,
}

/// (struct, member).
type Member = (&'static str, &'static str);

/// Chains to the disk's `dev_t` from a `struct request`, newest kernels first: each is
/// (struct, member) pointer hops, then the final (struct, member) `dev_t`.
const DEV_CHAINS: [(&[Member], Member); 3] = [
    // 5.15+: rq->q->disk->part0->bd_dev (the tracepoints' disk_devt(rq->q->disk)).
    (
        &[
            ("request", "q"),
            ("request_queue", "disk"),
            ("gendisk", "part0"),
        ],
        ("block_device", "bd_dev"),
    ),
    // 5.11 - 5.14: rq->rq_disk->part0->bd_dev.
    (
        &[("request", "rq_disk"), ("gendisk", "part0")],
        ("block_device", "bd_dev"),
    ),
    // 5.10 and older: rq->rq_disk->part0.__dev.devt (part0 embedded).
    (&[("request", "rq_disk")], ("gendisk", "part0.__dev.devt")),
];

/// ((program reading rq from argument 0, program reading it from argument 1), raw
/// tracepoint, required), in attach order.
type Programs = (&'static str, &'static str);
const EVENTS: [(Programs, &str, bool); 5] = [
    ((names::IO_RQ_COMPLETE, ""), "block_rq_complete", true),
    (
        (names::IO_RQ_MERGE, names::IO_RQ_MERGE_Q),
        "block_rq_merge",
        false,
    ),
    (
        (names::IO_RQ_REQUEUE, names::IO_RQ_REQUEUE_Q),
        "block_rq_requeue",
        false,
    ),
    (
        (names::IO_RQ_INSERT, names::IO_RQ_INSERT_Q),
        "block_rq_insert",
        false,
    ),
    (
        (names::IO_RQ_ISSUE, names::IO_RQ_ISSUE_Q),
        "block_rq_issue",
        true,
    ),
];

impl IoGlobals {
    /// Reads the layout from /sys/kernel/btf/vmlinux. Without BTF there is no safe way
    /// to read `struct request`: a clear error rather than guessed offsets.
    pub fn read() -> Result<Self> {
        let btf = Btf::vmlinux().context(
            "--io reads the kernel's struct request at offsets from its BTF, and this kernel has none",
        )?;
        Self::from_btf(btf).context("--io: cannot read the block layer's layout from kernel BTF")
    }

    pub fn from_btf(btf: &Btf) -> Result<Self> {
        let mut layout = IoLayout {
            cmd_flags: btf.member_offset("request", "cmd_flags")?,
            data_len: btf.member_offset("request", "__data_len")?,
            start_time_ns: btf
                .member_offset("request", "start_time_ns")
                .unwrap_or(IO_NO_OFFSET),
            ..IoLayout::default()
        };
        let mut errors = Vec::new();
        let mut found = false;
        for (hops, last) in DEV_CHAINS {
            match dev_chain(btf, hops, last) {
                Ok(offsets) => {
                    layout.dev_hops = hops.len() as u32;
                    layout.dev_offsets = offsets;
                    found = true;
                    break;
                }
                Err(err) => errors.push(format!("{err:#}")),
            }
        }
        if !found {
            bail!(
                "no known way from struct request to its disk's dev_t: {}",
                errors.join("; ")
            );
        }
        // REQ_OP_BITS is the first flag bit (__REQ_FAILFAST_DEV); 8 since 4.10.
        let op_bits = btf.enum_value("__REQ_FAILFAST_DEV").unwrap_or(8);
        layout.op_mask = (1u32 << op_bits.min(31)) - 1;
        let op = |name: &str| btf.enum_value(name).unwrap_or(IO_NO_OP);
        layout.op_read = op("REQ_OP_READ");
        layout.op_write = op("REQ_OP_WRITE");
        layout.op_flush = op("REQ_OP_FLUSH");
        layout.op_discard = op("REQ_OP_DISCARD");
        layout.op_secure_erase = op("REQ_OP_SECURE_ERASE");
        // SCSI_IN/OUT: passthrough before 5.11 (merged into DRV_IN/OUT later).
        layout.op_passthrough = [
            op("REQ_OP_DRV_IN"),
            op("REQ_OP_DRV_OUT"),
            op("REQ_OP_SCSI_IN"),
            op("REQ_OP_SCSI_OUT"),
        ];
        if layout.op_read == IO_NO_OP || layout.op_write == IO_NO_OP {
            bail!("kernel BTF has no REQ_OP_READ/REQ_OP_WRITE");
        }

        let mut events = Vec::new();
        for (program, event, required) in EVENTS {
            let rq = match btf.raw_tracepoint_arg(event, "request") {
                Ok(index) => index,
                Err(_) if !required => continue,
                Err(err) => return Err(err),
            };
            let program = match (event, rq) {
                // (rq, error, nr_bytes): the program reads arguments 0 and 2.
                ("block_rq_complete", 0) => {
                    let args = btf.raw_tracepoint_args(event)?;
                    if args.len() != 3 {
                        bail!("raw tracepoint {event}: unexpected arguments {args:?}");
                    }
                    program.0
                }
                ("block_rq_complete", _) => {
                    bail!("raw tracepoint {event}: struct request is argument {rq}")
                }
                (_, 0) => program.0,
                // Before 5.11: (struct request_queue *q, struct request *rq).
                (_, 1) => program.1,
                _ => bail!("raw tracepoint {event}: struct request is argument {rq}"),
            };
            events.push((program, event));
        }
        Ok(IoGlobals { layout, events })
    }

    pub fn apply<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        loader.override_global(names::IO_LAYOUT, &self.layout, true);
    }
}

/// Offsets of one pointer chain, or why this kernel does not have it.
fn dev_chain(btf: &Btf, hops: &[Member], last: Member) -> Result<[u32; 4]> {
    let mut offsets = [0u32; 4];
    for (index, (name, member)) in hops.iter().enumerate() {
        offsets[index] = btf.member_pointer_offset(name, member)?;
    }
    offsets[hops.len()] = btf.member_offset(last.0, last.1)?;
    Ok(offsets)
}

pub fn attach(ebpf: &mut Ebpf, globals: &IoGlobals) -> Result<ProbeUse> {
    for (name, event) in &globals.events {
        attach_raw_tracepoint(ebpf, name, event)?;
    }
    Ok(ProbeUse {
        family: "io".into(),
        method: format!(
            "raw_tracepoint {}, key = struct request pointer",
            globals
                .events
                .iter()
                .map(|(_, event)| *event)
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
        OP_PASSTHROUGH => "passthrough",
        _ => "other",
    }
}

/// The block requests still in flight at the drain (`IO_INFLIGHT`), as waits in
/// progress of the processes that submitted them (the thread is not known: `tid` is
/// the process's id). Their time enters the IO rows when they complete.
fn drain_in_flight(
    maps: &MapSet,
    devices: &DeviceNames,
    moment: DrainMoment,
) -> Result<Vec<WaitingRow>> {
    use super::shared::inprogress::listed_age;
    let mut waiting = Vec::new();
    for (_, request) in maps.entries::<u64, IoInFlight>(names::IO_INFLIGHT)? {
        let Some(age_ns) = listed_age(request.start_ns, moment.now_ns) else {
            continue;
        };
        let (major, minor) = split_dev(request.dev);
        let state = match request.issue_ns {
            0 => "queued",
            _ => "issued",
        };
        waiting.push(WaitingRow {
            kind: "io".into(),
            pid: request.tgid,
            tid: request.tgid,
            since_ns: request.start_ns,
            age_ns,
            counted_ns: 0,
            class: op_name(request.op).into(),
            what: format!(
                "{} ({state}, {} bytes)",
                devices.name(major, minor),
                request.bytes
            ),
            ..Default::default()
        });
    }
    Ok(waiting)
}

pub fn drain(maps: &MapSet, devices: &DeviceNames) -> Result<Vec<IoRow>> {
    let mut rows = Vec::new();
    for (key, stat) in maps.entries::<IoKey, IoStat>(names::IO_STATS)? {
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
    fn this_kernel_s_request_layout() {
        let Ok(btf) = Btf::from_sys_fs() else {
            eprintln!("SKIP: no /sys/kernel/btf/vmlinux here");
            return;
        };
        let globals = IoGlobals::from_btf(&btf).expect("layout");
        let layout = globals.layout;
        assert!(layout.dev_hops >= 1, "{layout:?}");
        assert_eq!(layout.op_flush, 2);
        assert_ne!(layout.start_time_ns, IO_NO_OFFSET);
        let events: Vec<&str> = globals.events.iter().map(|(_, event)| *event).collect();
        assert_eq!(
            events.first(),
            Some(&"block_rq_complete"),
            "completion first"
        );
        assert!(events.contains(&"block_rq_issue"), "{events:?}");
    }

    #[test]
    fn device_names_fall_back_to_numbers() {
        let names = DeviceNames::default();
        assert_eq!(names.name(7, 42), "7:42");
    }
}
