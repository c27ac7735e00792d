//! CONTRIBUTING.md stays current with the interfaces it describes: every method of the
//! `Family` trait, every function of `Registration`, every method of the `View` trait and
//! every module of the kernel side (`profiler-ebpf/src/*.rs`, main.rs aside) has an item
//! of its own in one of its lists. Read from the sources as text, as a reader would find
//! them.

use std::{fs, path::Path};

fn workspace_file(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative);
    fs::read_to_string(&path).unwrap_or_else(|err| panic!("reading {}: {err}", path.display()))
}

/// The lines of the item that starts with `opening` (`pub trait Family {`), up to its
/// closing brace at the start of a line.
fn item_body<'a>(source: &'a str, opening: &str) -> Vec<&'a str> {
    let mut lines = source.lines().skip_while(|line| !line.starts_with(opening));
    assert!(
        lines.next().is_some(),
        "`{opening}` is not in the source any more: update this test"
    );
    lines.take_while(|line| !line.starts_with('}')).collect()
}

/// The methods of a trait: the names of its `fn NAME` lines (comments left out).
fn trait_methods(source: &str, opening: &str) -> Vec<String> {
    item_body(source, opening)
        .into_iter()
        .map(str::trim_start)
        .filter(|line| !line.starts_with("//"))
        .filter_map(|line| line.strip_prefix("fn "))
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

/// The fields of a struct whose type is a function pointer (`pub NAME: fn(...)`).
fn function_fields(source: &str, opening: &str) -> Vec<String> {
    item_body(source, opening)
        .into_iter()
        .map(str::trim_start)
        .filter_map(|line| line.strip_prefix("pub "))
        .filter_map(|field| field.split_once(':'))
        .filter(|(_, ty)| ty.trim_start().starts_with("fn("))
        .map(|(name, _)| name.trim().to_string())
        .collect()
}

/// The modules of the kernel side, by file stem (main.rs only declares them).
fn ebpf_modules() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiler-ebpf/src");
    let mut modules: Vec<String> = fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("reading {}: {err}", dir.display()))
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .filter_map(|path| Some(path.file_stem()?.to_string_lossy().into_owned()))
        .filter(|stem| stem != "main")
        .collect();
    modules.sort();
    modules
}

/// Whether `name` heads an item of one of the guide's lists (`- `NAME`: what it is`, or
/// `- `A` and `B` (...): what they are`): a name only mentioned in passing (an example's
/// `wake`) is not described.
fn described(guide: &str, name: &str) -> bool {
    let name = format!("`{name}`");
    guide.lines().any(|line| {
        line.strip_prefix("- ")
            .and_then(|item| item.split_once(": "))
            .is_some_and(|(head, _)| head.contains(&name))
    })
}

#[test]
fn contributing_names_every_interface_and_ebpf_module() {
    let contributing = workspace_file("CONTRIBUTING.md");
    let probes = workspace_file("profiler/src/probes/mod.rs");
    let views = workspace_file("profile/src/views/mod.rs");

    let family = trait_methods(&probes, "pub trait Family ");
    let registration = function_fields(&probes, "pub struct Registration ");
    let view = trait_methods(&views, "pub trait View");
    let ebpf = ebpf_modules();
    // The parsers must keep finding what they look for.
    assert!(family.len() >= 5, "Family methods found: {family:?}");
    assert!(
        ["asked", "check", "plan"]
            .iter()
            .all(|name| registration.iter().any(|field| field == name)),
        "Registration functions found: {registration:?}"
    );
    assert!(view.len() >= 5, "View methods found: {view:?}");
    assert!(
        ebpf.iter().any(|module| module == "lock"),
        "eBPF modules found: {ebpf:?}"
    );

    let mut missing = Vec::new();
    for (what, names) in [
        (
            "method of the Family trait (profiler/src/probes/mod.rs)",
            &family,
        ),
        (
            "function of Registration (profiler/src/probes/mod.rs)",
            &registration,
        ),
        ("method of the View trait (profile/src/views/mod.rs)", &view),
        ("eBPF module (profiler-ebpf/src/)", &ebpf),
    ] {
        for name in names {
            if !described(&contributing, name) {
                missing.push(format!("{what}: `{name}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "CONTRIBUTING.md has no list item (`- `NAME`: ...`) that describes:\n  {}",
        missing.join("\n  ")
    );
}
