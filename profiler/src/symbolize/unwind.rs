//! Unwinding user stacks without frame pointers: the registers and a copy of the top of
//! the user stack that the on-CPU sampler sends (see profiler-ebpf/src/cpu.rs) are
//! unwound here with framehop, from each object's `.eh_frame` (indexed by
//! `.eh_frame_hdr`) and `.debug_frame` when it has one; framehop falls back to frame
//! pointers for code without unwind information (the vDSO, JIT code).
//!
//! Objects are the ones `UserSymbols` keeps open for the run (its memory-map snapshots
//! and descriptors), so a process is unwound with the same view it is symbolized with.

use std::{
    collections::HashMap,
    ops::{Deref, Range},
    path::Path,
    sync::Arc,
};

use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};
use memmap2::Mmap;
use object::{Object, ObjectSection, ObjectSegment};

use super::user::{CodeMapping, UserSymbols};

/// Deepest stack unwound, as deep as the kernel's frame-pointer walks.
pub const MAX_FRAMES: usize = 127;

/// Per-process unwinders kept before those of exited processes are dropped.
const MAX_PROCESSES: usize = 1024;

/// Section bytes shared by every process that maps the object: a range of the file
/// mapped read-only (only the pages unwinding looks at are read: `.eh_frame_hdr` is a
/// binary-search table), or an owned copy of a compressed section.
#[derive(Clone)]
pub enum Bytes {
    Mapped(Arc<Mmap>, Range<usize>),
    Owned(Arc<[u8]>),
}

impl Default for Bytes {
    fn default() -> Self {
        Bytes::Owned(Arc::from(&[][..]))
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(map, range) => map.get(range.clone()).unwrap_or(&[]),
            Bytes::Owned(bytes) => bytes,
        }
    }
}

/// What unwinding needs of one object file, read once.
struct ObjectInfo {
    /// Loadable segments: (file offset, file size, virtual address).
    segments: Vec<(u64, u64, u64)>,
    sections: ExplicitModuleSectionInfo<Bytes>,
}

/// The result of one unwind, leaf first: the instruction pointer, then return addresses.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Unwound {
    pub addrs: Vec<u64>,
    /// The unwind reached the outermost frame (the unwind information says so); false
    /// when it stopped (stack bytes not copied, no rule, the depth limit).
    pub complete: bool,
}

/// User registers of one sample.
#[derive(Debug, Clone, Copy)]
pub struct Regs {
    pub ip: u64,
    pub sp: u64,
    /// The frame pointer (rbp, x29).
    pub bp: u64,
    /// The link register (aarch64: x30, the leaf's return address); unused on x86_64.
    pub lr: u64,
}

/// framehop's unwinder for the architecture lockpath is built for (the eBPF object
/// embedded in the binary is built for the same one).
#[cfg(target_arch = "x86_64")]
mod arch {
    pub use framehop::x86_64::{CacheX86_64 as Cache, UnwinderX86_64 as ArchUnwinder};

    pub fn unwind_regs(regs: super::Regs) -> framehop::x86_64::UnwindRegsX86_64 {
        framehop::x86_64::UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp)
    }
}

#[cfg(target_arch = "aarch64")]
mod arch {
    pub use framehop::aarch64::{CacheAarch64 as Cache, UnwinderAarch64 as ArchUnwinder};

    pub fn unwind_regs(regs: super::Regs) -> framehop::aarch64::UnwindRegsAarch64 {
        framehop::aarch64::UnwindRegsAarch64::new(regs.lr, regs.sp, regs.bp)
    }
}

use arch::{unwind_regs, ArchUnwinder, Cache};

/// Unwinds user stacks of the profiled processes, one framehop unwinder per process.
pub struct DwarfUnwinder {
    objects: HashMap<usize, Option<Arc<ObjectInfo>>>,
    /// Per process: the snapshot count its unwinder was built from, and the unwinder.
    processes: HashMap<u32, (usize, ArchUnwinder<Bytes>)>,
    cache: Cache,
}

impl Default for DwarfUnwinder {
    fn default() -> Self {
        Self::new()
    }
}

impl DwarfUnwinder {
    pub fn new() -> Self {
        DwarfUnwinder {
            objects: HashMap::new(),
            processes: HashMap::new(),
            cache: Cache::new(),
        }
    }

