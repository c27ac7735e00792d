//! On-CPU samples with a copy of the user stack (`--user-stack-bytes`): the sampler
//! sends each sample taken in user mode with its registers and the top of its stack
//! through `CPU_STACK_SAMPLES` (a sample taken in kernel mode, in a system call, sends
//! the user registers the task entered the kernel with, found at the top of its kernel
//! stack); they are unwound here as they arrive (the process is usually still alive, its
//! map snapshot fresh) with framehop from the objects' unwind information, and counted by
//! (thread, kernel stack, unwound user stack). Samples whose user registers cannot be
//! found, and those the ring had no room for, keep the in-kernel count and its
//! frame-pointer user stack.

use std::{cell::RefCell, collections::HashMap, time::Instant};

use anyhow::{Context, Result};
use aya::{
    maps::{MapData, RingBuf},
    util::online_cpus,
    Ebpf, EbpfLoader,
};
use profiler_common::cpu::{names, StackSampleHeader};

use crate::{
    btf::Btf,
    probes::shared::StackResolver,
    profile::CpuRow,
    symbolize::{
        unwind::{DwarfUnwinder, Regs, Unwound},
        UserSymbols,
    },
};

const HEADER_BYTES: usize = std::mem::size_of::<StackSampleHeader>();

/// One unwound sample's aggregation key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SampleKey {
    tgid: u32,
    tid: u32,
    kstack_id: i32,
    /// The frame-pointer walk of the same sample (the fallback).
    ustack_id: i32,
    /// `None` when the process's memory map was unknown (it had exited).
    unwound: Option<Unwound>,
}

/// What the unwinding did during the run.
#[derive(Debug, Default, Clone, Copy)]
pub struct UnwindStats {
    pub samples: u64,
    /// Unwinds that reached the outermost frame.
    pub complete: u64,
    /// Samples of processes whose memory map was unknown (frame pointers used).
    pub unknown_process: u64,
    /// Time spent unwinding, in nanoseconds.
    pub unwind_ns: u64,
}

struct State {
    ring: Option<RingBuf<MapData>>,
    unwinder: DwarfUnwinder,
    counts: HashMap<SampleKey, u64>,
    stats: UnwindStats,
}

/// User stack copies of the on-CPU family.
pub struct StackCopies {
    /// Bytes copied per sample; 0: off.
    bytes: u32,
    /// Offset of `task_struct.stack` from the kernel's BTF (0: unknown), to find the user
    /// registers of samples taken in kernel mode.
    task_stack_offset: u32,
    /// Size of the kernel's `struct pt_regs` from BTF (0: unknown; arm64 needs it).
    pt_regs_size: u32,
    state: RefCell<State>,
}

impl StackCopies {
    pub fn new(bytes: u32) -> StackCopies {
        let task_stack_offset = match bytes {
            0 => 0,
            _ => Btf::vmlinux()
                .and_then(|btf| btf.member_pointer_offset("task_struct", "stack"))
                .unwrap_or_else(|err| {
                    log::info!("samples in kernel mode keep frame-pointer user stacks: {err:#}");
                    0
                }),
        };
        let pt_regs_size = match task_stack_offset {
            0 => 0,
            _ => Btf::vmlinux()
                .ok()
                .and_then(|btf| btf.struct_size("pt_regs"))
                .unwrap_or(0),
        };
        StackCopies {
            bytes,
            task_stack_offset,
            pt_regs_size,
            state: RefCell::new(State {
                ring: None,
                unwinder: DwarfUnwinder::new(),
                counts: HashMap::new(),
                stats: UnwindStats::default(),
            }),
        }
    }

