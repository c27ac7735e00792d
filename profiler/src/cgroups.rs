//! Cgroup v2 ids to paths, for `report --by cgroup`. The kernel side records each
//! thread's cgroup id (`TaskInfo::cgroup_id`); a cgroup v2 id is the inode number of the
//! cgroup's directory under the cgroup2 mount, so one walk of that tree at drain time
//! names every cgroup alive then. Paths are relative to the mount (`/`, `/user.slice`),
//! as /proc/PID/cgroup prints them.

use std::{
    collections::HashMap,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::Mutex,
};

/// Known id -> path, kept across drains (`record --rotate` drains every period): ids are
/// not reused while the system runs, so an entry stays true; the tree is walked again
/// only when a drain meets an id it does not know.
static KNOWN: Mutex<Option<HashMap<u64, String>>> = Mutex::new(None);

/// Names cgroup ids. `walked` says whether this drain already walked the tree.
pub struct CgroupNames {
    mount: Option<PathBuf>,
    walked: bool,
}

impl CgroupNames {
    pub fn new() -> CgroupNames {
        CgroupNames {
            mount: cgroup2_mount(),
            walked: false,
        }
    }

    /// The path of cgroup `id`; `None` for 0 (not recorded) and for a cgroup that no
    /// longer exists (removed before the drain) or is not on the cgroup2 mount.
    pub fn path(&mut self, id: u64) -> Option<String> {
        if id == 0 {
            return None;
        }
        let mut known = KNOWN
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let known = known.get_or_insert_with(HashMap::new);
        if let Some(path) = known.get(&id) {
            return Some(path.clone());
        }
        if self.walked {
            return None;
        }
        self.walked = true;
        if let Some(mount) = &self.mount {
            walk(mount, known);
        }
        known.get(&id).cloned()
    }
}

impl Default for CgroupNames {
    fn default() -> Self {
        CgroupNames::new()
    }
}

/// Every cgroup directory under `mount`, by inode number. Unreadable directories (a
/// cgroup removed during the walk) are skipped.
fn walk(mount: &Path, known: &mut HashMap<u64, String>) {
    let mut dirs = vec![mount.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(metadata) = std::fs::metadata(&dir) else {
            continue;
        };
        let relative = dir.strip_prefix(mount).unwrap_or(Path::new(""));
        known.insert(metadata.ino(), format!("/{}", relative.display()));
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                dirs.push(entry.path());
            }
        }
    }
}

/// The cgroup id most of a process's threads were recorded in (0 ignored: not recorded),
/// the first one's (the main thread's) on a tie; 0 when none is known. Cgroup v2 keeps
/// the threads of a process together (outside threaded cgroups), so threads disagree only
/// when an entry is stale: a thread keeps the cgroup of the last event that named it, and
/// a main thread seen before it moved and exec'd (`sh -c 'echo $$ > cgroup.procs; exec
/// app'`) may never be named again, while the threads it starts are named in the new one.
pub fn most_common(ids: &[u64]) -> u64 {
    let mut best = (0, 0usize);
    for &id in ids {
        if id == 0 || id == best.0 {
            continue;
        }
        let count = ids.iter().filter(|&&other| other == id).count();
        if count > best.1 {
            best = (id, count);
        }
    }
    best.0
}

/// The cgroup v2 path of a live process, from /proc/PID/cgroup (`0::/path`), for a
/// process whose threads' cgroup was not recorded (a lock owner seen only as owner).
pub fn live_process_cgroup(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    parse_proc_cgroup(&text)
}

/// Whether the cgroup v2 path `cgroup` (`/a/b`, as /proc/PID/cgroup names it) lies in
/// the tree of directory `dir` (a path under the cgroup2 mount, or relative to it).
pub fn is_under(cgroup: &str, dir: &Path) -> bool {
    let full = match cgroup2_mount() {
        Some(mount) => mount.join(cgroup.trim_start_matches('/')),
        None => PathBuf::from(cgroup),
    };
    full.starts_with(dir) || Path::new(cgroup).starts_with(dir)
}

fn parse_proc_cgroup(text: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix("0::"))
        // A process in a cgroup removed under it shows "(deleted)".
        .filter(|path| path.starts_with('/') && !path.ends_with(" (deleted)"))
        .map(str::to_string)
}

/// Where cgroup v2 is mounted (the first cgroup2 mount; `/sys/fs/cgroup` on a unified
/// hierarchy, `/sys/fs/cgroup/unified` on a hybrid one).
fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(fields[1]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup_of_most_threads() {
        // The main thread, stale in the launcher's cgroup; its four workers in the new one.
        assert_eq!(most_common(&[1, 77, 77, 77, 77]), 77);
        // A tie: the main thread's.
        assert_eq!(most_common(&[5, 6]), 5);
        assert_eq!(most_common(&[0, 6]), 6);
        assert_eq!(most_common(&[0, 0]), 0);
        assert_eq!(most_common(&[]), 0);
    }

    #[test]
    fn proc_cgroup_lines() {
        assert_eq!(
            parse_proc_cgroup("0::/user.slice/session-1.scope\n").as_deref(),
            Some("/user.slice/session-1.scope")
        );
        // Hybrid hierarchy: v1 lines first, the v2 line last.
        assert_eq!(
            parse_proc_cgroup("12:pids:/user.slice\n1:name=systemd:/x\n0::/\n").as_deref(),
            Some("/")
        );
        assert_eq!(parse_proc_cgroup("3:cpu:/a\n"), None);
        assert_eq!(parse_proc_cgroup("0::/gone (deleted)\n"), None);
    }

    #[test]
    fn the_mount_root_is_slash_and_children_are_paths() {
        let root = std::env::temp_dir().join(format!("lockpath-cgroups-{}", std::process::id()));
        let child = root.join("a.slice/b.scope");
        std::fs::create_dir_all(&child).expect("create test tree");
        let mut known = HashMap::new();
        walk(&root, &mut known);
        let ino = |path: &Path| std::fs::metadata(path).expect("stat").ino();
        assert_eq!(known.get(&ino(&root)).map(String::as_str), Some("/"));
        assert_eq!(
            known.get(&ino(&child)).map(String::as_str),
            Some("/a.slice/b.scope")
        );
        assert_eq!(known.len(), 3);
        let _ = std::fs::remove_dir_all(&root);
    }
}
