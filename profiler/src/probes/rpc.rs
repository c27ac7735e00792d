//! Request / reply spans: `--rpc fuse|sunrpc|lustre` and `--span BEGIN,END`.
//! Hooks a kernel lacks are reported in one line each and the run goes on; a `--span`
//! that names something that does not exist is bad input (an error).

use anyhow::{bail, Context, Result};
use aya::{programs::KProbe, Ebpf, EbpfLoader};
use clap::{Args, ValueEnum};
use profiler_common::rpc::{
    names, RpcId, RpcKey, RpcStart, PROVIDER_FUSE, PROVIDER_LUSTRE, PROVIDER_SPAN, PROVIDER_SUNRPC,
    RPC_INFLIGHT_ENTRIES,
};

use crate::{
    btf::Btf,
    probes::prelude::*,
    profile::{RpcRow, WaitingRow},
    tracefs,
};

pub const FAMILY: Registration = Registration {
    name: "rpc",
    asked: |args| !args.rpc.rpc.is_empty() || args.rpc.span.is_some(),
    check: |args| RpcPlan::new(&args.rpc.rpc, args.rpc.span.clone()).map(|_| ()),
    plan: plan_family,
    maps: &[
        (names::RPC_STATS, MapSize::Stats),
        (names::RPC_OVERFLOW, MapSize::Overflow),
        (names::RPC_INFLIGHT, MapSize::Fixed(RPC_INFLIGHT_ENTRIES)),
    ],
    names: names::ALL,
};

/// Recorded when some asked-for pair is usable on this kernel.
fn plan_family(args: &FamilyArgs, ctx: &mut PlanContext) -> Result<Planned> {
    let plan = RpcPlan::new(&args.rpc.rpc, args.rpc.span.clone())?;
    if !plan.any() {
        return Ok(None);
    }
    let setup = resolve(&plan, ctx.symbols, ctx.unavailable)?;
    Ok(setup
        .any()
        .then(|| Box::new(RpcFamily { setup }) as Box<dyn Family>))
}

/// The request-span family of one recording.
struct RpcFamily {
    setup: RpcSetup,
}

impl Family for RpcFamily {
    fn configure<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        for (name, value) in &self.setup.globals {
            loader.override_global(name, value, true);
        }
    }

    fn attach(&mut self, ebpf: &mut Ebpf, _ctx: &mut AttachContext) -> Result<Vec<ProbeUse>> {
        attach(ebpf, &self.setup)
    }

    fn drain(&self, out: &mut Drain) -> Result<()> {
        out.profile.rpcs = drain(out.maps, out.stacks, &self.setup)?;
        let waiting = drain_in_flight(out.maps, out.stacks, &self.setup, out.moment)?;
        out.profile.waiting.extend(waiting);
        Ok(())
    }

    fn progress(&self, live: &Profile) -> Option<String> {
        progress_of(&live.rpcs, |row| row.latency.count, "requests")
    }
}

/// What `--rpc` and `--span` ask for.
#[derive(Debug, Default, Clone)]
pub struct RpcPlan {
    pub fuse: bool,
    pub sunrpc: bool,
    pub lustre: bool,
    pub span: Option<SpanSpec>,
}

impl RpcPlan {
    pub fn new(providers: &[RpcProvider], span: Option<SpanSpec>) -> Result<RpcPlan> {
        let plan = RpcPlan {
            fuse: providers.contains(&RpcProvider::Fuse),
            sunrpc: providers.contains(&RpcProvider::Sunrpc),
            lustre: providers.contains(&RpcProvider::Lustre),
            span,
        };
        match &plan.span {
            Some(SpanSpec {
                begin: SpanPoint::Tracepoint { .. },
                ..
            }) if plan.sunrpc => bail!(
                "--rpc sunrpc and a tracepoint --span share one program pair: record them in two runs"
            ),
            Some(SpanSpec {
                begin: SpanPoint::Kprobe { .. },
                ..
            }) if plan.lustre => bail!(
                "--rpc lustre and a kprobe --span share one program pair: record them in two runs"
            ),
            _ => {}
        }
        Ok(plan)
    }

