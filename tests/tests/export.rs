//! Root integration tests of the exporters on real recordings: diff names the injected
//! lock first, `go tool pprof` reads the export with the same totals, merge keeps the
//! hosts, the HTML report works in a real headless Chromium (search, zoom, no script
//! errors, hostile names escaped), Prometheus scrapes the live metrics, and progress
//! shows on a terminal only.

#[macro_use]
mod common;

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::*;
use serde_json::{json, Value};

/// A process name that is markup (14 bytes: fits comm's 15).
const HOSTILE_COMM: &str = "<svg onload=x>";
/// A symbol name with quotes and angle brackets, put into a profile by hand.
const HOSTILE_SYMBOL: &str = "ns::f<\"q'\">::<img src=x onerror=alert(1)>";

/// Records lock-storm with these arguments into `out`.
fn record_storm(out: &Path, storm_args: &[&str]) {
    let storm = workload("lock-storm");
    let mut args = vec!["record", "-o", path_str(out), "--", path_str(&storm)];
    args.extend_from_slice(storm_args);
    lockpath_ok(&args);
}

fn sum(profile: &Value, field: &str) -> u64 {
    items(&profile["locks"], "locks")
        .map(|row| row[field].as_u64().expect("number"))
        .sum()
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn diff_pprof_merge_and_html_from_two_runs() {
    let test = test_name!();
    let dir = or_skip!(root_test("export-two-runs"));
    let base = dir.join("base.json");
    let new = dir.join("new.json");
    // BASE: one thread, nothing to contend with. NEW: eight threads fight over their
    // process's mmap_lock (rwsem), the injected contention.
    record_storm(
        &base,
        &["--seconds", "2", "--threads", "1", "--mode", "mmap"],
    );
    record_storm(
        &new,
        &[
            "--seconds",
            "3",
            "--threads",
            "8",
            "--mode",
            "mmap",
            "--name",
            HOSTILE_COMM,
        ],
    );
    let new_profile = load_json(&new);
    let storm_pid = items(&new_profile["processes"], "processes")
        // The main thread may have been named (lock-storm) by an early contention,
        // before it renamed itself; its worker threads carry the hostile name.
        .find(|process| {
            process["comm"] == HOSTILE_COMM
                || process["threads"]
                    .as_array()
                    .is_some_and(|threads| threads.iter().any(|t| t["comm"] == HOSTILE_COMM))
        })
        .and_then(|process| process["pid"].as_u64())
        .expect("the workload runs under its hostile name");
    // Ground truth: the workload's rwsem (its mm's mmap_lock) by recorded wait.
    let injected = items(&new_profile["locks"], "locks")
        .filter(|row| row["pid"].as_u64() == Some(storm_pid))
        .filter(|row| matches!(row["flags"].as_u64(), Some(2) | Some(4)))
        .max_by_key(|row| row["total_ns"].as_u64())
        .map(|row| row["lock_name"].as_str().expect("lock name").to_string())
        .expect("the injected mmap_lock contention was recorded");

    check_diff(&dir, &base, &new, &injected);
    check_pprof(&dir, &new, &new_profile);
    check_folded_and_json(&new, &new_profile);
    check_merge(&dir, &base, &new);
    if require_tool(test, "chromium") && require_tool(test, "chromedriver") {
        check_html_in_chromium(&dir, &new);
    }
}

fn check_diff(dir: &Path, base: &Path, new: &Path, injected: &str) {
    let output = lockpath_ok(&[
        "diff",
        path_str(base),
        path_str(new),
        "--format",
        "json",
        "--top",
        "0",
    ]);
    let diff: Value = serde_json::from_slice(&output.stdout).expect("diff JSON");
    let tables = diff["tables"].as_array().expect("tables");
    let by_lock = tables
        .iter()
        .find(|table| table["by"] == "lock")
        .expect("lock table");
    let first = &by_lock["rows"][0];
    let key = first["key"].as_str().expect("key");
    assert!(
        key.starts_with("rwsem:") && key.ends_with(injected),
        "diff must name the injected lock {injected} first, got {key}:\n{diff}"
    );
    assert!(
        first["new_per_s"].as_f64().expect("new") > first["base_per_s"].as_f64().expect("base")
    );
    // Rows are sorted by growth.
    let changes: Vec<f64> = items(&by_lock["rows"], "rows")
        .map(|row| row["change_per_s"].as_f64().expect("change"))
        .collect();
    assert!(
        changes.windows(2).all(|pair| pair[0] >= pair[1]),
        "{changes:?}"
    );
    let callers = tables
        .iter()
        .find(|table| table["by"] == "caller")
        .expect("caller table");
    assert!(callers["rows"][0]["key"]
        .as_str()
        .expect("key")
        .starts_with("rwsem:"));

    // The text table says the same, within 100 columns, and -o writes the differential SVG.
    let svg_path = dir.join("diff.svg");
    let output = lockpath_ok(&[
        "diff",
        path_str(base),
        path_str(new),
        "-o",
        path_str(&svg_path),
    ]);
    let text = String::from_utf8_lossy(&output.stdout);
    for line in text.lines() {
        assert!(line.chars().count() <= 100, "diff line too wide: {line}");
    }
    let first_row = text
        .lines()
        .skip_while(|line| !line.starts_with("lock by lock"))
        .nth(2)
        .expect("first row of the lock table");
    assert!(
        first_row.contains(injected),
        "text diff names {injected} first:\n{text}"
    );
    let svg = std::fs::read_to_string(&svg_path).expect("diff svg");
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let document = roxmltree::Document::parse_with_options(&svg, options).expect("well-formed SVG");
    assert!(
        document
            .descendants()
            .any(|node| node.text() == Some(HOSTILE_COMM)
                || node
                    .text()
                    .is_some_and(|text| text.starts_with(HOSTILE_COMM))),
        "the process frame is in the SVG as text"
    );
    assert!(
        !svg.contains(HOSTILE_COMM),
        "the raw name must be escaped in the SVG"
    );
}

fn check_pprof(dir: &Path, new: &Path, profile: &Value) {
    if !require_tool("diff_pprof_merge_and_html_from_two_runs", "go") {
        return;
    }
    let pprof = dir.join("new.pb.gz");
    lockpath_ok(&[
        "export",
        path_str(new),
        "--format",
        "pprof",
        "-o",
        path_str(&pprof),
    ]);
    let total = |index: &str, unit: &[&str]| pprof_total(dir, &pprof, index, unit);
    assert_eq!(
        total("delay", &["-unit", "ns"]),
        sum(profile, "total_ns"),
        "pprof delay total"
    );
    assert_eq!(
        total("contentions", &[]),
        sum(profile, "count"),
        "pprof contentions total"
    );
}

fn check_folded_and_json(new: &Path, profile: &Value) {
    let output = lockpath_ok(&["export", path_str(new), "--format", "json"]);
    let tree: Value = serde_json::from_slice(&output.stdout).expect("JSON export");
    assert_eq!(
        tree["root"]["value"].as_u64(),
        Some(sum(profile, "total_ns"))
    );
    let names: Vec<&str> = items(&tree["root"]["children"], "children")
        .filter_map(|child| child["name"].as_str())
        .collect();
    assert!(names.contains(&HOSTILE_COMM), "{names:?}");
}

fn check_merge(dir: &Path, base: &Path, new: &Path) {
    // The same run seen from another host.
    let mut other = load_json(new);
    other["host"] = json!("node-b");
    let other_path = dir.join("node-b.json");
    std::fs::write(&other_path, serde_json::to_vec(&other).expect("json")).expect("write");
    let all = dir.join("all.json");
    lockpath_ok(&[
        "merge",
        path_str(base),
        path_str(&other_path),
        "-o",
        path_str(&all),
    ]);
    let merged = load_json(&all);
    let base_profile = load_json(base);
    assert_eq!(
        sum(&merged, "total_ns"),
        sum(&base_profile, "total_ns") + sum(&other, "total_ns"),
        "merge keeps every row"
    );
    let hosts: Vec<&str> = items(&merged["processes"], "processes")
        .filter_map(|process| process["host"].as_str())
        .collect();
    assert!(hosts.contains(&"node-b"), "{hosts:?}");
    let report = lockpath_ok(&["report", path_str(&all)]);
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        text.contains("by host") && text.contains("node-b"),
        "per-host split:\n{text}"
    );
    let output = lockpath_ok(&["diff", path_str(base), path_str(&all), "--format", "json"]);
    let diff: Value = serde_json::from_slice(&output.stdout).expect("diff JSON");
    let host_table = items(&diff["tables"], "tables")
        .find(|table| table["by"] == "host")
        .expect("diff shows the per-host split");
    assert_eq!(host_table["rows"][0]["key"], "node-b", "{host_table}");
}

