//! Shared helpers: workspace paths, child processes with readable errors, and
//! the environment hygiene needed to run cargo from inside `cargo xtask`.

use std::{
    env,
    ffi::OsString,
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{anyhow, bail, Context as _, Result};

/// Root of the cargo workspace (the parent of the xtask crate).
pub fn workspace_root() -> PathBuf {
    let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask
        .parent()
        .map_or_else(|| xtask.join(".."), Path::to_path_buf)
}

/// Target directory of the host workspace: `$CARGO_TARGET_DIR` if set, else `<workspace>/target`.
pub fn target_dir() -> Result<PathBuf> {
    match env::var_os("CARGO_TARGET_DIR").filter(|dir| !dir.is_empty()) {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                Ok(dir)
            } else {
                let cwd = env::current_dir().context("cannot read the current directory")?;
                Ok(cwd.join(dir))
            }
        }
        None => Ok(workspace_root().join("target")),
    }
}

pub fn home() -> Result<PathBuf> {
    env::var_os("HOME")
        .filter(|home| !home.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("HOME is not set; set it to your home directory"))
}

/// `$CARGO_HOME`, defaulting to `~/.cargo` like cargo and rustup do.
pub fn cargo_home() -> Result<PathBuf> {
    match env::var_os("CARGO_HOME").filter(|dir| !dir.is_empty()) {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => Ok(home()?.join(".cargo")),
    }
}

/// Where `cargo install` puts binaries: `$CARGO_INSTALL_ROOT/bin`, else `$CARGO_HOME/bin`.
pub fn install_root() -> Option<PathBuf> {
    env::var_os("CARGO_INSTALL_ROOT")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
}

pub fn install_bin_dir() -> Result<PathBuf> {
    match install_root() {
        Some(root) => Ok(root.join("bin")),
        None => Ok(cargo_home()?.join("bin")),
    }
}

