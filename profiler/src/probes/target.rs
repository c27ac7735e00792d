//! What to profile: the whole system, running processes, a cgroup, or a command that
//! lockpath starts. The filter itself lives in the kernel (`profiler-ebpf/src/target.rs`);
//! this side validates the request and fills the kernel's maps.

use std::{
    collections::HashSet,
    ffi::CString,
    os::unix::ffi::OsStrExt,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use aya::{maps::HashMap, Ebpf};
use profiler_common::target::{names, FILTER_ALL, FILTER_CGROUP, FILTER_PIDS};

use crate::profile::Targets;

#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    System,
    Pids(Vec<u32>),
    Cgroup(PathBuf),
    Command(Vec<String>),
}

impl Target {
    pub fn filter_mode(&self) -> u32 {
        match self {
            Target::System => FILTER_ALL,
            Target::Pids(_) | Target::Command(_) => FILTER_PIDS,
            Target::Cgroup(_) => FILTER_CGROUP,
        }
    }

    /// Checks the request before anything is loaded: processes exist, the cgroup is one.
    pub fn validate(&self) -> Result<()> {
        match self {
            Target::Pids(pids) => {
                for &pid in pids {
                    if pid == 0 || !Path::new(&format!("/proc/{pid}")).exists() {
                        bail!("no process with pid {pid}: check the pid with `ps -p {pid}`");
                    }
                    if !is_alive(pid) {
                        bail!(
                            "process {pid} has already exited: give the pid of a running process"
                        );
                    }
                }
            }
            Target::Cgroup(path) => {
                if !path.join("cgroup.procs").exists() || !is_cgroup2(path) {
                    bail!(
                        "{} is not a cgroup v2 directory: give a directory under {}",
                        path.display(),
                        cgroup2_mount().unwrap_or_else(|| "the cgroup2 mount".into())
                    );
                }
            }
            Target::Command(command) => {
                if command.is_empty() {
                    bail!("no command after --");
                }
            }
            Target::System => {}
        }
        Ok(())
    }

    /// After the filter is installed: a `-p` process that exited meanwhile is an error
    /// (nothing of it could be recorded).
    pub fn check_alive(&self) -> Result<()> {
        if let Target::Pids(pids) = self {
            if let Some(pid) = pids.iter().find(|&&pid| !is_alive(pid)) {
                bail!("process {pid} exited before recording began: give the pid of a running process");
            }
        }
        Ok(())
    }

    pub fn describe(&self) -> Targets {
        match self {
            Target::System => Targets {
                mode: "system".into(),
                ..Default::default()
            },
            Target::Pids(pids) => Targets {
                mode: "pids".into(),
                pids: pids.clone(),
                ..Default::default()
            },
            Target::Cgroup(path) => Targets {
                mode: "cgroup".into(),
                cgroup: Some(path.display().to_string()),
                ..Default::default()
            },
            Target::Command(command) => Targets {
                mode: "command".into(),
                command: command.clone(),
                ..Default::default()
            },
        }
    }

    /// Whether process `tgid`, which existed before the recording began, is one of the
    /// targets: any process system-wide; a given process or a descendant of one (the
    /// kernel's target set follows only children started later); a process of the
    /// cgroup tree; none for a command (it starts with the recording).
    pub fn admits_existing(&self, tgid: u32, maps: &crate::probes::shared::MapSet) -> bool {
        match self {
            Target::System => true,
            Target::Command(_) => false,
            Target::Pids(pids) => {
                let tracked = |pid: u32| {
                    pids.contains(&pid)
                        || maps
                            .get(names::TARGETS)
                            .ok()
                            .and_then(|map| HashMap::<_, u32, u8>::try_from(map).ok())
                            .is_some_and(|targets| targets.get(&pid, 0).is_ok())
                };
                let mut pid = tgid;
                // Up the parents to init (bounded: a pid's parent is an older process).
                for _ in 0..64 {
                    if tracked(pid) {
                        return true;
                    }
                    match parent_of(pid) {
                        Some(parent) if parent > 1 => pid = parent,
                        _ => return false,
                    }
                }
                false
            }
            Target::Cgroup(path) => crate::cgroups::live_process_cgroup(tgid)
                .is_some_and(|cgroup| crate::cgroups::is_under(&cgroup, path)),
        }
    }

