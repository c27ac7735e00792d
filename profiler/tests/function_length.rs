//! No function of the product is longer than 120 lines, from its `fn` line to its closing
//! brace: the workspace's crates and the eBPF programs, tests left out (the `tests/`
//! folders and everything after a file's `#[cfg(test)]`). A longer function is split into
//! named steps.

use std::{
    fs,
    path::{Path, PathBuf},
};

const MOST_LINES: usize = 120;

/// The crates' source folders, from the workspace root.
const SOURCES: &[&str] = &[
    "profiler/src",
    "profiler-common/src",
    "profiler-ebpf/src",
    "profile/src",
    "xtask/src",
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read a source folder").flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

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
