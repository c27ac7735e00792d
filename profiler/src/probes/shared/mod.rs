//! What every probe family shares: the maps (`maps`), stack resolution (`stacks`),
//! loading and attaching with one error path (`attach`), the kfunc stand-ins of the
//! object (`kfunc`), the process watcher (`processes`) and the map commands aya lacks
//! (`bpfsys`).

mod attach;
pub mod bpfsys;
pub mod inprogress;
pub mod kfunc;
mod maps;
mod processes;
mod stacks;

pub use attach::{
    attach_kprobe_pair, attach_loaded_raw_tracepoint, attach_raw_tracepoint, attach_tracepoint,
    explain, kprobes_unavailable, load_error, load_object, load_raw_tracepoint, object_load_error,
    program, program_misses,
};
pub use maps::{comm_to_string, drain_losses, drain_processes, latency_from, MapSet};
pub use processes::ProcessWatcher;
pub use stacks::{strip_tracing_frames, StackResolver};

/// Lowest kernel address: the upper half on x86_64; on arm64 the linear map starts at
/// 0xffff000000000000 with 48-bit and 0xfff0000000000000 with 52-bit virtual addresses.
#[cfg(not(target_arch = "aarch64"))]
const KERNEL_SPACE_START: u64 = 0xffff_8000_0000_0000;
#[cfg(target_arch = "aarch64")]
const KERNEL_SPACE_START: u64 = 0xfff0_0000_0000_0000;

/// Whether `addr` can be a kernel address (a lock's, given on the command line).
pub fn is_kernel_address(addr: u64) -> bool {
    addr >= KERNEL_SPACE_START
}
