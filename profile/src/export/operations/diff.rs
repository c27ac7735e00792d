//! `lockpath diff BASE NEW`: what grew, per lock, caller, process (and host), each
//! value per second of its run so runs of different length compare.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{
    export::tables::table::{fit, most_first_f64},
    kind::Kind,
    profile::Profile,
    units::format_ns,
};

/// A value and an event count (lock: wait ns and contentions) under one key.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Measure {
    pub value: u64,
    pub events: u64,
}

/// One way of splitting a kind's totals: "lock", "caller", "process", "host".
pub struct Breakdown {
    pub by: &'static str,
    pub entries: BTreeMap<String, Measure>,
    /// How the lock of each key was named (`LockRow::lock_name_source`): lock by lock
    /// only, and only for profiles that say.
    pub name_sources: BTreeMap<String, String>,
}

impl Breakdown {
    pub fn new(by: &'static str, entries: BTreeMap<String, Measure>) -> Breakdown {
        Breakdown {
            by,
            entries,
            name_sources: BTreeMap::new(),
        }
    }
}

/// How a breakdown names a row (its table key).
pub(crate) type RowKey<'a, R> = Box<dyn Fn(&R) -> String + 'a>;

/// Adds a value and an event count to the entry of `key`.
pub(crate) fn add(entries: &mut BTreeMap<String, Measure>, key: String, value: u64, events: u64) {
    let entry = entries.entry(key).or_default();
    entry.value = entry.value.saturating_add(value);
    entry.events = entry.events.saturating_add(events);
}

/// The entries of (key, value, events) triples, summed per key.
pub(crate) fn summed(
    items: impl IntoIterator<Item = (String, u64, u64)>,
) -> BTreeMap<String, Measure> {
    let mut entries = BTreeMap::new();
    for (key, value, events) in items {
        add(&mut entries, key, value, events);
    }
    entries
}

