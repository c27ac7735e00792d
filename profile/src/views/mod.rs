//! One view per kind: everything the read side knows about a kind sits in its module
//! (lock.rs, rpc.rs, func.rs, cpu.rs, offcpu.rs, io.rs, hold.rs, offwake.rs, file.rs): its name
//! and meaning, whether a profile has it, its stack samples and their value types, the
//! labels of its flamegraphs, the breakdowns `diff` compares, its Prometheus series and
//! its section of the HTML report. The exporters take a kind's view from [`VIEWS`] (or
//! loop over it) instead of matching on `Kind`.
//!
//! A new kind is a module here, named after the kind, with its constants
//! (`pub(super) const INFO: ViewInfo`) and a type that implements [`View`], and its one
//! line in the `kinds!` table below, which makes the module, its variant of [`Kind`]
//! and its entry in [`VIEWS`], and gives the view its kind, name and constants
//! ([`Info`]).

use anyhow::Result;
use inferno::flamegraph::color::Palette;

use crate::{
    export::{
        formats::{html::kind_section, report::TextReport},
        operations::diff::Breakdown,
    },
    profile::{Latency, Profile},
};

/// Each line, `module: Variant => View`, declares the view's module (whose name is the
/// kind's), the variant of `Kind` and the view's place in `VIEWS`, in one order: that of
/// the sections of the text and HTML reports; and gives the view its [`Info`].
macro_rules! kinds {
    ($($module:ident: $variant:ident => $view:ident,)+) => {
        $(pub mod $module;)+

        /// What a flamegraph, export or diff weighs: the key of a view. Each kind's view
        /// (`views/`, one module per kind) says what it means and how it is shown.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Kind {
            $($variant,)+
        }

        impl Kind {
            /// Every kind, in the order of [`VIEWS`].
            pub const ALL: [Kind; [$(Kind::$variant,)+].len()] = [$(Kind::$variant,)+];
        }

        /// Every kind's view, in the order of `Kind`.
        pub static VIEWS: [&dyn View; Kind::ALL.len()] = [$(&$module::$view,)+];

        $(
            impl Info for $module::$view {
                fn kind(&self) -> Kind {
                    Kind::$variant
                }

                fn name(&self) -> &'static str {
                    stringify!($module)
                }

                fn info(&self) -> &'static ViewInfo {
                    &$module::INFO
                }
            }
        )+
    };
}

kinds! {
    lock: Lock => LockView,
    rpc: Rpc => RpcView,
    func: Func => FuncView,
    cpu: Cpu => CpuView,
    offcpu: Offcpu => OffcpuView,
    io: Io => IoView,
    hold: Hold => HoldView,
    offwake: Offwake => OffwakeView,
    file: File => FileView,
}

/// Takes one sample of a view: its frames from the root to the leaf and one value per
/// entry of [`View::sample_types`]. `folded::samples` merges samples of the same path.
pub type AddSample<'a> = dyn FnMut(Vec<String>, &[u64]) + 'a;

/// One row's part of a cause of time (`View::causes`).
#[derive(Debug, Clone, PartialEq)]
pub struct CausePart {
    /// Names the same cause on every host: names, never pids or addresses.
    pub key: String,
    /// Its time in nanoseconds.
    pub ns: f64,
    /// The events that took that time (waits, requests, calls, samples).
    pub events: u64,
    /// The longest of them, in nanoseconds: the row's sum of squared durations is at
    /// most `ns * longest_ns` (how uncertain a rate of few long events is).
    pub longest_ns: f64,
    pub pid: u32,
    pub stack: Option<u32>,
}

impl CausePart {
    /// The part of a row of `events` events that took `ns` nanoseconds, the longest of
    /// them `longest_ns`.
    pub fn timed(
        key: String,
        pid: u32,
        stack: Option<u32>,
        events: u64,
        ns: u64,
        longest_ns: u64,
    ) -> CausePart {
        CausePart {
            key,
            ns: ns as f64,
            events,
            longest_ns: longest_ns as f64,
            pid,
            stack,
        }
    }

