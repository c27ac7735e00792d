//! Kernel symbols from `/proc/kallsyms`: functions for stacks (with their module,
//! `after_reply [ptlrpc]`), and data symbols for naming static locks.

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::profile::Frame;

#[derive(Debug, Clone, PartialEq)]
pub struct Symbol {
    pub addr: u64,
    pub name: String,
    pub module: Option<String>,
    /// Type letter from kallsyms (`T`, `t`, `D`, `b`, ...).
    pub kind: char,
}

/// Symbols that mark the end of a text region rather than a function.
fn is_region_end(name: &str) -> bool {
    matches!(
        name,
        "_etext"
            | "_einittext"
            | "__entry_text_end"
            | "__irqentry_text_end"
            | "__softirqentry_text_end"
    ) || name.starts_with("__end_")
}

/// The fields of one line of kallsyms text (`ffffffffc0a01000 t ldiskfs_bread\t[ldiskfs]`).
pub struct Fields<'a> {
    pub addr: u64,
    /// The type letter (`T`, `t`, `D`, `b`, ...).
    pub kind: &'a str,
    pub name: &'a str,
    /// `[module]`, brackets included, for a module's symbol.
    pub module: Option<&'a str>,
}

impl<'a> Fields<'a> {
    /// `None` for a line of fewer than three fields or whose address is not hex.
    pub fn parse(line: &'a str) -> Option<Self> {
        let mut parts = line.split_whitespace();
        let (addr, kind, name) = (parts.next()?, parts.next()?, parts.next()?);
        Some(Fields {
            addr: u64::from_str_radix(addr, 16).ok()?,
            kind,
            name,
            module: parts.next(),
        })
    }
}

/// No kernel function is this large; a larger offset means the address is elsewhere.
const MAX_FUNCTION_SIZE: u64 = 1 << 20;

/// Sorted kernel symbols with address lookup.
#[derive(Debug, Default)]
pub struct KernelSymbols {
    /// Text (function) symbols, sorted by address.
    text: Vec<Symbol>,
    /// Data and bss symbols of the kernel image, sorted by address.
    data: Vec<Symbol>,
    /// End of the last data/bss symbol range we can trust (`_end` or `__bss_stop`).
    data_end: u64,
    /// Module name -> end of its memory (`/proc/modules`: base + size). An address past
    /// it is not the module's, even when the module's last symbol is the closest below
    /// (BPF trampolines and programs live in the same address range).
    module_ends: std::collections::HashMap<String, u64>,
    /// Start of the kernel image (`_text`, `_stext`) and end of its text (`_etext`); 0 when
    /// kallsyms does not say.
    image_start: u64,
    text_end: u64,
    /// Lowest module function: modules lie above the image (0 when none is listed).
    modules_start: u64,
}

/// Largest kernel image (x86-64's `KERNEL_IMAGE_SIZE` with KASLR): past `_text` plus
/// this, an address is a module's or elsewhere.
const MAX_IMAGE_SIZE: u64 = 1 << 30;

impl KernelSymbols {
    pub fn load() -> Result<Self> {
        let mut symbols = Self::load_from(Path::new("/proc/kallsyms"))?;
        if let Ok(modules) = std::fs::read_to_string("/proc/modules") {
            symbols.set_modules(&modules);
        }
        Ok(symbols)
    }

