//! Root integration tests of the IO path on a real file system: ext4 on a loop device,
//! a large directory read back cold, and block requests counted against perf.

#[macro_use]
mod common;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use common::*;
use lockpath_tests::block;

/// [`run_ok`], its output trimmed.
fn run(program: &str, args: &[&str]) -> String {
    run_ok(program, args).trim().to_string()
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .map(|output| output.status.success())
        .unwrap_or(false)
}

/// An ext4 file system on its own loop device in a scratch directory. Dropping it
/// unmounts, detaches the loop device and removes the directory, also on panic.
struct Ext4Loop {
    dir: Scratch,
    mount: PathBuf,
    device: Option<String>,
    mounted: bool,
    /// (file, value before) of the device's writeback settings this test changed.
    bdi_restore: Vec<(PathBuf, String)>,
}

impl Ext4Loop {
    fn new(test: &str, size_mb: u64) -> Ext4Loop {
        let dir = scratch(test);
        let image = dir.join("ext4.img");
        let mount = dir.join("mnt");
        std::fs::create_dir_all(&mount).expect("mount point");
        let mut fs = Ext4Loop {
            dir,
            mount,
            device: None,
            mounted: false,
            bdi_restore: Vec::new(),
        };
        std::fs::File::create(&image)
            .and_then(|file| file.set_len(size_mb << 20))
            .expect("image file");
        // No lazy initialisation: no background IO on the device after mount.
        run(
            "mkfs.ext4",
            &[
                "-q",
                "-F",
                "-E",
                "lazy_itable_init=0,lazy_journal_init=0",
                image.to_str().expect("path"),
            ],
        );
        fs.device = Some(run(
            "losetup",
            &["--show", "-f", image.to_str().expect("path")],
        ));
        run(
            "mount",
            &[
                "-o",
                "noatime",
                fs.device(),
                fs.mount.to_str().expect("path"),
            ],
        );
        fs.mounted = true;
        fs
    }

    /// Unmounts and mounts again: the journal is checkpointed and no metadata buffer
    /// stays pinned in memory, so the next reads really go to the device.
    fn remount(&mut self) {
        let mount = self.mount.to_str().expect("path").to_string();
        run("umount", &[&mount]);
        self.mounted = false;
        run("mount", &["-o", "noatime", self.device(), &mount]);
        self.mounted = true;
    }

    fn device(&self) -> &str {
        self.device.as_deref().expect("loop device")
    }

    /// Caps this device's dirty page cache at `bytes` (its own limit, strictly kept):
    /// a buffered writer is throttled there and the flusher threads write its pages
    /// back while it writes, as on a machine with little memory. Restored on drop (the
    /// loop device outlives the test).
    fn limit_dirty(&mut self, bytes: u64) {
        let name = Path::new(self.device())
            .file_name()
            .expect("device name")
            .to_owned();
        let bdi = Path::new("/sys/block").join(name).join("bdi");
        let max_bytes = bdi.join("max_bytes");
        // max_bytes is 6.2+; before, a share of the machine's limit.
        let (limit, value) = if max_bytes.exists() {
            (max_bytes, bytes.to_string())
        } else {
            (bdi.join("max_ratio"), "1".to_string())
        };
        for (file, value) in [(limit, value), (bdi.join("strict_limit"), "1".into())] {
            let before = std::fs::read_to_string(&file).unwrap_or_default();
            std::fs::write(&file, &value)
                .unwrap_or_else(|err| panic!("write {}: {err}", file.display()));
            self.bdi_restore.push((file, before.trim().to_string()));
        }
    }

    /// (major, minor) of the loop device.
    fn dev(&self) -> (u32, u32) {
        device_numbers(self.device())
    }
}

impl Drop for Ext4Loop {
    fn drop(&mut self) {
        for (file, before) in self.bdi_restore.drain(..).rev() {
            let _ = std::fs::write(file, before);
        }
        if self.mounted {
            let mount = self.mount.to_str().unwrap_or_default().to_string();
            let ok = Command::new("umount")
                .arg(&mount)
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !ok {
                let _ = Command::new("umount").args(["-l", &mount]).status();
            }
        }
        if let Some(device) = &self.device {
            let _ = Command::new("losetup").args(["-d", device]).status();
        }
    }
}

/// The start of a root test on ext4: programs loadable, `tools` installed besides
/// mkfs.ext4, losetup and mount (under CI=true all of them, or the test fails), then a
/// fresh ext4 of `size_mb` MiB on a loop device and an output directory beside it.
/// `None`: skipped outside CI, the reason printed.
fn ext4_test(test: &str, tools: &[&str], size_mb: u64) -> Option<(Ext4Loop, PathBuf)> {
    let needed = ["mkfs.ext4", "losetup", "mount"].iter().chain(tools);
    if !can_load_programs(test) || !needed.into_iter().all(|tool| require_tool(test, tool)) {
        return None;
    }
    let fs = Ext4Loop::new(test, size_mb);
    let out = fs.dir.join("out");
    std::fs::create_dir_all(&out).expect("out dir");
    Some((fs, out))
}

/// The profile's block-IO rows of device (`major`, `minor`).
fn device_rows(profile: &serde_json::Value, (major, minor): (u32, u32)) -> Vec<&serde_json::Value> {
    items(&profile["io"], "io rows")
        .filter(|row| {
            row["major"].as_u64() == Some(major as u64)
                && row["minor"].as_u64() == Some(minor as u64)
        })
        .collect()
}

fn drop_caches() {
    run("sync", &[]);
    std::fs::write("/proc/sys/vm/drop_caches", "3").expect("drop caches");
}

