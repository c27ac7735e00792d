//! `record`'s option of the block-IO family.

use clap::Args;

#[derive(Debug, Args)]
pub struct IoArgs {
    /// Record block-IO requests: latency histograms per device, operation and process.
    #[arg(long)]
    pub io: bool,
}