    /// The part of a row of latencies (requests, calls).
    pub fn of_latency(key: String, pid: u32, stack: Option<u32>, latency: &Latency) -> CausePart {
        let Latency {
            count,
            total_ns,
            max_ns,
            ..
        } = *latency;
        CausePart::timed(key, pid, stack, count, total_ns, max_ns)
    }
}

/// Takes the causes of time of a kind's rows (`View::causes`).
pub type AddCause<'a> = dyn FnMut(CausePart) + 'a;

/// How a flamegraph is labelled: its title, the unit of its counts, and the factor
/// inferno applies to the values it is given.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlameLabels {
    pub title: &'static str,
    pub count_name: &'static str,
    pub factor: f64,
}

impl FlameLabels {
    /// Labels of a flamegraph (`per_second`: a differential one, whose values are per
    /// second of run). Of a kind that weighs time, the values (microseconds; nanoseconds
    /// per second) are shown in ms (ms per second); other kinds count samples.
    pub fn new(title: &'static str, weighs_time: bool, per_second: bool) -> FlameLabels {
        let (count_name, factor) = match (weighs_time, per_second) {
            (true, false) => ("ms", 0.001),
            (true, true) => ("ms/s", 1e-6),
            (false, false) => ("samples", 1.0),
            (false, true) => ("samples/s", 1.0),
        };
        FlameLabels {
            title,
            count_name,
            factor,
        }
    }
}

/// What a kind is, as constants (but its key and name, which are in the `kinds!` table):
/// its meaning, the families whose recording makes a profile have it, the value types of
/// its samples, and the titles and column names it is shown under.
#[derive(Debug)]
pub struct ViewInfo {
    /// What the kind weighs, in one sentence (the command line's help).
    pub about: &'static str,
    /// The recorded families that make a profile have this kind, even without rows.
    pub families: &'static [&'static str],
    /// What the values of the kind's samples are, pprof style: (type, unit).
    pub sample_types: &'static [(&'static str, &'static str)],
    /// The title of the kind's flamegraph.
    pub flame_title: &'static str,
    /// The title of its differential flamegraph (NEW against BASE).
    pub diff_flame_title: &'static str,
    /// Names of the `diff` text's value and event columns (per second of run).
    pub diff_columns: (&'static str, &'static str),
    /// The headings of the kind's section of the HTML report.
    pub report: ReportHeadings,
}

/// The headings of a kind's section of the HTML report (`html::kind_section`).
#[derive(Debug)]
pub struct ReportHeadings {
    /// The section's title.
    pub title: &'static str,
    /// A heading above the flamegraph (HTML), when it has one.
    pub flame_heading: Option<&'static str>,
    /// The title of the flamegraph's frame.
    pub flame_title: &'static str,
}

/// What the `kinds!` table gives each view.
pub trait Info {
    /// The kind the view shows (its key in [`VIEWS`]).
    fn kind(&self) -> Kind;

    /// The kind's name on the command line and in exports: that of its module.
    fn name(&self) -> &'static str;

    /// The kind's other constants: its module's `INFO`.
    fn info(&self) -> &'static ViewInfo;
}

