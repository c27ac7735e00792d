//! `report --format csv`: the lock table (grouped as `--by` says) as CSV, one row per
//! group, with the numbers of the JSON report's `locks` (nanoseconds, not rounded), for
//! spreadsheets and scripts (like `perf lock contention -x`).

use anyhow::{Context, Result};

use crate::{export::tables::lock::top_lock_groups, kind::GroupBy, profile::Profile};

/// The columns, in order.
pub const HEADER: [&str; 11] = [
    "type",
    "lock",
    "caller",
    "contended",
    "total_wait_ns",
    "max_wait_ns",
    "min_wait_ns",
    "avg_wait_ns",
    "pids",
    "processes",
    "host",
];

/// The lock groups of `profile`, `top` of them (0: all), as CSV with a header line.
pub fn render(profile: &Profile, by: GroupBy, top: usize) -> Result<String> {
    let (groups, _) = top_lock_groups(profile, by, top, false);
    let mut writer = ::csv::Writer::from_writer(Vec::new());
    writer.write_record(HEADER)?;
    for group in &groups {
        let pids: Vec<String> = group.pids.iter().map(u32::to_string).collect();
        writer.write_record([
            group.lock_type.as_str(),
            &group.lock,
            &group.caller,
            &group.contended.to_string(),
            &group.total_wait_ns.to_string(),
            &group.max_wait_ns.to_string(),
            &group.min_wait_ns.to_string(),
            &group.avg_wait_ns.to_string(),
            &pids.join(" "),
            &group.processes.join(" "),
            &group.host,
        ])?;
    }
    let bytes = writer.into_inner().context("cannot finish the CSV table")?;
    String::from_utf8(bytes).context("the CSV table is not UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_what_needs_quoting_and_keeps_the_numbers() {
        let mut profile = crate::export::formats::report::tests::profile_with_two_locks();
        // A hostile process name: a comma, a quote, a newline.
        if let Some(process) = profile.processes.first_mut() {
            process.comm = "a,\"b\"\nc".into();
        }
        let text = render(&profile, GroupBy::Lock, 0).expect("csv");
        let mut reader = ::csv::Reader::from_reader(text.as_bytes());
        let headers = reader.headers().expect("header").clone();
        assert_eq!(headers.iter().collect::<Vec<_>>(), HEADER);
        let (groups, _) = top_lock_groups(&profile, GroupBy::Lock, 0, false);
        let records: Vec<::csv::StringRecord> = reader.records().map(|r| r.expect("row")).collect();
        assert_eq!(records.len(), groups.len());
        for (record, group) in records.iter().zip(&groups) {
            assert_eq!(&record[1], group.lock);
            assert_eq!(record[4].parse::<u64>().expect("ns"), group.total_wait_ns);
            assert_eq!(record[3].parse::<u64>().expect("count"), group.contended);
            assert_eq!(&record[9], group.processes.join(" "));
        }
    }
}
