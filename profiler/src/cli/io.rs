//! `record`'s option of the block-IO family.

use clap::Args;

#[derive(Debug, Args)]
pub struct IoArgs {
    /// Record block-IO requests: latency histograms per device, operation, process and
    /// file, and whose writes caused them (a writer's writeback is its own).
    #[arg(long)]
    pub io: bool,
    /// With --io: also time the read, write, fsync and open calls of the targets per
    /// file and process (system-call tracepoints; on any file system, FUSE and network
    /// file systems included). Costs a hash lookup on those calls of every process.
    #[arg(long, requires = "io")]
    pub file_calls: bool,
}
