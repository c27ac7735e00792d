//! A small FUSE file system under test control: one flat directory of empty-or-written
//! files, whose replies can be delayed by a chosen time per FUSE opcode. It gives
//! request/reply ground truth (`--rpc fuse` latency = the injected delay) and a real
//! kernel lock held across a request (the directory's inode rwsem during CREATE).
//!
//! Mounted directly with mount(2) through /dev/fuse (root), served by the `fuser`
//! crate on background threads; a delayed reply is sent from its own thread, so one
//! slow request never holds up the others. [`FuseFixture`] unmounts on drop.

use std::{
    collections::HashMap,
    ffi::{CString, OsStr, OsString},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request, SessionACL, WriteFlags,
};

/// FUSE opcodes (include/uapi/linux/fuse.h) the fixture can delay.
pub const FUSE_LOOKUP: u32 = 1;
pub const FUSE_GETATTR: u32 = 3;
pub const FUSE_OPEN: u32 = 14;
pub const FUSE_READ: u32 = 15;
pub const FUSE_WRITE: u32 = 16;
pub const FUSE_FLUSH: u32 = 25;
pub const FUSE_CREATE: u32 = 35;

const ROOT: u64 = 1;
const TTL: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Tree {
    by_name: HashMap<OsString, u64>,
    sizes: HashMap<u64, u64>,
    next_ino: u64,
}

struct DelayFs {
    delays: HashMap<u32, Duration>,
    tree: Arc<Mutex<Tree>>,
}

fn attr(ino: u64, size: u64) -> FileAttr {
    let now = SystemTime::now();
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind: if ino == ROOT {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: if ino == ROOT { 0o777 } else { 0o666 },
        nlink: if ino == ROOT { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl DelayFs {
    /// Runs `reply` now, or after the delay chosen for `opcode` on a thread of its own.
    fn answer(&self, opcode: u32, reply: impl FnOnce() + Send + 'static) {
        match self.delays.get(&opcode) {
            Some(&delay) if !delay.is_zero() => {
                std::thread::spawn(move || {
                    std::thread::sleep(delay);
                    reply();
                });
            }
            _ => reply(),
        }
    }

    fn size_of(&self, ino: u64) -> Option<u64> {
        let tree = self.tree.lock().expect("fixture tree");
        if ino == ROOT {
            Some(0)
        } else {
            tree.sizes.get(&ino).copied()
        }
    }
}

impl Filesystem for DelayFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let found = if parent.0 == ROOT {
            let tree = self.tree.lock().expect("fixture tree");
            tree.by_name
                .get(name)
                .map(|&ino| (ino, tree.sizes.get(&ino).copied().unwrap_or(0)))
        } else {
            None
        };
        self.answer(FUSE_LOOKUP, move || match found {
            Some((ino, size)) => reply.entry(&TTL, &attr(ino, size), Generation(0)),
            None => reply.error(Errno::ENOENT),
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let size = self.size_of(ino.0);
        self.answer(FUSE_GETATTR, move || match size {
            Some(size) => reply.attr(&TTL, &attr(ino.0, size)),
            None => reply.error(Errno::ENOENT),
        });
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if let Some(size) = size {
            self.tree
                .lock()
                .expect("fixture tree")
                .sizes
                .insert(ino.0, size);
        }
        match self.size_of(ino.0) {
            Some(size) => reply.attr(&TTL, &attr(ino.0, size)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        if parent.0 != ROOT {
            reply.error(Errno::ENOENT);
            return;
        }
        let ino = {
            let mut tree = self.tree.lock().expect("fixture tree");
            if let Some(&ino) = tree.by_name.get(name) {
                ino
            } else {
                tree.next_ino = tree.next_ino.max(ROOT) + 1;
                let ino = tree.next_ino;
                tree.by_name.insert(name.to_owned(), ino);
                tree.sizes.insert(ino, 0);
                ino
            }
        };
        self.answer(FUSE_CREATE, move || {
            reply.created(
                &TTL,
                &attr(ino, 0),
                Generation(0),
                FileHandle(ino),
                FopenFlags::empty(),
            )
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.answer(FUSE_OPEN, move || {
            reply.opened(FileHandle(ino.0), FopenFlags::empty())
        });
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let file_size = self.size_of(ino.0).unwrap_or(0);
        let len = file_size.saturating_sub(offset).min(size as u64) as usize;
        self.answer(FUSE_READ, move || reply.data(&vec![0u8; len]));
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let written = data.len() as u32;
        {
            let mut tree = self.tree.lock().expect("fixture tree");
            let size = tree.sizes.entry(ino.0).or_default();
            *size = (*size).max(offset + written as u64);
        }
        self.answer(FUSE_WRITE, move || reply.written(written));
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.answer(FUSE_FLUSH, move || reply.ok());
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut tree = self.tree.lock().expect("fixture tree");
        match tree.by_name.remove(name) {
            Some(ino) => {
                tree.sizes.remove(&ino);
                reply.ok()
            }
            None => reply.error(Errno::ENOENT),
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino.0 != ROOT {
            reply.error(Errno::ENOTDIR);
            return;
        }
        let mut entries: Vec<(u64, FileType, OsString)> = vec![
            (ROOT, FileType::Directory, ".".into()),
            (ROOT, FileType::Directory, "..".into()),
        ];
        {
            let tree = self.tree.lock().expect("fixture tree");
            let mut files: Vec<_> = tree.by_name.iter().collect();
            files.sort();
            for (name, &ino) in files {
                entries.push((ino, FileType::RegularFile, name.clone()));
            }
        }
        for (index, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), index as u64 + 1, kind, &name) {
                break;
            }
        }
        reply.ok();
    }
}

/// A mounted fixture; unmounts (lazily, so a stuck request cannot hang the test) and
/// removes its mount point on drop.
pub struct FuseFixture {
    mountpoint: PathBuf,
    session: Option<fuser::BackgroundSession>,
}

impl FuseFixture {
    /// Mounts a fixture at a fresh directory `mountpoint` (created here), delaying the
    /// replies of the given opcodes.
    pub fn mount(mountpoint: &Path, delays: &[(u32, Duration)]) -> std::io::Result<FuseFixture> {
        std::fs::create_dir_all(mountpoint)?;
        let fs = DelayFs {
            delays: delays.iter().copied().collect(),
            tree: Arc::new(Mutex::new(Tree::default())),
        };
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("lockpath-fixture".into()),
            MountOption::Subtype("lockpath".into()),
        ];
        config.acl = SessionACL::All;
        config.n_threads = Some(2);
        let session = fuser::Session::new(fs, mountpoint, &config)?.spawn()?;
        Ok(FuseFixture {
            mountpoint: mountpoint.to_path_buf(),
            session: Some(session),
        })
    }

    pub fn path(&self) -> &Path {
        &self.mountpoint
    }
}

impl Drop for FuseFixture {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            // fuser unmounts with MNT_DETACH (never blocks on a stuck request), then
            // the session threads end as /dev/fuse reports the connection gone.
            let _ = session.umount_and_join();
        }
        if let Ok(path) = CString::new(self.mountpoint.as_os_str().as_encoded_bytes()) {
            // SAFETY: a valid NUL-terminated path; if the mount is already gone this
            // fails with EINVAL, which is fine.
            unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = std::fs::remove_dir(&self.mountpoint);
    }
}
