//! Block IO: attach the block raw tracepoints, drain `IO_STATS`, name the devices, and
//! the histogram arithmetic (percentiles from log2 buckets).

use std::collections::HashMap as StdHashMap;

use anyhow::{bail, Context, Result};
use aya::{maps::HashMap, programs::RawTracePoint, Ebpf, EbpfLoader};
use profiler_common::io::{
    IoKey, IoLayout, IoStat, IO_NO_OFFSET, IO_NO_OP, OP_DISCARD, OP_FLUSH, OP_PASSTHROUGH, OP_READ,
    OP_WRITE,
};

use crate::{btf::Btf, probes::shared::MapSet, profile::IoRow, profile::ProbeUse};

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
    (("io_rq_complete", ""), "block_rq_complete", true),
    (("io_rq_merge", "io_rq_merge_q"), "block_rq_merge", false),
    (
        ("io_rq_requeue", "io_rq_requeue_q"),
        "block_rq_requeue",
        false,
    ),
    (("io_rq_insert", "io_rq_insert_q"), "block_rq_insert", false),
    (("io_rq_issue", "io_rq_issue_q"), "block_rq_issue", true),
];

impl IoGlobals {
    /// Reads the layout from /sys/kernel/btf/vmlinux. Without BTF there is no safe way
    /// to read `struct request`: a clear error rather than guessed offsets.
    pub fn read() -> Result<Self> {
        let btf = Btf::from_sys_fs().context(
            "--io reads the kernel's struct request at offsets from its BTF, and this kernel has none",
        )?;
        Self::from_btf(&btf).context("--io: cannot read the block layer's layout from kernel BTF")
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
        loader.override_global("IO_LAYOUT", &self.layout, true);
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
        let program: &mut RawTracePoint = ebpf
            .program_mut(name)
            .with_context(|| format!("program {name} missing from the eBPF object"))?
            .try_into()
            .with_context(|| format!("program {name} is not a raw tracepoint"))?;
        program
            .load()
            .map_err(|err| crate::probes::shared::load_error(name, err))?;
        program
            .attach(event)
            .with_context(|| format!("cannot attach to raw tracepoint {event}"))?;
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

pub fn drain(maps: &MapSet, devices: &DeviceNames) -> Result<Vec<IoRow>> {
    let map = maps.get("IO_STATS")?;
    let stats: HashMap<_, IoKey, IoStat> =
        HashMap::try_from(map).context("IO_STATS has an unexpected type")?;
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

/// Latency (ns) below which `fraction` of the requests of a log2 microsecond histogram
/// fall, interpolated linearly inside the bucket (so within a factor of 2).
pub fn percentile_ns(hist: &[u64], fraction: f64) -> u64 {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return 0;
    }
    let rank = fraction * total as f64;
    let mut seen = 0.0;
    for (slot, &count) in hist.iter().enumerate() {
        if count == 0 {
            continue;
        }
        if seen + count as f64 >= rank {
            let (low, high) = bucket_us(slot);
            let inside = (rank - seen) / count as f64;
            return ((low as f64 + inside * (high - low) as f64) * 1000.0) as u64;
        }
        seen += count as f64;
    }
    let (_, high) = bucket_us(hist.len().saturating_sub(1));
    high * 1000
}

/// Bounds of bucket `slot` in microseconds, [low, high): [0, 2) for slot 0, then
/// [2^slot, 2^(slot+1)).
pub fn bucket_us(slot: usize) -> (u64, u64) {
    if slot == 0 {
        (0, 2)
    } else {
        (1u64 << slot, 1u64 << (slot + 1))
    }
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
    fn percentiles_from_buckets() {
        // 100 requests in [64, 128) us, 1 in [1024, 2048) us.
        let mut hist = vec![0u64; 12];
        hist[6] = 100;
        hist[10] = 1;
        let p50 = percentile_ns(&hist, 0.5);
        assert!((64_000..128_000).contains(&p50), "{p50}");
        let p99 = percentile_ns(&hist, 0.99);
        assert!((64_000..=128_000).contains(&p99), "{p99}");
        let p100 = percentile_ns(&hist, 1.0);
        assert!((1_024_000..=2_048_000).contains(&p100), "{p100}");
        assert_eq!(percentile_ns(&[], 0.5), 0);
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