fn frames_of(profile: &serde_json::Value, row: &serde_json::Value) -> Vec<String> {
    row["stack"]
        .as_u64()
        .map(|id| stack_names(profile, id))
        .unwrap_or_default()
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn ext4_directory_waits_and_block_requests() {
    let _alone = or_skip!(root_test_alone(&[]));
    let ci = is_ci();
    for tool in ["mkfs.ext4", "losetup", "mount", "perf"] {
        if !have(tool) {
            assert!(!ci, "{tool} is needed under CI=true");
            eprintln!("SKIP ext4_directory_waits_and_block_requests: no {tool}");
            return;
        }
    }
    let mut fs = Ext4Loop::new("io-ext4", 256);
    let keep = std::env::var_os("LOCKPATH_KEEP").map(PathBuf::from);
    let (major, minor) = fs.dev();
    let dir = fs.mount.join("big");
    let tool = workload("ext4-dir");
    run(
        tool.to_str().expect("path"),
        &["populate", dir.to_str().expect("path"), "10000"],
    );
    fs.remount();
    drop_caches();

    let out = fs.dir.join("out");
    std::fs::create_dir_all(&out).expect("out dir");
    let profile_path = out.join("io.json");
    let perf_path = out.join("perf.txt");
    let svg_path = out.join("io.svg");
    // perf counts the loop device's completions system-wide, around the whole recording;
    // the file system has no IO outside the workload (synced before, syncfs at its end).
    let kernel_dev = (major << 20) | minor;
    let filter = format!("dev == {kernel_dev}");
    let lockpath = lockpath_bin();
    let output = Command::new("perf")
        .args([
            "stat",
            "-e",
            "block:block_rq_complete",
            "--filter",
            &filter,
            "-a",
            "-x",
            ",",
            "-o",
        ])
        .arg(&perf_path)
        .arg("--")
        .arg(&lockpath)
        .args(["record", "-a", "--offcpu", "--io", "-o"])
        .arg(&profile_path)
        .arg("--flamegraph")
        .arg(&svg_path)
        .arg("--")
        .arg(&tool)
        .args(["run", dir.to_str().expect("path"), "2000"])
        .output()
        .expect("run perf stat -- lockpath record");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "lockpath failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("listed=12000"),
        "the workload ran: {stdout}"
    );

    if let Some(keep) = &keep {
        let _ = std::fs::copy(&profile_path, keep);
    }
    let profile = load_json(&profile_path);
    let duration_ns = profile["duration_s"].as_f64().expect("duration") * 1e9;
    let workload_pid = items(&profile["processes"], "processes")
        .find(|process| process["comm"] == "ext4-dir")
        .and_then(|process| process["pid"].as_u64())
        .unwrap_or_else(|| panic!("ext4-dir among the processes: {}", profile["processes"]));

    // Buffer and page waits of the workload, through ext4's read paths. Buffer waits
    // name ext4 (directory blocks, inode tables). Page waits of file reads do not:
    // ext4_file_read_iter tail-calls generic_file_read_iter, which tail-calls
    // filemap_read, so the stack goes vfs_read -> filemap_read; those frames are the
    // evidence that it is the page-cache read of the workload's ext4 files.
    for (class, read_frames) in [
        (
            "buffer",
            &[
                "ext4_read_bh",
                "ext4_bread",
                "__ext4_read_dirblock",
                "ext4_find_entry",
                "__ext4_find_entry",
                "__ext4_get_inode_loc",
                "ext4_readdir",
                "ext4_lookup",
            ][..],
        ),
        (
            "page",
            &[
                "filemap_read",
                "filemap_get_pages",
                "ext4_file_read_iter",
                "ext4_mpage_readpages",
            ][..],
        ),
    ] {
        let rows: Vec<&serde_json::Value> = items(&profile["offcpu"], "offcpu rows")
            .filter(|row| row["pid"].as_u64() == Some(workload_pid) && row["class"] == class)
            .collect();
        let total: u64 = rows
            .iter()
            .map(|row| row["total_ns"].as_u64().expect("total"))
            .sum();
        eprintln!(
            "ext4-dir: {class} waits {total} ns in {} stacks",
            rows.len()
        );
        assert!(total > 0, "no {class} wait for the workload");
        assert!(
            rows.iter().any(|row| frames_of(&profile, row)
                .iter()
                .any(|name| read_frames.contains(&name.as_str()))),
            "no {class} stack with a read frame {read_frames:?}"
        );
        for row in rows {
            assert_eq!(row["state"], "D");
        }
    }
    let ext4_buffer_frames = items(&profile["offcpu"], "offcpu rows")
        .filter(|row| row["pid"].as_u64() == Some(workload_pid) && row["class"] == "buffer")
        .any(|row| {
            frames_of(&profile, row)
                .iter()
                .any(|name| name.starts_with("ext4_") || name.starts_with("__ext4_"))
        });
    assert!(ext4_buffer_frames, "buffer waits go through ext4 code");

    // Block requests on the loop device agree with perf's count of the same tracepoint.
    let io_rows = device_rows(&profile, (major, minor));
    let ours: u64 = io_rows
        .iter()
        .map(|row| row["count"].as_u64().expect("count"))
        .sum();
    let theirs = perf_count(&perf_path, "block:block_rq_complete");
    assert!(
        theirs > 100,
        "the cold directory must cause block IO: perf saw {theirs}"
    );
    let error = (ours as f64 - theirs as f64).abs() / theirs as f64;
    eprintln!(
        "loop device {major}:{minor}: lockpath {ours} requests, perf {theirs} ({:.2}% apart)",
        error * 100.0
    );
    assert!(
        error < 0.03,
        "lockpath {ours} vs perf {theirs}: {:.1}% apart",
        error * 100.0
    );
    let name = Path::new(fs.device())
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    for row in &io_rows {
        assert_eq!(
            row["device"].as_str(),
            Some(name.as_str()),
            "device named from /sys"
        );
        let count = row["count"].as_u64().expect("count");
        let total = row["total_ns"].as_u64().expect("total");
        let max = row["max_ns"].as_u64().expect("max") as f64;
        assert!(
            total > 0 && max > 0.0 && max < duration_ns,
            "latency out of range: {row}"
        );
        let hist_sum: u64 = items(&row["hist"], "hist")
            .map(|v| v.as_u64().expect("n"))
            .sum();
        assert_eq!(hist_sum, count, "the histogram holds every request: {row}");
    }
    assert!(
        io_rows.iter().any(|row| row["op"] == "read"),
        "reads on the loop device"
    );

    // Summary, JSON report, flamegraph kinds.
    assert!(
        stdout.contains("usecs") && stdout.contains("distribution"),
        "biolatency-style histogram:\n{stdout}"
    );
    assert!(
        stdout.contains(&format!("{name} ({major}:{minor})")),
        "device in the summary:\n{stdout}"
    );
    let report = report_json(&profile_path, &["--top", "0"]);
    let group = items(&report["io"], "io in the JSON report")
        .find(|group| group["dev"] == format!("{major}:{minor}").as_str() && group["op"] == "read")
        .unwrap_or_else(|| panic!("loop reads in the JSON report: {}", report["io"]));
    let p50 = group["p50_ns"].as_u64().expect("p50");
    let p99 = group["p99_ns"].as_u64().expect("p99");
    assert!(
        p50 > 0 && p50 <= p99 && p99 <= group["max_ns"].as_u64().expect("max"),
        "{group}"
    );
    let io_svg = out.join("io-only.svg");
    lockpath_ok(&[
        "flamegraph",
        profile_path.to_str().expect("path"),
        "--kind",
        "io",
        "-o",
        io_svg.to_str().expect("path"),
    ]);
    let svg = read_svg(&io_svg);
    assert!(
        svg.contains("buffer") && svg.contains("ext4-dir"),
        "IO flamegraph has the classes and process"
    );
    assert!(
        !svg.contains(";sleep;"),
        "IO flamegraph has IO classes only"
    );
    let folded = lockpath_ok(&[
        "export",
        profile_path.to_str().expect("path"),
        "--format",
        "folded",
        "--kind",
        "io",
    ]);
    for line in String::from_utf8_lossy(&folded.stdout).lines() {
        let class = line.split(';').nth(1).expect("class frame");
        assert!(
            ["buffer", "page", "block-io", "journal"].contains(&class),
            "{line}"
        );
    }
    check_io_exporters(&out, &profile_path, &io_rows, &name);
}

