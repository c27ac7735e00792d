//! What differs between the architectures the programs are built for (x86_64 and
//! aarch64, chosen by aya's `bpf_target_arch` cfg): the registers of a kprobe and of a
//! perf sample and where a task's user registers sit on its kernel stack. (Which words of a
//! kernel stack are kernel text comes from kallsyms on both: `LockText`.)

use aya_ebpf::programs::{PerfEventContext, ProbeContext};

/// The user registers an unwinder starts from: instruction, stack and frame pointers,
/// and the link register (aarch64; 0 on x86_64, where the return address is on the
/// stack).
#[derive(Clone, Copy)]
pub struct UserRegs {
    pub ip: u64,
    pub sp: u64,
    pub fp: u64,
    pub lr: u64,
}

/// Kernel stacks are 16 KiB on x86_64 and on arm64 with 4 KiB pages (without KASAN,
/// which doubles them: then no registers match and the sample keeps its frame-pointer
/// stack).
pub const THREAD_SIZE: u64 = 16 * 1024;

#[cfg(bpf_target_arch = "x86_64")]
mod imp {
    use aya_ebpf::bindings::pt_regs;

    use super::*;

    /// x86_64's user code and stack segment selectors.
    const USER_CS: u64 = 0x33;
    const USER_SS: u64 = 0x2b;

    #[inline(always)]
    pub fn kprobe_sp(ctx: &ProbeContext) -> u64 {
        // SAFETY: `regs` is the kprobe's pt_regs, valid for this program run.
        unsafe { (*ctx.regs).rsp }
    }

    #[inline(always)]
    pub fn sample_user_regs(ctx: &PerfEventContext) -> Option<UserRegs> {
        // SAFETY: the context of a perf_event program is a bpf_perf_event_data; its regs
        // are readable.
        let regs = unsafe { &(*ctx.ctx).regs };
        (regs.cs & 3 == 3).then_some(UserRegs {
            ip: regs.rip,
            sp: regs.rsp,
            fp: regs.rbp,
            lr: 0,
        })
    }

    /// The `pt_regs` at the top of a kernel stack, below 16 bytes of padding on kernels
    /// with FRED; `_size` (the kernel's pt_regs) is fixed on x86_64.
    #[inline(always)]
    pub fn entry_user_regs(stack: u64, _size: u64) -> Option<UserRegs> {
        let size = core::mem::size_of::<pt_regs>() as u64;
        for padding in [0u64, 16] {
            let at = stack + THREAD_SIZE - padding - size;
            // SAFETY: fault-safe read of kernel memory into a local.
            let Ok(regs) =
                (unsafe { aya_ebpf::helpers::bpf_probe_read_kernel(at as *const pt_regs) })
            else {
                continue;
            };
            if regs.cs == USER_CS && regs.ss == USER_SS {
                return Some(UserRegs {
                    ip: regs.rip,
                    sp: regs.rsp,
                    fp: regs.rbp,
                    lr: 0,
                });
            }
        }
        None
    }
}

#[cfg(bpf_target_arch = "aarch64")]
mod imp {
    use aya_ebpf::bindings::user_pt_regs;

    use super::*;

    /// `PSTATE.M`: the exception level and stack pointer; 0 is EL0 (user), and bit 4
    /// set is a 32-bit (compat) task, whose registers an aarch64 unwinder cannot use.
    const PSR_MODE_MASK: u64 = 0x1f;

    #[inline(always)]
    pub fn kprobe_sp(ctx: &ProbeContext) -> u64 {
        // SAFETY: on arm64 a kprobe's context is the kernel's pt_regs, which begins with
        // the user_pt_regs layout; valid for this program run.
        unsafe { (*(ctx.regs as *const user_pt_regs)).sp }
    }

    #[inline(always)]
    fn user_mode(regs: &user_pt_regs) -> Option<UserRegs> {
        (regs.pstate & PSR_MODE_MASK == 0).then_some(UserRegs {
            ip: regs.pc,
            sp: regs.sp,
            fp: regs.regs[29],
            lr: regs.regs[30],
        })
    }

    #[inline(always)]
    pub fn sample_user_regs(ctx: &PerfEventContext) -> Option<UserRegs> {
        // SAFETY: the context of a perf_event program is a bpf_perf_event_data, whose
        // regs are a user_pt_regs on arm64.
        let regs = unsafe { &(*ctx.ctx).regs };
        user_mode(regs)
    }

    /// `task_pt_regs`: the kernel's pt_regs (`size` bytes, from BTF: it grows between
    /// releases) at the top of the kernel stack, starting with the user_pt_regs layout.
    #[inline(always)]
    pub fn entry_user_regs(stack: u64, size: u64) -> Option<UserRegs> {
        if size == 0 {
            return None;
        }
        let at = stack + THREAD_SIZE - size;
        // SAFETY: fault-safe read of kernel memory into a local.
        let regs =
            unsafe { aya_ebpf::helpers::bpf_probe_read_kernel(at as *const user_pt_regs) }.ok()?;
        user_mode(&regs)
    }
}

pub use imp::{entry_user_regs, kprobe_sp, sample_user_regs};