/// What the read side knows about one kind. What [`Info`] gives needs no code.
pub trait View: Info + Sync {
    fn about(&self) -> &'static str {
        self.info().about
    }

    fn families(&self) -> &'static [&'static str] {
        self.info().families
    }

    fn sample_types(&self) -> &'static [(&'static str, &'static str)] {
        self.info().sample_types
    }

    /// Whether the profile has rows of this kind.
    fn has_rows(&self, profile: &Profile) -> bool;

    /// Whether a profile has data of this kind: a family of it recorded, or rows present.
    fn present_in(&self, profile: &Profile) -> bool {
        self.families()
            .iter()
            .any(|family| profile.recorded(family))
            || self.has_rows(profile)
    }

    /// Whether the kind weighs time in nanoseconds (waits, latencies, holds); `cpu`
    /// counts samples instead. Exporters pick units and divisors by it.
    fn weighs_time(&self) -> bool {
        true
    }

    /// Which sample value the flamegraph width is, and the divisor that turns it into
    /// the folded unit (time in nanoseconds is folded in microseconds).
    fn flame_value(&self) -> (usize, u64) {
        if self.weighs_time() {
            (1, 1_000)
        } else {
            (0, 1)
        }
    }

    /// Hands every stack sample of the kind to `add`, frames from the root (cleaned
    /// with `folded::clean`), unmerged and in any order.
    fn samples(&self, profile: &Profile, add: &mut AddSample);

    /// The kind's folded lines `(root;...;leaf, value)`, unsorted, zero lines left out,
    /// when the view builds them faster than from [`View::samples`]; `None` otherwise.
    fn folded_lines(&self, _profile: &Profile) -> Option<Vec<(String, u64)>> {
        None
    }

    /// Title, count unit and factor of the kind's flamegraph (values of `folded::lines`).
    fn flame_labels(&self) -> FlameLabels {
        FlameLabels::new(self.info().flame_title, self.weighs_time(), false)
    }

    /// Same for the differential flamegraph, whose values are the flame value
    /// (undivided) per second of run time.
    fn diff_flame_labels(&self) -> FlameLabels {
        FlameLabels::new(self.info().diff_flame_title, self.weighs_time(), true)
    }

    /// A line under the flamegraph's title, when the kind has something to say.
    fn flame_subtitle(&self, _profile: &Profile) -> Option<String> {
        None
    }

    /// The flamegraph's palette, when not inferno's default.
    fn flame_palette(&self) -> Option<Palette> {
        None
    }

    /// The ways `diff` splits the kind's totals, each a table of its own. Keys stay
    /// comparable across runs: names, never pids.
    fn breakdowns(&self, profile: &Profile, out: &mut Vec<Breakdown>);

    /// The causes of time the kind's rows weigh, for `outliers`: one part per row.
    /// Kinds whose time another kind counts already (holds, wakers, files) give none.
    fn causes(&self, _profile: &Profile, _add: &mut AddCause) {}

    /// Names of the `diff` text's value and event columns (per second of run).
    fn diff_columns(&self) -> (&'static str, &'static str) {
        self.info().diff_columns
    }

    /// Appends the kind's Prometheus series (text exposition format) to `out`. Kinds
    /// whose rows are only in the reports, JSON and flamegraphs give none.
    fn metrics(&self, _profile: &Profile, _out: &mut String) {}

    /// The kind's section of the text report (`lockpath report`) or of the end-of-record
    /// summary, as `text` says: a blank line, a heading and its tables
    /// (`TextReport::section`); empty when the profile has nothing of it to show
    /// (`TextReport::shows`). The report is every view's section, in the order of [`VIEWS`].
    fn text_section(&self, _profile: &Profile, _text: &TextReport) -> String {
        String::new()
    }

    /// The kind's tables in its section of the HTML report.
    fn html_tables(&self, profile: &Profile, out: &mut String);

    /// The kind's section of the HTML report: its headings, its tables and its
    /// flamegraph.
    fn html_section(&self, profile: &Profile) -> Result<String> {
        kind_section(profile, self.kind(), |out| self.html_tables(profile, out))
    }
}

impl Kind {
    /// The kind's view.
    pub fn view(self) -> &'static dyn View {
        // Every kind has its view: the table is in the order of the enum (tested below).
        VIEWS[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.view().name()
    }

    pub fn about(self) -> &'static str {
        self.view().about()
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        VIEWS
            .iter()
            .find(|view| view.name() == name)
            .map(|view| view.kind())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_views_are_in_the_order_of_the_enum() {
        assert_eq!(VIEWS.len(), Kind::ALL.len());
        for (index, kind) in Kind::ALL.into_iter().enumerate() {
            assert_eq!(VIEWS[index].kind(), kind);
            assert_eq!(kind.view().kind(), kind);
        }
    }
}
