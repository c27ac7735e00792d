//! Shared by the root integration tests: where the binaries are, the root/CI rule,
//! running `lockpath record`, reading its profile, and checking nothing stays loaded.
#![allow(dead_code, unused_macros)]

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

/// The name of the test function this is expanded in (its last path segment).
macro_rules! test_name {
    () => {{
        fn here() {}
        let path = std::any::type_name_of_val(&here);
        let path = path.strip_suffix("::here").unwrap_or(path);
        path.rsplit("::").next().unwrap_or(path)
    }};
}

/// `FUNCTION(ARGS)` of a test prologue (`root_test`, `root_test_needing`,
/// `root_test_alone`, `root_test_in_cgroup`, `lockpath_test`) called with the test's own
/// name first: its value, or the end of the test when it says the test cannot run.
macro_rules! or_skip {
    ($prologue:ident($($arg:expr),* $(,)?)) => {
        match $prologue(test_name!(), $($arg),*) {
            Some(value) => value,
            None => return,
        }
    };
}

/// The `lockpath` binary under test: `$LOCKPATH_BIN` (set by `cargo xtask test`), else
/// the release build of this workspace.
pub fn lockpath_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("LOCKPATH_BIN") {
        return PathBuf::from(path);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/lockpath")
}

/// An artifact of `cargo xtask dist`: `$ENV` (set by `cargo xtask test`), else
/// `target/dist/NAME` of this workspace.
pub fn dist_artifact(env: &str, name: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env) {
        return PathBuf::from(path);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/dist")
        .join(name)
}

/// The static x86_64 `lockpath` of `cargo xtask dist`.
pub fn static_lockpath_bin() -> PathBuf {
    dist_artifact("LOCKPATH_DIST_BIN", "lockpath-x86_64-linux-musl")
}

/// True when `path` (an artifact of `cargo xtask dist`) exists. Under `CI=true` a missing
/// one fails the test; elsewhere the test is skipped with the reason printed.
pub fn require_artifact(test: &str, path: &Path) -> bool {
    if path.is_file() {
        return true;
    }
    let reason = format!("{} does not exist (run `cargo xtask dist`)", path.display());
    if is_ci() {
        panic!("{test}: {reason}");
    }
    eprintln!("SKIP {test}: {reason}");
    false
}

pub fn is_ci() -> bool {
    std::env::var("CI")
        .map(|v| v == "true" || v == "1")
        .unwrap_or(false)
}

/// A workload binary of this crate (`src/bin/NAME.rs`).
pub fn workload(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "workload {} not built (cargo build --bins)",
        path.display()
    );
    path
}

/// True when the test may load eBPF programs. Under `CI=true` a test that cannot load
/// them fails; elsewhere it is skipped with the reason printed.
pub fn can_load_programs(test: &str) -> bool {
    let ci = is_ci();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc_geteuid() } == 0;
    let bin = lockpath_bin();
    let reason = if !root {
        Some("not running as root".to_string())
    } else if !bin.exists() {
        Some(format!(
            "{} does not exist (run `cargo xtask build`)",
            bin.display()
        ))
    } else {
        None
    };
    match reason {
        None => true,
        Some(reason) if ci => panic!("{test}: cannot load eBPF programs under CI=true: {reason}"),
        Some(reason) => {
            eprintln!("SKIP {test}: {reason}");
            false
        }
    }
}

/// What most root tests start with: their scratch directory `scratch_name` (see
/// [`scratch`]), or `None` (the test then ends) when the test may not load eBPF
/// programs (see [`can_load_programs`]).
pub fn root_test(test: &str, scratch_name: &str) -> Option<Scratch> {
    root_test_needing(test, &[], scratch_name)
}

/// [`root_test`] of a test that also runs each of `tools` (see [`require_tool`]),
/// checked in order after the programs.
pub fn root_test_needing(test: &str, tools: &[&str], scratch_name: &str) -> Option<Scratch> {
    if !can_load_programs(test) || !tools.iter().all(|tool| require_tool(test, tool)) {
        return None;
    }
    Some(scratch(scratch_name))
}

