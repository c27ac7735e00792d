//! `record`'s options of the off-CPU families: the waits (`--offcpu`, `--offcpu-all`),
//! who ended them (`--wakers`), which are kept and how they are classified.

use clap::Args;

use super::values::parse_min_wait;
use crate::waitclass;

#[derive(Debug, Args)]
pub struct OffcpuArgs {
    /// Record off-CPU waits in D state (buffer, page, block IO, journal, most lock
    /// sleeps), by process, stack and wait class.
    #[arg(long)]
    pub offcpu: bool,

    /// Off-CPU waits in S state (voluntary sleeps) too; implies --offcpu.
    #[arg(long)]
    pub offcpu_all: bool,

    /// Who woke each off-CPU wait (with --offcpu or --offcpu-all): the waker's process,
    /// thread and stacks from sched:sched_waking, aggregated in the kernel per (waiter
    /// stack, waker stack); the report's "woken by" lines and `--kind offwake`.
    #[arg(long)]
    pub wakers: bool,

    /// Drop off-CPU waits shorter than this, in the kernel (e.g. 100us, 2ms).
    #[arg(long, value_name = "DUR", value_parser = parse_min_wait)]
    pub min_wait: Option<u64>,

    /// Add a wait class: off-CPU stacks with a frame matching FRAME_PATTERN (`*` is a
    /// wildcard) get class NAME; before the built-in rules; repeatable.
    #[arg(long, value_name = "NAME=FRAME_PATTERN", value_parser = waitclass::parse_rule)]
    pub wait_class: Vec<waitclass::Rule>,
}
