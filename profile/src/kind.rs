//! The keys of what exporters show: `Kind` (what is weighed; made with its view in
//! `views/`) and `GroupBy` (how lock rows are grouped). Plain types: the command line
//! parses its words into them (cli.rs), the exporters never see clap.

pub use crate::views::Kind;

/// How the lock table groups its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupBy {
    /// One row per lock class and type: a lock's own name, or the class of
    /// interchangeable instances (hashed wait queues, on-stack wait queues and
    /// completions, futex hash buckets, `kmalloc` objects by caller; `lockclass`).
    Lock,
    /// One row per lock as recorded (address, static symbol, name) and type.
    Instance,
    /// One row per calling function and lock type.
    Caller,
    /// One row per process and lock type.
    Process,
    /// One row per host (profiles merged with `lockpath merge`).
    Host,
    /// One row per cgroup v2 path and lock type ("?" when the cgroup is unknown).
    Cgroup,
}

impl GroupBy {
    pub const ALL: [GroupBy; 6] = [
        GroupBy::Lock,
        GroupBy::Instance,
        GroupBy::Caller,
        GroupBy::Process,
        GroupBy::Host,
        GroupBy::Cgroup,
    ];

    pub fn name(self) -> &'static str {
        match self {
            GroupBy::Lock => "lock",
            GroupBy::Instance => "instance",
            GroupBy::Caller => "caller",
            GroupBy::Process => "process",
            GroupBy::Host => "host",
            GroupBy::Cgroup => "cgroup",
        }
    }

    pub fn about(self) -> &'static str {
        match self {
            GroupBy::Lock => {
                "One row per lock and type; interchangeable instances (hashed and on-stack \
                 wait queues, futex hash buckets, kmalloc objects by caller) as one class \
                 with their count"
            }
            GroupBy::Instance => "One row per lock as recorded (address, symbol or name) and type",
            GroupBy::Caller => "One row per calling function and lock type",
            GroupBy::Process => "One row per process and lock type",
            GroupBy::Host => "One row per host (profiles merged with `lockpath merge`)",
            GroupBy::Cgroup => {
                "One row per cgroup v2 path and lock type (`?`: cgroup unknown, e.g. a \
                 profile of an older version)"
            }
        }
    }

    pub fn from_name(name: &str) -> Option<GroupBy> {
        GroupBy::ALL.into_iter().find(|by| by.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_back_as_their_kinds() {
        for kind in Kind::ALL {
            assert_eq!(Kind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(Kind::from_name("hold"), Some(Kind::Hold));
        assert_eq!(Kind::from_name("holds"), None);
        for by in GroupBy::ALL {
            assert_eq!(GroupBy::from_name(by.name()), Some(by));
        }
    }
}