/// [`root_test`] of a test that runs its workloads in a cgroup of its own (see
/// [`TestCgroup::for_test`]): that cgroup and the scratch directory.
pub fn root_test_in_cgroup(test: &str, scratch_name: &str) -> Option<(TestCgroup, Scratch)> {
    if !can_load_programs(test) {
        return None;
    }
    let cgroup = TestCgroup::for_test(test)?;
    Some((cgroup, scratch(scratch_name)))
}

/// What the tests of lockpath's checks of its input start with: their scratch
/// directory `scratch_name`, or `None` (the test then ends) when lockpath is not built
/// (see [`lockpath_built`]).
pub fn lockpath_test(test: &str, scratch_name: &str) -> Option<Scratch> {
    lockpath_built(test).then(|| scratch(scratch_name))
}

/// What a root test that needs the machine to itself starts with when it needs no
/// scratch directory: the [`alone`] guard, or `None` (the test then ends) when it may
/// not load eBPF programs or one of `tools` is missing (see [`root_test_needing`]).
pub fn root_test_alone(test: &str, tools: &[&str]) -> Option<std::sync::MutexGuard<'static, ()>> {
    let alone = alone();
    if !can_load_programs(test) || !tools.iter().all(|tool| require_tool(test, tool)) {
        return None;
    }
    Some(alone)
}

/// True when the lockpath binary is built; a test of it is skipped (with its name
/// printed) otherwise.
pub fn lockpath_built(test: &str) -> bool {
    if lockpath_bin().exists() {
        return true;
    }
    eprintln!("SKIP {test}: lockpath not built");
    false
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// A unique scratch directory for one test, removed when the test passes and
/// kept (its path printed) when the test fails, for the post-mortem.
pub fn scratch(test: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("lockpath-it-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    Scratch(dir)
}

/// A test's scratch directory (see [`scratch`]); derefs to its path.
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = PathBuf;

    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept the failed test's files in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Runs lockpath with `args`; returns its output (stdout, stderr, status).
pub fn lockpath(args: &[&str]) -> Output {
    lockpath_with(&lockpath_bin(), args)
}

/// Runs the lockpath binary `bin` with `args`.
pub fn lockpath_with(bin: &Path, args: &[&str]) -> Output {
    Command::new(bin).args(args).output().expect("run lockpath")
}

/// Runs lockpath and panics with its output unless it succeeded.
pub fn lockpath_ok(args: &[&str]) -> Output {
    lockpath_ok_with(&lockpath_bin(), args)
}

/// Runs the lockpath binary `bin` and panics with its output unless it succeeded.
pub fn lockpath_ok_with(bin: &Path, args: &[&str]) -> Output {
    let output = lockpath_with(bin, args);
    assert_succeeded(&output, &format!("{} {args:?}", bin.display()));
    output
}

/// Panics with `output` unless the run it is of (`what`) succeeded.
pub fn assert_succeeded(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

pub fn load_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|err| panic!("{} is not JSON: {err}", path.display()))
}

/// `name value` lines written by the fuse-workload / timed-calls binaries.
pub fn results(path: &Path) -> Vec<(String, u64)> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("workload results {}: {err}", path.display()))
        .lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// A run of the fuse-workload binary (a FUSE file system of its own, mounted at
/// `mountpoint`, with `name value` results written to `results`).
pub struct FuseWorkload {
    pub bin: PathBuf,
    pub results: PathBuf,
    pub mountpoint: PathBuf,
}

impl FuseWorkload {
    /// A run whose results go to `dir/RESULTS` and whose file system is mounted at
    /// `dir/mnt`.
    pub fn in_dir(dir: &Path, results: &str) -> FuseWorkload {
        FuseWorkload {
            bin: workload("fuse-workload"),
            results: dir.join(results),
            mountpoint: dir.join("mnt"),
        }
    }