    /// Unwinds one sample of `pid` from its registers and the stack bytes copied from
    /// `regs.sp` upwards. `None` when the process's memory map is unknown.
    pub fn unwind(
        &mut self,
        symbols: &UserSymbols,
        pid: u32,
        regs: Regs,
        stack: &[u8],
    ) -> Option<Unwound> {
        let (generation, mappings) = symbols.code_mappings(pid)?;
        let rebuild = self
            .processes
            .get(&pid)
            .is_none_or(|(built, _)| *built != generation);
        if rebuild {
            let unwinder = self.build(&mappings);
            self.processes.insert(pid, (generation, unwinder));
            // A long system-wide run sees many short processes: drop the unwinders of
            // those that exited (rebuilt from the snapshots if a late sample comes).
            if self.processes.len() > MAX_PROCESSES {
                self.processes
                    .retain(|pid, _| Path::new(&format!("/proc/{pid}")).exists());
            }
        }
        let (_, unwinder) = self.processes.get(&pid)?;
        Some(unwind_with(unwinder, &mut self.cache, regs, stack))
    }

    /// Bytes of unwind sections held for every object read so far, and their count.
    pub fn held_bytes(&self) -> (usize, usize) {
        let objects = self.objects.values().flatten();
        let bytes = objects
            .clone()
            .map(|info| {
                let section = |data: &Option<Bytes>| data.as_ref().map_or(0, |data| data.len());
                section(&info.sections.eh_frame)
                    + section(&info.sections.eh_frame_hdr)
                    + section(&info.sections.debug_frame)
            })
            .sum();
        (bytes, objects.count())
    }

    fn build(&mut self, mappings: &[CodeMapping]) -> ArchUnwinder<Bytes> {
        let mut unwinder = ArchUnwinder::new();
        for mapping in mappings {
            let info = self
                .objects
                .entry(mapping.object)
                .or_insert_with(|| read_object(&mapping.read_path).map(Arc::new))
                .clone();
            let Some(info) = info else {
                continue;
            };
            let Some(base) = base_avma(&info.segments, mapping) else {
                continue;
            };
            let name = mapping.read_path.display().to_string();
            unwinder.add_module(Module::new(
                name,
                mapping.start..mapping.end,
                base,
                info.sections.clone(),
            ));
        }
        unwinder
    }
}

/// Unwinds with a built unwinder; stack reads outside the copy fail (the unwind stops).
fn unwind_with(
    unwinder: &ArchUnwinder<Bytes>,
    cache: &mut Cache,
    regs: Regs,
    stack: &[u8],
) -> Unwound {
    let mut read_stack = |addr: u64| -> Result<u64, ()> {
        let offset = addr.checked_sub(regs.sp).ok_or(())? as usize;
        let bytes = stack
            .get(offset..offset.checked_add(8).ok_or(())?)
            .ok_or(())?;
        Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
    };
    let mut frames = unwinder.iter_frames(regs.ip, unwind_regs(regs), cache, &mut read_stack);
    let mut addrs = Vec::new();
    let complete = loop {
        if addrs.len() >= MAX_FRAMES {
            break false;
        }
        match frames.next() {
            Ok(Some(frame)) => addrs.push(frame.address()),
            Ok(None) => break true,
            Err(_) => break false,
        }
    };
    Unwound { addrs, complete }
}

/// Where the object's address 0 is in the process: the mapping's file offset lies in one
/// loadable segment, whose virtual address is then known.
fn base_avma(segments: &[(u64, u64, u64)], mapping: &CodeMapping) -> Option<u64> {
    let &(file_offset, _, vaddr) = segments.iter().find(|(offset, size, _)| {
        *offset <= mapping.offset && mapping.offset < offset.saturating_add((*size).max(1))
    })?;
    // The mapping's start holds file offset `mapping.offset`, i.e. virtual address
    // vaddr + (mapping.offset - file_offset).
    let svma = vaddr.checked_add(mapping.offset - file_offset)?;
    mapping.start.checked_sub(svma)
}