/// The exporters on the ext4 recording: diff per device and op (per second), pprof of
/// the IO waits read by go, the HTML section with the device's histogram.
fn check_io_exporters(dir: &Path, path: &Path, loop_rows: &[&serde_json::Value], device: &str) {
    let path_str = path.to_str().expect("path");
    let profile = load_json(path);
    let duration_s = profile["duration_s"].as_f64().expect("duration");
    let diff = lockpath_ok(&[
        "diff", path_str, path_str, "--kind", "io", "--format", "json",
    ]);
    let diff: serde_json::Value = serde_json::from_slice(&diff.stdout).expect("diff JSON");
    let reads: u64 = loop_rows
        .iter()
        .filter(|row| row["op"] == "read")
        .map(|row| row["count"].as_u64().expect("count"))
        .sum();
    let key = format!("{device} read");
    let row = diff_rows(&diff, "device")
        .iter()
        .find(|row| row["key"] == key.as_str())
        .unwrap_or_else(|| panic!("{key} in {diff}"));
    let per_s = reads as f64 / duration_s;
    let events = row["new_events_per_s"].as_f64().expect("events");
    assert!(
        (events - per_s).abs() <= per_s * 1e-9,
        "{row} vs {per_s} req/s"
    );
    assert_eq!(row["ratio"].as_f64(), Some(1.0));

    let waits: Vec<&serde_json::Value> = items(&profile["offcpu"], "offcpu rows")
        .filter(|row| {
            ["buffer", "page", "block-io", "journal"].contains(&row["class"].as_str().unwrap_or(""))
        })
        .collect();
    if require_tool("ext4_directory_waits_and_block_requests", "go") {
        let pprof = dir.join("io.pb.gz");
        lockpath_ok(&[
            "export",
            path_str,
            "--format",
            "pprof",
            "--kind",
            "io",
            "-o",
            pprof.to_str().expect("path"),
        ]);
        let total: u64 = waits
            .iter()
            .map(|row| row["total_ns"].as_u64().expect("total"))
            .sum();
        assert_eq!(
            pprof_total(dir, &pprof, "io_wait", &["-unit", "ns"]),
            total,
            "pprof io_wait total is the IO classes' off-CPU time"
        );
    }

    let html = dir.join("io.html");
    let page = report_html(path, &html);
    assert!(page.contains("<section id=\"io\">"), "io section");
    assert!(
        page.contains(&format!("Latency histogram: {device} (")),
        "the loop device's histogram"
    );
    assert!(page.contains("<pre class=\"histogram\">"), "histogram");
    assert!(
        page.contains("title=\"IO wait flamegraph\""),
        "IO flamegraph inline"
    );
    assert!(
        page.contains("<section id=\"offcpu\">"),
        "offcpu section too"
    );
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn io_survives_a_device_that_vanishes_mid_run() {
    let _alone = or_skip!(root_test_alone(&[]));
    for tool in ["mkfs.ext4", "losetup", "mount"] {
        if !have(tool) {
            eprintln!("SKIP io_survives_a_device_that_vanishes_mid_run: no {tool}");
            return;
        }
    }
    let fs = Ext4Loop::new("io-vanish", 32);
    let (major, minor) = fs.dev();
    let name = Path::new(fs.device())
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let out = scratch("io-vanish-out");
    let profile_path = out.join("p.json");
    let (child, programs) = spawn_recording(&[
        "record",
        "--io",
        "-a",
        "-d",
        "3",
        "-o",
        profile_path.to_str().expect("path"),
    ]);
    // IO on the device, then the device goes away while lockpath still records.
    let tool = workload("ext4-dir");
    run(
        tool.to_str().expect("path"),
        &[
            "populate",
            fs.mount.join("d").to_str().expect("path"),
            "200",
        ],
    );
    run("sync", &[]);
    drop(fs);
    child.finish(&programs);
    let profile = load_json(&profile_path);
    let rows = device_rows(&profile, (major, minor));
    assert!(!rows.is_empty(), "the vanished device's requests are kept");
    for row in rows {
        assert_eq!(
            row["device"].as_str(),
            Some(name.as_str()),
            "named from the scan at start"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// A loop device on a scratch file, without a file system; detached and removed on drop.
struct BareLoop {
    dir: Scratch,
    device: String,
}

impl BareLoop {
    fn new(test: &str, size_mb: u64) -> BareLoop {
        let dir = scratch(test);
        let image = dir.join("disk.img");
        std::fs::File::create(&image)
            .and_then(|file| file.set_len(size_mb << 20))
            .expect("image file");
        let device = run("losetup", &["--show", "-f", image.to_str().expect("path")]);
        // udev probes a new block device (blkid, partition scan): let that finish before
        // the counts begin, where udev runs.
        let _ = Command::new("udevadm")
            .args(["settle", "--timeout=10"])
            .stderr(std::process::Stdio::null())
            .status();
        BareLoop { dir, device }
    }

    fn dev(&self) -> (u32, u32) {
        device_numbers(&self.device)
    }
}

impl Drop for BareLoop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
    }
}

/// Requests keyed by their `struct request` address: sector-less flushes (empty
/// `REQ_OP_FLUSH` requests) are counted one per fsync; reads of one sector by four
/// threads at once (requests a (dev, sector) key confuses: one replaced the other, one
/// completion went unmatched) are each counted and credited to their process; direct
/// writes are credited to the process that submitted them; and perf, counting
/// `block:block_rq_issue` on the same device while lockpath's raw tracepoints are
/// attached, sees exactly the requests lockpath counted (a classic tracepoint program
/// returning 0 would blind it).
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn sectorless_flushes_and_writes_match_perf_issue_counts() {
    let _alone = alone();
    const TEST: &str = "sectorless_flushes_and_writes_match_perf_issue_counts";
    if !can_load_programs(TEST) {
        return;
    }
    let ci = is_ci();
    for tool in ["losetup", "perf"] {
        if !have(tool) {
            assert!(!ci, "{tool} is needed under CI=true");
            eprintln!("SKIP {TEST}: no {tool}");
            return;
        }
    }
    let disk = BareLoop::new("io-flush", 16);
    let (major, minor) = disk.dev();
    let name = Path::new(&disk.device)
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let cache =
        std::fs::read_to_string(format!("/sys/block/{name}/queue/write_cache")).unwrap_or_default();
    if !cache.contains("write back") {
        eprintln!("SKIP {TEST}: {name} has no write-back cache ({cache:?}): fsync sends no flush");
        return;
    }
    const FLUSHES: u64 = 40;
    const WRITES: u64 = 16;
    const READERS: u64 = 4;
    const READS: u64 = 500;
    let out = disk.dir.join("out");
    std::fs::create_dir_all(&out).expect("out dir");
    let profile_path = out.join("p.json");
    let perf_path = out.join("perf.txt");
    let filter = format!("dev == {}", (major << 20) | minor);
    let others_before = requests_of_other_disks(&name);
    let output = Command::new("perf")
        .args([
            "stat",
            "-e",
            "block:block_rq_issue,block:block_rq_complete",
            "--filter",
            &filter,
            "-a",
            "-x",
            ",",
            "-o",
        ])
        .arg(&perf_path)
        .arg("--")
        .arg(lockpath_bin())
        .args(["record", "-a", "--io", "-o"])
        .arg(&profile_path)
        .arg("--")
        .arg(workload("ext4-dir"))
        .args([
            "block",
            &disk.device,
            &FLUSHES.to_string(),
            &WRITES.to_string(),
            &READERS.to_string(),
            &READS.to_string(),
        ])
        .output()
        .expect("run perf stat -- lockpath record");
    let others = requests_of_other_disks(&name).saturating_sub(others_before);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "lockpath failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let pid: u64 = stdout
        .split_whitespace()
        .find_map(|word| word.strip_prefix("pid="))
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("the workload ran: {stdout}"));
    let profile = load_json(&profile_path);
    assert!(
        items(&profile["probes"], "probes").any(|probe| probe["family"] == "io"
            && probe["method"]
                .as_str()
                .unwrap_or("")
                .contains("raw_tracepoint")),
        "{}",
        profile["probes"]
    );
    let rows = device_rows(&profile, (major, minor));
    let sum = |op: &str, field: &str, of_pid: Option<u64>| -> u64 {
        rows.iter()
            .filter(|row| row["op"] == op && of_pid.is_none_or(|pid| row["pid"] == pid))
            .map(|row| row[field].as_u64().expect(field))
            .sum()
    };
    let flushes = sum("flush", "count", None);
    let writes = sum("write", "count", None);
    let reads = sum("read", "count", Some(pid));
    let ours: u64 = rows
        .iter()
        .map(|row| row["count"].as_u64().expect("count"))
        .sum();
    let issued = perf_count(&perf_path, "block:block_rq_issue");
    let completed = perf_count(&perf_path, "block:block_rq_complete");
    eprintln!(
        "{name}: lockpath {ours} requests ({flushes} flushes, {writes} writes, {reads} reads \
         of one sector by the workload), perf {issued} issued, {completed} completions"
    );
    assert_eq!(sum("flush", "bytes", None), 0, "flushes carry no data");
    assert!(
        sum("write", "count", Some(pid)) > 0,
        "direct writes are credited to the submitting process {pid}: {rows:?}"
    );
    // perf is not blinded and agrees request for request, or lockpath is short by no
    // more than the runs the kernel says it skipped (an interrupt issuing a request while
    // the issue program runs): every flush, every written byte once, every read of the
    // shared sector credited to the workload. Its completions also count the
    // submitter's side of each flush (completed by the flush machinery, never issued).
    let lockpath = block::Tally {
        requests: ours,
        flushes,
        write_bytes: sum("write", "bytes", None),
        reads,
    };
    let truth = block::Tally {
        requests: issued,
        flushes: FLUSHES,
        write_bytes: WRITES * block::BLOCK as u64,
        reads: READERS * READS,
    };
    let perf = "requests (perf block_rq_issue)";
    let skipped = block::check_tally(&lockpath, &truth, perf, &profile["losses"])
        .unwrap_or_else(|why| panic!("{why}; rows {rows:?}"));
    assert!(
        completed >= issued,
        "perf completions {completed} < issues {issued}"
    );
    // The losses are counted system-wide: they say something of the loop device only when
    // no other disk was busy (a machine building beside the test once had 5 stale
    // entries among its system disk's requests while the loop device's counts matched
    // perf's exactly). Unmatched completions can always be another disk's requests in
    // flight when the recording started.
    let losses = &profile["losses"];
    if others > 0 {
        eprintln!(
            "losses not checked: other disks completed {others} requests during the run: {losses}"
        );
        return;
    }
    // A skipped completion leaves its request open until its address is used again.
    for (loss, allowed) in [("io_stale_replaced", skipped), ("io_inflight_map_full", 0)] {
        assert!(
            losses[loss].as_u64().unwrap_or(0) <= allowed,
            "{loss} in a quiet run: {losses}"
        );
    }
}

/// Requests completed so far by every block device but `name` (reads, writes, discards
/// and flushes of /proc/diskstats; partitions are left out, their disk counts them).
fn requests_of_other_disks(name: &str) -> u64 {
    let stats = std::fs::read_to_string("/proc/diskstats").unwrap_or_default();
    stats
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let device = *fields.get(2)?;
            let whole_disk = Path::new("/sys/block").join(device).exists();
            (device != name && whole_disk).then(|| {
                // Completed reads (3), writes (7), discards (14), flushes (18), 0-based.
                [3, 7, 14, 18]
                    .iter()
                    .filter_map(|&at| fields.get(at)?.parse::<u64>().ok())
                    .sum::<u64>()
            })
        })
        .sum()
}