/// WebDriver (chromedriver) session on headless Chromium, closed on drop.
struct Browser {
    addr: String,
    session: String,
    _driver: KillOnDrop,
}

impl Browser {
    fn start(profile_dir: &Path) -> Browser {
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let driver = KillOnDrop(driver);
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while http(&addr, "GET", "/status", None)
            .ok()
            .map(|(status, _)| status)
            != Some(200)
        {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless", "--no-sandbox", "--disable-gpu",
                         "--disable-background-networking", "--disable-component-update",
                         "--disable-sync", "--no-first-run",
                         format!("--user-data-dir={}", profile_dir.display())]
            },
            "goog:loggingPrefs": {"browser": "ALL"}
        }}});
        let (status, body) =
            http(&addr, "POST", "/session", Some(&capabilities.to_string())).expect("new session");
        assert_eq!(status, 200, "new session: {body}");
        let reply: Value = serde_json::from_str(&body).expect("session JSON");
        let session = reply["value"]["sessionId"]
            .as_str()
            .expect("session id")
            .to_string();
        Browser {
            addr,
            session,
            _driver: driver,
        }
    }

    fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let body = (method == "POST").then(|| body.to_string());
        let (status, text) =
            http(&self.addr, method, &path, body.as_deref()).expect("webdriver call");
        assert_eq!(status, 200, "{method} {path}: {text}");
        serde_json::from_str::<Value>(&text).expect("webdriver JSON")["value"].clone()
    }

    fn run(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            json!({"script": script, "args": []}),
        )
    }

    fn severe_logs(&self) -> Vec<Value> {
        self.call("POST", "/se/log", json!({"type": "browser"}))
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|entry| entry["level"] == "SEVERE")
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = http(
            &self.addr,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        );
    }
}

