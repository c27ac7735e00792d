//! `record`'s options of the request-span family: the built-in providers (`--rpc`) and
//! a user-defined span (`--span`), and the grammar of a span.

use clap::{Args, ValueEnum};

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