    /// Sets the copy size and sizes the ring (about 0.2 s of samples of every CPU, a
    /// power of two between 256 KiB and 64 MiB); nothing when copies are off.
    pub fn configure<'a>(&'a self, loader: &mut EbpfLoader<'a>, freq_hz: u64) {
        if self.bytes == 0 {
            return;
        }
        let cpus = online_cpus().map(|cpus| cpus.len()).unwrap_or(1) as u64;
        let per_second = cpus * freq_hz * (self.bytes as u64 + HEADER_BYTES as u64 + 8);
        let ring = (per_second / 5)
            .next_power_of_two()
            .clamp(256 * 1024, 64 * 1024 * 1024) as u32;
        let slots = aya::util::nr_cpus().unwrap_or(1) as u32;
        loader
            .override_global(names::CPU_USER_STACK_BYTES, &self.bytes, true)
            .override_global(names::CPU_TASK_STACK_OFFSET, &self.task_stack_offset, true)
            .override_global(names::CPU_PT_REGS_SIZE, &self.pt_regs_size, true)
            .map_max_entries(names::CPU_STACK_SAMPLES, ring)
            .map_max_entries(names::CPU_STACK_SCRATCH, slots);
    }

    /// Takes the sample ring out of the object; what to add to the family's method.
    pub fn start(&self, ebpf: &mut Ebpf) -> Result<Option<String>> {
        if self.bytes == 0 {
            return Ok(None);
        }
        let map = ebpf
            .take_map(names::CPU_STACK_SAMPLES)
            .context("map CPU_STACK_SAMPLES missing from the eBPF object")?;
        let ring = RingBuf::try_from(map).context("CPU_STACK_SAMPLES has an unexpected type")?;
        self.state.borrow_mut().ring = Some(ring);
        Ok(Some(format!(
            "; user stacks: {}-byte copies unwound with .eh_frame/.debug_frame (user mode), frame pointers otherwise",
            self.bytes
        )))
    }

    /// Unwinds and counts every sample waiting in the ring.
    pub fn poll(&self, user: &mut UserSymbols) {
        let mut state = self.state.borrow_mut();
        let State {
            ring,
            unwinder,
            counts,
            stats,
        } = &mut *state;
        let Some(ring) = ring.as_mut() else {
            return;
        };
        let started = Instant::now();
        while let Some(item) = ring.next() {
            let Some(header) = header_of(&item) else {
                continue;
            };
            let len = (header.len as usize).min(item.len() - HEADER_BYTES);
            let stack = &item[HEADER_BYTES..HEADER_BYTES + len];
            if !user.knows(header.tgid) {
                user.remember(header.tgid);
            }
            let regs = Regs {
                ip: header.ip,
                sp: header.sp,
                bp: header.bp,
                lr: header.lr,
            };
            let unwound = unwinder.unwind(user, header.tgid, regs, stack);
            stats.samples += 1;
            match &unwound {
                Some(unwound) if unwound.complete => stats.complete += 1,
                Some(_) => {}
                None => stats.unknown_process += 1,
            }
            let key = SampleKey {
                tgid: header.tgid,
                tid: header.tid,
                kstack_id: header.kstack_id,
                ustack_id: header.ustack_id,
                unwound,
            };
            *counts.entry(key).or_insert(0) += 1;
        }
        stats.unwind_ns += started.elapsed().as_nanos() as u64;
    }

    /// The unwound samples so far as profile rows. An unwind that reached the outermost
    /// frame is the stack; one that stopped gives way to the frame-pointer walk when
    /// that one is whole, and otherwise ends in `[unwind stopped]`.
    pub fn rows(&self, stacks: &mut StackResolver) -> Vec<CpuRow> {
        let state = self.state.borrow();
        state
            .counts
            .iter()
            .map(|(key, &samples)| {
                let frame_pointers =
                    |stacks: &mut StackResolver| stacks.user_stack(key.tgid, key.ustack_id);
                let user_stack = match &key.unwound {
                    Some(unwound) if unwound.complete => {
                        Some(stacks.user_addrs_stack(key.tgid, &unwound.addrs, false, false))
                    }
                    Some(unwound) => {
                        let fallback = frame_pointers(stacks);
                        match fallback {
                            Some(id) if stacks.user_stack_complete(id) => Some(id),
                            _ if unwound.addrs.is_empty() => fallback,
                            _ => Some(stacks.user_addrs_stack(
                                key.tgid,
                                &unwound.addrs,
                                unwound.addrs.len() >= crate::symbolize::unwind::MAX_FRAMES,
                                true,
                            )),
                        }
                    }
                    None => frame_pointers(stacks),
                };
                CpuRow {
                    pid: key.tgid,
                    tid: key.tid,
                    kernel_stack: stacks.kernel_stack(key.kstack_id),
                    user_stack,
                    samples,
                }
            })
            .collect()
    }

    /// A period was drained (`record --rotate`): its unwound samples are in its profile.
    pub fn new_period(&self) {
        self.state.borrow_mut().counts.clear();
    }

    /// What the unwinding did so far.
    pub fn stats(&self) -> UnwindStats {
        self.state.borrow().stats
    }

    /// Logs what the unwinding did (`RUST_LOG=info`).
    pub fn finish(&self) {
        if self.bytes == 0 {
            return;
        }
        let stats = self.stats();
        let (bytes, objects) = self.state.borrow().unwinder.held_bytes();
        log::info!(
            "user stack copies: {} samples unwound ({} to the outermost frame, {} of exited processes) in {:.1} ms; unwind sections of {objects} objects held: {:.1} MiB",
            stats.samples,
            stats.complete,
            stats.unknown_process,
            stats.unwind_ns as f64 / 1e6,
            bytes as f64 / (1024.0 * 1024.0)
        );
    }
}

/// The header at the start of a ring item, if the item is long enough.
fn header_of(item: &[u8]) -> Option<StackSampleHeader> {
    let bytes = item.get(..HEADER_BYTES)?;
    // SAFETY: `bytes` holds HEADER_BYTES bytes; StackSampleHeader is plain old data
    // (every bit pattern valid) and the read is unaligned.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const StackSampleHeader) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_items_have_no_header() {
        assert!(header_of(&[0u8; 8]).is_none());
        let header = StackSampleHeader {
            tgid: 7,
            len: 16,
            ..Default::default()
        };
        // SAFETY: viewing a plain-old-data struct as bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                &header as *const StackSampleHeader as *const u8,
                HEADER_BYTES,
            )
        };
        assert_eq!(header_of(bytes), Some(header));
    }
}
