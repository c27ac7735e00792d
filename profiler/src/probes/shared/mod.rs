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
    attach_kprobe_pair, attach_raw_tracepoint, attach_tracepoint, explain, kprobes_unavailable,
    load_error, object_load_error, program, program_misses,
};
pub use maps::{comm_to_string, drain_losses, drain_processes, latency_from, MapSet};
pub use processes::ProcessWatcher;
pub use stacks::{strip_tracing_frames, StackResolver};