    /// Reads module bounds from `/proc/modules` text (`fuse 167936 0 - Live 0xffff...`).
    pub fn set_modules(&mut self, text: &str) {
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(name), Some(size), Some(base)) =
                (fields.first(), fields.get(1), fields.get(5))
            else {
                continue;
            };
            let size = size.parse::<u64>().ok();
            let base = u64::from_str_radix(base.trim_start_matches("0x"), 16).ok();
            if let (Some(size), Some(base)) = (size, base) {
                if base != 0 {
                    self.module_ends
                        .insert(name.to_string(), base.saturating_add(size));
                }
            }
        }
    }

    pub fn load_from(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let symbols = Self::parse(&text);
        if symbols.text.iter().all(|symbol| symbol.addr == 0) {
            bail!(
                "{} shows only zero addresses: run as root, or set kernel.kptr_restrict=0",
                path.display()
            );
        }
        Ok(symbols)
    }

    /// True when the kernel image (not a module) has a function of this name.
    pub fn has_function(&self, name: &str) -> bool {
        self.text
            .iter()
            .any(|symbol| symbol.module.is_none() && symbol.name == name)
    }

    /// Parses kallsyms text: `ffffffff81000000 T _stext` or
    /// `ffffffffc0a01000 t ldiskfs_bread\t[ldiskfs]`.
    pub fn parse(text: &str) -> Self {
        let mut symbols = KernelSymbols::default();
        for line in text.lines() {
            let Some(fields) = Fields::parse(line) else {
                continue;
            };
            let Some(kind) = fields.kind.chars().next() else {
                continue;
            };
            let addr = fields.addr;
            let module = fields
                .module
                .map(|module| module.trim_matches(|c| c == '[' || c == ']').to_string());
            let symbol = Symbol {
                addr,
                name: fields.name.to_string(),
                module,
                kind,
            };
            // The end of the image's text, whatever its type: `T` on x86_64, `D` on
            // arm64 (Debian's 6.1 cloud kernel).
            if symbol.module.is_none() && symbol.name == "_etext" {
                symbols.text_end = addr;
            }
            match kind.to_ascii_lowercase() {
                't' | 'w' => {
                    if symbol.module.is_some() {
                        if symbols.modules_start == 0 || addr < symbols.modules_start {
                            symbols.modules_start = addr;
                        }
                    } else {
                        match symbol.name.as_str() {
                            "_text" | "_stext"
                                if symbols.image_start == 0 || addr < symbols.image_start =>
                            {
                                symbols.image_start = addr
                            }
                            _ => {}
                        }
                    }
                    symbols.text.push(symbol)
                }
                'd' | 'b' | 'r' => {
                    if matches!(symbol.name.as_str(), "_end" | "__bss_stop") {
                        symbols.data_end = symbols.data_end.max(addr);
                    }
                    if symbol.module.is_none() {
                        symbols.data.push(symbol);
                    }
                }
                _ => {}
            }
        }
        symbols.text.sort_by_key(|symbol| symbol.addr);
        symbols.data.sort_by_key(|symbol| symbol.addr);
        symbols
    }

    /// The function containing `addr` and the offset into it. Addresses past the end
    /// of a text region (the JIT area of BPF programs, for one) have no function.
    pub fn function(&self, addr: u64) -> Option<(&Symbol, u64)> {
        let index = self.text.partition_point(|symbol| symbol.addr <= addr);
        let symbol = self.text.get(index.checked_sub(1)?)?;
        let offset = addr - symbol.addr;
        if is_region_end(&symbol.name) || offset > MAX_FUNCTION_SIZE {
            return None;
        }
        if let Some(end) = symbol
            .module
            .as_ref()
            .and_then(|module| self.module_ends.get(module))
        {
            if addr >= *end {
                return None;
            }
        }
        Some((symbol, offset))
    }

    /// The text symbol `name` (in `module` when given: `ptlrpc:after_reply`).
    pub fn find_function(&self, name: &str, module: Option<&str>) -> Option<&Symbol> {
        self.text.iter().find(|symbol| {
            symbol.name == name
                && module.is_none_or(|module| symbol.module.as_deref() == Some(module))
        })
    }

    /// The kernel image's text, `_stext` (or `_text`) to `_etext`, when kallsyms says.
    pub fn image_text(&self) -> Option<(u64, u64)> {
        (self.image_start != 0 && self.text_end > self.image_start)
            .then_some((self.image_start, self.text_end))
    }

    /// The span of the modules' functions: from the lowest to the end of the module
    /// holding the highest (`/proc/modules`; one page past that function when unknown).
    /// BPF programs and trampolines, listed as the module `bpf`, are left out. Data of
    /// modules lying between their text is inside the span.
    pub fn modules_text(&self) -> Option<(u64, u64)> {
        let mut functions = self.text.iter().filter(|symbol| {
            symbol
                .module
                .as_deref()
                .is_some_and(|module| module != "bpf")
        });
        let first = functions.next()?;
        let last = functions.next_back().unwrap_or(first);
        let end = last
            .module
            .as_ref()
            .and_then(|module| self.module_ends.get(module))
            .copied()
            .filter(|end| *end > last.addr)
            .unwrap_or(last.addr + 4096);
        Some((first.addr, end))
    }

    /// The `[start, end)` ranges of consecutive image functions that `wanted` selects:
    /// a range ends at the next function it does not select.
    pub fn function_runs(&self, wanted: impl Fn(&Symbol) -> bool) -> Vec<(u64, u64)> {
        let mut runs = Vec::new();
        let mut open: Option<u64> = None;
        for symbol in self.text.iter().filter(|symbol| symbol.module.is_none()) {
            match (open, wanted(symbol)) {
                (None, true) => open = Some(symbol.addr),
                // A symbol not selected at the run's own address is an alias of its start.
                (Some(start), false) if symbol.addr > start => {
                    runs.push((start, symbol.addr));
                    open = None;
                }
                _ => {}
            }
        }
        if let Some(start) = open {
            runs.push((start, self.text_end.max(start)));
        }
        runs
    }

    /// The data symbol `name` of the kernel image (a static lock, for `--hold`).
    pub fn find_data(&self, name: &str) -> Option<&Symbol> {
        self.data.iter().find(|symbol| symbol.name == name)
    }

    /// Up to `limit` data symbol names close to `name`, closest first.
    pub fn close_data(&self, name: &str, limit: usize) -> Vec<String> {
        close_names(
            name,
            self.data.iter().map(|symbol| symbol.name.as_str()),
            limit,
        )
    }

    /// Up to `limit` function names close to `name`, closest first (`__pfx_` padding
    /// symbols left out): for "no such function" errors.
    pub fn close_functions(&self, name: &str, limit: usize) -> Vec<String> {
        close_names(
            name,
            self.text
                .iter()
                .map(|symbol| symbol.name.as_str())
                .filter(|candidate| !candidate.starts_with("__pfx_")),
            limit,
        )
    }

    /// A stack frame for a kernel address.
    pub fn frame(&self, addr: u64) -> Frame {
        match self.function(addr) {
            Some((symbol, _)) => Frame {
                name: symbol.name.clone(),
                module: symbol.module.clone(),
                kernel: true,
            },
            None => Frame {
                name: format!("0x{addr:x}"),
                module: None,
                kernel: true,
            },
        }
    }

    /// Whether `addr` lies in the kernel image past its text: a static object (`.data`,
    /// `.bss`) whether or not kallsyms names it. Heap, per-CPU, vmalloc and module
    /// addresses are not.
    pub fn in_image_data(&self, addr: u64) -> bool {
        if self.image_start == 0 || self.text_end == 0 || addr < self.text_end {
            return false;
        }
        let image_end = match self.data_end {
            0 => self.image_start.saturating_add(MAX_IMAGE_SIZE),
            end => end,
        };
        // Modules lie above the image on x86_64, and may lie below it on arm64.
        let below_modules = self.modules_start <= self.text_end || addr < self.modules_start;
        addr < image_end && below_modules
    }

    /// Name of a static kernel object containing `addr` (`jiffies_lock`,
    /// `rcu_state+0x40`), or `None` for heap addresses.
    pub fn data_name(&self, addr: u64) -> Option<String> {
        if self.data.is_empty() || (self.data_end != 0 && addr >= self.data_end) {
            return None;
        }
        let index = self.data.partition_point(|symbol| symbol.addr <= addr);
        let symbol = self.data.get(index.checked_sub(1)?)?;
        let offset = addr - symbol.addr;
        // Without sizes, accept an offset within the gap to the next symbol, and only
        // up to a page: a heap address past the image is never named.
        let next = self
            .data
            .get(index)
            .map(|next| next.addr)
            .unwrap_or(u64::MAX);
        if addr >= next || offset >= 4096 {
            return None;
        }
        Some(if offset == 0 {
            symbol.name.clone()
        } else {
            format!("{}+0x{offset:x}", symbol.name)
        })
    }
}