    pub fn any(&self) -> bool {
        self.fuse || self.sunrpc || self.lustre || self.span.is_some()
    }
}

const SUNRPC_BEGIN: &str = "rpc_task_begin";
const SUNRPC_END: &str = "rpc_task_end";
const LUSTRE_SEND: &str = "ptl_send_rpc";
const LUSTRE_REPLY: &str = "after_reply";

/// The generic tracepoint pair: provider, span name, (group, event) of begin and end.
type TpPair = (u32, String, (String, String), (String, String));

/// The kernel side of a resolved plan: load-time globals, and which pairs to attach.
#[derive(Debug, Default)]
pub struct RpcSetup {
    pub globals: Vec<(&'static str, u32)>,
    fuse: bool,
    /// (provider, name, begin group:event, end group:event) for the tracepoint pair.
    tp_pair: Option<TpPair>,
    /// (provider, name, begin symbol, end symbol) for the kprobe pair.
    kp_pair: Option<(u32, String, String, String)>,
}

impl RpcSetup {
    /// True when some request pair will be attached (its maps need their full size).
    pub fn any(&self) -> bool {
        self.fuse || self.tp_pair.is_some() || self.kp_pair.is_some()
    }
}

fn field(group: &str, event: &str, name: &str) -> Result<tracefs::Field> {
    tracefs::event_fields(group, event)?
        .into_iter()
        .find(|field| field.name == name)
        .with_context(|| format!("{group}:{event} has no field {name} on this kernel"))
}

fn key_field(group: &str, event: &str, name: &str) -> Result<tracefs::Field> {
    let found = field(group, event, name)?;
    if found.size != 4 && found.size != 8 {
        bail!(
            "--span: {group}:{event} field {name} is {} bytes; a key must be a 4- or 8-byte integer",
            found.size
        );
    }
    Ok(found)
}

/// Checks the hooks, reports the missing ones in `unavailable` (one line each on
/// stderr), and computes what to load.
pub fn resolve(
    plan: &RpcPlan,
    symbols: &KernelSymbols,
    unavailable: &mut Vec<Unavailable>,
) -> Result<RpcSetup> {
    let mut setup = RpcSetup::default();
    let mut missing = |what: &str, reason: String| {
        eprintln!("lockpath: --rpc {what}: not recorded: {reason}; the rest of the run goes on");
        unavailable.push(Unavailable {
            family: FAMILY.name.into(),
            what: what.into(),
            reason,
        });
    };
    if plan.fuse {
        resolve_fuse(&mut setup, &mut missing);
    }
    if plan.sunrpc {
        resolve_sunrpc(&mut setup, &mut missing)?;
    }
    if plan.lustre {
        resolve_lustre(&mut setup, symbols, &mut missing);
    }
    if let Some(span) = &plan.span {
        resolve_span(&mut setup, span, symbols, &mut missing)?;
    }
    Ok(setup)
}

/// What an unavailable provider says: its name and why (one line, and the profile's
/// `unavailable` list).
type Missing<'a> = dyn FnMut(&str, String) + 'a;

/// FUSE requests: the fuse tracepoints, and the globals that read a request's opcode.
fn resolve_fuse(setup: &mut RpcSetup, missing: &mut Missing) {
    if !(tracefs::event_exists("fuse", "fuse_request_send")
        && tracefs::event_exists("fuse", "fuse_request_end"))
    {
        missing(
            "fuse",
            "this kernel has no fuse:fuse_request_send/fuse_request_end tracepoints \
             (FUSE not built or module not loaded: modprobe fuse)"
                .into(),
        );
        return;
    }
    match fuse_globals() {
        Ok(globals) => {
            setup.globals.extend(globals);
            setup.fuse = true;
        }
        Err(err) => missing("fuse", format!("{err:#}")),
    }
}

/// SUNRPC tasks (NFS): a pair of sunrpc tracepoints keyed by task and client id.
fn resolve_sunrpc(setup: &mut RpcSetup, missing: &mut Missing) -> Result<()> {
    if !(tracefs::event_exists("sunrpc", SUNRPC_BEGIN)
        && tracefs::event_exists("sunrpc", SUNRPC_END))
    {
        missing(
            "sunrpc",
            format!(
                "this kernel has no sunrpc:{SUNRPC_BEGIN}/{SUNRPC_END} tracepoints \
                 (no SUNRPC/NFS client: CONFIG_SUNRPC off or module sunrpc not loaded)"
            ),
        );
        return Ok(());
    }
    set_tp_pair(
        setup,
        PROVIDER_SUNRPC,
        "sunrpc",
        ("sunrpc", SUNRPC_BEGIN, "task_id", Some("client_id")),
        ("sunrpc", SUNRPC_END, "task_id", Some("client_id")),
    )
}

/// Lustre RPCs: kprobes on ptlrpc's send and reply functions.
fn resolve_lustre(setup: &mut RpcSetup, symbols: &KernelSymbols, missing: &mut Missing) {
    let absent: Vec<&str> = [LUSTRE_SEND, LUSTRE_REPLY]
        .into_iter()
        .filter(|symbol| symbols.find_function(symbol, None).is_none())
        .collect();
    if !absent.is_empty() {
        missing(
            "lustre",
            format!(
                "{} not in /proc/kallsyms (the Lustre client module ptlrpc is not loaded)",
                absent.join(" and ")
            ),
        );
    } else if let Some(why) = kprobes_unavailable() {
        missing("lustre", format!("its hooks are kprobes and {why}"));
    } else {
        setup.globals.extend([
            (names::SPAN_KP_PROVIDER, PROVIDER_LUSTRE),
            (names::SPAN_KP_BEGIN_ARG, 0),
            (names::SPAN_KP_END_ARG, 0),
        ]);
        setup.kp_pair = Some((
            PROVIDER_LUSTRE,
            "lustre".into(),
            LUSTRE_SEND.into(),
            LUSTRE_REPLY.into(),
        ));
    }
}

/// `--span BEGIN,END`: two tracepoints, or two kprobes, of the user's choosing.
fn resolve_span(
    setup: &mut RpcSetup,
    span: &SpanSpec,
    symbols: &KernelSymbols,
    missing: &mut Missing,
) -> Result<()> {
    match (&span.begin, &span.end) {
        (
            SpanPoint::Tracepoint {
                group: begin_group,
                event: begin_event,
                field: begin_field,
            },
            SpanPoint::Tracepoint {
                group: end_group,
                event: end_event,
                field: end_field,
            },
        ) => {
            for (group, event) in [(begin_group, begin_event), (end_group, end_event)] {
                if !tracefs::event_exists(group, event) {
                    bail!(
                        "--span: this kernel has no tracepoint {group}:{event} (see {}/events)",
                        "/sys/kernel/tracing"
                    );
                }
            }
            set_tp_pair(
                setup,
                PROVIDER_SPAN,
                &span.text,
                (begin_group, begin_event, begin_field, None),
                (end_group, end_event, end_field, None),
            )
        }
        (
            SpanPoint::Kprobe {
                symbol: begin,
                arg: begin_arg,
            },
            SpanPoint::Kprobe {
                symbol: end,
                arg: end_arg,
            },
        ) => {
            for symbol in [begin, end] {
                crate::symbolize::kallsyms::check_kernel_function(symbols, symbol)?;
            }
            if let Some(why) = kprobes_unavailable() {
                missing(&span.text, format!("its hooks are kprobes and {why}"));
            } else {
                setup.globals.extend([
                    (names::SPAN_KP_PROVIDER, PROVIDER_SPAN),
                    (names::SPAN_KP_BEGIN_ARG, *begin_arg),
                    (names::SPAN_KP_END_ARG, *end_arg),
                ]);
                setup.kp_pair =
                    Some((PROVIDER_SPAN, span.text.clone(), begin.clone(), end.clone()));
            }
            Ok(())
        }
        _ => bail!(
            "--span {}: BEGIN and END must be of the same kind",
            span.text
        ),
    }
}

type TpSide<'a> = (&'a str, &'a str, &'a str, Option<&'a str>);

fn set_tp_pair(
    setup: &mut RpcSetup,
    provider: u32,
    name: &str,
    begin: TpSide,
    end: TpSide,
) -> Result<()> {
    let begin_key = key_field(begin.0, begin.1, begin.2)?;
    let end_key = key_field(end.0, end.1, end.2)?;
    let conn = |side: TpSide| -> Result<(u32, u32)> {
        match side.3 {
            Some(name) => {
                let found = key_field(side.0, side.1, name)?;
                Ok((found.offset, found.size))
            }
            None => Ok((0, 0)),
        }
    };
    let (begin_conn, begin_conn_size) = conn(begin)?;
    let (end_conn, end_conn_size) = conn(end)?;
    setup.globals.extend([
        (names::SPAN_TP_PROVIDER, provider),
        (names::SPAN_TP_BEGIN_KEY, begin_key.offset),
        (names::SPAN_TP_BEGIN_KEY_SIZE, begin_key.size),
        (names::SPAN_TP_BEGIN_CONN, begin_conn),
        (names::SPAN_TP_BEGIN_CONN_SIZE, begin_conn_size),
        (names::SPAN_TP_END_KEY, end_key.offset),
        (names::SPAN_TP_END_KEY_SIZE, end_key.size),
        (names::SPAN_TP_END_CONN, end_conn),
        (names::SPAN_TP_END_CONN_SIZE, end_conn_size),
    ]);
    setup.tp_pair = Some((
        provider,
        name.to_string(),
        (begin.0.to_string(), begin.1.to_string()),
        (end.0.to_string(), end.1.to_string()),
    ));
    Ok(())
}

fn attach_kprobe(ebpf: &mut Ebpf, name: &str, symbol: &str) -> Result<()> {
    let kprobe: &mut KProbe = program(ebpf, name)?;
    kprobe
        .load()
        .map_err(|err| crate::probes::shared::load_error(name, err))?;
    kprobe
        .attach(symbol, 0)
        .with_context(|| format!("cannot attach a kprobe to {symbol}"))?;
    Ok(())
}

/// `struct fuse_req` offsets for the FUSE raw tracepoints, from the BTF of vmlinux (FUSE
/// built in) or of the fuse module (`/sys/kernel/btf/fuse`, split on vmlinux's).
fn fuse_globals() -> Result<Vec<(&'static str, u32)>> {
    let btf = Btf::from_sys_fs_with_module("fuse")
        .context("its requests are read at offsets from kernel BTF, and it cannot be read")?;
    fuse_globals_from(&btf)
}

fn fuse_globals_from(btf: &Btf) -> Result<Vec<(&'static str, u32)>> {
    for event in ["fuse_request_send", "fuse_request_end"] {
        let index = btf.raw_tracepoint_arg(event, "fuse_req")?;
        if index != 0 {
            bail!("raw tracepoint {event}: struct fuse_req is argument {index}, not the first");
        }
    }
    Ok(vec![
        (
            names::FUSE_REQ_OPCODE,
            btf.member_offset("fuse_req", "in.h.opcode")?,
        ),
        (
            names::FUSE_REQ_PID,
            btf.member_offset("fuse_req", "in.h.pid")?,
        ),
        (
            names::FUSE_REQ_FLAGS,
            btf.member_offset("fuse_req", "flags")?,
        ),
        (
            names::FUSE_FR_BACKGROUND,
            btf.enum_value("FR_BACKGROUND")
                .context("kernel BTF has no FR_BACKGROUND (enum fuse_req_flag)")?,
        ),
    ])
}

/// Attaches what `resolve` found usable.
pub fn attach(ebpf: &mut Ebpf, setup: &RpcSetup) -> Result<Vec<ProbeUse>> {
    let mut used = Vec::new();
    if setup.fuse {
        // The end first: no request is started that could not be closed.
        for (program, event) in [
            (names::RPC_FUSE_END, "fuse_request_end"),
            (names::RPC_FUSE_SEND, "fuse_request_send"),
        ] {
            attach_raw_tracepoint(ebpf, program, event)?;
        }
        used.push(ProbeUse {
            family: FAMILY.name.into(),
            method: "fuse: raw_tracepoint fuse:fuse_request_send/fuse_request_end, \
                     key = struct fuse_req pointer"
                .into(),
        });
    }
    if let Some((_, name, begin, end)) = &setup.tp_pair {
        attach_tracepoint(ebpf, names::RPC_SPAN_BEGIN_TP, &begin.0, &begin.1)?;
        attach_tracepoint(ebpf, names::RPC_SPAN_END_TP, &end.0, &end.1)?;
        used.push(ProbeUse {
            family: FAMILY.name.into(),
            method: format!(
                "{name}: tracepoint {}:{} / {}:{}",
                begin.0, begin.1, end.0, end.1
            ),
        });
    }
    if let Some((_, name, begin, end)) = &setup.kp_pair {
        attach_kprobe(ebpf, names::RPC_SPAN_BEGIN_KP, begin)?;
        attach_kprobe(ebpf, names::RPC_SPAN_END_KP, end)?;
        used.push(ProbeUse {
            family: FAMILY.name.into(),
            method: format!("{name}: kprobe {begin} / {end}, key = request pointer argument"),
        });
    }
    Ok(used)
}

/// The requests still in flight at the drain (`RPC_INFLIGHT`), as waits in progress of
/// the threads that sent them (the FUSE server is named after the drain, from kernel
/// memory). Their time enters the latency rows when they end.
fn drain_in_flight(
    maps: &MapSet,
    stacks: &mut StackResolver,
    setup: &RpcSetup,
    moment: DrainMoment,
) -> Result<Vec<WaitingRow>> {
    use super::shared::inprogress::drain_listed;
    let start_ns = |start: &RpcStart| start.start_ns;
    let row = |id: RpcId, start: RpcStart, age_ns| {
        let (provider, op_name) = provider_and_op(id.provider, start.op, setup);
        Some(WaitingRow {
            kind: "rpc".into(),
            pid: start.tgid,
            tid: if start.tid != 0 {
                start.tid
            } else {
                start.tgid
            },
            since_ns: start.start_ns,
            age_ns,
            counted_ns: 0,
            class: format!("{} {op_name}", provider.to_uppercase()),
            stack: stacks.kernel_stack(start.start_kstack),
            request: Some(id.id),
            ..Default::default()
        })
    };
    drain_listed(maps, names::RPC_INFLIGHT, moment, start_ns, row)
}

/// A provider's name and the name of an operation of it.
fn provider_and_op(provider: u32, op: u32, setup: &RpcSetup) -> (String, String) {
    let span_name = |provider: u32| -> String {
        [
            &setup.tp_pair.as_ref().map(|pair| (pair.0, pair.1.clone())),
            &setup.kp_pair.as_ref().map(|pair| (pair.0, pair.1.clone())),
        ]
        .into_iter()
        .flatten()
        .find(|(id, _)| *id == provider)
        .map(|(_, name)| name.clone())
        .unwrap_or_else(|| "span".into())
    };
    match provider {
        PROVIDER_FUSE => ("fuse".to_string(), fuse_opcode_name(op)),
        PROVIDER_SUNRPC => ("sunrpc".to_string(), "rpc_task".to_string()),
        PROVIDER_LUSTRE => ("lustre".to_string(), "ptlrpc_request".to_string()),
        other => ("span".to_string(), span_name(other)),
    }
}

/// Reads the aggregate out of the kernel.
pub fn drain(maps: &MapSet, stacks: &mut StackResolver, setup: &RpcSetup) -> Result<Vec<RpcRow>> {
    let row = |key: RpcKey, latency| {
        let (provider, op_name) = provider_and_op(key.provider, key.op, setup);
        Some(RpcRow {
            provider,
            op: key.op,
            op_name,
            pid: key.tgid,
            start_stack: stacks.kernel_stack(key.start_kstack),
            end_stack: stacks.kernel_stack(key.end_kstack),
            latency,
        })
    };
    maps.latency_rows(names::RPC_STATS, names::RPC_OVERFLOW, row)
}

/// FUSE opcode names (include/uapi/linux/fuse.h), as the tracepoint prints them
/// without the `FUSE_` prefix.
pub fn fuse_opcode_name(op: u32) -> String {
    const NAMES: &[(u32, &str)] = &[
        (1, "LOOKUP"),
        (2, "FORGET"),
        (3, "GETATTR"),
        (4, "SETATTR"),
        (5, "READLINK"),
        (6, "SYMLINK"),
        (8, "MKNOD"),
        (9, "MKDIR"),
        (10, "UNLINK"),
        (11, "RMDIR"),
        (12, "RENAME"),
        (13, "LINK"),
        (14, "OPEN"),
        (15, "READ"),
        (16, "WRITE"),
        (17, "STATFS"),
        (18, "RELEASE"),
        (20, "FSYNC"),
        (21, "SETXATTR"),
        (22, "GETXATTR"),
        (23, "LISTXATTR"),
        (24, "REMOVEXATTR"),
        (25, "FLUSH"),
        (26, "INIT"),
        (27, "OPENDIR"),
        (28, "READDIR"),
        (29, "RELEASEDIR"),
        (30, "FSYNCDIR"),
        (31, "GETLK"),
        (32, "SETLK"),
        (33, "SETLKW"),
        (34, "ACCESS"),
        (35, "CREATE"),
        (36, "INTERRUPT"),
        (37, "BMAP"),
        (38, "DESTROY"),
        (39, "IOCTL"),
        (40, "POLL"),
        (41, "NOTIFY_REPLY"),
        (42, "BATCH_FORGET"),
        (43, "FALLOCATE"),
        (44, "READDIRPLUS"),
        (45, "RENAME2"),
        (46, "LSEEK"),
        (47, "COPY_FILE_RANGE"),
        (48, "SETUPMAPPING"),
        (49, "REMOVEMAPPING"),
        (50, "SYNCFS"),
        (51, "TMPFILE"),
        (52, "STATX"),
        (4096, "CUSE_INIT"),
    ];
    NAMES
        .iter()
        .find(|(number, _)| *number == op)
        .map(|(_, name)| name.to_string())
        .unwrap_or_else(|| format!("op{op}"))
}

// `record`'s options of the request-span family: the built-in providers (`--rpc`) and a
// user-defined span (`--span`), and the grammar of a span.

#[derive(Debug, Args)]
pub struct RpcArgs {
    /// Record request/reply latency of a provider (repeatable): fuse (tracepoints),
    /// sunrpc (tracepoints), lustre (kprobes on ptl_send_rpc / after_reply).
    #[arg(long = "rpc", value_enum, value_name = "PROVIDER")]
    pub rpc: Vec<RpcProvider>,