/// A rustup proxy (`cargo`, `rustc`, `rustup`) by absolute path when it is in
/// `$CARGO_HOME/bin`, so `+nightly` works even if PATH starts with a toolchain's
/// own bin directory. Falls back to a PATH lookup.
pub fn rustup_proxy(name: &str) -> PathBuf {
    cargo_home()
        .map(|home| home.join("bin").join(name))
        .ok()
        .filter(|path| path.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

/// The cargo that is running `cargo xtask`, for builds of the host workspace.
pub fn host_cargo() -> Command {
    let mut cmd = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    remove_package_env(&mut cmd);
    cmd.current_dir(workspace_root());
    cmd
}

/// A rustup-proxied command (`cargo`, `rustc`, `rustup`) that chooses its own
/// toolchain: everything cargo and rustup set for the xtask process that would
/// pin the toolchain or change the build (RUSTUP_TOOLCHAIN, RUSTC, RUSTFLAGS,
/// CARGO_BUILD_*, CARGO_TARGET_*, ...) is removed. Kept: CARGO_HOME, RUSTUP_HOME
/// and cargo's network/registry/terminal settings.
pub fn isolated(program: &str) -> Command {
    const KEEP_CARGO: &[&str] = &[
        "CARGO_HOME",
        "CARGO_LOG",
        "CARGO_NET_",
        "CARGO_HTTP_",
        "CARGO_REGISTRIES_",
        "CARGO_REGISTRY_",
        "CARGO_TERM_",
    ];
    const DROP_RUST: &[&str] = &["RUSTC", "RUSTDOC", "RUSTFLAGS", "RUSTUP_TOOLCHAIN"];
    let mut cmd = Command::new(rustup_proxy(program));
    remove_package_env(&mut cmd);
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let drop = key == "CARGO"
            || (key.starts_with("CARGO_") && !KEEP_CARGO.iter().any(|keep| key.starts_with(keep)))
            || DROP_RUST.iter().any(|prefix| key.starts_with(prefix));
        if drop {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// Removes what `cargo run` sets for the xtask package itself, and the
/// library directories it prepends to LD_LIBRARY_PATH (the stable toolchain's
/// lib/ and our target/), which must not leak into other toolchains' tools.
fn remove_package_env(cmd: &mut Command) {
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if key.starts_with("CARGO_PKG_")
            || matches!(
                key,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_RUSTC_CURRENT_DIR"
                    | "CARGO_TARGET_TMPDIR"
            )
        {
            cmd.env_remove(key);
        }
    }
    let Some(library_path) = env::var_os("LD_LIBRARY_PATH") else {
        return;
    };
    let toolchains = env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| home().ok().map(|home| home.join(".rustup")))
        .map(|rustup| rustup.join("toolchains"));
    let target = target_dir().ok();
    let kept: Vec<PathBuf> = env::split_paths(&library_path)
        .filter(|dir| {
            !toolchains.as_ref().is_some_and(|t| dir.starts_with(t))
                && !target.as_ref().is_some_and(|t| dir.starts_with(t))
        })
        .collect();
    match env::join_paths(&kept) {
        Ok(joined) if !kept.is_empty() => cmd.env("LD_LIBRARY_PATH", joined),
        _ => cmd.env_remove("LD_LIBRARY_PATH"),
    };
}

/// PATH with `dirs` in front of the current one.
pub fn path_with(dirs: &[PathBuf]) -> Result<OsString> {
    let current = env::var_os("PATH").unwrap_or_default();
    let all = dirs.iter().cloned().chain(env::split_paths(&current));
    env::join_paths(all).context("a directory to put on PATH contains ':'")
}

/// Finds an executable on PATH, like `command -v`.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| {
            fs::metadata(candidate)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}

/// True when the effective user id is 0.
pub fn is_root() -> Result<bool> {
    let status =
        fs::read_to_string("/proc/self/status").context("cannot read /proc/self/status")?;
    let uid_line = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .context("no Uid: line in /proc/self/status")?;
    // Fields: real, effective, saved, filesystem.
    let effective = uid_line
        .split_whitespace()
        .nth(1)
        .context("malformed Uid: line in /proc/self/status")?;
    Ok(effective == "0")
}

/// The command line as the user would type it, for messages.
pub fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|part| part.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `cmd` with inherited stdio. On failure the error names the `step`
/// and ends with `hint` (what to do about it).
pub fn run(cmd: &mut Command, step: &str, hint: &str) -> Result<()> {
    let shown = describe(cmd);
    let status = cmd
        .status()
        .map_err(|err| anyhow!("{step}: cannot start `{shown}` ({err}); {hint}"))?;
    if !status.success() {
        bail!("{step}: `{shown}` failed ({status}); {hint}");
    }
    Ok(())
}

/// Runs `cmd` and returns its stdout; stderr goes into the error on failure.
pub fn capture(cmd: &mut Command, step: &str, hint: &str) -> Result<String> {
    let shown = describe(cmd);
    let output = capture_bytes(cmd, step, hint)?;
    String::from_utf8(output)
        .map_err(|_| anyhow!("{step}: `{shown}` printed non-UTF-8 output; {hint}"))
}

/// Runs `cmd` and returns its standard output as bytes; a failure is one error line with
/// the first line the command printed on stderr.
pub fn capture_bytes(cmd: &mut Command, step: &str, hint: &str) -> Result<Vec<u8>> {
    let shown = describe(cmd);
    let output = cmd
        .output()
        .map_err(|err| anyhow!("{step}: cannot start `{shown}` ({err}); {hint}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let reason = stderr
            .lines()
            .map(str::trim)
            .find(|line| !line.is_empty())
            .unwrap_or("no error output");
        bail!(
            "{step}: `{shown}` failed ({}: {reason}); {hint}",
            output.status
        );
    }
    Ok(output.stdout)
}

/// Progress line on stderr, so that stdout stays the child's.
pub fn say(message: impl std::fmt::Display) {
    eprintln!("xtask: {message}");
}

/// `items` joined by ", ", as in a "known: a, b, c" list.
pub fn comma_list<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    items
        .into_iter()
        .map(|item| item.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::comma_list;

    #[test]
    fn comma_list_joins_what_it_is_given() {
        assert_eq!(comma_list(["6.1", "5.10"]), "6.1, 5.10");
        assert_eq!(comma_list(Vec::<u32>::new()), "");
    }
}
