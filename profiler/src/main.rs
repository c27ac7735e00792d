use clap::Parser;

/// mimalloc: loading a large profile makes millions of small allocations (names, rows,
/// frames); the system allocator spends a tenth of `report`'s time on them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's options by their number in its `mi_option_t` (v3's mimalloc.h; retired
/// options keep their numbers there as `deprecated_*`, so these stay put).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// A recording keeps little for long and runs beside the workload it measures: memory it
/// frees (the kernel's BTF, read once at start-up) goes back to the system at once, and
/// arenas are committed as they are used. By default mimalloc keeps freed memory for a
/// second and commits arenas ahead: a system-wide lock recording then peaked at 120 MiB
/// instead of 90 MiB. The read side keeps the defaults, which are a quarter faster on a
/// large profile.
fn allocator_for_recording() {
    // SAFETY: mi_option_set only stores a value that mimalloc reads on its next purge or
    // arena reservation; any value is valid for these two options.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
        libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0);
    }
}

fn main() {
    // One CLI style for every message, log lines included:
    // `lockpath: warning: ...` (RUST_LOG=debug for more).
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format(|out, record| {
            use std::io::Write as _;
            let level = match record.level() {
                log::Level::Error => "error",
                log::Level::Warn => "warning",
                log::Level::Info => "info",
                log::Level::Debug => "debug",
                log::Level::Trace => "trace",
            };
            writeln!(out, "lockpath: {level}: {}", record.args())
        })
        .init();
    let cli = lockpath::cli::Cli::parse();
    if cli.command.records() {
        allocator_for_recording();
    }
    match lockpath::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            // One line: what went wrong and, in the innermost message, what to do.
            eprintln!("lockpath: error: {err:#}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option numbers name the options meant: their defaults in mimalloc v3
    /// (options.c) are 1000 ms for `purge_delay` and 2 for `arena_eager_commit` (unless
    /// its environment variables say otherwise).
    #[test]
    fn option_numbers_are_mimallocs() {
        for (option, name, default) in [
            (MI_OPTION_PURGE_DELAY, "MIMALLOC_PURGE_DELAY", 1000),
            (
                MI_OPTION_ARENA_EAGER_COMMIT,
                "MIMALLOC_ARENA_EAGER_COMMIT",
                2,
            ),
        ] {
            if std::env::var_os(name).is_some() {
                continue;
            }
            // SAFETY: mi_option_get only reads an option's value.
            let value = unsafe { libmimalloc_sys::mi_option_get(option) };
            assert_eq!(value, default, "option {option} is not {name}");
        }
    }
}
