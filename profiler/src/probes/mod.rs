//! One module per probe family, each behind one interface: the [`Family`] trait (what
//! a planned family does during a recording) and its [`Registration`] (how it is asked
//! for, checked and planned, and the maps it sizes). `record` loops over [`FAMILIES`];
//! a new family is its own files plus one line there. `shared` holds what every family
//! uses (maps, stacks, losses, thread names, attach helpers).

pub mod blocked;
pub mod blocked_on;
pub mod cpu;
pub mod filelock;
pub mod func;
pub mod hold;
pub mod io;
pub mod lock;
pub mod lockfilter;
pub mod lockname;
pub mod offcpu;
pub mod owners;
pub mod rpc;
pub mod shared;
pub mod target;
pub mod virtspin;
pub mod wakers;

use anyhow::Result;
use aya::{Ebpf, EbpfLoader};

use crate::{
    profile::{ProbeUse, Profile, Unavailable},
    symbolize::{KernelSymbols, UserSymbols},
};
use shared::{MapSet, StackResolver};
use target::Target;

/// Every family, in the order they are planned, attached and drained (the order of
/// `probes` in a profile).
pub const FAMILIES: &[Registration] = &[
    lock::FAMILY,
    offcpu::FAMILY,
    // After offcpu: its drain adds to the off-CPU rows.
    wakers::FAMILY,
    io::FAMILY,
    rpc::FAMILY,
    func::FAMILY,
    cpu::FAMILY,
    hold::FAMILY,
];

/// Every family's slice of `record`'s command line: its `<Family>Args`, beside its code
/// (options, their help text and their value parsers), flattened into
/// `cli::RecordArgs`, in the order of `record --help`. The off-CPU slice has the options
/// of the wakers family too.
#[derive(Debug, clap::Args)]
pub struct FamilyArgs {
    #[command(flatten)]
    pub lock: lock::LockArgs,

    #[command(flatten)]
    pub rpc: rpc::RpcArgs,

    #[command(flatten)]
    pub func: func::FuncArgs,

    #[command(flatten)]
    pub cpu: cpu::CpuArgs,

    #[command(flatten)]
    pub hold: hold::HoldArgs,

    #[command(flatten)]
    pub offcpu: offcpu::OffcpuArgs,

    #[command(flatten)]
    pub io: io::IoArgs,
}

/// How a family enters a recording.
pub struct Registration {
    /// The family's name, as in a profile's `probes[].family`.
    pub name: &'static str,
    /// Whether the arguments ask for the family.
    pub asked: fn(&FamilyArgs) -> bool,
    /// Checks the family's arguments before anything is loaded (bad input fails here,
    /// before the privilege check).
    pub check: fn(&FamilyArgs) -> Result<()>,
    /// The family for this run, or `None` when it is not recorded (not asked for, or
    /// nothing of it is available: the reasons are then in `ctx.unavailable`).
    pub plan: fn(&FamilyArgs, &mut PlanContext) -> Result<Planned>,
    /// Its maps that need room when it is recorded; otherwise they shrink to one entry
    /// each, so they cost no kernel memory (the object is loaded whole).
    pub maps: &'static [(&'static str, MapSize)],
    /// Every name of its kernel side (`profiler_common::<family>::names::ALL`), checked
    /// against the built object by a unit test.
    pub names: &'static [&'static str],
}

/// A family planned for this run, or `None` when it is not recorded.
pub type Planned = Option<Box<dyn Family>>;

/// A family of this recording, under its registration's name.
pub struct Recorded {
    /// The family's name, as in its registration.
    pub name: &'static str,
    family: Box<dyn Family>,
}

impl Recorded {
    pub fn new(registration: &Registration, family: Box<dyn Family>) -> Self {
        Recorded {
            name: registration.name,
            family,
        }
    }
}

impl std::ops::Deref for Recorded {
    type Target = dyn Family;

    fn deref(&self) -> &Self::Target {
        self.family.as_ref()
    }
}

impl std::ops::DerefMut for Recorded {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.family.as_mut()
    }
}

/// How many entries a family's map gets when the family is recorded.
#[derive(Debug, Clone, Copy)]
pub enum MapSize {
    /// An aggregation map: `--map-entries`.
    Stats,
    /// A map of events in progress, of a fixed size (a `*_ENTRIES` of profiler-common).
    Fixed(u32),
    /// The overflow rows of a full aggregation map (`OVERFLOW_ENTRIES` of
    /// profiler-common): drained by periods like `Stats`.
    Overflow,
}

