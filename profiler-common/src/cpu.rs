//! On-CPU sampling: a perf_event software CPU clock on every CPU; each sample adds one
//! to the count of (process, thread, kernel stack, user stack).

/// Aggregation key of one on-CPU sample.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuKey {
    /// Process id (tgid) of the task that was on the CPU.
    pub tgid: u32,
    /// Thread id of that task.
    pub tid: u32,
    /// Kernel stack id in `STACKS`, or a negative errno (no kernel stack: sampled in user mode
    /// with an empty kernel part, or lost).
    pub kstack_id: i32,
    /// User stack id in `STACKS`, or a negative errno (kernel threads have none).
    pub ustack_id: i32,
}

impl CpuKey {
    /// The row of `CPU_OVERFLOW` that takes this sample when `CPU_SAMPLES` is full: its
    /// thread, without stacks.
    pub const fn overflow(&self) -> CpuKey {
        CpuKey {
            tgid: self.tgid,
            tid: self.tid,
            kstack_id: -1,
            ustack_id: -1,
        }
    }
}

/// Most bytes of user stack one sample copies (`--user-stack-bytes`): with the header,
/// 64 KiB (perf's limit too). Some programs keep more than 32 KiB in one frame (fio's
/// job loop keeps 37 KB).
pub const USER_STACK_MAX: usize = 64 * 1024 - core::mem::size_of::<StackSampleHeader>();

/// Bytes of `CPU_STACK_SAMPLES` when stack copies are off (one page: the map must exist).
pub const STACK_RING_MIN_BYTES: u32 = 4096;

/// What one on-CPU sample with a user stack copy says besides the stack bytes: sent
/// through `CPU_STACK_SAMPLES` (header, then `len` bytes read from `sp` upwards), so user
/// space can unwind without frame pointers. The registers are the user ones: of the
/// sample when it was taken in user mode, else those the task entered the kernel with.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackSampleHeader {
    pub tgid: u32,
    pub tid: u32,
    /// As in `CpuKey` (user mode: no kernel stack).
    pub kstack_id: i32,
    /// The frame-pointer walk of the same sample, as in `CpuKey`.
    pub ustack_id: i32,
    /// User registers at the sample: instruction, stack and frame pointers, and the
    /// link register (aarch64; 0 on x86_64).
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    pub lr: u64,
    /// Bytes of stack that follow (0 when even a short read failed).
    pub len: u32,
    pub _pad: u32,
}

/// The scratch value (one per CPU) the program fills before sending `header` and `len`
/// bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StackSample {
    pub header: StackSampleHeader,
    pub stack: [u8; USER_STACK_MAX],
}

/// What the family's programs could not record: each loss's slot in `LOSSES`, its name
/// in a profile and what it means (`ALL`, which the report prints).
pub mod losses {
    crate::loss::losses! {
        CPU_MAP_FULL = 16, "cpu_map_full",
            "on-CPU sample map full: sample counted in its thread's row without stacks (raise \
             --map-entries for its own row)";
        USER_STACK_FAILED = 17, "user_stack_failed",
            "user stack of a sample could not be taken (shown without user frames)";
        CPU_OVERFLOW_FULL = 43, "cpu_overflow_full",
            "on-CPU sample map and its overflow map full: sample dropped";
    }
}

pub mod names {
    crate::define_names! {
        CPU_SAMPLES,
        CPU_OVERFLOW,
        CPU_SAMPLE = cpu_sample,
        /// Ring of `StackSampleHeader` + stack bytes (samples with a user stack copy).
        CPU_STACK_SAMPLES,
        /// Scratch `StackSample`s, one per CPU (an array: per-CPU values are limited to 32 KiB).
        CPU_STACK_SCRATCH,
        /// Load-time global (u32): bytes of user stack to copy per sample; 0 = frame
        /// pointers only.
        CPU_USER_STACK_BYTES,
        /// Load-time global (u32): offset of `task_struct.stack`; 0 = unknown.
        CPU_TASK_STACK_OFFSET,
        /// Load-time global (u32): size of the kernel's `struct pt_regs`; 0 = unknown.
        CPU_PT_REGS_SIZE,
    }
}

#[cfg(feature = "user")]
crate::impl_pod!(CpuKey, StackSampleHeader);
