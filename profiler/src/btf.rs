//! Kernel struct layouts from BTF (`/sys/kernel/btf/vmlinux`). Rust eBPF has no CO-RE
//! here, so field offsets that differ between kernels are read at start-up and handed to
//! the programs as load-time constants. Only what lockpath needs: struct member offsets,
//! through anonymous structs and unions, and through nested members (`a.b.c`).
//!
//! Why not aya-obj's BTF parser (aya-obj 0.3.0, what aya 0.14 uses): it parses the same
//! file, but what a member-offset lookup needs is not public there. `Btf::type_by_id`
//! and `Btf::string_at` are `pub(crate)`, and the members of `Struct`/`Union`
//! (`BtfMember { name_offset, btf_type, offset }`) are `pub(crate)` fields with no public
//! accessor; only `id_by_type_name_kind` (a type's id by name) is public. So a struct's
//! members, their names and their bit offsets cannot be read through it.

use std::{collections::HashMap, path::Path};

use anyhow::{bail, Context, Result};

const BTF_MAGIC: u16 = 0xeb9f;

const KIND_INT: u32 = 1;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

#[derive(Debug, Clone)]
struct Member {
    name: String,
    type_id: u32,
    bit_offset: u32,
}

#[derive(Debug, Clone)]
struct Type {
    kind: u32,
    name: String,
    /// Referenced type (typedef, qualifiers, pointers).
    type_id: u32,
    members: Vec<Member>,
}

/// The struct and union types of a BTF blob, by id and by name.
pub struct Btf {
    types: Vec<Type>,
    by_name: HashMap<String, Vec<u32>>,
}

impl Btf {
    pub fn from_sys_fs() -> Result<Btf> {
        Self::from_file(Path::new("/sys/kernel/btf/vmlinux"))
    }

    pub fn from_file(path: &Path) -> Result<Btf> {
        let bytes = std::fs::read(path).with_context(|| {
            format!(
                "cannot read kernel BTF {} (a kernel built with CONFIG_DEBUG_INFO_BTF is needed)",
                path.display()
            )
        })?;
        Self::parse(&bytes).with_context(|| format!("cannot parse BTF in {}", path.display()))
    }

