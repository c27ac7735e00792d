use clap::Parser;

/// mimalloc: loading a large profile makes millions of small allocations (names, rows,
/// frames); the system allocator spends a tenth of `report`'s time on them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
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
