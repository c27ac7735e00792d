//! The guest's verdict lines: `LAB-CHECK <name> PASS|FAIL|SKIP <why>`, then `LAB-DONE`.

use std::collections::BTreeMap;

use super::kernels::LabKernel;

/// Reads the verdicts; Ok(summary) when every check passed or skipped legitimately.
pub(super) fn parse_serial(
    serial: &str,
    kernel: &LabKernel,
) -> std::result::Result<String, String> {
    let mut results: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut done = false;
    for line in serial.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(rest) = line.strip_prefix("LAB-CHECK ") {
            let mut parts = rest.splitn(3, ' ');
            let name = parts.next().unwrap_or("").to_string();
            let verdict = parts.next().unwrap_or("").to_string();
            let why = parts.next().unwrap_or("").to_string();
            results.insert(name, (verdict, why));
        } else if line.starts_with("LAB-DONE") {
            done = true;
        }
    }
    if !done {
        return Err("no LAB-DONE line: the guest's /init did not finish".into());
    }
    let mut problems = Vec::new();
    for (name, (verdict, why)) in &results {
        if verdict == "FAIL" {
            problems.push(format!("{name} failed: {why}"));
        }
    }
    for name in kernel
        .required
        .iter()
        .filter(|name| !kernel.excused.contains(name))
    {
        match results.get(*name) {
            Some((verdict, _)) if verdict == "PASS" => {}
            Some((verdict, why)) if verdict != "FAIL" => problems.push(format!(
                "{name} must pass on {} but was {verdict}: {why}",
                kernel.name
            )),
            Some(_) => {}
            None => problems.push(format!("{name} did not run")),
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    let line = |verdict: &str| {
        results
            .iter()
            .filter(|(_, (v, _))| v == verdict)
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    };
    Ok(format!(
        "passed: {}; skipped: {}",
        line("PASS"),
        match line("SKIP") {
            skipped if skipped.is_empty() => "none".to_string(),
            skipped => skipped,
        }
    ))
}