/// (major, minor) of a block device node.
fn device_numbers(device: &str) -> (u32, u32) {
    let text = run("stat", &["-c", "%t %T", device]);
    let mut parts = text
        .split_whitespace()
        .map(|hex| u32::from_str_radix(hex, 16).expect("hex"));
    (parts.next().expect("major"), parts.next().expect("minor"))
}

/// fio on ext4 (4 jobs of random 4 KiB writes, an fsync every 8): the journal's locks,
/// the loop device's, the block layer's and the wait queues of their waits. The top 10
/// rows of the lock table (`report --by lock`) are 10 different classes: no row is an
/// instance of a class (a hashed bit-wait queue, a wait queue or completion on a kernel
/// stack, a generic kmalloc object: the `class` of its `--by instance` row), no class
/// is two rows (a lock's readers and writers share its row), and no lock is in two rows
/// (a lock taken in several functions is one class, not one per function).
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn fio_lock_table_rows_are_distinct_classes() {
    let test = test_name!();
    let _alone = alone();
    let Some((fs, out)) = ext4_test(test, &["fio"], 512) else {
        return;
    };
    let profile_path = out.join("fio.json");
    let directory = format!("--directory={}", path_str(&fs.mount));
    let command = [
        "fio",
        "--name=classes",
        &directory,
        "--numjobs=4",
        "--rw=randwrite",
        "--bs=4k",
        "--size=32M",
        "--fsync=8",
        "--ioengine=psync",
        "--time_based",
        "--runtime=5",
        "--group_reporting",
    ];
    let profile = record_profile(&["--lock"], &profile_path, &command).profile;
    let profile_arg = path_str(&profile_path);
    let text = lockpath_ok(&["report", profile_arg, "--by", "lock", "--top", "12"]);
    eprintln!("{}", String::from_utf8_lossy(&text.stdout));
    let report = |by: &str| -> Vec<serde_json::Value> {
        let output = lockpath_ok(&[
            "report",
            profile_arg,
            "--by",
            by,
            "--format",
            "json",
            "--top",
            "0",
        ]);
        let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON report");
        json["locks"].as_array().expect("lock rows").clone()
    };
    let by_lock = report("lock");
    let by_instance = report("instance");
    let field = |row: &serde_json::Value, key: &str| -> String {
        row[key].as_str().unwrap_or_default().to_string()
    };
    let top: Vec<(String, String)> = by_lock
        .iter()
        .take(10)
        .map(|row| (field(row, "lock"), field(row, "type")))
        .collect();
    for row in by_lock.iter().take(10) {
        eprintln!(
            "top: {:<50} {:<10} {:<13} x{:<3} {} ns",
            field(row, "lock"),
            field(row, "type"),
            field(row, "lock_name_source"),
            row["instances"].as_u64().unwrap_or(0),
            row["total_wait_ns"].as_u64().unwrap_or(0)
        );
    }
    assert!(
        top.len() == 10,
        "4 fio jobs with fsyncs contend at least 10 locks: {top:?}"
    );
    // Each instance (by name) to its classes: its `class`, else its name.
    let mut classes_of: std::collections::HashMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for row in &by_instance {
        let class = field(row, "class");
        let name = field(row, "lock");
        let class = if class.is_empty() {
            name.clone()
        } else {
            class
        };
        classes_of.entry(name).or_default().insert(class);
    }
    for (name, kind) in &top {
        // A row named as an instance of a class is a class not grouped.
        let classes = classes_of.get(name);
        assert!(
            classes.is_none_or(|classes| classes.iter().all(|class| class == name)),
            "{name} ({kind}) is one instance of {classes:?}: {top:?}"
        );
        assert!(
            !name.starts_with("static@finish_wait")
                && !name.starts_with("static@__wake_up")
                && !name.starts_with("static@prepare_to_wait")
                && !name.starts_with("0xffffc9"),
            "{name} ({kind}) is a single bit-wait or on-stack instance: {top:?}"
        );
    }
    // One row per class: a lock's readers and writers share its row, as do a mutex's
    // spinning and sleeping waits, as do its waits' outcomes (`rwlock:R` and `rwlock:W`,
    // `mutex`, `mutex:spin` and `mutex !EINTR` are one lock type). Two locks of
    // different types may share a name: a pipe's mutex and its wait queue's spinlock,
    // both in one `kmalloc-cg-192` object and both taken in `anon_pipe_read`.
    let base_type = |kind: &str| {
        kind.split([':', ' '])
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let mut distinct: Vec<(&String, String)> = top
        .iter()
        .map(|(name, kind)| (name, base_type(kind)))
        .collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), top.len(), "a class in two rows: {top:?}");
    // No lock in two of the rows: every recorded row of a lock goes to one class.
    // Profile row -> class through its `--by instance` class.
    let class_of: std::collections::HashMap<(String, String), String> = by_instance
        .iter()
        .map(|row| {
            let class = field(row, "class");
            let name = field(row, "lock");
            let key = (name.clone(), field(row, "type"));
            (key, if class.is_empty() { name } else { class })
        })
        .collect();
    let top_names: std::collections::BTreeSet<&String> = top.iter().map(|(name, _)| name).collect();
    let mut rows_of_lock: std::collections::BTreeMap<
        (u64, String),
        std::collections::BTreeSet<String>,
    > = Default::default();
    for row in profile["locks"].as_array().expect("locks") {
        let addr = row["lock_addr"].as_u64().expect("lock_addr");
        let kind =
            lockpath_profile::lock::lock_type_name(row["flags"].as_u64().expect("flags") as u32)
                .to_string();
        let name = row["lock_name"].as_str().expect("lock_name").to_string();
        let class = class_of
            .get(&(name.clone(), kind.clone()))
            .cloned()
            .unwrap_or(name);
        if top_names.contains(&class) {
            rows_of_lock.entry((addr, kind)).or_default().insert(class);
        }
    }
    for ((addr, kind), classes) in &rows_of_lock {
        assert!(
            classes.len() == 1,
            "lock {addr:#x} ({kind}) is in {} rows: {classes:?}",
            classes.len()
        );
    }
}