    /// Fills the kernel's target maps. `child` is the started command's pid, if any.
    pub fn install(&self, ebpf: &mut Ebpf, child: Option<u32>) -> Result<()> {
        match self {
            Target::System => Ok(()),
            Target::Pids(pids) => insert_pids(ebpf, pids),
            Target::Command(_) => {
                let pid = child.context("the command was not started")?;
                insert_pids(ebpf, &[pid])
            }
            Target::Cgroup(path) => {
                let map = ebpf
                    .map_mut(names::CGROUPS)
                    .context("map CGROUPS missing")?;
                let mut cgroups: HashMap<_, u64, u8> =
                    HashMap::try_from(map).context("CGROUPS has an unexpected type")?;
                for dir in cgroup_tree(path)? {
                    // A cgroup v2 id is the inode number of its directory.
                    let id = std::fs::metadata(&dir)
                        .with_context(|| format!("cannot stat {}", dir.display()))?
                        .ino();
                    cgroups
                        .insert(id, 1, 0)
                        .with_context(|| format!("cannot track cgroup {}", dir.display()))?;
                }
                Ok(())
            }
        }
    }
}

/// For `-p`: true while any tracked process (the given pids, or a child the kernel
/// started following) is still running. Zombies count as gone: they record nothing.
pub fn any_target_alive(maps: &crate::probes::shared::MapSet, pids: &[u32]) -> bool {
    if pids.iter().any(|&pid| is_alive(pid)) {
        return true;
    }
    let Ok(map) = maps.get(names::TARGETS) else {
        return false;
    };
    let Ok(targets) = HashMap::<_, u32, u8>::try_from(map) else {
        return false;
    };
    let alive = targets.keys().flatten().any(is_alive);
    alive
}

/// True when `path` is on a cgroup v2 file system (cgroup v1 directories have
/// `cgroup.procs` too, but the eBPF side only sees cgroup v2 ids).
fn is_cgroup2(path: &Path) -> bool {
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes into a zeroed struct we own; the path is NUL-terminated.
    unsafe {
        let mut stat: libc::statfs = std::mem::zeroed();
        libc::statfs(c_path.as_ptr(), &mut stat) == 0 && stat.f_type as i64 == CGROUP2_SUPER_MAGIC
    }
}

/// Where cgroup v2 is mounted, for the error message.
fn cgroup2_mount() -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(2) == Some(&"cgroup2")).then(|| fields[1].to_string())
    })
}

/// The parent of process `pid`, from `/proc/PID/stat`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    crate::probes::blocked::parse_stat(&stat).map(|stat| stat.ppid)
}

/// True while `pid` runs: it exists and is neither a zombie nor dead.
pub fn is_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may hold spaces.
    let state = stat
        .rfind(')')
        .and_then(|end| stat[end + 1..].split_whitespace().next());
    !matches!(state, Some("Z") | Some("X") | Some("x") | None)
}

fn insert_pids(ebpf: &mut Ebpf, pids: &[u32]) -> Result<()> {
    let map = ebpf
        .map_mut(names::TARGETS)
        .context("map TARGETS missing")?;
    let mut targets: HashMap<_, u32, u8> =
        HashMap::try_from(map).context("TARGETS has an unexpected type")?;
    for &pid in pids {
        targets
            .insert(pid, 1, 0)
            .with_context(|| format!("cannot track pid {pid}"))?;
        // Children that already exist are followed too.
        for child in children_of(pid) {
            targets
                .insert(child, 1, 0)
                .with_context(|| format!("cannot track pid {child}"))?;
        }
    }
    Ok(())
}

/// Descendant processes of `pid` that exist now (from /proc/PID/task/*/children).
fn children_of(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut queue = vec![pid];
    while let Some(parent) = queue.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Ok(children) = std::fs::read_to_string(task.path().join("children")) else {
                continue;
            };
            for child in children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok())
            {
                if !found.contains(&child) {
                    found.push(child);
                    queue.push(child);
                }
            }
        }
    }
    found
}

