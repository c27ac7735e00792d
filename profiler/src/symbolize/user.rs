//! User-space symbols: the one user symbolizer, for every probe family (blazesym).
//!
//! How processes that exit during the run are still symbolized: the kernel side notes
//! each process the first time one of its user stacks is recorded (and again after an
//! exec), and user space then snapshots `/proc/PID/maps` right away and opens every
//! executable mapping through `/proc/PID/map_files/`, keeping the descriptor. At the end
//! of the run the addresses are turned into file offsets with that snapshot and the
//! files are read through the kept descriptors (`/proc/self/fd/N`), so neither the exit
//! of the process nor the deletion or replacement of its binary loses the symbols.
//! Processes that were never snapshotted are read from /proc at the end, if alive.
//!
//! Symbols come from `.symtab`, or `.dynsym` when the binary is stripped, then from a
//! separate debug file (by build id under /usr/lib/debug/.build-id/, or debug link);
//! outside file mappings from the vDSO and JIT perf maps (/tmp/perf-PID.map) of live
//! processes. A binary stripped of `.symtab` that carries MiniDebugInfo
//! (`.gnu_debugdata`, an xz-compressed symbol table, as Fedora ships) is read through it.
//! Rust and C++ names are demangled.

use std::{
    collections::HashMap,
    fs::File,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
};

use blazesym::{
    symbolize::{
        source::{Elf, Process, Source},
        Input, Symbolized, Symbolizer,
    },
    Pid,
};

use crate::profile::Frame;

/// One executable mapping of a process.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Offset of `start` in the file.
    pub offset: u64,
    /// Index in `UserSymbols::objects`, or `None` for special mappings (`[vdso]`, anonymous).
    pub object: Option<usize>,
    /// The path as /proc shows it (`/usr/lib/x86_64-linux-gnu/libc.so.6`, `[vdso]`).
    pub name: String,
}

/// An executable mapping of an object file, for unwinders (see `code_mappings`).
#[derive(Debug, Clone, PartialEq)]
pub struct CodeMapping {
    pub start: u64,
    pub end: u64,
    /// Offset of `start` in the file.
    pub offset: u64,
    /// Index of the object (the same file in every process has the same index).
    pub object: usize,
    /// Where the file is read (the kept descriptor, or the path).
    pub read_path: PathBuf,
}

/// One line of `/proc/PID/maps`, executable mappings only.
#[derive(Debug, Clone, PartialEq)]
pub struct MapsLine {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub dev: String,
    pub inode: u64,
    pub name: String,
}

/// Parses the executable mappings of `/proc/PID/maps` text.
pub fn parse_maps(text: &str) -> Vec<MapsLine> {
    let mut lines = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(6, char::is_whitespace);
        let (Some(range), Some(perms), Some(offset), Some(dev), Some(inode)) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            continue;
        };
        if !perms.contains('x') {
            continue;
        }
        let name = parts.next().unwrap_or("").trim().to_string();
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(offset), Ok(inode)) = (
            u64::from_str_radix(start, 16),
            u64::from_str_radix(end, 16),
            u64::from_str_radix(offset, 16),
            inode.parse::<u64>(),
        ) else {
            continue;
        };
        lines.push(MapsLine {
            start,
            end,
            offset,
            dev: dev.to_string(),
            inode,
            name,
        });
    }
    lines
}

/// An object file (executable or shared library) kept open for the run.
struct Object {
    /// The path as /proc showed it, for display (` (deleted)` removed).
    name: String,
    /// Where blazesym reads it: the kept descriptor, or the path when it could not be kept.
    read_path: PathBuf,
    _file: Option<File>,
}

/// Names of the outermost frames of a complete user stack: the walk reached the start of
/// the program or of the thread. A stack ending elsewhere was cut short.
const STACK_ROOTS: &[&str] = &[
    "_start",
    "__libc_start_main",
    "__libc_start_call_main",
    "__libc_start_main_impl",
    "start_thread",
    "clone",
    "clone3",
    "__clone",
    "__clone3",
    "thread_start",
    "_dl_start_user",
];

/// True when the frame is in the C library or the dynamic loader, where every process and
/// thread starts (their own code has no frame pointers, so the walk ends there).
fn in_c_runtime(frame: &Frame) -> bool {
    let Some(module) = &frame.module else {
        return false;
    };
    let file = module.rsplit('/').next().unwrap_or(module);
    file.starts_with("libc.so") || file.starts_with("libc-") || file.starts_with("ld-linux")
}