/// `dd`'s own count of the bytes it copied (`N bytes (...) copied` on stderr).
fn dd_bytes(stderr: &str) -> u64 {
    stderr
        .lines()
        .find(|line| line.contains(" bytes") && line.contains("copied"))
        .and_then(|line| line.split_whitespace().next())
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no byte count from dd in:\n{stderr}"))
}

/// A second writer on the same file system, outside the recording's targets: dd
/// writes 16 MiB to `path` and syncs, again and again until `stop` exists.
fn bystander(path: &Path, stop: &Path) -> std::process::Child {
    let script = format!(
        "while [ ! -e '{}' ]; do dd if=/dev/zero of='{}' bs=1M count=16 conv=fsync status=none; done",
        path_str(stop),
        path_str(path)
    );
    Command::new("sh")
        .args(["-c", &script])
        .spawn()
        .expect("start the bystander")
}

/// The `io_files` group of the file at `path` in a JSON report, if any.
fn file_group<'a>(report: &'a serde_json::Value, path: &Path) -> Option<&'a serde_json::Value> {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(path).expect("stat").ino();
    report["io_files"]
        .as_array()?
        .iter()
        .find(|group| group["file"]["ino"].as_u64() == Some(ino))
}

/// Bytes of a group's `issued_by` or `caused_by` list, by (pid, process).
fn shares(group: &serde_json::Value, list: &str) -> Vec<(u64, String, u64)> {
    group[list]
        .as_array()
        .expect("share list")
        .iter()
        .map(|share| {
            (
                share["pid"].as_u64().unwrap_or(0),
                share["process"].as_str().unwrap_or_default().to_string(),
                share["bytes"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// A buffered writer's IO is charged to it and to its file, though the flusher issues
/// it: `dd` writes 300 MiB (fsync at the end) to ext4 on a loop device whose dirty
/// cache is capped at 32 MiB, so kworker threads write most of it back while dd runs.
/// Recorded as `-- dd` (only dd is a target) and as `-a -- dd` (every process), each
/// time beside a second dd writing another file, started outside the recording:
/// - dd's file: its written bytes within 5% of dd's own count, at least 95% of them
///   caused by dd, more than half issued by kworker threads;
/// - `-- dd`: the bystander's file is not in the profile (not a target's IO);
/// - `-a`: the bystander's file is charged to the bystander alone.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn writeback_is_charged_to_the_writer_and_its_file() {
    let test = test_name!();
    let _alone = alone();
    let Some((mut fs, out)) = ext4_test(test, &["dd"], 1024) else {
        return;
    };
    fs.limit_dirty(32 << 20);
    for system_wide in [false, true] {
        let written = fs.mount.join(format!("written-{system_wide}"));
        let other = fs.mount.join(format!("bystander-{system_wide}"));
        let stop = out.join(format!("stop-{system_wide}"));
        let profile_path = out.join(format!("writeback-{system_wide}.json"));
        let mut other_writer = bystander(&other, &stop);
        let options: &[&str] = if system_wide {
            &["--io", "-a"]
        } else {
            &["--io"]
        };
        let of = format!("of={}", path_str(&written));
        let command = [
            "dd",
            "if=/dev/zero",
            &of,
            "bs=1M",
            "count=300",
            "conv=fsync",
        ];
        let Recorded { stdout, stderr, .. } = record_profile(options, &profile_path, &command);
        std::fs::write(&stop, "").expect("stop file");
        assert!(other_writer.wait().expect("bystander").success());
        let copied = dd_bytes(&stderr);
        eprintln!("{stdout}");
        let report = lockpath_ok(&["report", path_str(&profile_path), "--format", "json"]);
        let report: serde_json::Value =
            serde_json::from_slice(&report.stdout).expect("JSON report");
        let group = file_group(&report, &written)
            .unwrap_or_else(|| panic!("no io_files group of {}: {report}", written.display()));
        let bytes = group["write_bytes"].as_u64().unwrap_or(0);
        let within = |value: u64| value as f64 / copied as f64;
        assert!(
            (0.95..=1.05).contains(&within(bytes)),
            "{bytes} written at the block layer, dd copied {copied}"
        );
        let caused = shares(group, "caused_by");
        let (dd_pid, dd_name, by_dd) = caused.first().cloned().expect("a cause");
        assert_eq!(dd_name, "dd", "{caused:?}");
        assert!(
            within(by_dd) >= 0.95,
            "{by_dd} of {copied} bytes caused by dd: {caused:?}"
        );
        let issued = shares(group, "issued_by");
        let by_kworker: u64 = issued
            .iter()
            .filter(|(_, process, _)| process.starts_with("kworker"))
            .map(|(_, _, bytes)| bytes)
            .sum();
        assert!(
            by_kworker * 2 > bytes,
            "{by_kworker} of {bytes} bytes issued by kworker threads: {issued:?}"
        );
        let path = group["file"]["path"].as_str().unwrap_or_default();
        assert_eq!(path, path_str(&written), "the file's path");
        // The file view: its table alone, and its flamegraph rooted at the file.
        let by_file = lockpath_ok(&["report", path_str(&profile_path), "--by", "file"]);
        let by_file = String::from_utf8_lossy(&by_file.stdout).into_owned();
        assert!(
            by_file.contains(path_str(&written)) && by_file.contains("caused by"),
            "{by_file}"
        );
        let svg = out.join(format!("files-{system_wide}.svg"));
        let args = [
            "flamegraph",
            path_str(&profile_path),
            "--kind",
            "file",
            "-o",
        ];
        lockpath_ok(&[&args[..], &[path_str(&svg)]].concat());
        let svg = std::fs::read_to_string(&svg).expect("file flamegraph");
        assert!(
            svg.contains("block write") && svg.contains("written-"),
            "file flamegraph"
        );
        let other_group = file_group(&report, &other);
        if !system_wide {
            assert!(
                other_group.is_none(),
                "the bystander's file in a -- dd recording: {other_group:?}"
            );
            continue;
        }
        let other_group = other_group.expect("the bystander's file with -a");
        let caused = shares(other_group, "caused_by");
        assert!(
            caused
                .iter()
                .all(|(pid, process, _)| *pid != dd_pid && process == "dd"),
            "the bystander's file charged to others than its own dd processes: {caused:?}"
        );
    }
}

/// With `--map-entries 2`, 40 files written and synced one after another cannot each
/// have their row: the requests the full map has no room for go to their (device, op,
/// process) rows without file, so the device's totals stay whole. Checked against
/// perf's count of the loop device's issued requests in the same run (its completions
/// also count each flush's submitter side) and against the bytes the files hold.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn a_full_io_map_keeps_every_request() {
    let test = test_name!();
    let _alone = alone();
    let Some((fs, out)) = ext4_test(test, &["dd", "perf"], 256) else {
        return;
    };
    let (major, minor) = fs.dev();
    let dir = fs.mount.join("many");
    std::fs::create_dir_all(&dir).expect("files dir");
    let profile_path = out.join("io.json");
    let perf_path = out.join("perf.txt");
    let script = format!(
        "for i in $(seq 40); do dd if=/dev/zero of={}/f$i bs=256k count=4 conv=fsync \
         status=none || exit 1; done",
        path_str(&dir)
    );
    let filter = format!("dev == {}", (major << 20) | minor);
    let output = Command::new("perf")
        .args(["stat", "-e", "block:block_rq_issue", "--filter", &filter])
        .args(["-a", "-x", ",", "-o", path_str(&perf_path), "--"])
        .arg(lockpath_bin())
        .args(["record", "-a", "--io", "--map-entries", "2", "-o"])
        .arg(&profile_path)
        .args(["--", "sh", "-c", &script])
        .output()
        .expect("run perf stat -- lockpath record");
    assert!(
        output.status.success(),
        "lockpath failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let written: u64 = std::fs::read_dir(&dir)
        .expect("files")
        .map(|entry| entry.expect("entry").metadata().expect("size").len())
        .sum();
    assert_eq!(written, 40 << 20, "the workload wrote its 40 files");
    let profile = load_json(&profile_path);
    let map_full = profile["losses"]["io_map_full"].as_u64().unwrap_or(0);
    assert!(
        map_full > 0,
        "2 map entries cannot hold 40 files: {}",
        profile["losses"]
    );
    let rows = device_rows(&profile, (major, minor));
    let writes: Vec<&serde_json::Value> = rows
        .iter()
        .copied()
        .filter(|row| row["op"] == "write")
        .collect();
    let ours = sum_of(&rows, "count");
    let theirs = perf_count(&perf_path, "block:block_rq_issue");
    let bytes = sum_of(&writes, "bytes");
    eprintln!(
        "loop device: {ours} requests in {} rows, perf {theirs}; {bytes} bytes written for \
         {written} in the files; {map_full} requests in overflow rows",
        rows.len()
    );
    let error = ours.abs_diff(theirs) as f64 / theirs as f64;
    assert!(
        error < 0.03,
        "lockpath {ours} vs perf {theirs}: {:.1}% apart",
        error * 100.0
    );
    // The files' data, plus the journal and metadata that the syncs write.
    let share = bytes as f64 / written as f64;
    assert!(
        (1.0..1.25).contains(&share),
        "{bytes} bytes written to the device for {written} in the files"
    );
}

/// fio with io_uring, two jobs writing a file each (96 and 48 MiB, buffered, fsync at
/// the end): each file's bytes written at the block layer are within 5% of fio's own
/// `io_bytes` for its job, and charged to one process, each job its own.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn fio_io_uring_jobs_are_charged_their_own_files() {
    let test = test_name!();
    let _alone = alone();
    let Some((fs, out)) = ext4_test(test, &["fio"], 512) else {
        return;
    };
    let profile_path = out.join("fio.json");
    let jobs = [("a", 96), ("b", 48)];
    let mut job_args = Vec::new();
    for (name, mib) in jobs {
        job_args.extend([
            format!("--name={name}"),
            format!("--filename={name}.dat"),
            format!("--size={mib}M"),
        ]);
    }
    let mut fio_args = vec![
        "--ioengine=io_uring",
        "--rw=write",
        "--bs=64k",
        "--end_fsync=1",
    ];
    fio_args.extend(job_args.iter().map(String::as_str));
    let fio = record_fio(&fs, &out, &["--io"], &profile_path, &fio_args);
    let report = lockpath_ok(&["report", path_str(&profile_path), "--format", "json"]);
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).expect("JSON report");
    let mut causes = Vec::new();
    for (name, _) in jobs {
        let io_bytes = fio_io_bytes(&fio, name, "write");
        let file = fs.mount.join(format!("{name}.dat"));
        let group = file_group(&report, &file)
            .unwrap_or_else(|| panic!("no io_files group of {}", file.display()));
        let written = group["write_bytes"].as_u64().unwrap_or(0);
        let error = written.abs_diff(io_bytes) as f64 / io_bytes as f64;
        eprintln!(
            "job {name}: fio io_bytes {io_bytes}, lockpath {written} ({:.2}% apart)",
            error * 100.0
        );
        assert!(
            error <= 0.05,
            "job {name}: {written} bytes of {} at the block layer, fio wrote {io_bytes}",
            file.display()
        );
        let caused = shares(group, "caused_by");
        let (pid, process, bytes) = caused.first().cloned().expect("a cause");
        assert!(
            bytes as f64 >= 0.95 * written as f64 && process.starts_with("fio"),
            "job {name}: caused by {caused:?}"
        );
        causes.push(pid);
    }
    assert_ne!(causes[0], causes[1], "both jobs charged to one process");
}

/// Direct IO carries no page of its file, so its requests are charged to the file of
/// the read or write call that submits them (`--file-calls`): fio writes 48 MiB to one
/// file with `direct=1` (psync: one pwrite per 1 MiB block), then reads it back the
/// same way. The file's bytes written and read at the block layer are fio's own
/// `io_bytes` of each job, issued and caused by fio.
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn direct_io_is_charged_to_the_file_of_its_call() {
    let test = test_name!();
    let _alone = alone();
    let Some((fs, out)) = ext4_test(test, &["fio"], 256) else {
        return;
    };
    let profile_path = out.join("direct.json");
    let fio_args = [
        "--filename=direct.dat",
        "--size=48M",
        "--bs=1M",
        "--direct=1",
        "--ioengine=psync",
        "--name=w",
        "--rw=write",
        "--name=r",
        "--stonewall",
        "--rw=read",
    ];
    let options = ["--io", "--file-calls"];
    let fio = record_fio(&fs, &out, &options, &profile_path, &fio_args);
    let (written_by_fio, read_by_fio) = (
        fio_io_bytes(&fio, "w", "write"),
        fio_io_bytes(&fio, "r", "read"),
    );
    assert_eq!(written_by_fio, 48 << 20, "fio wrote less than asked");
    let report = report_json(&profile_path, &[]);
    let file = fs.mount.join("direct.dat");
    let group = file_group(&report, &file).unwrap_or_else(|| {
        panic!(
            "no io_files group of {}: {}",
            file.display(),
            report["io_files"]
        )
    });
    let (written, read) = (
        group["write_bytes"].as_u64().unwrap_or(0),
        group["read_bytes"].as_u64().unwrap_or(0),
    );
    eprintln!(
        "fio wrote {written_by_fio} and read {read_by_fio} bytes; the file's block IO: \
         {written} written, {read} read"
    );
    assert_eq!(written, written_by_fio, "direct writes charged to the file");
    assert_eq!(read, read_by_fio, "direct reads charged to the file");
    for list in ["issued_by", "caused_by"] {
        let charged = shares(group, list);
        assert!(
            charged
                .iter()
                .all(|(_, process, _)| process.starts_with("fio")),
            "{list}: {charged:?}"
        );
    }
}

/// Records fio in the loop file system (`fio_args` after its JSON output options) with
/// `record OPTIONS`, the profile at `profile`; fio's own JSON output.
fn record_fio(
    fs: &Ext4Loop,
    out: &Path,
    options: &[&str],
    profile: &Path,
    fio_args: &[&str],
) -> serde_json::Value {
    let fio_json = out.join("fio-output.json");
    let directory = format!("--directory={}", path_str(&fs.mount));
    let fio_output = format!("--output={}", path_str(&fio_json));
    let mut command = vec!["fio", "--output-format=json", &fio_output, &directory];
    command.extend(fio_args);
    let stdout = record_profile(options, profile, &command).stdout;
    eprintln!("{stdout}");
    serde_json::from_str(&std::fs::read_to_string(&fio_json).expect("fio's output"))
        .expect("fio's JSON")
}

/// fio's `io_bytes` of job `job` for `op` (`read`, `write`).
fn fio_io_bytes(fio: &serde_json::Value, job: &str, op: &str) -> u64 {
    items(&fio["jobs"], "fio jobs")
        .find(|entry| entry["jobname"] == job)
        .and_then(|entry| entry[op]["io_bytes"].as_u64())
        .unwrap_or_else(|| panic!("no {op} io_bytes of job {job} in fio's output"))
}

/// `call` rows of a file group: (count, total_ns) summed over processes.
fn call_totals(group: &serde_json::Value, call: &str) -> (u64, u64) {
    group["calls"]
        .as_array()
        .map(|calls| {
            calls.iter().filter(|calls| calls["call"] == call).fold(
                (0, 0),
                |(count, total), calls| {
                    (
                        count + calls["count"].as_u64().unwrap_or(0),
                        total + calls["total_ns"].as_u64().unwrap_or(0),
                    )
                },
            )
        })
        .unwrap_or((0, 0))
}

/// Asserts lockpath's time of a file's calls against the workload's own clock around
/// them: never more (the tracepoints are inside the system call), at most 5% less.
fn assert_call_time(what: &str, lockpath_ns: u64, own_ns: u64) {
    let ratio = lockpath_ns as f64 / own_ns as f64;
    eprintln!("{what}: lockpath {lockpath_ns} ns, the workload's own {own_ns} ns ({ratio:.4})");
    assert!(
        (0.95..=1.001).contains(&ratio),
        "{what}: lockpath {lockpath_ns} ns against the workload's own {own_ns} ns"
    );
}

/// `--file-calls` times calls per file against the workloads' own clocks: fsync on
/// ext4 (3 files, 10 rounds of 128 KiB written then fsync, each fsync timed by the
/// workload), and open and write on the FUSE fixture (4 files; the server delays CREATE
/// 30 ms and WRITE 60 ms; the workload times each call).
#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn file_calls_match_the_workloads_own_timing() {
    let test = test_name!();
    let _alone = alone();
    let Some((fs, out)) = ext4_test(test, &[], 256) else {
        return;
    };
    let report_of = |profile: &Path| report_json(profile, &[]);
    let group_ending = |report: &serde_json::Value, name: &str| -> serde_json::Value {
        let suffix = format!("/{name}");
        report["io_files"]
            .as_array()
            .and_then(|groups| {
                groups.iter().find(|group| {
                    group["file"]["path"]
                        .as_str()
                        .unwrap_or("")
                        .ends_with(&suffix)
                })
            })
            .cloned()
            .unwrap_or_else(|| panic!("no io_files group of {name}: {report}"))
    };

    // ext4: fsync.
    let (files, rounds) = (3u64, 10u64);
    let profile = out.join("fsyncs.json");
    let results_path = out.join("fsyncs.results");
    let timed = workload("timed-calls");
    let options = ["--io", "--file-calls"];
    let command = [
        path_str(&timed),
        "fsyncs",
        path_str(&results_path),
        path_str(&fs.mount),
        &files.to_string(),
        &rounds.to_string(),
    ];
    record_profile(&options, &profile, &command);
    let own = results(&results_path);
    let report = report_of(&profile);
    for index in 0..files {
        let name = format!("fsync{index}");
        let group = group_ending(&report, &name);
        let (count, total) = call_totals(&group, "fsync");
        assert_eq!(count, rounds, "{name}: fsync calls in {group}");
        assert_call_time(
            &format!("ext4 {name} fsync"),
            total,
            result(&own, &format!("{name}_ns")),
        );
        assert_eq!(
            call_totals(&group, "write").0,
            rounds,
            "{name}: writes in {group}"
        );
    }

    // FUSE: open (CREATE) and write.
    let profile = out.join("fuse.json");
    let results_path = out.join("fuse.results");
    let mountpoint = fs.dir.join("fuse");
    let fuse = workload("fuse-workload");
    let command = [
        path_str(&fuse),
        "latency",
        path_str(&results_path),
        path_str(&mountpoint),
        "4",
        "30",
        "60",
    ];
    record_profile(&options, &profile, &command);
    let own = results(&results_path);
    let report = report_of(&profile);
    for (call, key) in [("open", "create_ns"), ("write", "write_ns")] {
        let times: Vec<u64> = own
            .iter()
            .filter(|(name, _)| name == key)
            .map(|(_, value)| *value)
            .collect();
        assert_eq!(times.len(), 4, "{key} lines in {own:?}");
        for (index, own_ns) in times.into_iter().enumerate() {
            let name = format!("file{index}");
            let group = group_ending(&report, &name);
            let (count, total) = call_totals(&group, call);
            assert_eq!(count, 1, "{name}: {call} calls in {group}");
            assert_call_time(&format!("FUSE {name} {call}"), total, own_ns);
        }
    }
}