/// A cgroup directory and every cgroup below it.
fn cgroup_tree(root: &Path) -> Result<Vec<PathBuf>> {
    let mut dirs = vec![root.to_path_buf()];
    let mut index = 0;
    while index < dirs.len() {
        let dir = dirs[index].clone();
        index += 1;
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            // A sub-cgroup removed while the tree is walked: it has no tasks left.
            Err(_) if index > 1 => continue,
            Err(err) => return Err(err).with_context(|| format!("cannot list {}", dir.display())),
        };
        for entry in entries.flatten() {
            if entry.file_type().map(|kind| kind.is_dir()).unwrap_or(false) {
                dirs.push(entry.path());
            }
        }
    }
    Ok(dirs)
}

/// For `--cgroup DIR`: sub-cgroups made after the recording started (a Slurm job, a
/// container) are tracked too. The kernel filter knows cgroups by id, so the tree is
/// walked again every half second and the ids not seen before are added; a task of a new
/// cgroup is recorded from the walk after the cgroup appeared.
pub struct CgroupTracker {
    root: PathBuf,
    known: HashSet<u64>,
    next: Instant,
}

impl CgroupTracker {
    const EVERY: Duration = Duration::from_millis(500);

    /// A tracker for a cgroup target; `None` for the others.
    pub fn new(target: &Target) -> Option<CgroupTracker> {
        match target {
            Target::Cgroup(root) => Some(CgroupTracker {
                root: root.clone(),
                known: HashSet::new(),
                next: Instant::now() + Self::EVERY,
            }),
            _ => None,
        }
    }

    /// Adds the sub-cgroups made since the last walk, when one is due.
    pub fn poll(&mut self, maps: &mut crate::probes::shared::MapSet) {
        if Instant::now() < self.next {
            return;
        }
        self.next = Instant::now() + Self::EVERY;
        let Ok(dirs) = cgroup_tree(&self.root) else {
            return;
        };
        let Ok(map) = maps.get_mut(names::CGROUPS) else {
            return;
        };
        let Ok(mut cgroups) = HashMap::<_, u64, u8>::try_from(map) else {
            return;
        };
        for dir in dirs {
            let Ok(meta) = std::fs::metadata(&dir) else {
                continue;
            };
            if self.known.insert(meta.ino()) {
                if let Err(err) = cgroups.insert(meta.ino(), 1, 0) {
                    log::warn!("cannot track the new cgroup {}: {err}", dir.display());
                }
            }
        }
    }
}

/// A command started by lockpath, held before `exec` until the probes are attached, so
/// not one event of it is missed.
pub struct Child {
    pub pid: u32,
    release_fd: libc::c_int,
    error_fd: libc::c_int,
    reaped: Option<i32>,
}