    /// Record a user-defined request span BEGIN,END; each side is tp:GROUP:EVENT:FIELD
    /// or kprobe:SYMBOL[:ARG], the field or argument being the request key.
    #[arg(long, value_name = "BEGIN,END", value_parser = SpanSpec::parse)]
    pub span: Option<SpanSpec>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RpcProvider {
    /// FUSE requests: fuse:fuse_request_send -> fuse:fuse_request_end, per opcode.
    Fuse,
    /// NFS / SUNRPC tasks: sunrpc:rpc_task_begin -> sunrpc:rpc_task_end.
    Sunrpc,
    /// Lustre RPCs: kprobes ptl_send_rpc -> after_reply (request pointer as key).
    Lustre,
}

/// One side of a `--span`.
#[derive(Debug, Clone, PartialEq)]
pub enum SpanPoint {
    /// `tp:GROUP:EVENT:FIELD`: the key is FIELD of the record.
    Tracepoint {
        group: String,
        event: String,
        field: String,
    },
    /// `kprobe:SYMBOL[:ARG]`: the key is argument ARG (0 = first) of SYMBOL.
    Kprobe { symbol: String, arg: u32 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct SpanSpec {
    pub text: String,
    pub begin: SpanPoint,
    pub end: SpanPoint,
}

impl SpanSpec {
    pub fn parse(text: &str) -> Result<SpanSpec, String> {
        let (begin, end) = text.split_once(',').ok_or_else(|| {
            format!("--span {text:?}: expected BEGIN,END (e.g. kprobe:ptl_send_rpc:0,kprobe:after_reply:0)")
        })?;
        let spec = SpanSpec {
            text: text.to_string(),
            begin: parse_point(begin)?,
            end: parse_point(end)?,
        };
        if std::mem::discriminant(&spec.begin) != std::mem::discriminant(&spec.end) {
            return Err(format!(
                "--span {text:?}: BEGIN and END must both be tracepoints (tp:) or both kprobes (kprobe:)"
            ));
        }
        Ok(spec)
    }
}

fn parse_point(text: &str) -> Result<SpanPoint, String> {
    let parts: Vec<&str> = text.split(':').collect();
    match parts.as_slice() {
        ["tp" | "tracepoint", group, event, field]
            if !group.is_empty() && !event.is_empty() && !field.is_empty() =>
        {
            Ok(SpanPoint::Tracepoint {
                group: group.to_string(),
                event: event.to_string(),
                field: field.to_string(),
            })
        }
        ["kprobe", symbol] if !symbol.is_empty() => Ok(SpanPoint::Kprobe {
            symbol: symbol.to_string(),
            arg: 0,
        }),
        ["kprobe", symbol, arg] if !symbol.is_empty() => {
            let arg: u32 = arg
                .parse()
                .ok()
                .filter(|&arg| arg < 6)
                .ok_or_else(|| format!("{text:?}: the argument index must be 0..=5"))?;
            Ok(SpanPoint::Kprobe {
                symbol: symbol.to_string(),
                arg,
            })
        }
        _ => Err(format!(
            "{text:?}: expected tp:GROUP:EVENT:FIELD or kprobe:SYMBOL[:ARG]"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuse_names() {
        assert_eq!(fuse_opcode_name(35), "CREATE");
        assert_eq!(fuse_opcode_name(16), "WRITE");
        assert_eq!(fuse_opcode_name(999), "op999");
    }

    #[test]
    fn conflicting_pairs_are_refused() {
        let span = SpanSpec::parse("kprobe:a,kprobe:b").ok();
        assert!(RpcPlan::new(&[RpcProvider::Lustre], span).is_err());
        let span = SpanSpec::parse("kprobe:a,kprobe:b").ok();
        assert!(RpcPlan::new(&[RpcProvider::Sunrpc], span).is_ok());
    }

    #[test]
    fn this_kernel_s_fuse_layout() {
        let Ok(btf) = Btf::from_sys_fs_with_module("fuse") else {
            eprintln!("SKIP: no kernel BTF here");
            return;
        };
        if btf.raw_tracepoint_args("fuse_request_send").is_err() {
            eprintln!("SKIP: no FUSE tracepoints in this kernel");
            return;
        }
        let globals = fuse_globals_from(&btf).expect("fuse layout");
        let value = |name: &str| {
            globals
                .iter()
                .find(|(global, _)| *global == name)
                .map(|(_, value)| *value)
                .expect(name)
        };
        // struct fuse_in_header { len, opcode, unique, nodeid, uid, gid, pid, ... }.
        assert_eq!(
            value(names::FUSE_REQ_PID),
            value(names::FUSE_REQ_OPCODE) + 28
        );
        assert_eq!(value(names::FUSE_FR_BACKGROUND), 2);
    }

    #[test]
    fn span_specs_parse() {
        let spec = SpanSpec::parse("kprobe:ptl_send_rpc,kprobe:after_reply:0").expect("parse");
        assert_eq!(
            spec.begin,
            SpanPoint::Kprobe {
                symbol: "ptl_send_rpc".into(),
                arg: 0
            }
        );
        let spec =
            SpanSpec::parse("tp:fuse:fuse_request_send:unique,tp:fuse:fuse_request_end:unique")
                .expect("parse");
        assert!(matches!(spec.end, SpanPoint::Tracepoint { ref field, .. } if field == "unique"));
        assert!(SpanSpec::parse("kprobe:a").is_err(), "no END");
        assert!(SpanSpec::parse("kprobe:a,tp:b:c:d").is_err(), "mixed kinds");
        assert!(
            SpanSpec::parse("kprobe:a:9,kprobe:b").is_err(),
            "argument index"
        );
        assert!(SpanSpec::parse("uprobe:a,uprobe:b").is_err());
    }
}