    /// [`FuseWorkload::in_dir`], with the mount point directory made beforehand.
    pub fn in_dir_with_mountpoint(dir: &Path, results: &str) -> FuseWorkload {
        let fuse = FuseWorkload::in_dir(dir, results);
        std::fs::create_dir_all(&fuse.mountpoint).expect("mountpoint");
        fuse
    }

    /// The command line `fuse-workload MODE RESULTS MOUNTPOINT ARGS...`.
    pub fn command<'a>(&'a self, mode: &'a str, args: &[&'a str]) -> Vec<&'a str> {
        let mut command = vec![
            path_str(&self.bin),
            mode,
            path_str(&self.results),
            path_str(&self.mountpoint),
        ];
        command.extend(args);
        command
    }

    /// The results the run wrote (see [`results`]).
    pub fn results(&self) -> Vec<(String, u64)> {
        results(&self.results)
    }
}

/// The value of `name` in workload results.
pub fn result(results: &[(String, u64)], name: &str) -> u64 {
    results
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| *value)
        .unwrap_or_else(|| panic!("no {name} in workload results {results:?}"))
}

/// Names of the frames of stack `id` in a profile, leaf first.
pub fn stack_names(profile: &serde_json::Value, id: u64) -> Vec<String> {
    profile["stacks"][id as usize]["frames"]
        .as_array()
        .expect("stack frames")
        .iter()
        .map(|frame| {
            profile["frames"][frame.as_u64().expect("frame index") as usize]["name"]
                .as_str()
                .expect("frame name")
                .to_string()
        })
        .collect()
}

/// Ids of the BPF programs that process `pid` holds through its file descriptors
/// (program and link fds both name their program in /proc/PID/fdinfo).
pub fn programs_held_by(pid: u32) -> Vec<u64> {
    let mut ids = Vec::new();
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return ids;
    };
    for entry in entries.flatten() {
        let Ok(info) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        for line in info.lines() {
            if let Some(id) = line.strip_prefix("prog_id:") {
                if let Ok(id) = id.trim().parse::<u64>() {
                    if !ids.contains(&id) {
                        ids.push(id);
                    }
                }
            }
        }
    }
    ids.sort_unstable();
    ids
}

/// Ids of every loaded BPF program.
pub fn loaded_programs() -> Vec<u64> {
    let output = Command::new("bpftool")
        .args(["-j", "prog", "show"])
        .output()
        .expect("run bpftool (apt-get install bpftool)");
    let programs: serde_json::Value = serde_json::from_slice(&output.stdout).expect("bpftool JSON");
    programs
        .as_array()
        .expect("bpftool returns a list")
        .iter()
        .filter_map(|program| program["id"].as_u64())
        .collect()
}

/// A `lockpath record` running in the background (see [`spawn_recording`]). It derefs
/// to its [`std::process::Child`]; its stderr is read by a thread from the start, so
/// [`Recording::wait_with_output`] returns all of it.
pub struct Recording {
    child: std::process::Child,
    stderr: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl std::ops::Deref for Recording {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.child
    }
}

impl std::ops::DerefMut for Recording {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.child
    }
}

impl Recording {
    /// Waits for lockpath to end; stdout as it came, stderr as read since the start.
    /// Waits for lockpath to end: it must have succeeded (its stderr and stdout are
    /// shown if not) and left none of `programs` loaded.
    pub fn finish(self, programs: &[u64]) -> Output {
        let output = self.wait_with_output().expect("wait for lockpath");
        assert_succeeded(&output, "lockpath");
        assert_programs_gone(programs);
        output
    }

    /// Ends a recording with Ctrl-C (SIGINT), then [`Recording::finish`]es it.
    pub fn stop(self, programs: &[u64]) -> Output {
        signal(self.id(), libc::SIGINT);
        self.finish(programs)
    }