fn check_html_in_chromium(dir: &Path, new: &Path) {
    // A profile whose hottest caller is a hostile symbol (quotes, angle brackets).
    let mut profile = load_json(new);
    let hottest = items(&profile["locks"], "locks")
        .max_by_key(|row| row["total_ns"].as_u64())
        .and_then(|row| row["stack"].as_u64())
        .expect("a row with a stack");
    let frames: Vec<u64> = profile["stacks"][hottest as usize]["frames"]
        .as_array()
        .expect("frames")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    let caller = frames
        .iter()
        .copied()
        .find(|&frame| {
            let name = profile["frames"][frame as usize]["name"]
                .as_str()
                .unwrap_or("");
            !(name.starts_with("rwsem")
                || name.starts_with("down_")
                || name.starts_with("_raw")
                || name.contains("lock_slowpath")
                || name.starts_with("osq_")
                || name == "down")
        })
        .expect("a caller frame");
    profile["frames"][caller as usize]["name"] = json!(HOSTILE_SYMBOL);
    profile["frames"][caller as usize]["kernel"] = json!(false);
    let hostile = dir.join("hostile.json");
    std::fs::write(&hostile, serde_json::to_vec(&profile).expect("json")).expect("write");
    let page = dir.join("report.html");
    let html = report_html(&hostile, &page);
    assert!(
        !html.contains(HOSTILE_COMM) && !html.contains("<img"),
        "raw names in the page"
    );

    let browser = Browser::start(&dir.join("chromium-profile"));
    browser.call(
        "POST",
        "/url",
        json!({"url": format!("file://{}", page.display())}),
    );
    let main = browser.run(
        "return {title: document.title, tables: document.querySelectorAll('table').length,
                 frames: document.querySelectorAll('iframe.flamegraph').length,
                 text: document.body.textContent,
                 injected: document.querySelectorAll('img, [onerror], [onload]').length}",
    );
    assert!(
        main["title"]
            .as_str()
            .expect("title")
            .starts_with("lockpath report"),
        "{main}"
    );
    assert!(
        main["tables"].as_u64().expect("tables") >= 3,
        "per-lock, per-caller, per-process"
    );
    // The lock flamegraph, and the holds-under-contention one when the run saw any.
    let hold_frames = u64::from(
        profile["contended_holds"]
            .as_array()
            .is_some_and(|holds| !holds.is_empty()),
    );
    assert_eq!(
        main["frames"].as_u64(),
        Some(1 + hold_frames),
        "the lock flamegraph (and the hold one)"
    );
    assert_eq!(
        main["injected"].as_u64(),
        Some(0),
        "no element came from a name"
    );
    let text = main["text"].as_str().expect("text");
    assert!(
        text.contains(HOSTILE_COMM) && text.contains(HOSTILE_SYMBOL),
        "names shown as text"
    );

    // The start is a date with its zone, not a Unix number.
    let start = browser.run(
        "const dt = Array.from(document.querySelectorAll('dt')).find(d => d.textContent === 'start');
         return dt ? dt.nextElementSibling.textContent : null",
    );
    let start = start.as_str().expect("a start item");
    assert!(
        start.len() >= 20
            && start.as_bytes()[4] == b'-'
            && start.as_bytes()[10] == b'T'
            && start.contains("Z (UTC)"),
        "start shown as {start:?}"
    );
    // The embedded flamegraph fills its frame, title included, at two window widths.
    for width in [800, 1600] {
        browser.call(
            "POST",
            "/window/rect",
            json!({"width": width, "height": 900}),
        );
        let fit = browser.run(
            "const frame = document.querySelector('iframe.flamegraph');
             const doc = frame.contentDocument;
             const svg = doc.querySelector('svg').getBoundingClientRect();
             const title = doc.getElementById('title').getBoundingClientRect();
             return {frame: frame.clientWidth, svg: svg.width, height: svg.height,
                     frameHeight: frame.clientHeight, left: title.left, right: title.right}",
        );
        let number = |key: &str| fit[key].as_f64().unwrap_or(f64::NAN);
        eprintln!("window {width}: flamegraph {fit}");
        assert!(
            number("svg") >= 0.9 * number("frame"),
            "window {width}: the flamegraph is {} px wide in a {} px frame",
            number("svg"),
            number("frame")
        );
        assert!(
            number("left") >= 0.0 && number("right") <= number("frame") + 1.0,
            "window {width}: the title is cut: {fit}"
        );
        assert!(
            number("height") <= number("frameHeight") + 1.0,
            "window {width}: the frame cuts the graph's bottom: {fit}"
        );
    }
    // Tables sort by a click on a header: numbers with units as numbers.
    let sorted = browser.run(
        "const table = document.querySelector('table');
         const header = Array.from(table.querySelectorAll('th')).findIndex(th => th.classList.contains('n'));
         table.querySelectorAll('th')[header].click();
         const first = Array.from(table.tBodies[0].rows).map(r => r.cells[header].textContent);
         table.querySelectorAll('th')[header].click();
         const second = Array.from(table.tBodies[0].rows).map(r => r.cells[header].textContent);
         return {first: first, second: second,
                 sort: table.querySelectorAll('th')[header].getAttribute('aria-sort')}",
    );
    let column = |key: &str| -> Vec<f64> {
        sorted[key]
            .as_array()
            .expect("cells")
            .iter()
            .map(|cell| {
                let text = cell.as_str().expect("cell");
                let (number, unit) = text.split_once(' ').unwrap_or((text, ""));
                let scale = match unit {
                    "ns" => 1e-9,
                    "us" => 1e-6,
                    "ms" => 1e-3,
                    _ => 1.0,
                };
                number.parse::<f64>().expect("a number") * scale
            })
            .collect()
    };
    let (down, up) = (column("first"), column("second"));
    assert!(
        down.windows(2).all(|w| w[0] >= w[1]),
        "descending: {down:?}"
    );
    assert!(up.windows(2).all(|w| w[0] <= w[1]), "ascending: {up:?}");
    assert_eq!(sorted["sort"], "ascending");

    // Inside the flamegraph: it rendered, search highlights, a click zooms.
    browser.call("POST", "/frame", json!({"id": 0}));
    let rendered = browser.run(
        "return {frames: document.querySelectorAll('#frames > g').length,
                 injected: document.querySelectorAll('img, [onerror]').length,
                 titles: Array.from(document.querySelectorAll('#frames title')).map(t => t.textContent)}",
    );
    assert!(
        rendered["frames"].as_u64().expect("frames") > 3,
        "{rendered}"
    );
    assert_eq!(rendered["injected"].as_u64(), Some(0));
    let titles = rendered["titles"].to_string();
    assert!(
        titles.contains("<svg onload=x>"),
        "the process frame is text: {titles}"
    );
    let matched =
        browser.run("search('^ns::f<'); return document.getElementById('matched').textContent");
    let matched = matched.as_str().expect("matched text");
    let percent: f64 = matched
        .trim_start_matches("Matched: ")
        .trim_end_matches('%')
        .parse()
        .unwrap_or_else(|_| panic!("search did not match: {matched:?}"));
    assert!(percent > 0.0 && percent <= 100.0, "{matched}");
    // The widest frame that is not the whole graph: after a real click it fills the width.
    let target = browser.run(
        "const total = parseInt(document.getElementById('frames').attributes.total_samples.value);
         let best = null, bestWidth = -1;
         for (const g of document.querySelectorAll('#frames > g')) {
             const w = parseInt(g.querySelector('rect').attributes['fg:w'].value);
             if (w < total && w > bestWidth) { best = g; bestWidth = w; }
         }
         return best;",
    );
    let element = target
        .as_object()
        .and_then(|object| object.values().next())
        .and_then(Value::as_str)
        .expect("an element reference")
        .to_string();
    let reference = json!({"element-6066-11e4-a52e-4f735466cecf": element});
    let width_of = |browser: &Browser| -> f64 {
        let width = browser.call(
            "POST",
            "/execute/sync",
            json!({"script": "return arguments[0].querySelector('rect').attributes.width.value",
                   "args": [reference]}),
        );
        width
            .as_str()
            .and_then(|width| width.trim_end_matches('%').parse().ok())
            .unwrap_or_else(|| panic!("frame width {width}"))
    };
    let before = width_of(&browser);
    browser.call("POST", &format!("/element/{element}/click"), json!({}));
    let zoomed = browser.run(
        "return {unzoom_hidden: document.getElementById('unzoom').classList.contains('hide'),
                 parents: document.querySelectorAll('#frames > g.parent').length}",
    );
    assert_eq!(
        zoomed["unzoom_hidden"],
        json!(false),
        "zoom shows 'Reset Zoom': {zoomed}"
    );
    assert!(
        zoomed["parents"].as_u64().expect("parents") >= 1,
        "ancestors marked: {zoomed}"
    );
    let after = width_of(&browser);
    assert!(
        before < 99.0 && after > 99.9,
        "the clicked frame fills the graph: {before}% -> {after}%"
    );
    browser.call("POST", "/frame", json!({"id": null}));
    let errors = browser.severe_logs();
    assert!(errors.is_empty(), "script errors in the report: {errors:?}");
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn prometheus_scrapes_live_metrics() {
    let test = test_name!();
    let dir = or_skip!(root_test_needing(&["prometheus"], "export-prometheus"));
    let metrics_port = free_port();
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let storm = workload("lock-storm");
    let profile_path = dir.join("live.json");
    let (mut lockpath_child, programs) = spawn_killed_on_drop(&record_args(
        &["--lock", "--offcpu-all", "--io", "--metrics", &metrics_addr],
        &profile_path,
        &[path_str(&storm), "--seconds", "15", "--threads", "4"],
    ));

    let web_port = free_port();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: lockpath\n    static_configs:\n      - targets: ['{metrics_addr}']\n"
        ),
    )
    .expect("write config");
    let web = format!("127.0.0.1:{web_port}");
    let prometheus = start_prometheus(&dir, &config, &web);

    let query = |expr: &str| -> Vec<Value> {
        let path = format!(
            "/api/v1/query?query={}",
            expr.replace('{', "%7B")
                .replace('}', "%7D")
                .replace('"', "%22")
                .replace('=', "%3D")
                .replace(' ', "%20")
        );
        match http(&web, "GET", &path, None) {
            Ok((200, body)) => serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|reply| reply["data"]["result"].as_array().cloned())
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    };
    let deadline = Instant::now() + Duration::from_secs(12);
    let (contentions, wait, offcpu) = loop {
        let contentions = query("lockpath_lock_contentions_total");
        let wait = query("lockpath_lock_wait_seconds_total{type=\"rwsem:W\"}");
        let offcpu = query("lockpath_offcpu_seconds_total{process=\"lock-storm\"}");
        let up = query("up{job=\"lockpath\"}");
        let is_up = up
            .first()
            .map(|series| series["value"][1] == "1")
            .unwrap_or(false);
        if is_up && !contentions.is_empty() && !wait.is_empty() && !offcpu.is_empty() {
            break (contentions, wait, offcpu);
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus found no lockpath series within 12 s (up: {up:?}); log: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    // The same text, checked by Prometheus's own linter (histogram rules included).
    if let Ok((200, text)) = http(&metrics_addr, "GET", "/metrics", None) {
        assert!(
            text.contains("# TYPE lockpath_io_latency_seconds histogram"),
            "{text}"
        );
        if require_tool(test, "promtool") {
            let mut promtool = Command::new("promtool")
                .args(["check", "metrics"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start promtool");
            use std::io::Write;
            promtool
                .stdin
                .take()
                .expect("stdin")
                .write_all(text.as_bytes())
                .expect("feed promtool");
            let checked = promtool.wait_with_output().expect("promtool");
            let complaints = String::from_utf8_lossy(&checked.stdout).into_owned()
                + &String::from_utf8_lossy(&checked.stderr);
            // Lint remarks (e.g. naming advice) are not errors; parse errors are.
            assert!(
                !complaints.contains("error while linting") && !complaints.contains("parse"),
                "promtool: {complaints}\n{text}"
            );
        }
    }
    drop(prometheus);
    for series in &offcpu {
        assert!(series["metric"]["class"].is_string(), "{series}");
        let seconds: f64 = series["value"][1]
            .as_str()
            .and_then(|value| value.parse().ok())
            .expect("value");
        assert!(seconds >= 0.0, "{series}");
    }
    let offcpu_scraped: f64 = offcpu
        .iter()
        .filter_map(|series| series["value"][1].as_str()?.parse::<f64>().ok())
        .sum();
    assert!(
        offcpu_scraped > 0.0,
        "off-CPU time of lock-storm scraped: {offcpu:?}"
    );
    for series in &contentions {
        assert!(
            series["metric"]["type"].is_string()
                && series["metric"]["caller"].is_string()
                && series["metric"]["name_source"].is_string(),
            "{series}"
        );
    }
    // mmap_lock (every rwsem:W wait of lock-storm) is named from the waiting task.
    let task_wait: f64 = wait
        .iter()
        .filter(|series| series["metric"]["name_source"] == "task")
        .filter_map(|series| series["value"][1].as_str()?.parse::<f64>().ok())
        .sum();
    assert!(task_wait > 0.0, "rwsem:W wait named by the task: {wait:?}");
    let scraped_wait: f64 = wait
        .iter()
        .map(|series| {
            series["value"][1]
                .as_str()
                .expect("value")
                .parse::<f64>()
                .expect("number")
        })
        .sum();
    assert!(scraped_wait > 0.0, "mmap_lock wait was scraped: {wait:?}");

    let status = lockpath_child
        .0
        .wait()
        .expect("lockpath ends with the workload");
    assert!(status.success(), "lockpath failed");
    assert_programs_gone(&programs);
    // The live values were lower bounds of the final profile's.
    let profile = load_json(&profile_path);
    let final_wait: u64 = items(&profile["locks"], "locks")
        .filter(|row| row["flags"] == 4)
        .map(|row| row["total_ns"].as_u64().expect("total"))
        .sum();
    assert!(
        scraped_wait * 1e9 <= final_wait as f64 * 1.0001,
        "{scraped_wait} s vs {final_wait} ns"
    );
}

#[test]
#[cfg_attr(lockpath_not_root, ignore = "needs root: loads eBPF programs")]
fn progress_on_a_terminal_only() {
    let dir = or_skip!(root_test_needing(&["script"], "export-progress"));
    let storm = workload("lock-storm");
    let command = format!(
        "{} record -o {} -- {} --seconds 2.5 --threads 4",
        lockpath_bin().display(),
        dir.join("tty.json").display(),
        storm.display()
    );
    // `script` gives lockpath a pseudo-terminal.
    let output = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("run script");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(
        text.contains("lockpath: 1 s, ") && text.contains("lock contentions"),
        "progress on a terminal:\n{text}"
    );

    let output = lockpath_ok(&record_args(
        &[],
        &dir.join("pipe.json"),
        &[path_str(&storm), "--seconds", "2.5"],
    ));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains('\r') && !stderr.contains("lock contentions"),
        "silent on a pipe:\n{stderr}"
    );
}
