//! On-CPU samples: per process, and per function (self and total).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::export::tables::table::{fit, most_first};
use crate::profile::Profile;

/// On-CPU samples of one process.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CpuProcess {
    pub pid: u32,
    pub process: String,
    pub samples: u64,
}

/// A function's on-CPU samples: `self` where it was the leaf, `total` where it was on the
/// stack at all (counted once per sample even when recursive).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CpuFunction {
    pub function: String,
    pub kernel: bool,
    pub self_samples: u64,
    pub total_samples: u64,
}

/// Processes by on-CPU samples, most first.
pub fn cpu_processes(profile: &Profile) -> Vec<CpuProcess> {
    let mut by_pid: BTreeMap<u32, u64> = BTreeMap::new();
    for row in &profile.cpu {
        *by_pid.entry(row.pid).or_default() += row.samples;
    }
    let mut out: Vec<CpuProcess> = by_pid
        .into_iter()
        .map(|(pid, samples)| CpuProcess {
            pid,
            process: profile.process_name(pid),
            samples,
        })
        .collect();
    out.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.pid.cmp(&b.pid)));
    out
}

/// Functions by on-CPU samples (self first, then total), most first.
pub fn cpu_functions(profile: &Profile) -> Vec<CpuFunction> {
    let mut by_name: BTreeMap<(String, bool), (u64, u64)> = BTreeMap::new();
    for row in &profile.cpu {
        // Leaf first: the kernel part (if any) is innermost.
        let mut frames = profile.stack_frames(row.kernel_stack);
        frames.extend(profile.stack_frames(row.user_stack));
        let mut seen = BTreeSet::new();
        for (index, frame) in frames.iter().enumerate() {
            let key = (frame.display(), frame.kernel);
            let counts = by_name.entry(key.clone()).or_default();
            if index == 0 {
                counts.0 += row.samples;
            }
            if seen.insert(key) {
                counts.1 += row.samples;
            }
        }
    }
    let mut out: Vec<CpuFunction> = by_name
        .into_iter()
        .map(
            |((function, kernel), (self_samples, total_samples))| CpuFunction {
                function,
                kernel,
                self_samples,
                total_samples,
            },
        )
        .collect();
    most_first(
        &mut out,
        |function| (function.self_samples, function.total_samples),
        |a, b| a.function.cmp(&b.function),
    );
    out
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// Per-process samples and the top functions (self and total), within 100 columns.
pub fn cpu_tables(profile: &Profile, top: usize) -> String {
    let processes = cpu_processes(profile);
    let total: u64 = processes.iter().map(|process| process.samples).sum();
    let mut out = String::new();
    if total == 0 {
        out.push_str("no on-CPU samples recorded (idle is not counted)\n");
        return out;
    }
    let limit = |len: usize| crate::export::tables::table::shown_rows(top, len);
    out.push_str(&format!(
        "on-CPU samples, by process ({} samples at {} Hz per CPU, idle not counted):\n",
        total, profile.cpu_freq_hz
    ));
    out.push_str(&format!(
        "{:>10} {:>7} {:>8}  {}\n",
        "samples", "share", "pid", "process"
    ));
    for process in &processes[..limit(processes.len())] {
        out.push_str(&format!(
            "{:>10} {:>6.1}% {:>8}  {}\n",
            process.samples,
            percent(process.samples, total),
            process.pid,
            fit(&process.process, 60)
        ));
    }
    let functions = cpu_functions(profile);
    out.push_str("\ntop functions on CPU (self: the function itself; total: with its callees):\n");
    out.push_str(&format!(
        "{:>10} {:>7} {:>10} {:>7}  {}\n",
        "self", "self%", "total", "total%", "function"
    ));
    for function in &functions[..limit(functions.len())] {
        let name = if function.kernel {
            format!("{} [k]", function.function)
        } else {
            function.function.clone()
        };
        out.push_str(&format!(
            "{:>10} {:>6.1}% {:>10} {:>6.1}%  {}\n",
            function.self_samples,
            percent(function.self_samples, total),
            function.total_samples,
            percent(function.total_samples, total),
            fit(&name, 60)
        ));
    }
    out
}
