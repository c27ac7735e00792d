//! `record`'s options of the hold family: how long one lock is held.

use clap::Args;

use super::func::FuncMethod;

#[derive(Debug, Args)]
pub struct HoldArgs {
    /// Record how long one lock is held, acquisition to release, per holder stack and
    /// process: LOCK is a kernel symbol (a static lock) or an address from a report's
    /// lock column, optionally typed (mutex: or rwsem:; without a type both are probed).
    /// Spinlocks and rwlocks are refused: hooking their functions can hang the kernel.
    /// COST: it hooks the lock and unlock functions of the type (mutex_lock*/mutex_unlock,
    /// down_*/up_*), among the hottest functions of the kernel: every operation on every
    /// mutex or rwsem in the system pays a trampoline (fentry) or a breakpoint (kprobe)
    /// and one compare. Needs fentry or kprobes (not every kernel has them); docs/performance.md
    /// has the measured cost.
    #[arg(long, value_name = "[TYPE:]LOCK")]
    pub hold: Option<String>,

    /// How `--hold` hooks the lock functions: `auto` tries fentry/fexit, then kprobes.
    #[arg(long, value_enum, value_name = "METHOD", default_value_t = FuncMethod::Auto)]
    pub hold_method: FuncMethod,
}