impl Child {
    /// Forks; the child waits for `release`, then execs `command` (searched in PATH).
    /// Call before any other thread exists: the child only uses async-signal-safe calls.
    pub fn spawn(command: &[String]) -> Result<Child> {
        let program = resolve_program(&command[0])?;
        let program = CString::new(program.as_os_str().as_bytes())
            .context("the command contains a NUL byte")?;
        let args: Vec<CString> = command
            .iter()
            .map(|arg| CString::new(arg.as_bytes()))
            .collect::<Result<_, _>>()
            .context("an argument contains a NUL byte")?;
        let mut argv: Vec<*const libc::c_char> = args.iter().map(|arg| arg.as_ptr()).collect();
        argv.push(std::ptr::null());

        let release = pipe()?;
        let error = pipe()?;
        // SAFETY: fork in a process with a single thread (record calls this before
        // starting any); the child below only calls async-signal-safe functions.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            bail!("cannot fork: {}", std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: child side of fork: read, execv, write and _exit only.
            unsafe {
                libc::close(release[1]);
                libc::close(error[0]);
                let mut byte = 0u8;
                let got = libc::read(release[0], (&raw mut byte).cast(), 1);
                if got != 1 {
                    // lockpath went away before releasing us: do not run unobserved.
                    libc::_exit(126);
                }
                libc::execv(program.as_ptr(), argv.as_ptr());
                let errno = *libc::__errno_location();
                libc::write(
                    error[1],
                    (&raw const errno).cast(),
                    std::mem::size_of::<i32>(),
                );
                libc::_exit(127);
            }
        }
        // SAFETY: closing the ends of the pipes this side does not use.
        unsafe {
            libc::close(release[0]);
            libc::close(error[1]);
        }
        Ok(Child {
            pid: pid as u32,
            release_fd: release[1],
            error_fd: error[0],
            reaped: None,
        })
    }

    /// Lets the command run, and reports whether `exec` failed.
    pub fn release(&mut self, command: &str) -> Result<()> {
        let byte = 1u8;
        // SAFETY: writing one byte to the pipe end this struct owns, then closing it.
        unsafe {
            libc::write(self.release_fd, (&raw const byte).cast(), 1);
            libc::close(self.release_fd);
        }
        self.release_fd = -1;
        let mut errno = 0i32;
        // SAFETY: reading into a local i32 from the pipe end this struct owns; it closes
        // (EOF) when exec succeeds because the child's end is close-on-exec.
        let got = unsafe {
            libc::read(
                self.error_fd,
                (&raw mut errno).cast(),
                std::mem::size_of::<i32>(),
            )
        };
        // SAFETY: closing the pipe end this struct owns.
        unsafe { libc::close(self.error_fd) };
        self.error_fd = -1;
        if got == std::mem::size_of::<i32>() as isize {
            self.wait_blocking();
            bail!(
                "cannot start {command}: {}",
                std::io::Error::from_raw_os_error(errno)
            );
        }
        Ok(())
    }

    /// Non-blocking check: the exit status once the command has ended.
    pub fn try_wait(&mut self) -> Option<i32> {
        if self.reaped.is_some() {
            return self.reaped;
        }
        let mut status = 0;
        // SAFETY: waitpid on our own child with a valid status pointer.
        let ret = unsafe { libc::waitpid(self.pid as i32, &mut status, libc::WNOHANG) };
        if ret == self.pid as i32 {
            self.reaped = Some(exit_code(status));
        }
        self.reaped
    }

    fn wait_blocking(&mut self) -> i32 {
        if let Some(code) = self.reaped {
            return code;
        }
        let mut status = 0;
        // SAFETY: waitpid on our own child with a valid status pointer.
        unsafe { libc::waitpid(self.pid as i32, &mut status, 0) };
        let code = exit_code(status);
        self.reaped = Some(code);
        code
    }

    /// Stops a command that has not been released or has to go (on error).
    pub fn kill(&mut self) {
        if self.reaped.is_none() {
            // SAFETY: signalling and reaping our own child.
            unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
            self.wait_blocking();
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        for fd in [self.release_fd, self.error_fd] {
            if fd >= 0 {
                // SAFETY: closing a pipe end this struct still owns.
                unsafe { libc::close(fd) };
            }
        }
    }
}

/// Shell-style exit code: the status, or 128 + signal.
fn exit_code(status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

fn pipe() -> Result<[libc::c_int; 2]> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("cannot create a pipe: {}", std::io::Error::last_os_error());
    }
    Ok(fds)
}

/// Finds the program like a shell does: a path with `/` as is, else each PATH entry.
fn resolve_program(name: &str) -> Result<PathBuf> {
    let is_executable = |path: &Path| {
        std::fs::metadata(path)
            .map(|meta| meta.is_file() && meta.mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if name.contains('/') {
        let path = PathBuf::from(name);
        if !path.exists() {
            bail!("cannot start {name}: no such file");
        }
        if !is_executable(&path) {
            bail!("cannot start {name}: not an executable file");
        }
        return Ok(path);
    }
    let path_var = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path_var)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
        .with_context(|| format!("cannot start {name}: command not found in PATH"))
}