    pub fn wait_with_output(self) -> std::io::Result<Output> {
        let Recording {
            child,
            stderr,
            reader,
        } = self;
        let mut output = child.wait_with_output()?;
        if let Some(reader) = reader {
            let _ = reader.join();
        }
        output.stderr = std::mem::take(&mut *stderr.lock().expect("stderr buffer"));
        Ok(output)
    }

    /// The bare child, for a caller that does not need stderr.
    pub fn into_child(self) -> std::process::Child {
        self.child
    }

    fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().expect("stderr buffer")).into_owned()
    }
}

/// Starts `lockpath record ARGS` in the background, waits until it says it is recording
/// (every probe attached), and returns it with the program ids it holds.
pub fn spawn_recording(args: &[&str]) -> (Recording, Vec<u64>) {
    spawn_recording_with(&lockpath_bin(), args)
}

/// [`spawn_recording`] of the lockpath binary `bin`.
// The caller owns the child and waits for it.
#[allow(clippy::zombie_processes)]
pub fn spawn_recording_with(bin: &Path, args: &[&str]) -> (Recording, Vec<u64>) {
    use std::io::Read;
    let mut child = Command::new(bin)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start lockpath");
    let mut pipe = child.stderr.take().expect("piped stderr");
    let stderr = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = stderr.clone();
    let reader = std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n @ 1..) = pipe.read(&mut chunk) {
            sink.lock()
                .expect("stderr buffer")
                .extend_from_slice(&chunk[..n]);
        }
    });
    let mut recording = Recording {
        child,
        stderr,
        reader: Some(reader),
    };
    let pid = recording.id();
    // Startup takes well under a second on a quiet machine, several on a loaded CI one.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let text = recording.stderr_text();
        if text
            .lines()
            .any(|line| line.starts_with("lockpath:") && line.contains(" recording "))
        {
            return (recording, programs_held_by(pid));
        }
        if std::time::Instant::now() >= deadline || matches!(recording.try_wait(), Ok(Some(_))) {
            let _ = recording.kill();
            let output = recording.wait_with_output().expect("reap lockpath");
            panic!(
                "lockpath did not start recording within 60 s ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// [`spawn_recording`] of a lockpath that runs until the returned guard goes (it is
/// then killed); returns the guard and the program ids it holds.
pub fn spawn_killed_on_drop(args: &[&str]) -> (KillOnDrop, Vec<u64>) {
    let (recording, programs) = spawn_recording(args);
    (KillOnDrop(recording.into_child()), programs)
}

/// An agent: `lockpath record OPTIONS --rotate PERIOD -o OUT` started as
/// [`spawn_killed_on_drop`] starts it.
pub fn spawn_agent(options: &[&str], period: &str, out: &Path) -> (KillOnDrop, Vec<u64>) {
    let rotate = ["--rotate", period, "-o", path_str(out)];
    spawn_killed_on_drop(&[&["record"], options, &rotate].concat())
}

/// Panics if any of `ids` is still loaded. The kernel frees a program shortly after
/// its last reference goes (deferred work), so this waits up to 5 s for that.
pub fn assert_programs_gone(ids: &[u64]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let loaded = loaded_programs();
        let left: Vec<&u64> = ids.iter().filter(|id| loaded.contains(id)).collect();
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "programs left loaded 5 s after lockpath ended: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// True when `command` is on PATH. Under `CI=true` a missing tool fails the test (the
/// test-tool installer of `cargo xtask test` must have installed it); elsewhere it skips.
pub fn require_tool(test: &str, command: &str) -> bool {
    let found = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).any(|dir| dir.join(command).is_file()))
        .unwrap_or(false);
    if found {
        return true;
    }
    let ci = is_ci();
    if ci {
        panic!("{test}: {command} is not installed under CI=true (cargo xtask test installs it)");
    }
    eprintln!("SKIP {test}: {command} is not installed");
    false
}

/// Runs `program ARGS`, which must succeed (its stderr is shown if not); returns its
/// stdout.
pub fn run_ok(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|err| panic!("cannot run {program}: {err}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Starts a Prometheus server with the configuration file `config`, listening on
/// `listen` (`HOST:PORT`), its data and log in `dir`; it is killed when the guard goes.
pub fn start_prometheus(dir: &Path, config: &Path, listen: &str) -> KillOnDrop {
    let prometheus = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={listen}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(
            std::fs::File::create(dir.join("prometheus.log")).expect("log"),
        ))
        .spawn()
        .expect("start prometheus");
    KillOnDrop(prometheus)
}

/// A TCP port on loopback that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free loopback port")
}

/// One HTTP/1.1 request to `addr` (a JSON body when given); returns the status, whatever
/// it is, and the body. A connection that fails is an error.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(60)))
        .build()
        .into();
    let request = ureq::http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    let sent = match body {
        Some(body) => request
            .header("Content-Type", "application/json")
            .body(body.to_string())
            .map(|request| agent.run(request)),
        None => request.body(()).map(|request| agent.run(request)),
    };
    let mut response = sent
        .map_err(std::io::Error::other)?
        .map_err(std::io::Error::other)?;
    let text = response
        .body_mut()
        .with_config()
        .limit(u64::MAX)
        .read_to_string()
        .map_err(std::io::Error::other)?;
    Ok((response.status().as_u16(), text))
}

