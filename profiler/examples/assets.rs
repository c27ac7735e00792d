//! `cargo run -p profiler --example assets -- DIR`: writes the man pages (`man/lockpath.1`,
//! `man/lockpath-record.1`, ...) and the bash, zsh and fish completions (`lockpath.bash`, `_lockpath`, `lockpath.fish`)
//! of the `lockpath` CLI into DIR, from the same clap definition the binary parses with.
//! `cargo xtask dist` packages them.

use std::{fs, path::PathBuf};

use anyhow::{bail, Context as _, Result};
use clap::CommandFactory as _;
use clap_complete::Shell;

fn main() -> Result<()> {
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        bail!("usage: assets DIR (writes the man page and the shell completions into DIR)");
    };
    let dir = PathBuf::from(dir);
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;

    let command = lockpath::cli::Cli::command();
    let man = dir.join("man");
    fs::create_dir_all(&man).with_context(|| format!("cannot create {}", man.display()))?;
    // lockpath.1, and lockpath-record.1 and so on for each subcommand.
    clap_mangen::generate_to(command.clone(), &man)
        .with_context(|| format!("cannot write the man pages into {}", man.display()))?;

    for (shell, file) in [
        (Shell::Bash, "lockpath.bash"),
        (Shell::Zsh, "_lockpath"),
        (Shell::Fish, "lockpath.fish"),
    ] {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut command.clone(), "lockpath", &mut script);
        let path = dir.join(file);
        fs::write(&path, script).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