    pub fn parse(bytes: &[u8]) -> Result<Btf> {
        let u16_at = |offset: usize| -> Result<u16> {
            let raw = bytes
                .get(offset..offset + 2)
                .context("BTF header cut short")?;
            Ok(u16::from_le_bytes([raw[0], raw[1]]))
        };
        let u32_at = |offset: usize| -> Result<u32> {
            let raw = bytes
                .get(offset..offset + 4)
                .context("BTF data cut short")?;
            Ok(u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]))
        };
        if u16_at(0)? != BTF_MAGIC {
            bail!("not BTF (bad magic), or not little-endian");
        }
        let header_len = u32_at(4)? as usize;
        let type_off = u32_at(8)? as usize;
        let type_len = u32_at(12)? as usize;
        let str_off = u32_at(16)? as usize;
        let str_len = u32_at(20)? as usize;
        let strings = bytes
            .get(header_len + str_off..header_len + str_off + str_len)
            .context("BTF string section out of bounds")?;
        let name_at = |offset: u32| -> String {
            let start = offset as usize;
            let Some(rest) = strings.get(start..) else {
                return String::new();
            };
            let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            String::from_utf8_lossy(&rest[..end]).into_owned()
        };

        // Type id 0 is `void`.
        let mut types = vec![Type {
            kind: 0,
            name: String::new(),
            type_id: 0,
            members: Vec::new(),
        }];
        let mut cursor = header_len + type_off;
        let end = cursor + type_len;
        if end > bytes.len() {
            bail!("BTF type section out of bounds");
        }
        while cursor < end {
            let name_off = u32_at(cursor)?;
            let info = u32_at(cursor + 4)?;
            let size_or_type = u32_at(cursor + 8)?;
            cursor += 12;
            let vlen = (info & 0xffff) as usize;
            let kind = (info >> 24) & 0x1f;
            let kind_flag = info >> 31 == 1;
            let mut members = Vec::new();
            let extra = match kind {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
                KIND_ARRAY => 12,
                KIND_STRUCT | KIND_UNION => {
                    for index in 0..vlen {
                        let base = cursor + index * 12;
                        let offset = u32_at(base + 8)?;
                        members.push(Member {
                            name: name_at(u32_at(base)?),
                            type_id: u32_at(base + 4)?,
                            // With kind_flag, the top 8 bits are a bitfield size.
                            bit_offset: if kind_flag {
                                offset & 0x00ff_ffff
                            } else {
                                offset
                            },
                        });
                    }
                    vlen * 12
                }
                KIND_ENUM | KIND_FUNC_PROTO => vlen * 8,
                KIND_DATASEC | KIND_ENUM64 => vlen * 12,
                _ => 0,
            };
            cursor += extra;
            types.push(Type {
                kind,
                name: name_at(name_off),
                type_id: size_or_type,
                members,
            });
        }
        let mut by_name: HashMap<String, Vec<u32>> = HashMap::new();
        for (id, ty) in types.iter().enumerate() {
            if matches!(ty.kind, KIND_STRUCT | KIND_UNION) && !ty.name.is_empty() {
                by_name.entry(ty.name.clone()).or_default().push(id as u32);
            }
        }
        Ok(Btf { types, by_name })
    }

    /// Follows typedefs and qualifiers to the underlying type.
    fn resolve(&self, mut id: u32) -> Option<&Type> {
        for _ in 0..32 {
            let ty = self.types.get(id as usize)?;
            match ty.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = ty.type_id
                }
                _ => return Some(ty),
            }
        }
        None
    }

    /// Bit offset of `member` in `ty`, looking into anonymous structs and unions.
    fn member_bits(&self, ty: &Type, member: &str) -> Option<(u32, u32)> {
        for candidate in &ty.members {
            if candidate.name == member {
                return Some((candidate.bit_offset, candidate.type_id));
            }
            if candidate.name.is_empty() {
                let inner = self.resolve(candidate.type_id)?;
                if let Some((bits, type_id)) = self.member_bits(inner, member) {
                    return Some((candidate.bit_offset + bits, type_id));
                }
            }
        }
        None
    }

    /// Byte offset of `path` (`mmap_lock`, or `a.b` through nested members) in
    /// `struct name`.
    pub fn member_offset(&self, name: &str, path: &str) -> Result<u32> {
        let ids = self
            .by_name
            .get(name)
            .with_context(|| format!("kernel BTF has no struct {name}"))?;
        let mut last_err = None;
        // Some names exist several times (a forward-declared duplicate); take the first with the member.
        for &id in ids {
            let Some(mut ty) = self.resolve(id) else {
                continue;
            };
            let mut bits = 0;
            let mut found = true;
            for part in path.split('.') {
                match self.member_bits(ty, part) {
                    Some((offset, type_id)) => {
                        bits += offset;
                        match self.resolve(type_id) {
                            Some(next) => ty = next,
                            None => {
                                found = false;
                                break;
                            }
                        }
                    }
                    None => {
                        last_err = Some(format!(
                            "struct {name} has no member {path} in this kernel's BTF"
                        ));
                        found = false;
                        break;
                    }
                }
            }
            if found {
                if bits % 8 != 0 {
                    bail!("{name}.{path} is a bitfield");
                }
                return Ok(bits / 8);
            }
        }
        bail!(last_err.unwrap_or_else(|| format!("struct {name} has no member {path}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-built BTF blob: struct inner { int a; int b; }; struct outer { int x;
    /// union { struct inner in; }; };
    fn blob() -> Vec<u8> {
        let strings = b"\0int\0inner\0a\0b\0outer\0x\0in\0";
        let name = |s: &str| -> u32 {
            let needle = format!("\0{s}\0");
            strings
                .windows(needle.len())
                .position(|w| w == needle.as_bytes())
                .map(|p| p as u32 + 1)
                .expect("name in table")
        };
        let mut types = Vec::new();
        let mut push = |words: &[u32]| {
            for word in words {
                types.extend_from_slice(&word.to_le_bytes());
            }
        };
        // 1: int
        push(&[name("int"), KIND_INT << 24, 4, 32]);
        // 2: struct inner { a @0, b @32 bits }
        push(&[
            name("inner"),
            KIND_STRUCT << 24 | 2,
            8,
            name("a"),
            1,
            0,
            name("b"),
            1,
            32,
        ]);
        // 3: anonymous union { struct inner in; }
        push(&[0, KIND_UNION << 24 | 1, 8, name("in"), 2, 0]);
        // 4: struct outer { int x @0; anon union @64 bits }
        push(&[
            name("outer"),
            KIND_STRUCT << 24 | 2,
            16,
            name("x"),
            1,
            0,
            0,
            3,
            64,
        ]);
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&BTF_MAGIC.to_le_bytes());
        bytes.extend_from_slice(&[1, 0]);
        for word in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        bytes.extend_from_slice(&types);
        bytes.extend_from_slice(strings);
        bytes
    }

    #[test]
    fn offsets_through_anonymous_members_and_paths() {
        let btf = Btf::parse(&blob()).expect("parse");
        assert_eq!(btf.member_offset("outer", "x").expect("x"), 0);
        assert_eq!(btf.member_offset("outer", "in").expect("in"), 8);
        assert_eq!(btf.member_offset("outer", "in.b").expect("in.b"), 12);
        assert!(btf.member_offset("outer", "nope").is_err());
        assert!(btf.member_offset("missing", "x").is_err());
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(Btf::parse(b"nope").is_err());
        let mut cut = blob();
        cut.truncate(30);
        assert!(Btf::parse(&cut).is_err());
    }

    #[test]
    fn this_kernel_when_available() {
        // Real BTF, when the machine has it: offsets exist and are plausible.
        let Ok(btf) = Btf::from_sys_fs() else {
            eprintln!("SKIP: no /sys/kernel/btf/vmlinux here");
            return;
        };
        let mm = btf
            .member_offset("task_struct", "mm")
            .expect("task_struct.mm");
        let lock = btf
            .member_offset("mm_struct", "mmap_lock")
            .expect("mm_struct.mmap_lock");
        let owner = btf.member_offset("mutex", "owner").expect("mutex.owner");
        assert!(mm > 0 && mm < 8192, "task_struct.mm at {mm}");
        assert!(lock < 4096, "mm_struct.mmap_lock at {lock}");
        assert_eq!(owner, 0, "mutex.owner is the first member");
        let pid = btf.member_offset("task_struct", "pid").expect("pid");
        let tgid = btf.member_offset("task_struct", "tgid").expect("tgid");
        assert_eq!(tgid, pid + 4, "tgid follows pid");
        eprintln!("task_struct.mm={mm} mm_struct.mmap_lock={lock} pid={pid}");
    }
}