/// What planning may use and report.
pub struct PlanContext<'a> {
    pub symbols: &'a KernelSymbols,
    /// Hooks this kernel lacks: one entry each, and the run goes on without them.
    pub unavailable: &'a mut Vec<Unavailable>,
    /// The families the arguments ask for.
    pub asked: &'a [&'static str],
}

/// What attaching may use and report.
pub struct AttachContext<'a> {
    pub symbols: &'a KernelSymbols,
    pub unavailable: &'a mut Vec<Unavailable>,
    /// The kernel-memory reader, when the recording made one.
    pub reader: Option<&'a mut blocked_on::KernelReader>,
}

/// Where a family drains to: the maps, the stack resolver and the profile being filled.
pub struct Drain<'a> {
    pub maps: &'a MapSet,
    pub stacks: &'a mut StackResolver,
    pub profile: &'a mut Profile,
    /// When the drain reads the waits in progress (CLOCK_MONOTONIC, the clock of the
    /// programs' time stamps), and whether it ends a profile's span.
    pub moment: DrainMoment,
}

/// What a drain is for: it decides what happens to the waits in progress.
#[derive(Debug, Clone, Copy)]
pub struct DrainMoment {
    pub now_ns: u64,
    /// A `--rotate` period ends while the programs run on: a wait in progress counts
    /// into this period up to `now_ns` and into the next one from there.
    pub ends_period: bool,
}

impl DrainMoment {
    /// Now; `ends_period` as above.
    pub fn now(ends_period: bool) -> Self {
        DrainMoment {
            now_ns: monotonic_ns(),
            ends_period,
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given, which lives on this stack.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// A planned family during one recording.
pub trait Family {
    /// Sets its load-time globals on the loader (before the object is loaded).
    fn configure<'a>(&'a self, _loader: &mut EbpfLoader<'a>) {}

    /// Whether its programs record user stacks (the process watcher then runs).
    fn user_stacks(&self) -> bool {
        false
    }

    /// Loads and attaches its programs; says how. Empty when nothing could be attached
    /// and the run goes on (the reasons are in `ctx.unavailable`).
    fn attach(&mut self, ebpf: &mut Ebpf, ctx: &mut AttachContext) -> Result<Vec<ProbeUse>>;

    /// Called once its programs are attached and the maps readable, before the
    /// recording's clock starts: finds what was already in progress (the off-CPU
    /// family: the threads blocked before the recording).
    /// `reader` reads kernel memory, where this kernel lets it (what a blocked thread
    /// waits on).
    fn started(
        &mut self,
        _maps: &MapSet,
        _stacks: &mut StackResolver,
        _target: &Target,
        _reader: Option<&mut blocked_on::KernelReader>,
    ) {
    }

    /// Called often while recording, and once more after the programs are detached
    /// (before the last drain): reads what its programs send per event (the process
    /// snapshots in `user` are fresh then).
    fn poll(&self, _user: &mut UserSymbols) {}

    /// `record --rotate`: a period was drained into its profile; what the family keeps
    /// in user space per event starts afresh (the kernel maps were emptied already).
    fn new_period(&self) {}

    /// Called once the programs are detached, before the last drain: adds to the maps
    /// what the programs left for user space.
    fn stopped(&mut self, _maps: &mut MapSet) -> Result<()> {
        Ok(())
    }

    /// Reads its kernel maps into `out.profile` (while recording and at the end).
    fn drain(&self, out: &mut Drain) -> Result<()>;

    /// Its part of the progress line (`3456 lock contentions`), once it has rows.
    fn progress(&self, live: &Profile) -> Option<String>;

    /// After the profile is written: what the user should know about the family's run.
    fn finish(&self, _profile: &Profile) {}
}

/// What a family module uses of the family interface, the shared helpers and the
/// profile model: `use crate::probes::prelude::*;`.
pub mod prelude {
    pub use super::{
        progress_of,
        shared::{
            attach_kprobe_pair, attach_loaded_raw_tracepoint, attach_raw_tracepoint,
            attach_tracepoint, explain, kprobes_unavailable, latency_from, load_raw_tracepoint,
            program, MapSet, StackResolver,
        },
        AttachContext, Drain, DrainMoment, Family, FamilyArgs, MapSize, PlanContext, Planned,
        Registration,
    };
    pub use crate::{
        kind::Kind,
        profile::{ProbeUse, Profile, Unavailable},
        symbolize::KernelSymbols,
    };
}

/// The progress part of a family with `rows`: `N what`, N the sum of `count` over them.
pub fn progress_of<T>(rows: &[T], count: impl Fn(&T) -> u64, what: &str) -> Option<String> {
    (!rows.is_empty()).then(|| format!("{} {what}", rows.iter().map(count).sum::<u64>()))
}
