use clap::Parser;

/// mimalloc: loading a large profile makes millions of small allocations (names, rows,
/// frames); the system allocator spends a tenth of `report`'s time on them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    match lockpath::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            // One line: what went wrong and, in the innermost message, what to do.
            eprintln!("lockpath: error: {err:#}");
            std::process::exit(1);
        }
    }
}
