//! Kernel-memory reads on demand: a program never attached, run by user space through
//! `BPF_PROG_TEST_RUN` in its own thread. Its context is `KREAD_ARGS` u64 values:
//! the operation, an address, a length and a sequence number. It writes the outcome
//! and the bytes read into the single value of `KREAD_BUF`; user space knows the value
//! is this run's by its sequence number.

/// Arguments of one run: `[op, address, length, sequence]`.
pub const KREAD_ARGS: usize = 4;

/// Copy `length` bytes (at most `KREAD_BUF_LEN`) from the kernel `address`.
pub const KREAD_OP_READ: u64 = 1;
/// Write the running task's `task_struct` address (`bpf_get_current_task`) into the
/// first 8 bytes.
pub const KREAD_OP_CURRENT_TASK: u64 = 2;

/// Bytes one run reads at most.
pub const KREAD_BUF_LEN: usize = 4096;

/// An argument was out of range (unknown operation, or a length over `KREAD_BUF_LEN`).
pub const KREAD_STATUS_BAD_ARGS: i64 = -22;

/// The value of `KREAD_BUF` (one entry): the sequence number of the run that wrote it,
/// the outcome (0, or the helper's negative errno: the bytes are then not valid) and
/// the bytes.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug)]
pub struct KreadBuf {
    pub sequence: u64,
    pub status: i64,
    pub bytes: [u8; KREAD_BUF_LEN],
}

pub mod names {
    crate::define_names! {
        KREAD_BUF,
        /// The reader program (a raw tracepoint program, loaded but never attached).
        KREAD_PROG = kread_run,
    }
}

#[cfg(feature = "user")]
crate::impl_pod!(KreadBuf);