/// True when a user stack (leaf first) reached a program or thread entry point: a known
/// entry function, `main` or a thread start routine near the end, or the C runtime that
/// calls them. Otherwise the frame-pointer walk stopped early (a function built without
/// frame pointers) and the stack is truncated.
pub fn reaches_root(frames: &[Frame]) -> bool {
    let Some(last) = frames.last() else {
        return false;
    };
    if STACK_ROOTS.contains(&last.name.as_str()) || in_c_runtime(last) {
        return true;
    }
    frames.iter().rev().take(3).any(|frame| {
        frame.name == "main"
            || frame.name.ends_with("::thread_start")
            || STACK_ROOTS.contains(&frame.name.as_str())
    })
}

/// User-space symbolizer with memory-map snapshots of the profiled processes.
pub struct UserSymbols {
    symbolizer: Symbolizer,
    /// Snapshots per process, oldest first (an exec adds one).
    processes: HashMap<u32, Vec<Vec<Mapping>>>,
    objects: Vec<Object>,
    object_ids: HashMap<(String, u64), usize>,
    /// Symbol names by (object, file offset).
    names: HashMap<(usize, u64), Option<String>>,
    /// Symbol names outside file mappings (vDSO, perf maps) by (process, address).
    live_names: HashMap<(u32, u64), Option<String>>,
}

impl Default for UserSymbols {
    fn default() -> Self {
        Self::new()
    }
}

impl UserSymbols {
    pub fn new() -> Self {
        UserSymbols {
            symbolizer: Symbolizer::builder()
                .enable_demangling(true)
                .enable_code_info(false)
                .enable_inlined_fns(false)
                .build(),
            processes: HashMap::new(),
            objects: Vec::new(),
            object_ids: HashMap::new(),
            names: HashMap::new(),
            live_names: HashMap::new(),
        }
    }

