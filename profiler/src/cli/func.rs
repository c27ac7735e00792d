//! `record`'s options of the function-latency family: kernel functions (`--func`) and
//! user-space functions (`--ufunc`).

use clap::{Args, ValueEnum};

#[derive(Debug, Args)]
pub struct FuncArgs {
    /// Record the latency of a kernel function, entry to return (repeatable; up to 8).
    /// fentry/fexit where the kernel allows, else kprobe/kretprobe.
    #[arg(long = "func", value_name = "[MODULE:]SYMBOL")]
    pub func: Vec<String>,

    /// How `--func` hooks kernel functions: `auto` tries fentry/fexit, then
    /// kprobe/kretprobe; the other values force one method (for tests of each).
    #[arg(long, value_enum, value_name = "METHOD", default_value_t = FuncMethod::Auto)]
    pub func_method: FuncMethod,

    /// Record the latency of a user-space function with uprobes (repeatable; up to 8).
    #[arg(long = "ufunc", value_name = "BINARY:SYMBOL")]
    pub ufunc: Vec<String>,
}

/// How a kernel function is hooked (`--func-method`, and `--hold-method` for the lock
/// functions of `--hold`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FuncMethod {
    Auto,
    Fentry,
    Kprobe,
}
