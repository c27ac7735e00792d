//! Root integration tests of `record --interval`: a run quiet in its first half and
//! contended in its second must show it, and every series must add up to the totals.

#[macro_use]
mod common;

use std::collections::BTreeMap;

use common::*;

fn values(series: &serde_json::Value) -> Vec<u64> {
    items(&series["wait_ns"], "wait_ns")
        .map(|value| value.as_u64().expect("ns"))
        .collect()
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn contention_in_the_second_half_lands_in_the_second_half() {
    let dir = or_skip!(root_test("timeline-halves"));
    let profile_path = dir.join("halves.json");
    let storm = workload("lock-storm");
    let script = format!(
        "sleep 2.5; exec {} --seconds 2.5 --threads 4 --mode both",
        path_str(&storm)
    );
    let options = ["--lock", "--offcpu", "--interval", "250ms"];
    let profile = record_profile(&options, &profile_path, &["sh", "-c", &script]).profile;
    let timeline = &profile["timeline"];
    let ends: Vec<f64> = items(&timeline["ends_s"], "a timeline with ends_s")
        .map(|end| end.as_f64().expect("end"))
        .collect();
    let duration = profile["duration_s"].as_f64().expect("duration");
    eprintln!("{} intervals over {duration:.2} s: {ends:?}", ends.len());
    assert!(
        ends.len() >= 15,
        "about 20 intervals of 250 ms in 5 s: {}",
        ends.len()
    );
    assert!(
        ends.windows(2).all(|pair| pair[0] < pair[1]),
        "increasing ends"
    );
    assert!(
        (ends.last().copied().unwrap_or(0.0) - duration).abs() < 1e-6,
        "the last ends the run"
    );
    // Near 250 ms each; one may run late while the storm starves the snapshot timer
    // (4 threads on 2 CPUs), and the count above keeps the cadence.
    for pair in ends.windows(2) {
        assert!(pair[1] - pair[0] < 1.0, "intervals near 250 ms: {pair:?}");
    }
    let series = timeline["series"].as_array().expect("series");
    let intervals = ends.len();
    for one in series {
        assert_eq!(
            values(one).len(),
            intervals,
            "one value per interval: {one}"
        );
    }

    // Per lock: the sum over the intervals is the lock's total in the profile.
    let mut lock_totals: BTreeMap<String, u64> = BTreeMap::new();
    for row in profile["locks"].as_array().expect("locks") {
        let flags = row["flags"].as_u64().expect("flags");
        let name = row["lock_name"].as_str().expect("lock name");
        *lock_totals.entry(format!("{flags}:{name}")).or_default() +=
            row["total_ns"].as_u64().expect("total");
    }
    let lock_series: Vec<&serde_json::Value> = series
        .iter()
        .filter(|one| one["family"] == "lock" && one["by"] == "lock")
        .collect();
    let all_locks: u64 = lock_totals.values().sum();
    let series_sum: u64 = lock_series
        .iter()
        .map(|one| values(one).iter().sum::<u64>())
        .sum();
    assert!(all_locks > 0, "the storm contended");
    assert_eq!(
        series_sum, all_locks,
        "the intervals add up to the lock total"
    );
    // Per class and per process too.
    let mut class_totals: BTreeMap<String, u64> = BTreeMap::new();
    for row in profile["offcpu"].as_array().expect("offcpu") {
        *class_totals
            .entry(row["class"].as_str().expect("class").to_string())
            .or_default() += row["total_ns"].as_u64().expect("total");
    }
    for one in series.iter().filter(|one| one["by"] == "class") {
        let name = one["name"].as_str().expect("name");
        assert_eq!(
            values(one).iter().sum::<u64>(),
            class_totals.get(name).copied().unwrap_or(0),
            "class {name}: intervals add up to its total"
        );
    }
    let process_sum: u64 = series
        .iter()
        .filter(|one| one["family"] == "lock" && one["by"] == "process")
        .map(|one| values(one).iter().sum::<u64>())
        .sum();
    assert_eq!(process_sum, all_locks, "per process, the same total");

    // The quiet first half: at least 90% of the lock wait ended in the second half.
    let middle = duration / 2.0;
    let mut second = 0u64;
    for one in &lock_series {
        for (value, end) in values(one).iter().zip(&ends) {
            if *end > middle {
                second += value;
            }
        }
    }
    let share = second as f64 / all_locks as f64;
    eprintln!(
        "lock wait {all_locks} ns, {second} ns ({:.1}%) in intervals ending after {middle:.2} s",
        share * 100.0
    );
    assert!(
        share >= 0.9,
        "at least 90% in the second half: {:.1}%",
        share * 100.0
    );

    // Text, JSON and HTML reports show it.
    let text = lockpath_ok(&["report", path_str(&profile_path), "--timeline"]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains("timeline:") && text.contains("lock wait by lock"),
        "{text}"
    );
    let json = lockpath_ok(&["report", path_str(&profile_path), "--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON report");
    assert_eq!(
        json["timeline"]["ends_s"].as_array().map(Vec::len),
        Some(intervals)
    );
    let html = dir.join("halves.html");
    let html = report_html(&profile_path, &html);
    assert!(
        html.contains("id=\"timeline\"") && html.contains("<rect"),
        "a chart in the HTML"
    );
}

#[test]
fn interval_bad_input_is_one_clear_line() {
    fails_with(
        &["record", "--interval", "10ms", "-d", "1"],
        "at least 100ms",
    );
    fails_with(
        &["record", "--interval", "soon", "-d", "1"],
        "not a duration",
    );
    fails_with(
        &["record", "--cpu", "--interval", "1s", "-d", "1"],
        "add --lock, --offcpu or --io",
    );
    let dir = scratch("timeline-none");
    let path = dir.join("empty.json");
    std::fs::write(&path, br#"{"format":"lockpath/1","host":"h","kernel":"k","start_unix_s":0,"duration_s":1.0,"command_line":[],"targets":{"mode":"system"},"probes":[],"losses":{},"processes":[],"frames":[],"stacks":[]}"#).expect("write");
    fails_with(
        &["report", path_str(&path), "--timeline"],
        "has no timeline",
    );
}