/// One breakdown per way of keying `rows`, each summing the rows' (value, events).
pub(crate) fn keyed_breakdowns<R>(
    out: &mut Vec<Breakdown>,
    ways: Vec<(&'static str, RowKey<R>)>,
    rows: &[R],
    measure: fn(&R) -> (u64, u64),
) {
    for (by, key) in ways {
        let entries = summed(rows.iter().map(|row| {
            let (value, events) = measure(row);
            (key(row), value, events)
        }));
        out.push(Breakdown::new(by, entries));
    }
}

/// The ways the kind's view splits its totals (`View::breakdowns`). Keys stay
/// comparable across runs: names, never pids (lock addresses of dynamic locks differ
/// between runs; static locks keep their symbol).
pub fn breakdowns(profile: &Profile, kind: Kind) -> Vec<Breakdown> {
    let mut out = Vec::new();
    kind.view().breakdowns(profile, &mut out);
    out
}

fn format_value(kind: Kind, per_second: f64) -> String {
    if kind.view().weighs_time() {
        format_ns(per_second.abs().round() as u64)
    } else {
        format!("{:.1}", per_second.abs())
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DiffRow {
    pub key: String,
    pub base_per_s: f64,
    pub new_per_s: f64,
    pub change_per_s: f64,
    /// NEW / BASE; `None` when BASE is zero (new).
    pub ratio: Option<f64>,
    pub base_events_per_s: f64,
    pub new_events_per_s: f64,
    /// How the lock was named in BASE and in NEW (`task`, `kallsyms`, `address`, ...):
    /// rows by lock only, empty when the run did not have the lock or does not say. A
    /// lock named by another method in NEW is still the same row (matched by name).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub base_name_source: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub new_name_source: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DiffTable {
    pub kind: String,
    pub by: String,
    /// Unit of the `*_per_s` values: nanoseconds per second of run (lock: of wait,
    /// offcpu: off the CPU, io: of summed request latency).
    pub unit: String,
    /// Largest growth first.
    pub rows: Vec<DiffRow>,
}

fn unit(kind: Kind) -> &'static str {
    if kind.view().weighs_time() {
        "ns/s"
    } else {
        "samples/s"
    }
}

fn kind_name(kind: Kind) -> String {
    kind.name().to_string()
}

pub fn diff(base: &Profile, new: &Profile, kind: Kind) -> Vec<DiffTable> {
    let base_s = base.duration_s.max(1e-3);
    let new_s = new.duration_s.max(1e-3);
    let new_breakdowns = breakdowns(new, kind);
    let mut tables = Vec::new();
    for base_breakdown in breakdowns(base, kind) {
        let empty = BTreeMap::new();
        let new_breakdown = new_breakdowns
            .iter()
            .find(|breakdown| breakdown.by == base_breakdown.by);
        let new_entries = new_breakdown
            .map(|breakdown| &breakdown.entries)
            .unwrap_or(&empty);
        let new_sources = new_breakdown.map(|breakdown| &breakdown.name_sources);
        let source = |sources: Option<&BTreeMap<String, String>>, key: &String| {
            sources
                .and_then(|sources| sources.get(key))
                .cloned()
                .unwrap_or_default()
        };
        let mut keys: Vec<&String> = base_breakdown.entries.keys().collect();
        keys.extend(new_entries.keys());
        keys.sort();
        keys.dedup();
        let mut rows: Vec<DiffRow> = keys
            .into_iter()
            .map(|key| {
                let before = base_breakdown.entries.get(key).copied().unwrap_or_default();
                let after = new_entries.get(key).copied().unwrap_or_default();
                let base_per_s = before.value as f64 / base_s;
                let new_per_s = after.value as f64 / new_s;
                DiffRow {
                    key: key.clone(),
                    base_per_s,
                    new_per_s,
                    change_per_s: new_per_s - base_per_s,
                    ratio: (before.value > 0).then(|| new_per_s / base_per_s),
                    base_events_per_s: before.events as f64 / base_s,
                    new_events_per_s: after.events as f64 / new_s,
                    base_name_source: source(Some(&base_breakdown.name_sources), key),
                    new_name_source: source(new_sources, key),
                }
            })
            .collect();
        most_first_f64(&mut rows, |row| row.change_per_s, |a, b| a.key.cmp(&b.key));
        tables.push(DiffTable {
            kind: kind_name(kind),
            by: base_breakdown.by.to_string(),
            unit: unit(kind).to_string(),
            rows,
        });
    }
    // A table only NEW has (e.g. hosts of a merged NEW against a single-host BASE).
    for breakdown in &new_breakdowns {
        if !tables.iter().any(|table| table.by == breakdown.by) {
            let mut rows: Vec<DiffRow> = breakdown
                .entries
                .iter()
                .map(|(key, after)| {
                    let new_per_s = after.value as f64 / new_s;
                    DiffRow {
                        key: key.clone(),
                        base_per_s: 0.0,
                        new_per_s,
                        change_per_s: new_per_s,
                        ratio: None,
                        base_events_per_s: 0.0,
                        new_events_per_s: after.events as f64 / new_s,
                        base_name_source: String::new(),
                        new_name_source: breakdown
                            .name_sources
                            .get(key)
                            .cloned()
                            .unwrap_or_default(),
                    }
                })
                .collect();
            rows.sort_by(|a, b| b.change_per_s.total_cmp(&a.change_per_s));
            tables.push(DiffTable {
                kind: kind_name(kind),
                by: breakdown.by.to_string(),
                unit: unit(kind).to_string(),
                rows,
            });
        }
    }
    tables
}

fn format_ratio(row: &DiffRow) -> String {
    match row.ratio {
        None => "new".into(),
        Some(_) if row.new_per_s == 0.0 => "gone".into(),
        Some(ratio) if ratio >= 100.0 => format!("x{ratio:.0}"),
        Some(ratio) => format!("x{ratio:.2}"),
    }
}

fn format_rate(events: f64) -> String {
    if events >= 1e6 {
        format!("{:.1}M", events / 1e6)
    } else if events >= 1e4 {
        format!("{:.1}k", events / 1e3)
    } else if events >= 10.0 {
        format!("{events:.0}")
    } else {
        format!("{events:.1}")
    }
}

/// A row's key within 39 columns (the line within 100), with how its lock was named
/// when the runs say: `spinlock rq_lock:cpu0 (runqueue)`, `(address→kallsyms)` when
/// NEW named it by another method than BASE. The key is shortened, never the method.
fn key_with_source(row: &DiffRow) -> String {
    let (base, new) = (&row.base_name_source, &row.new_name_source);
    let suffix = match (base.is_empty(), new.is_empty()) {
        (true, true) => return fit(&row.key, 38),
        (false, true) => format!(" ({base})"),
        (true, false) => format!(" ({new})"),
        _ if base == new => format!(" ({new})"),
        _ => format!(" ({base}→{new})"),
    };
    let room = 39usize.saturating_sub(suffix.chars().count()).max(12);
    format!("{}{suffix}", fit(&row.key, room))
}

/// The tables as text, within 100 columns; `top` rows each (0: all).
pub fn text(base: &Profile, new: &Profile, kind: Kind, top: usize) -> String {
    let (value_name, events_name) = kind.view().diff_columns();
    let mut out = format!(
        "BASE {} ({:.1} s) -> NEW {} ({:.1} s); per second of run, largest growth first\n",
        fit(&base.host, 20),
        base.duration_s,
        fit(&new.host, 20),
        new.duration_s
    );
    out.push_str(&crate::waiting::diff_line(base, new));
    for table in diff(base, new, kind) {
        out.push_str(&format!("\n{} by {}:\n", table.kind, table.by));
        if table.rows.is_empty() {
            out.push_str("  nothing recorded in either run\n");
            continue;
        }
        out.push_str(&format!(
            "{:>10} {:>10} {:>11} {:>7} {:>8} {:>8}  {}\n",
            format!("base {value_name}"),
            format!("new {value_name}"),
            "change",
            "ratio",
            format!("b {events_name}"),
            format!("n {events_name}"),
            table.by
        ));
        let shown = crate::export::tables::table::shown_rows(top, table.rows.len());
        for row in &table.rows[..shown] {
            let sign = if row.change_per_s < 0.0 { "-" } else { "+" };
            out.push_str(&format!(
                "{:>10} {:>10} {:>11} {:>7} {:>8} {:>8}  {}\n",
                format_value(kind, row.base_per_s),
                format_value(kind, row.new_per_s),
                format!("{sign}{}", format_value(kind, row.change_per_s)),
                format_ratio(row),
                format_rate(row.base_events_per_s),
                format_rate(row.new_events_per_s),
                key_with_source(row),
            ));
        }
        out.push_str(&crate::export::tables::table::more_rows(
            shown,
            table.rows.len(),
        ));
    }
    out
}

#[derive(Serialize)]
struct JsonDiff<'a> {
    base: JsonRun<'a>,
    new: JsonRun<'a>,
    tables: Vec<DiffTable>,
}

#[derive(Serialize)]
struct JsonRun<'a> {
    host: &'a str,
    duration_s: f64,
    /// Threads still waiting at the end of the run.
    waiting: usize,
    /// The oldest of those waits.
    waiting_oldest_ns: u64,
}