/// Sends `signal` to process `pid`, which must exist.
pub fn signal(pid: u32, signal: i32) {
    let Ok(pid) = i32::try_from(pid) else {
        panic!("pid {pid} out of range");
    };
    // SAFETY: kill(2) has no memory preconditions.
    let sent = unsafe { libc::kill(pid, signal) };
    assert_eq!(
        sent,
        0,
        "kill({pid}, {signal}): {}",
        std::io::Error::last_os_error()
    );
}

/// A child process killed (by its pid) and reaped when the guard goes, even on panic.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `Total samples` of `go tool pprof -top -sample_index INDEX` on a pprof file
/// (`unit`: extra arguments such as `-unit ns`). `home` is a scratch directory for go.
pub fn pprof_total(home: &Path, pprof: &Path, index: &str, unit: &[&str]) -> u64 {
    let output = Command::new("go")
        .args(["tool", "pprof", "-top", "-sample_index", index])
        .args(unit)
        .arg(pprof)
        .env("GOTELEMETRY", "off")
        .env("GOFLAGS", "")
        .env("HOME", home)
        .output()
        .expect("run go tool pprof");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "go tool pprof failed:\n{text}");
    assert!(text.contains(&format!("Type: {index}")), "{text}");
    text.split("Total samples = ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("no total in pprof output:\n{text}"))
}

/// The rows of `table.by == by` of a `diff --format json` document.
pub fn diff_rows<'a>(diff: &'a serde_json::Value, by: &str) -> &'a Vec<serde_json::Value> {
    diff["tables"]
        .as_array()
        .expect("tables")
        .iter()
        .find(|table| table["by"] == by)
        .and_then(|table| table["rows"].as_array())
        .unwrap_or_else(|| panic!("no {by} table in {diff}"))
}

/// Records with `lockpath record ARGS` (see `spawn_recording`), checks that it
/// succeeded and left no program loaded; returns (stdout, stderr).
pub fn record_ok(args: &[&str]) -> (String, String) {
    let (child, programs) = spawn_recording(args);
    assert!(!programs.is_empty(), "lockpath loaded no program");
    let output = child.wait_with_output().expect("wait for lockpath");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "lockpath failed:\n{stdout}\n{stderr}"
    );
    assert_programs_gone(&programs);
    (stdout, stderr)
}

/// What `record_profile` returns: the recorder's output and the profile it wrote.
pub struct Recorded {
    pub stdout: String,
    pub stderr: String,
    pub profile: serde_json::Value,
}

