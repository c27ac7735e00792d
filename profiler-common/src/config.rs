//! Load-time globals handed from user space to the eBPF programs
//! (`EbpfLoader::set_global`). Names must match the `#[no_mangle]` statics.

pub const GLOBAL_FILTER_MODE: &str = "FILTER_MODE";