pub fn json(base: &Profile, new: &Profile, kind: Kind) -> serde_json::Result<String> {
    serde_json::to_string_pretty(&JsonDiff {
        base: JsonRun {
            host: &base.host,
            duration_s: base.duration_s,
            waiting: crate::waiting::by_thread(base).len(),
            waiting_oldest_ns: crate::waiting::oldest(base),
        },
        new: JsonRun {
            host: &new.host,
            duration_s: new.duration_s,
            waiting: crate::waiting::by_thread(new).len(),
            waiting_oldest_ns: crate::waiting::oldest(new),
        },
        tables: diff(base, new, kind),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::formats::report::tests::{
        profile_with_named_locks, profile_with_two_locks, spinlock_renamed, two_runs,
    };

    #[test]
    fn grown_lock_comes_first_normalized_per_second() {
        let (base, mut new) = two_runs(10.0, 5.0);
        // mmap_lock: 6 ms in 10 s -> 60 ms in 5 s (x20 per second).
        new.locks[2].total_ns = 60_000_000;
        // The spinlock halves its absolute time, so per second it stays the same.
        new.locks[0].total_ns /= 2;
        new.locks[1].total_ns /= 2;
        let tables = diff(&base, &new, Kind::Lock);
        let by_lock = &tables[0];
        assert_eq!(by_lock.by, "lock");
        assert_eq!(by_lock.rows[0].key, "rwsem:W mmap_lock");
        assert!((by_lock.rows[0].base_per_s - 600_000.0).abs() < 1.0);
        assert!((by_lock.rows[0].new_per_s - 12_000_000.0).abs() < 1.0);
        assert!((by_lock.rows[0].ratio.expect("ratio") - 20.0).abs() < 1e-9);
        assert!(
            by_lock.rows[1].change_per_s.abs() < 1.0,
            "{:?}",
            by_lock.rows[1]
        );
        let callers = tables
            .iter()
            .find(|table| table.by == "caller")
            .expect("callers");
        assert_eq!(callers.rows[0].key, "rwsem:W vm_mmap_pgoff");
    }

    #[test]
    fn text_fits_100_columns_and_names_new_and_gone() {
        let base = profile_with_two_locks();
        let mut new = profile_with_two_locks();
        new.locks.remove(2);
        new.locks[0].lock_name = "a_very_long_static_lock_symbol_name+0x1234567".into();
        let text = text(&base, &new, Kind::Lock, 0);
        for line in text.lines() {
            assert!(
                line.chars().count() <= 100,
                "too wide ({}): {line}",
                line.chars().count()
            );
        }
        assert!(text.contains("new"), "{text}");
        assert!(text.contains("gone"), "{text}");
    }

    #[test]
    fn lock_rows_say_how_each_run_named_the_lock() {
        let base = profile_with_named_locks();
        // NEW named the spinlock another way (same name): still one row.
        let mut new = spinlock_renamed(&base);
        new.locks[2].total_ns *= 2;
        let tables = diff(&base, &new, Kind::Lock);
        let by_lock = &tables[0];
        assert_eq!(by_lock.rows.len(), 2, "{:?}", by_lock.rows);
        let row = |key: &str| {
            by_lock
                .rows
                .iter()
                .find(|row| row.key == key)
                .unwrap_or_else(|| panic!("no row {key}: {:?}", by_lock.rows))
        };
        let spin = row("spinlock 0xffff1");
        assert_eq!(
            (
                spin.base_name_source.as_str(),
                spin.new_name_source.as_str()
            ),
            ("address", "kallsyms")
        );
        assert!(spin.change_per_s.abs() < 1.0, "{spin:?}");
        let mmap = row("rwsem:W mmap_lock");
        assert_eq!(mmap.base_name_source, "task");
        assert_eq!(mmap.new_name_source, "task");
        // Tables of several locks per row do not say.
        let callers = tables.iter().find(|t| t.by == "caller").expect("callers");
        assert!(callers
            .rows
            .iter()
            .all(|row| row.base_name_source.is_empty() && row.new_name_source.is_empty()));

        let text = text(&base, &new, Kind::Lock, 0);
        crate::export::tables::table::assert_fits_100_columns(&text);
        assert!(text.contains("  rwsem:W mmap_lock (task)\n"), "{text}");
        assert!(
            text.contains("  spinlock 0xffff1 (address→kallsyms)\n"),
            "{text}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&json(&base, &new, Kind::Lock).expect("json")).expect("parse");
        let rows = json["tables"][0]["rows"].as_array().expect("rows");
        let spin = rows
            .iter()
            .find(|row| row["key"] == "spinlock 0xffff1")
            .expect("spin row");
        assert_eq!(spin["base_name_source"], "address");
        assert_eq!(spin["new_name_source"], "kallsyms");
        // Older profiles (no sources): no field, no suffix.
        let old = profile_with_two_locks();
        let old_json = super::json(&old, &old, Kind::Lock).expect("json");
        assert!(!old_json.contains("name_source"), "{old_json}");
        // A long name is cut, the method is kept.
        let mut long = base.clone();
        for row in &mut long.locks {
            if row.lock_name == "0xffff1" {
                row.lock_name = "a_very_long_static_lock_symbol_name+0x1234567".into();
                row.lock_name_source = "task_struct".into();
            }
        }
        let text = super::text(&base, &long, Kind::Lock, 0);
        crate::export::tables::table::assert_fits_100_columns(&text);
        assert!(text.contains("… (task_struct)\n"), "{text}");
    }

    #[test]
    fn merged_profiles_get_a_host_table() {
        let mut new = profile_with_two_locks();
        new.processes[0].host = Some("node-a".into());
        new.processes[1].host = Some("node-b".into());
        let tables = diff(&profile_with_two_locks(), &new, Kind::Lock);
        let hosts = tables
            .iter()
            .find(|table| table.by == "host")
            .expect("host table");
        assert_eq!(hosts.rows.len(), 2);
        assert_eq!(hosts.rows[0].key, "node-a");
    }

    #[test]
    fn offcpu_tables_per_class_process_and_function() {
        use crate::export::tables::offcpu::tests::profile_with_waits_and_io;
        let base = profile_with_waits_and_io();
        let mut new = profile_with_waits_and_io();
        // NEW: buffer waits tripled over a run twice as long (x1.5 per second).
        new.duration_s = 4.0;
        for row in &mut new.offcpu {
            if row.class == "buffer" {
                row.total_ns *= 3;
            }
        }
        let tables = diff(&base, &new, Kind::Offcpu);
        let bys: Vec<&str> = tables.iter().map(|table| table.by.as_str()).collect();
        assert_eq!(bys, ["class", "process", "function"]);
        let class = &tables[0];
        assert_eq!(class.rows[0].key, "buffer", "grew most, first");
        assert!(
            (class.rows[0].base_per_s - 30e6).abs() < 1.0,
            "{:?}",
            class.rows[0]
        );
        assert!(
            (class.rows[0].new_per_s - 45e6).abs() < 1.0,
            "{:?}",
            class.rows[0]
        );
        assert_eq!(class.rows[0].ratio, Some(1.5));
        assert_eq!(tables[1].rows[0].key, "mdtest");
        assert_eq!(
            tables[2].rows[0].key,
            "buffer __wait_on_buffer < ext4_read_bh"
        );
        crate::export::tables::table::assert_table_shows(
            &text(&base, &new, Kind::Offcpu, 0),
            &["offcpu by class"],
        );
    }

    #[test]
    fn io_tables_per_device_and_op() {
        use crate::export::tables::offcpu::tests::profile_with_waits_and_io;
        let base = profile_with_waits_and_io();
        let mut new = profile_with_waits_and_io();
        for row in &mut new.io {
            row.count *= 2;
            row.total_ns *= 4;
        }
        let tables = diff(&base, &new, Kind::Io);
        assert_eq!(tables[0].by, "device");
        let row = &tables[0].rows[0];
        assert_eq!(row.key, "loop0 read");
        // 100 requests, 10 ms of latency in 2 s: 50 req/s, 5 ms/s; NEW x2 and x4.
        assert!((row.base_events_per_s - 50.0).abs() < 1e-9, "{row:?}");
        assert!((row.new_events_per_s - 100.0).abs() < 1e-9, "{row:?}");
        assert_eq!(row.ratio, Some(4.0));
    }
}