/// Records `command` with `lockpath record OPTIONS -o PROFILE -- COMMAND`, checked as
/// `record_ok` checks it, and loads the profile.
pub fn record_profile(options: &[&str], profile: &Path, command: &[&str]) -> Recorded {
    let (stdout, stderr) = record_ok(&record_args(options, profile, command));
    Recorded {
        stdout,
        stderr,
        profile: load_json(profile),
    }
}

/// The arguments `record OPTIONS -o PROFILE -- COMMAND`.
pub fn record_args<'a>(
    options: &[&'a str],
    profile: &'a Path,
    command: &[&'a str],
) -> Vec<&'a str> {
    [
        &["record"],
        options,
        &["-o", path_str(profile), "--"],
        command,
    ]
    .concat()
}

/// The arguments `record OPTIONS -o PROFILE --flamegraph SVG -- COMMAND`.
pub fn record_args_with_flamegraph<'a>(
    options: &[&'a str],
    profile: &'a Path,
    svg: &'a Path,
    command: &[&'a str],
) -> Vec<&'a str> {
    let output = ["-o", path_str(profile), "--flamegraph", path_str(svg), "--"];
    [&["record"], options, &output, command].concat()
}

/// `lockpath report PROFILE --format json ARGS` (must succeed), its output parsed.
pub fn report_json(profile: &Path, args: &[&str]) -> serde_json::Value {
    report_json_with(&lockpath_bin(), profile, args)
}

/// [`report_json`] of the lockpath binary `bin`.
pub fn report_json_with(bin: &Path, profile: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["report", path_str(profile), "--format", "json"];
    all.extend(args);
    let output = lockpath_ok_with(bin, &all);
    serde_json::from_slice(&output.stdout).expect("report JSON")
}

/// `lockpath report PROFILE --format html -o PAGE` (must succeed); returns the page.
pub fn report_html(profile: &Path, page: &Path) -> String {
    lockpath_ok(&[
        "report",
        path_str(profile),
        "--format",
        "html",
        "-o",
        path_str(page),
    ]);
    std::fs::read_to_string(page).expect("html report written")
}

/// `lockpath export PROFILE --format folded --kind KIND` (must succeed); returns its
/// lines.
pub fn export_folded(profile: &Path, kind: &str) -> String {
    let output = lockpath_ok(&[
        "export",
        path_str(profile),
        "--format",
        "folded",
        "--kind",
        kind,
    ]);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `perf stat -e EVENT -x , -o OUT -- COMMAND`: the command line that counts `event`
/// over `command`, as CSV into `out` (read by [`perf_count`]).
pub fn under_perf_stat<'a>(event: &'a str, out: &'a Path, command: &[&'a str]) -> Vec<&'a str> {
    let perf = [
        "perf",
        "stat",
        "-e",
        event,
        "-x",
        ",",
        "-o",
        path_str(out),
        "--",
    ];
    [&perf, command].concat()
}

/// The flamegraph at `path`, checked to be well-formed XML.
pub fn read_svg(path: &Path) -> String {
    let svg = std::fs::read_to_string(path).expect("svg written");
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    roxmltree::Document::parse_with_options(&svg, options).expect("the SVG is well-formed XML");
    svg
}

/// The sum of the counts (the last field) of folded stack lines.
pub fn folded_total(folded: &str) -> u64 {
    folded
        .lines()
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Runs lockpath with `args`, which must fail with `expect` on stderr and no panic;
/// returns stderr.
pub fn fails_with(args: &[&str], expect: &str) -> String {
    let output = lockpath(args);
    assert!(!output.status.success(), "lockpath {args:?} must fail");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        stderr.contains(expect),
        "lockpath {args:?}: expected {expect:?} in:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "no panic: {stderr}");
    stderr
}

pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Contentions of process `pid` in a profile: its lock rows' counts.
pub fn contentions_of(profile: &serde_json::Value, pid: u64) -> u64 {
    sum_of(&rows_of(profile, "locks", pid), "count")
}

/// The rows of process `pid` in the profile's list `list` ("locks", "funcs", ...).
pub fn rows_of<'a>(
    profile: &'a serde_json::Value,
    list: &str,
    pid: u64,
) -> Vec<&'a serde_json::Value> {
    profile[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list} list in the profile"))
        .iter()
        .filter(|row| row["pid"].as_u64() == Some(pid))
        .collect()
}