/// Reads the unwind sections of an ELF file; `None` when it cannot be read or parsed.
/// The file is mapped, not read: only the pages unwinding touches are read in. `.text`
/// is not given to framehop: the CFI describes prologues and epilogues itself.
fn read_object(path: &Path) -> Option<ObjectInfo> {
    let opened = std::fs::File::open(path).ok()?;
    // SAFETY: a read-only private mapping of an object file that processes have mapped
    // to run; such files are replaced by renaming a new one in place, not rewritten (a
    // truncated file would fault on access, as it would for the processes themselves).
    let map = Arc::new(unsafe { Mmap::map(&opened) }.ok()?);
    let file = object::File::parse(&map[..]).ok()?;
    let segments = file
        .segments()
        .map(|segment| {
            let (offset, size) = segment.file_range();
            (offset, size, segment.address())
        })
        .collect();
    let range = |name: &str| {
        file.section_by_name(name)
            .map(|section| section.address()..section.address() + section.size())
    };
    let bytes = |name: &str| {
        let section = file.section_by_name(name)?;
        let data = section.uncompressed_data().ok()?;
        if data.is_empty() {
            return None;
        }
        match (&data, section.file_range()) {
            (std::borrow::Cow::Borrowed(_), Some((offset, size))) => {
                let start = usize::try_from(offset).ok()?;
                let end = start.checked_add(usize::try_from(size).ok()?)?;
                Some(Bytes::Mapped(Arc::clone(&map), start..end))
            }
            _ => Some(Bytes::Owned(Arc::from(&*data))),
        }
    };
    let sections = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: range(".text"),
        got_svma: range(".got"),
        eh_frame_svma: range(".eh_frame"),
        eh_frame: bytes(".eh_frame"),
        eh_frame_hdr_svma: range(".eh_frame_hdr"),
        eh_frame_hdr: bytes(".eh_frame_hdr"),
        debug_frame: bytes(".debug_frame"),
        ..Default::default()
    };
    Some(ObjectInfo { segments, sections })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_comes_from_the_segment_holding_the_mapping() {
        // A PIE whose text segment is at file offset 0x1000, vaddr 0x1000, mapped at
        // 0x5555_5555_5000 from offset 0x1000: its address 0 is at 0x5555_5555_4000.
        let segments = [
            (0, 0x600, 0),
            (0x1000, 0x2000, 0x1000),
            (0x3000, 0x500, 0x4000),
        ];
        let mapping = CodeMapping {
            start: 0x5555_5555_5000,
            end: 0x5555_5555_7000,
            offset: 0x1000,
            object: 0,
            read_path: "/x".into(),
        };
        assert_eq!(base_avma(&segments, &mapping), Some(0x5555_5555_4000));
        // A segment whose vaddr differs from its offset (a shared library's data).
        let mapping = CodeMapping {
            start: 0x7f00_0000_3000,
            offset: 0x3000,
            ..mapping
        };
        assert_eq!(
            base_avma(&segments, &mapping),
            Some(0x7f00_0000_3000 - 0x4000)
        );
    }

    /// Unwinds this test's own stack from registers and a copy of its stack, the way a
    /// sample arrives from the kernel: the chain must reach the test function and the
    /// test harness's thread start.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn own_stack_unwinds_through_the_test_function() {
        #[inline(never)]
        fn capture() -> (Regs, Vec<u8>) {
            let (ip, sp, bp): (u64, u64, u64);
            // SAFETY: reads the instruction, stack and frame pointers; no memory access.
            unsafe {
                std::arch::asm!(
                    "lea {ip}, [rip]",
                    "mov {sp}, rsp",
                    "mov {bp}, rbp",
                    ip = out(reg) ip,
                    sp = out(reg) sp,
                    bp = out(reg) bp,
                );
            }
            // As the sampler does: the top of the stack, up to the end of its mapping.
            let top = thread_stack_top();
            let len = (16 * 1024).min(top.saturating_sub(sp) as usize);
            let mut copy = vec![0u8; len];
            // SAFETY: reads this thread's own stack from the stack pointer up, within
            // the thread's stack (bounded by its top above).
            unsafe {
                std::ptr::copy_nonoverlapping(sp as *const u8, copy.as_mut_ptr(), len);
            }
            (Regs { ip, sp, bp, lr: 0 }, copy)
        }
        /// The highest address of this thread's stack.
        fn thread_stack_top() -> u64 {
            // SAFETY: pthread_getattr_np fills an attribute object we own and destroy;
            // pthread_attr_getstack reads it.
            unsafe {
                let mut attr: libc::pthread_attr_t = std::mem::zeroed();
                assert_eq!(libc::pthread_getattr_np(libc::pthread_self(), &mut attr), 0);
                let mut addr: *mut libc::c_void = std::ptr::null_mut();
                let mut size: libc::size_t = 0;
                assert_eq!(libc::pthread_attr_getstack(&attr, &mut addr, &mut size), 0);
                libc::pthread_attr_destroy(&mut attr);
                addr as u64 + size as u64
            }
        }
        #[inline(never)]
        fn marker_caller_of_capture() -> (Regs, Vec<u8>) {
            std::hint::black_box(capture())
        }
        let (regs, stack) = marker_caller_of_capture();
        let mut symbols = UserSymbols::new();
        let pid = std::process::id();
        assert!(symbols.remember(pid));
        let mut unwinder = DwarfUnwinder::new();
        let unwound = unwinder
            .unwind(&symbols, pid, regs, &stack)
            .expect("own process known");
        assert!(unwound.addrs.len() >= 3, "{unwound:?}");
        let frames = symbols.frames(pid, &unwound.addrs);
        let names: Vec<&str> = frames.iter().map(|frame| frame.name.as_str()).collect();
        let at = |name: &str| names.iter().position(|frame| frame.contains(name));
        let (Some(callee), Some(caller)) = (at("capture"), at("marker_caller_of_capture")) else {
            panic!("capture and its caller expected in {names:?}");
        };
        assert!(callee < caller, "{names:?}");
        assert!(
            at("own_stack_unwinds_through_the_test_function").is_some(),
            "{names:?}"
        );
    }
}