    /// Snapshots the executable mappings of `pid` now and keeps their files open.
    /// Returns false when the process is gone (or its maps are unreadable).
    pub fn remember(&mut self, pid: u32) -> bool {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return false;
        };
        let lines = parse_maps(&text);
        if lines.is_empty() {
            // A kernel thread, or a process already past exit_mm.
            return false;
        }
        let snapshot: Vec<Mapping> = lines
            .iter()
            .map(|line| Mapping {
                start: line.start,
                end: line.end,
                offset: line.offset,
                object: self.object_for(pid, line),
                name: line.name.clone(),
            })
            .collect();
        let snapshots = self.processes.entry(pid).or_default();
        if snapshots.last() != Some(&snapshot) {
            snapshots.push(snapshot);
        }
        true
    }

    /// Snapshots again every remembered process that is still alive (new libraries).
    pub fn refresh(&mut self) {
        let pids: Vec<u32> = self.processes.keys().copied().collect();
        for pid in pids {
            self.remember(pid);
        }
    }

    pub fn knows(&self, pid: u32) -> bool {
        self.processes.contains_key(&pid)
    }

    fn object_for(&mut self, pid: u32, line: &MapsLine) -> Option<usize> {
        if !line.name.starts_with('/') || line.inode == 0 {
            return None;
        }
        let key = (line.dev.clone(), line.inode);
        if let Some(&id) = self.object_ids.get(&key) {
            return Some(id);
        }
        // map_files reaches the mapped file even when its path was deleted or replaced.
        let via_map_files = format!("/proc/{pid}/map_files/{:x}-{:x}", line.start, line.end);
        let file = File::open(&via_map_files)
            .or_else(|_| File::open(&line.name))
            .ok();
        let read_path = match &file {
            Some(file) => PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())),
            None => PathBuf::from(&line.name),
        };
        let id = self.objects.len();
        self.objects.push(Object {
            name: line.name.trim_end_matches(" (deleted)").to_string(),
            read_path,
            _file: file,
        });
        self.object_ids.insert(key, id);
        Some(id)
    }

    /// The executable file mappings of `pid` in its newest snapshot, with the path each
    /// object is read from, and the number of snapshots so far (a new one changes it).
    pub fn code_mappings(&self, pid: u32) -> Option<(usize, Vec<CodeMapping>)> {
        let snapshots = self.processes.get(&pid)?;
        let newest = snapshots.last()?;
        let mappings = newest
            .iter()
            .filter_map(|mapping| {
                let object = mapping.object?;
                Some(CodeMapping {
                    start: mapping.start,
                    end: mapping.end,
                    offset: mapping.offset,
                    object,
                    read_path: self.objects[object].read_path.clone(),
                })
            })
            .collect();
        Some((snapshots.len(), mappings))
    }

    /// Whether `addr` lies in an executable mapping of `pid` (any snapshot).
    pub fn in_code(&self, pid: u32, addr: u64) -> bool {
        self.mapping(pid, addr).is_some()
    }

    /// The mapping containing `addr` in the newest snapshot that has one.
    fn mapping(&self, pid: u32, addr: u64) -> Option<&Mapping> {
        self.processes.get(&pid)?.iter().rev().find_map(|snapshot| {
            snapshot
                .iter()
                .find(|mapping| mapping.start <= addr && addr < mapping.end)
        })
    }

    /// Frames for user addresses of `pid`, leaf first. Return addresses (every frame but
    /// the leaf) are looked up one byte back, inside the call instruction.
    pub fn frames(&mut self, pid: u32, addrs: &[u64]) -> Vec<Frame> {
        if !self.knows(pid) {
            self.remember(pid);
        }
        addrs
            .iter()
            .enumerate()
            .map(|(index, &addr)| {
                let lookup = if index == 0 {
                    addr
                } else {
                    addr.saturating_sub(1)
                };
                self.frame(pid, addr, lookup)
            })
            .collect()
    }

    fn frame(&mut self, pid: u32, addr: u64, lookup: u64) -> Frame {
        let Some(mapping) = self.mapping(pid, lookup).cloned() else {
            return Frame {
                name: format!("0x{addr:x}"),
                module: None,
                kernel: false,
            };
        };
        let Some(object) = mapping.object else {
            // [vdso], [anon:...], JIT code: the live process's vDSO or its perf map
            // (/tmp/perf-PID.map, written by JIT runtimes) may name it; otherwise the
            // mapping's name is all there is.
            if !self.live_names.contains_key(&(pid, lookup)) {
                let name = self.symbolize_live(pid, lookup);
                self.live_names.insert((pid, lookup), name);
            }
            let live = self.live_names[&(pid, lookup)].clone();
            let name = match live {
                Some(name) => name,
                None if mapping.name.is_empty() => format!("0x{addr:x}"),
                None => mapping.name.clone(),
            };
            return Frame {
                name,
                module: None,
                kernel: false,
            };
        };
        let file_offset = lookup - mapping.start + mapping.offset;
        let module = Some(self.objects[object].name.clone());
        if !self.names.contains_key(&(object, file_offset)) {
            let name = self.symbolize(object, file_offset);
            self.names.insert((object, file_offset), name);
        }
        let name = self.names[&(object, file_offset)].clone();
        // No symbol: the object and the offset in it still say where (and merge).
        let name = name.unwrap_or_else(|| {
            let object = &self.objects[object].name;
            let file = object.rsplit('/').next().unwrap_or(object);
            format!("{file}+0x{file_offset:x}")
        });
        Frame {
            name,
            module,
            kernel: false,
        }
    }

    /// The symbol at a file offset: from the object's `.symtab` or `.dynsym`, else from
    /// its separate debug file (found by build id under /usr/lib/debug/.build-id/, what
    /// Debian's -dbgsym packages install, or by its debug link).
    fn symbolize(&self, object: usize, file_offset: u64) -> Option<String> {
        [false, true].into_iter().find_map(|debug_syms| {
            let mut elf = Elf::new(self.objects[object].read_path.clone());
            elf.debug_syms = debug_syms;
            self.name_at(&Source::Elf(elf), Input::FileOffset(file_offset))
        })
    }

    /// The symbol at an address outside any file mapping of a live process: its vDSO,
    /// or JIT code its runtime listed in /tmp/perf-PID.map.
    fn symbolize_live(&self, pid: u32, addr: u64) -> Option<String> {
        let mut process = Process::new(Pid::from(pid));
        process.debug_syms = false;
        process.perf_map = true;
        process.vdso = true;
        self.name_at(&Source::Process(process), Input::AbsAddr(addr))
    }

    /// The name of the symbol at `input` in `source`, if blazesym finds one.
    fn name_at(&self, source: &Source, input: Input<u64>) -> Option<String> {
        match self.symbolizer.symbolize_single(source, input) {
            Ok(Symbolized::Sym(sym)) => Some(sym.name.into_owned()),
            _ => None,
        }
    }

    /// Path (for display) of the object a frame came from.
    pub fn object_name(&self, index: usize) -> Option<&Path> {
        self.objects
            .get(index)
            .map(|object| Path::new(&object.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0a00000-55d0c0a20000 r--p 00000000 fd:01 1234                       /usr/bin/prog
55d0c0a20000-55d0c0a80000 r-xp 00020000 fd:01 1234                       /usr/bin/prog
7f1e2c000000-7f1e2c021000 rw-p 00000000 00:00 0 
7f1e2c228000-7f1e2c3bd000 r-xp 00028000 fd:01 5678                       /usr/lib/x86_64-linux-gnu/libc.so.6
7ffd5a3f0000-7ffd5a3f2000 r-xp 00000000 00:00 0                          [vdso]
7f00000000-7f00001000 r-xp 00000000 fd:01 999                            /tmp/old binary (deleted)
";

    #[test]
    fn maps_keep_executable_mappings() {
        let lines = parse_maps(MAPS);
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert_eq!(lines[0].start, 0x55d0c0a20000);
        assert_eq!(lines[0].offset, 0x20000);
        assert_eq!(lines[0].inode, 1234);
        assert_eq!(lines[0].name, "/usr/bin/prog");
        assert_eq!(lines[2].name, "[vdso]");
        assert_eq!(lines[3].name, "/tmp/old binary (deleted)");
    }

    #[test]
    fn own_functions_are_named_through_a_snapshot() {
        // This test binary's own function, through /proc/self/maps like any process.
        #[inline(never)]
        fn marker_function_for_symbolizer() -> u64 {
            std::hint::black_box(42)
        }
        let addr = marker_function_for_symbolizer as *const () as u64;
        let mut symbols = UserSymbols::new();
        assert!(symbols.remember(std::process::id()));
        let frames = symbols.frames(std::process::id(), &[addr + 1]);
        assert!(
            frames[0].name.contains("marker_function_for_symbolizer"),
            "{frames:?}"
        );
        assert!(!frames[0].name.contains("_ZN"), "demangled: {frames:?}");
        assert!(!frames[0].kernel);
        assert!(frames[0].module.is_some());
    }

    #[test]
    fn stripped_library_is_named_from_dynsym() {
        // The C library ships stripped: only its .dynsym names its functions.
        let addr = libc::getpid as *const () as u64;
        let mut symbols = UserSymbols::new();
        let frames = symbols.frames(std::process::id(), &[addr]);
        assert!(frames[0].name.contains("getpid"), "{frames:?}");
        let module = frames[0].module.as_deref().unwrap_or("");
        assert!(module.contains("libc"), "{frames:?}");
    }

    #[test]
    fn jit_code_is_named_from_the_perf_map() {
        // An anonymous executable mapping, as a JIT runtime makes, listed in the
        // process's perf map.
        let len = 4096;
        // SAFETY: a fresh private anonymous mapping, unmapped below.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(page, libc::MAP_FAILED);
        let start = page as u64;
        let pid = std::process::id();
        let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
        std::fs::write(
            &map,
            format!(
                "{:x} 100 jitted_marker_function\n{:x} 80 other_jitted\n",
                start,
                start + 0x100
            ),
        )
        .expect("write the perf map");
        let mut symbols = UserSymbols::new();
        assert!(symbols.remember(pid));
        let frames = symbols.frames(pid, &[start + 0x10, start + 0x111]);
        let _ = std::fs::remove_file(&map);
        // SAFETY: unmapping the mapping made above.
        unsafe { libc::munmap(page, len) };
        assert_eq!(frames[0].name, "jitted_marker_function", "{frames:?}");
        assert_eq!(frames[1].name, "other_jitted", "{frames:?}");
    }

    #[test]
    fn roots_mark_complete_stacks() {
        let frame = |name: &str| Frame {
            name: name.into(),
            module: None,
            kernel: false,
        };
        let libc = Frame {
            name: "libc.so.6+0x2724a".into(),
            module: Some("/usr/lib/x86_64-linux-gnu/libc.so.6".into()),
            kernel: false,
        };
        assert!(reaches_root(&[
            frame("work"),
            frame("main"),
            frame("_start")
        ]));
        assert!(reaches_root(&[frame("work"), frame("main"), libc.clone()]));
        assert!(reaches_root(&[frame("work"), libc]));
        assert!(reaches_root(&[
            frame("f"),
            frame("main"),
            frame("0x1040000000")
        ]));
        assert!(!reaches_root(&[frame("work"), frame("0x1234")]));
        assert!(!reaches_root(&[
            frame("a"),
            frame("b"),
            frame("c"),
            frame("main"),
            frame("x"),
            frame("y"),
            frame("z")
        ]));
        assert!(!reaches_root(&[]));
    }
}