/// The elements of the JSON array `list` (`what` names it if it is not an array).
pub fn items<'a>(
    list: &'a serde_json::Value,
    what: &str,
) -> std::slice::Iter<'a, serde_json::Value> {
    list.as_array().expect(what).iter()
}

/// The sum of the number `field` over `rows`.
pub fn sum_of(rows: &[&serde_json::Value], field: &str) -> u64 {
    rows.iter()
        .map(|row| {
            row[field]
                .as_u64()
                .unwrap_or_else(|| panic!("no number {field} in {row}"))
        })
        .sum()
}

/// Taken by the tests of one file that need the machine to themselves (every disk's
/// requests, every lock's contention): cargo runs a file's tests side by side, and one
/// test's workload would land in the other's recording. A test that failed holding it
/// poisons it; the others still run.
pub fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Where cgroup v2 is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on hybrid
/// systems).
pub fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(fields[1]))
    })
}

/// `MOUNT/lockpath-test-PID`, removed when dropped (its processes are gone by then).
/// Where no cgroup v2 hierarchy is mounted, one is mounted for the test (and unmounted
/// after).
pub struct TestCgroup {
    pub path: PathBuf,
    /// The path as lockpath names it: relative to the cgroup2 mount.
    pub name: String,
    /// Sub-cgroups made by `child`, removed (deepest first) before it.
    children: Vec<PathBuf>,
    /// The cgroup2 hierarchy this test mounted, if it had to.
    own_mount: Option<PathBuf>,
}

impl TestCgroup {
    pub fn new() -> Option<TestCgroup> {
        let (mount, own_mount) = match cgroup2_mount() {
            Some(mount) => (mount, None),
            None => {
                let mount = std::env::temp_dir()
                    .join(format!("lockpath-it-{}-cgroup2", std::process::id()));
                std::fs::create_dir_all(&mount).ok()?;
                let mounted = Command::new("mount")
                    .args(["-t", "cgroup2", "none", path_str(&mount)])
                    .status()
                    .is_ok_and(|status| status.success());
                if !mounted {
                    let _ = std::fs::remove_dir(&mount);
                    return None;
                }
                (mount.clone(), Some(mount))
            }
        };
        let name = format!("/lockpath-test-{}", std::process::id());
        let path = mount.join(&name[1..]);
        let _ = std::fs::remove_dir(&path);
        std::fs::create_dir(&path).expect("create the test cgroup");
        Some(TestCgroup {
            path,
            name,
            children: Vec::new(),
            own_mount,
        })
    }

    /// Moves process `pid` into the cgroup.
    pub fn adopt(&self, pid: u32) {
        std::fs::write(self.path.join("cgroup.procs"), pid.to_string())
            .expect("move into the cgroup");
    }
}

impl TestCgroup {
    /// The cgroup of `test`; `None` (the test then ends) without a cgroup2 mount, which
    /// fails the test under `CI=true` and is said as a skip otherwise.
    pub fn for_test(test: &str) -> Option<TestCgroup> {
        let cgroup = TestCgroup::new();
        if cgroup.is_none() {
            assert!(!is_ci(), "{test}: no cgroup2 mount under CI=true");
            eprintln!("SKIP {test}: no cgroup2 file system is mounted");
        }
        cgroup
    }

