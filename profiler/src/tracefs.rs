//! tracefs: where tracepoints are described. Mounted on demand; record layouts read from
//! each event's `format` file, because they differ between kernels.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

const TRACEFS: &str = "/sys/kernel/tracing";
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

fn root() -> PathBuf {
    if Path::new(TRACEFS).join("events").is_dir() {
        PathBuf::from(TRACEFS)
    } else {
        PathBuf::from(DEBUGFS_TRACING)
    }
}

/// Makes sure tracefs is mounted; mounts it if needed.
pub fn ensure_mounted() -> Result<()> {
    if Path::new(TRACEFS).join("events").is_dir()
        || Path::new(DEBUGFS_TRACING).join("events").is_dir()
    {
        return Ok(());
    }
    let status = std::process::Command::new("mount")
        .args(["-t", "tracefs", "nodev", TRACEFS])
        .status();
    match status {
        Ok(status) if status.success() && Path::new(TRACEFS).join("events").is_dir() => Ok(()),
        _ => bail!(
            "tracefs is not mounted and mounting it failed: run `mount -t tracefs nodev {TRACEFS}` as root"
        ),
    }
}

/// True when the kernel can create kprobes: the perf `kprobe` PMU (4.17+) or tracefs's
/// `kprobe_events` (aya uses the first, else the second). Both are missing when the kernel
/// is built without CONFIG_KPROBES.
pub fn kprobes_available() -> bool {
    kprobes_unavailable().is_none()
}

/// Why kprobes cannot be used on this kernel, or `None` when they can. The one check of
/// kprobe support.
pub fn kprobes_unavailable() -> Option<String> {
    let pmu = Path::new("/sys/bus/event_source/devices/kprobe/type").exists();
    let legacy = [TRACEFS, DEBUGFS_TRACING]
        .iter()
        .any(|dir| Path::new(dir).join("kprobe_events").exists());
    if pmu || legacy {
        None
    } else {
        Some("this kernel has no kprobe support (built without CONFIG_KPROBES)".into())
    }
}

pub fn event_exists(group: &str, event: &str) -> bool {
    root().join("events").join(group).join(event).is_dir()
}

/// One field of a tracepoint record.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub offset: u32,
    pub size: u32,
}

/// Fields of `group:event`, from its format file.
pub fn event_fields(group: &str, event: &str) -> Result<Vec<Field>> {
    let path = root().join("events").join(group).join(event).join("format");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "this kernel has no {group}:{event} tracepoint ({} unreadable)",
            path.display()
        )
    })?;
    Ok(parse_format(&text))
}

/// Offset of a field, with an error naming the event when it is absent.
pub fn field_offset(group: &str, event: &str, field: &str) -> Result<u32> {
    event_fields(group, event)?
        .into_iter()
        .find(|candidate| candidate.name == field)
        .map(|found| found.offset)
        .with_context(|| format!("{group}:{event} has no field {field} on this kernel"))
}

/// Parses `field:pid_t child_pid;\toffset:20;\tsize:4;\tsigned:1;` lines.
pub fn parse_format(text: &str) -> Vec<Field> {
    let mut fields = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("field:") else {
            continue;
        };
        let mut parts = rest.split(';').map(str::trim);
        let Some(declaration) = parts.next() else {
            continue;
        };
        let name = declaration
            .split_whitespace()
            .last()
            .unwrap_or_default()
            .split('[')
            .next()
            .unwrap_or_default()
            .to_string();
        let mut offset = None;
        let mut size = None;
        for part in parts {
            if let Some(value) = part.strip_prefix("offset:") {
                offset = value.parse().ok();
            } else if let Some(value) = part.strip_prefix("size:") {
                size = value.parse().ok();
            }
        }
        if let (Some(offset), Some(size)) = (offset, size) {
            fields.push(Field { name, offset, size });
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_format_files() {
        let text = "name: sched_process_fork\nID: 366\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:__data_loc char[] parent_comm;\toffset:8;\tsize:4;\tsigned:0;\n\
\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
\tfield:pid_t child_pid;\toffset:20;\tsize:4;\tsigned:1;\n";
        let fields = parse_format(text);
        assert_eq!(fields.len(), 4);
        assert_eq!(fields[1].name, "parent_comm");
        assert_eq!(fields[2].name, "comm");
        assert_eq!(fields[2].size, 16);
        assert_eq!(
            fields[3],
            Field {
                name: "child_pid".into(),
                offset: 20,
                size: 4
            }
        );
    }
}