/// Up to `limit` of `candidates` close to `name` (containing it, contained in it, or a
/// few edits away), closest first.
pub fn close_names<'a>(
    name: &str,
    candidates: impl Iterator<Item = &'a str>,
    limit: usize,
) -> Vec<String> {
    let mut scored: Vec<(usize, &str)> = Vec::new();
    let budget = (name.len() / 3).max(2);
    for candidate in candidates {
        let score = if candidate.contains(name) || name.contains(candidate) {
            Some(candidate.len().abs_diff(name.len()).min(budget))
        } else if candidate.len().abs_diff(name.len()) <= budget {
            Some(strsim::levenshtein(name, candidate)).filter(|&distance| distance <= budget)
        } else {
            None
        };
        if let Some(score) = score {
            scored.push((score, candidate));
        }
    }
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored
        .into_iter()
        .take(limit)
        .map(|(_, name)| name.to_string())
        .collect()
}

/// A clear error for a kernel function that does not exist, with close names.
pub fn check_kernel_function(symbols: &KernelSymbols, spec: &str) -> anyhow::Result<()> {
    let (module, name) = match spec.split_once(':') {
        Some((module, name)) => (Some(module), name),
        None => (None, spec),
    };
    if symbols.find_function(name, module).is_some() {
        return Ok(());
    }
    if let (Some(module), Some(found)) = (module, symbols.find_function(name, None)) {
        let actual = match &found.module {
            Some(actual) => format!("in module {actual}"),
            None => "built into the kernel image".to_string(),
        };
        anyhow::bail!(
            "{name} is {actual}, not in module {module}: name it {}",
            match &found.module {
                Some(actual) => format!("{actual}:{name}"),
                None => name.to_string(),
            }
        );
    }
    let close = symbols.close_functions(name, 8);
    let where_ = module
        .map(|module| format!(" in module {module}"))
        .unwrap_or_default();
    if close.is_empty() {
        anyhow::bail!("no kernel function {name}{where_} in /proc/kallsyms (and nothing close)");
    }
    anyhow::bail!(
        "no kernel function {name}{where_} in /proc/kallsyms; close matches: {}",
        close.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
ffffffff81000000 T _stext
ffffffff81001000 T do_pipe2
ffffffff81001200 t queued_spin_lock_slowpath
ffffffff81002000 T _etext
ffffffff82000000 D jiffies_lock
ffffffff82000040 D rcu_state
ffffffff82001000 B __bss_stop
ffffffff82001000 B _end
ffffffffc0a01000 t after_reply\t[ptlrpc]
ffffffffc0a02000 d ptlrpc_lock\t[ptlrpc]
";

    /// The lock programs' text ranges: the image's text, and the modules' span (to the
    /// end of the last one's memory from /proc/modules when known, else a page past its
    /// last function).
    #[test]
    fn text_ranges_cover_image_text_and_modules() {
        let mut symbols = KernelSymbols::parse(SAMPLE);
        assert_eq!(
            symbols.image_text(),
            Some((0xffffffff81000000, 0xffffffff81002000))
        );
        assert_eq!(
            symbols.modules_text(),
            Some((0xffffffffc0a01000, 0xffffffffc0a02000))
        );
        symbols.set_modules("ptlrpc 40960 0 - Live 0xffffffffc0a00000\n");
        assert_eq!(
            symbols.modules_text(),
            Some((0xffffffffc0a01000, 0xffffffffc0a0a000))
        );
        let empty = KernelSymbols::parse("");
        assert_eq!((empty.image_text(), empty.modules_text()), (None, None));
        // arm64 lists `_etext` as data (and no `_text`).
        let arm64 = KernelSymbols::parse(
            "ffffaf7a39810000 T _stext\nffffaf7a39811000 T do_pipe2\nffffaf7a3a3d0000 D _etext\n",
        );
        assert_eq!(
            arm64.image_text(),
            Some((0xffffaf7a39810000, 0xffffaf7a3a3d0000))
        );
    }

    /// arm64 may place the modules below the image: its data is still the image's.
    #[test]
    fn image_data_is_found_with_the_modules_below_the_image() {
        let symbols = KernelSymbols::parse(
            "ffffc4eba0010000 T _stext\n\
             ffffc4eba0011000 T do_pipe2\n\
             ffffc4eba1000000 D _etext\n\
             ffffc4eb90001000 t fuse_init\t[fuse]\n",
        );
        assert!(symbols.in_image_data(0xffffc4eba1006080));
        assert!(!symbols.in_image_data(0xffffc4eb90001040));
        assert!(!symbols.in_image_data(0xffffc4eba0011000));
    }

    #[test]
    fn image_data_lies_between_the_text_and_the_modules() {
        let symbols = KernelSymbols::parse(SAMPLE);
        // Past _etext, below _end: data and bss, named by a symbol or not.
        assert!(symbols.in_image_data(0xffffffff82000000));
        assert!(symbols.in_image_data(0xffffffff81f00000));
        // Text, heap (direct map), past the image's end, a module's data.
        for addr in [
            0xffffffff81001010,
            0xffff888100000000,
            0xffffffff82001000,
            0xffffffffc0a02000,
        ] {
            assert!(!symbols.in_image_data(addr), "{addr:x}");
        }
        // Without `_end` (kallsyms without data symbols): up to the modules.
        let bare = KernelSymbols::parse(
            "ffffffff81000000 T _text\nffffffff82269a88 T _etext\n\
             ffffffffc0a01000 t after_reply\t[ptlrpc]\n",
        );
        assert!(bare.in_image_data(0xffffffff83c1ab40));
        assert!(!bare.in_image_data(0xffffffffc0a01100));
        assert!(!bare.in_image_data(0xffffffff81000100));
        // No image bounds, no guess.
        assert!(!KernelSymbols::parse("").in_image_data(0xffffffff83c1ab40));
    }

    #[test]
    fn functions_with_offsets_and_modules() {
        let symbols = KernelSymbols::parse(SAMPLE);
        let (symbol, offset) = symbols.function(0xffffffff81001010).expect("found");
        assert_eq!((symbol.name.as_str(), offset), ("do_pipe2", 0x10));
        let frame = symbols.frame(0xffffffffc0a01234);
        assert_eq!(frame.display(), "after_reply [ptlrpc]");
        assert_eq!(symbols.frame(0x1000).name, "0x1000");
        assert_eq!(
            symbols.frame(0xffffffff81002010).name,
            "0xffffffff81002010",
            "past _etext"
        );
        // Past the module's end (/proc/modules): a BPF trampoline, not the module.
        let mut symbols = KernelSymbols::parse(SAMPLE);
        symbols.set_modules("ptlrpc 8192 0 - Live 0xffffffffc0a00000\n");
        assert_eq!(
            symbols.frame(0xffffffffc0a01234).display(),
            "after_reply [ptlrpc]"
        );
        assert_eq!(symbols.frame(0xffffffffc0a03000).name, "0xffffffffc0a03000");
    }

    #[test]
    fn static_locks_are_named_heap_is_not() {
        let symbols = KernelSymbols::parse(SAMPLE);
        assert_eq!(
            symbols.data_name(0xffffffff82000000).as_deref(),
            Some("jiffies_lock")
        );
        assert_eq!(
            symbols.data_name(0xffffffff82000048).as_deref(),
            Some("rcu_state+0x8")
        );
        assert_eq!(symbols.data_name(0xffff888012345678), None, "heap address");
        assert_eq!(
            symbols.data_name(0xffffffff82001008),
            None,
            "past the image"
        );
    }

    #[test]
    fn finds_functions_and_close_matches() {
        let symbols = KernelSymbols::parse(SAMPLE);
        assert!(symbols.find_function("do_pipe2", None).is_some());
        assert!(symbols
            .find_function("after_reply", Some("ptlrpc"))
            .is_some());
        assert!(symbols.find_function("after_reply", Some("ext4")).is_none());
        assert!(
            symbols.find_function("jiffies_lock", None).is_none(),
            "data, not text"
        );
        assert_eq!(symbols.close_functions("do_pipe", 3), vec!["do_pipe2"]);
        assert_eq!(
            symbols.close_functions("after_replay", 3),
            vec!["after_reply"]
        );
        assert!(symbols.close_functions("zzzzzzzz", 3).is_empty());
    }
}
