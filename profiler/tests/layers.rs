//! The shape of the code, read from the sources as a reader would follow them (tests
//! left out): the modules of lockpath import one another downward only, with no import
//! cycle between the top-level modules of this crate, nor between the modules of one
//! folder (the families of `probes/`, `symbolize/`, ...), read from the `use crate::...`
//! and `crate::...` paths; and no function of the workspace is longer than 120 lines.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

/// Module path of a source file under `src/` (`probes/shared/mod.rs` -> `probes::shared`).
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|last| last == "mod") {
        parts.pop();
    }
    parts.join("::")
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read src").flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The paths a source names from the crate root: `crate::a::b` and the items of
/// `use crate::{a::{b, c}, d}` (as `a::b`, `a::c`, `d`), and `super::` paths made
/// absolute.
fn crate_paths(module: &str, text: &str) -> Vec<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or(text);
    let mut paths = Vec::new();
    let parent: Vec<&str> = module.split("::").collect();
    let parent = parent[..parent.len().saturating_sub(1)].join("::");
    for (prefix, base) in [("crate::", String::new()), ("super::", parent)] {
        let mut rest = code;
        while let Some(at) = rest.find(prefix) {
            let after = &rest[at + prefix.len()..];
            let tree = if after.starts_with('{') {
                let mut depth = 0;
                let end = after
                    .char_indices()
                    .find(|&(_, c)| {
                        match c {
                            '{' => depth += 1,
                            '}' => depth -= 1,
                            _ => {}
                        }
                        depth == 0
                    })
                    .map_or(after.len(), |(i, _)| i + 1);
                &after[..end]
            } else {
                let end = after
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(after.len());
                &after[..end]
            };
            for path in expand(tree) {
                paths.push(if base.is_empty() {
                    path
                } else {
                    format!("{base}::{path}")
                });
            }
            rest = &after[tree.len().max(1).min(after.len())..];
        }
    }
    paths
}

/// `{a::{b, c}, d}` -> `a::b`, `a::c`, `d`; `a::b` -> `a::b`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim().trim_end_matches("::");
    let Some(inner) = tree.strip_prefix('{').and_then(|t| t.strip_suffix('}')) else {
        if let Some((head, rest)) = tree.split_once("::{") {
            return expand(&format!("{{{}", rest))
                .into_iter()
                .map(|path| format!("{head}::{path}"))
                .collect();
        }
        return vec![tree.split(" as ").next().unwrap_or(tree).trim().to_string()];
    };
    let mut items = Vec::new();
    let (mut depth, mut current) = (0, String::new());
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    items.push(current);
    items
        .iter()
        .filter(|item| !item.trim().is_empty())
        .flat_map(|item| expand(item.trim()))
        .collect()
}

/// A cycle in `graph`, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|seen| seen == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, done, path) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}

#[test]
fn modules_import_downward_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|file| module_of(&src, file)).collect();
    // For every folder (the crate root too): its modules and who imports whom among them.
    let mut graphs: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in &files {
        let module = module_of(&src, file);
        let text = fs::read_to_string(file).expect("read source");
        for path in crate_paths(&module, &text) {
            // The module the path names: its longest prefix that is a module.
            let parts: Vec<&str> = path.split("::").collect();
            let Some(target) = (1..=parts.len())
                .rev()
                .map(|n| parts[..n].join("::"))
                .find(|candidate| modules.contains(candidate))
            else {
                continue;
            };
            // The two sibling modules (children of one folder) the import goes between.
            let (from, to): (Vec<&str>, Vec<&str>) =
                (module.split("::").collect(), target.split("::").collect());
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                // A module and its own parent or child.
                continue;
            }
            let folder = from[..common].join("::");
            graphs
                .entry(folder)
                .or_default()
                .entry(from[common].to_string())
                .or_default()
                .insert(to[common].to_string());
        }
    }
    assert!(
        graphs.get("").is_some_and(|top| top.len() >= 5),
        "the top-level imports were not read: {graphs:?}"
    );
    for (folder, graph) in &graphs {
        if let Some(cycle) = find_cycle(graph) {
            panic!(
                "import cycle between the modules of {}: {}",
                if folder.is_empty() {
                    "the crate"
                } else {
                    folder
                },
                cycle.join(" -> ")
            );
        }
    }
}

