//! The views of a profile that exporters take: `Kind` (what is weighed) and `GroupBy`
//! (how lock rows are grouped). Plain types: the command line parses its words into
//! them (cli.rs), the exporters never see clap.

/// What a flamegraph, export or diff weighs. One row of [`KINDS`] says what each means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Lock,
    Rpc,
    Func,
    Cpu,
    Offcpu,
    Io,
    Hold,
    Offwake,
}

/// What a kind means: its name on the command line, what it weighs, and the families
/// whose recording makes a profile have it.
#[derive(Debug)]
pub struct KindInfo {
    pub kind: Kind,
    pub name: &'static str,
    pub about: &'static str,
    pub families: &'static [&'static str],
}

/// Every kind, in the order of `Kind` (the order of the HTML report's sections).
///
/// `io` has two faces: block requests carry no stacks, so the stack views (flamegraph,
/// folded, pprof, JSON tree) weigh the off-CPU time in IO wait classes, while the
/// tables (diff, HTML) list the block-IO requests by device, operation and process.
/// `hold` weighs the holds under contention the lock family records by itself; the
/// timings of `--hold` (every hold of one lock) are in the text, JSON and HTML reports.
pub const KINDS: [KindInfo; 8] = [
    KindInfo {
        kind: Kind::Lock,
        name: "lock",
        about: "Lock wait time by process, lock type and waiter stack",
        families: &["lock"],
    },
    KindInfo {
        kind: Kind::Rpc,
        name: "rpc",
        about: "Request latency by process, provider, operation and completion stack",
        families: &["rpc"],
    },
    KindInfo {
        kind: Kind::Func,
        name: "func",
        about: "Function latency by process, function and stack at entry",
        families: &["func", "ufunc"],
    },
    KindInfo {
        kind: Kind::Cpu,
        name: "cpu",
        about: "On-CPU samples by process and stack (user frames, then kernel frames `_[k]`)",
        families: &["cpu"],
    },
    KindInfo {
        kind: Kind::Offcpu,
        name: "offcpu",
        about: "Off-CPU time by process, wait class and stack",
        families: &["offcpu"],
    },
    KindInfo {
        kind: Kind::Io,
        name: "io",
        about: "IO waits: in flamegraph, folded, pprof and JSON exports the off-CPU time in IO \
                wait classes (buffer, page, block-io, journal); in diff and HTML the block-IO \
                requests by device, operation and process",
        families: &["io"],
    },
    KindInfo {
        kind: Kind::Hold,
        name: "hold",
        about: "Holds under contention by lock, holder process and acquisition stack (from \
                --lock: how long each contended acquirer held the lock while the next \
                waiter waited); --hold's own timings are in the report and JSON",
        families: &["lock"],
    },
    KindInfo {
        kind: Kind::Offwake,
        name: "offwake",
        about: "Off-CPU time by waiter stack and waker (--wakers): the waiter's stack, a `--` \
                frame, then the waker's stack upside down with its thread on top",
        families: &["wakers"],
    },
];

impl Kind {
    /// Every kind, in table order.
    pub const ALL: [Kind; 8] = [
        Kind::Lock,
        Kind::Rpc,
        Kind::Func,
        Kind::Cpu,
        Kind::Offcpu,
        Kind::Io,
        Kind::Hold,
        Kind::Offwake,
    ];

    pub fn info(self) -> &'static KindInfo {
        // Every kind has its row: the table is in the order of the enum.
        &KINDS[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }

    pub fn about(self) -> &'static str {
        self.info().about
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        KINDS
            .iter()
            .find(|info| info.name == name)
            .map(|info| info.kind)
    }

    /// Whether the kind weighs time in nanoseconds (waits, latencies, holds); `cpu`
    /// counts samples instead. Exporters pick units and divisors by it.
    pub fn weighs_time(self) -> bool {
        match self {
            Kind::Lock
            | Kind::Offcpu
            | Kind::Io
            | Kind::Rpc
            | Kind::Func
            | Kind::Hold
            | Kind::Offwake => true,
            Kind::Cpu => false,
        }
    }
}

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
    fn the_table_is_in_the_order_of_the_enum() {
        for (index, kind) in Kind::ALL.into_iter().enumerate() {
            assert_eq!(KINDS[index].kind, kind);
            assert_eq!(Kind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(Kind::from_name("hold"), Some(Kind::Hold));
        assert_eq!(Kind::from_name("holds"), None);
        for by in GroupBy::ALL {
            assert_eq!(GroupBy::from_name(by.name()), Some(by));
        }
    }
}
