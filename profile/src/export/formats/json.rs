//! `export --format json`: the samples of one kind as a tree of nested frames
//! (`{"name", "value", "children"}`, the input of d3-flame-graph), with every sample
//! value kept per node. serde_json escapes every name.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{export::formats::folded, kind::Kind, profile::Profile};

#[derive(Debug, Default, Serialize)]
pub struct Node {
    pub name: String,
    /// The flamegraph value (`View::flame_value`, undivided), self plus children.
    pub value: u64,
    /// Every sample value, in the order of `View::sample_types`.
    pub values: Vec<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<Node>,
}

#[derive(Default)]
struct Building {
    values: Vec<u64>,
    children: BTreeMap<String, Building>,
}

impl Building {
    fn finish(self, name: String, flame_index: usize) -> Node {
        let mut children: Vec<Node> = self
            .children
            .into_iter()
            .map(|(name, child)| child.finish(name, flame_index))
            .collect();
        children.sort_by(|a, b| b.value.cmp(&a.value).then_with(|| a.name.cmp(&b.name)));
        Node {
            name,
            value: self.values.get(flame_index).copied().unwrap_or(0),
            values: self.values,
            children,
        }
    }
}

#[derive(Serialize)]
struct Export<'a> {
    format: &'static str,
    kind: String,
    host: &'a str,
    duration_s: f64,
    sample_types: Vec<SampleType>,
    root: Node,
}

#[derive(Serialize)]
struct SampleType {
    #[serde(rename = "type")]
    kind: &'static str,
    unit: &'static str,
}

pub fn tree(profile: &Profile, kind: Kind) -> Node {
    let width = kind.view().sample_types().len();
    let mut root = Building {
        values: vec![0; width],
        ..Default::default()
    };
    for sample in folded::samples(profile, kind) {
        let mut node = &mut root;
        add(&mut node.values, &sample.values);
        for frame in sample.frames {
            node = node.children.entry(frame).or_insert_with(|| Building {
                values: vec![0; width],
                ..Default::default()
            });
            add(&mut node.values, &sample.values);
        }
    }
    root.finish("all".into(), kind.view().flame_value().0)
}

fn add(totals: &mut [u64], values: &[u64]) {
    for (total, value) in totals.iter_mut().zip(values) {
        *total = total.saturating_add(*value);
    }
}

pub fn render(profile: &Profile, kind: Kind) -> serde_json::Result<String> {
    let mut text = serde_json::to_string_pretty(&Export {
        format: "lockpath-tree/1",
        kind: kind.name().to_string(),
        host: &profile.host,
        duration_s: profile.duration_s,
        sample_types: kind
            .view()
            .sample_types()
            .iter()
            .map(|&(kind, unit)| SampleType { kind, unit })
            .collect(),
        root: tree(profile, kind),
    })?;
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::formats::report::tests::profile_with_two_locks;

    #[test]
    fn tree_sums_children() {
        let root = tree(&profile_with_two_locks(), Kind::Lock);
        assert_eq!(root.value, 13_000_000);
        assert_eq!(root.values, vec![160, 13_000_000]);
        assert_eq!(root.children.len(), 1);
        let ior = &root.children[0];
        assert_eq!(ior.name, "ior");
        assert_eq!(ior.children[0].name, "spinlock");
        assert_eq!(ior.children[0].value, 7_000_000);
    }

    #[test]
    fn names_are_escaped_json() {
        let mut profile = profile_with_two_locks();
        profile.processes[0].comm = "<svg onload=\"x\">".into();
        let text = render(&profile, Kind::Lock).expect("json");
        let value: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert!(text.contains(r#"<svg onload=\"x\">"#), "{text}");
        assert_eq!(value["root"]["children"][0]["name"], "<svg onload=\"x\">");
    }
}