// No function of the product is longer than 120 lines, from its `fn` line to its
// closing brace: the workspace's crates and the eBPF programs, tests left out (the
// `tests/` folders and everything after a file's `#[cfg(test)]`). A longer function is
// split into named steps.

const MOST_LINES: usize = 120;

/// The crates' source folders, from the workspace root.
const SOURCES: &[&str] = &[
    "profiler/src",
    "profiler-common/src",
    "profiler-ebpf/src",
    "profile/src",
    "xtask/src",
];

/// The name of the function a line declares, when it does (`pub(crate) async fn x(`).
fn declared_fn(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace();
    for word in words.by_ref() {
        if word == "fn" {
            return words
                .next()
                .map(|name| name.split(['(', '<']).next().unwrap_or(name));
        }
        let qualifier = word.starts_with("pub")
            || ["const", "unsafe", "async", "extern", "\"C\""].contains(&word);
        if !qualifier {
            return None;
        }
    }
    None
}

/// The functions of one source longer than `MOST_LINES`: (name, first line, lines).
/// A function ends at the first line after its `fn` line that is a closing brace at
/// the indent of the `fn` line (rustfmt's layout), or on its own line (`fn x() {}`); a
/// declaration without body ends at its `;`.
fn long_functions(text: &str) -> Vec<(String, usize, usize)> {
    let code = text.split("#[cfg(test)]").next().unwrap_or(text);
    let lines: Vec<&str> = code.lines().collect();
    let mut long = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        let line = lines[index];
        let Some(name) = declared_fn(line) else {
            index += 1;
            continue;
        };
        let indent = line.len() - line.trim_start().len();
        let close = format!("{}}}", " ".repeat(indent));
        let mut end = lines.len() - 1;
        let mut opened = false;
        for (offset, candidate) in lines[index..].iter().enumerate() {
            // A signature that ends with `;` before any `{`: a declaration (trait).
            if !opened && candidate.trim_end().ends_with(';') {
                end = index + offset;
                break;
            }
            opened |= candidate.contains('{');
            let one_line = offset == 0 && candidate.trim_end().ends_with('}');
            if one_line || (offset > 0 && candidate.trim_end() == close) {
                end = index + offset;
                break;
            }
        }
        let count = end - index + 1;
        if count > MOST_LINES {
            long.push((name.to_string(), index + 1, count));
        }
        index = end + 1;
    }
    long
}

#[test]
fn no_function_is_longer_than_120_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let mut files = Vec::new();
    for folder in SOURCES {
        sources(&root.join(folder), &mut files);
    }
    assert!(files.len() > 100, "only {} sources found", files.len());
    let mut long = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).expect("read a source");
        for (name, line, count) in long_functions(&text) {
            let path = file
                .strip_prefix(root)
                .unwrap_or(&file)
                .display()
                .to_string();
            long.push(format!("{path}:{line}: fn {name} has {count} lines"));
        }
    }
    assert!(
        long.is_empty(),
        "functions longer than {MOST_LINES} lines (split them into named steps):\n{}",
        long.join("\n")
    );
}

#[test]
fn a_long_function_is_found() {
    let body = "        let x = 1;\n".repeat(MOST_LINES);
    let text = format!(
        "/// Short.\npub fn short() {{\n}}\n\ntrait B {{\n    fn declared(&self);\n    fn empty(&self) {{}}\n}}\n\nimpl A {{\n    pub(crate) fn long(&self) {{\n{body}    }}\n}}\n"
    );
    let found = long_functions(&text);
    assert_eq!(found, vec![("long".to_string(), 11, MOST_LINES + 2)]);
    let tests_only = format!("#[cfg(test)]\nmod tests {{\n    fn long() {{\n{body}    }}\n}}\n");
    assert!(long_functions(&tests_only).is_empty());
}