    /// Makes the sub-cgroup `relative` (and the ones above it); returns its path.
    pub fn child(&mut self, relative: &str) -> PathBuf {
        let mut path = self.path.clone();
        for part in relative.split('/') {
            path.push(part);
            if !path.exists() {
                std::fs::create_dir(&path).expect("create a test sub-cgroup");
                self.children.push(path.clone());
            }
        }
        path
    }
}

/// The entry of process `pid` in the profile's `processes`.
pub fn process_of(profile: &serde_json::Value, pid: u64) -> &serde_json::Value {
    profile["processes"]
        .as_array()
        .and_then(|processes| {
            processes
                .iter()
                .find(|process| process["pid"].as_u64() == Some(pid))
        })
        .unwrap_or_else(|| panic!("no process {pid} in the profile"))
}

/// Waits for a workload that must succeed.
pub fn wait_success(child: std::process::Child, what: &str) {
    let status = child
        .wait_with_output()
        .expect("wait for a workload")
        .status;
    assert!(status.success(), "{what}: {status}");
}

/// Starts lock-storm with `args` in the cgroup `dir`: a shell moves itself (the process
/// that becomes lock-storm) into the cgroup, then execs the storm, so every storm thread
/// starts there.
pub fn storm_in_cgroup(dir: &Path, args: &str) -> std::process::Child {
    let script = format!(
        "echo $$ > '{}/cgroup.procs' && exec '{}' {args}",
        dir.display(),
        workload("lock-storm").display()
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start lock-storm")
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        for child in self.children.iter().rev() {
            for _ in 0..50 {
                if std::fs::remove_dir(child).is_ok() || !child.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
        let removed = (0..50).any(|_| {
            let gone = std::fs::remove_dir(&self.path).is_ok() || !self.path.exists();
            if !gone {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            gone
        });
        if !removed {
            eprintln!("cannot remove {}", self.path.display());
        }
        if let Some(mount) = &self.own_mount {
            let _ = Command::new("umount").arg(mount).status();
            let _ = std::fs::remove_dir(mount);
        }
    }
}

/// The `key=value` report line starting with `first=`.
pub fn report(text: &str, first: &str) -> std::collections::HashMap<String, u64> {
    let line = text
        .lines()
        .find(|line| line.starts_with(&format!("{first}=")))
        .unwrap_or_else(|| panic!("no {first}= report in:\n{text}"));
    line.split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key.to_string(), value.parse().expect("number")))
        .collect()
}

/// perf stat's CSV count of `event` (`perf stat -x , -o PATH`).
pub fn perf_count(path: &Path, event: &str) -> u64 {
    let text = std::fs::read_to_string(path).expect("perf output");
    text.lines()
        .find(|line| line.contains(event))
        .and_then(|line| line.split(',').next())
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count of {event} in perf output:\n{text}"))
}

// Tests of what user space does to the kernel maps, on the maps themselves.

/// The eBPF object's maps, loaded but no program attached, the `small` ones with room
/// for `entries` rows; `None` (the test skipped) where programs cannot be loaded
/// outside CI.
pub fn object_maps(
    test: &str,
    small: &[&str],
    entries: u32,
) -> Option<lockpath::probes::shared::MapSet> {
    if !can_load_programs(test) {
        return None;
    }
    let mut loader = aya::EbpfLoader::new();
    for name in small {
        loader.map_max_entries(name, entries);
    }
    let mut ebpf =
        lockpath::probes::shared::load_object(&mut loader).expect("the eBPF object loads");
    drop(loader);
    Some(lockpath::probes::shared::MapSet::take_all(&mut ebpf))
}

/// A row in the hash map `name`.
pub fn insert<K: aya::Pod, V: aya::Pod>(
    maps: &mut lockpath::probes::shared::MapSet,
    name: &str,
    key: K,
    value: V,
) {
    let mut map: aya::maps::HashMap<_, K, V> =
        aya::maps::HashMap::try_from(maps.get_mut(name).expect(name)).expect("a hash map");
    map.insert(key, value, 0).expect("a row");
}
