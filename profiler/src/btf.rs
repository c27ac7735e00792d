//! Kernel struct layouts from BTF (`/sys/kernel/btf/vmlinux`). Rust eBPF has no CO-RE
//! here, so field offsets that differ between kernels are read at start-up and handed to
//! the programs as load-time constants. The btf-rs crate reads the format (a module's
//! split BTF on top of vmlinux's included); this module keeps the lookups lockpath
//! needs: struct member offsets, through anonymous structs and unions and nested
//! members (`a.b.c`); the lock member or per-CPU lock at an offset; enum values; the
//! arguments of raw tracepoints and the struct parameters of functions.
//!
//! The types are copied once into a vector indexed by type id, with a name index of the
//! structs and unions: a lookup by offset walks many types, and btf-rs hands out each
//! type as a fresh value (its names are read from the string table on every call). The
//! copy is flat: every name in one string, every member in one vector, a type 24 bytes.
//! On a 5.5 MB vmlinux BTF, btf-rs parses in 50-80 ms holding about 45 MiB while the copy
//! is made; the copy (126k types, 172k members) stays for the run. The vmlinux BTF is
//! read once per run (`Btf::vmlinux`).

use std::{
    collections::{HashMap, HashSet},
    path::Path,
};

use anyhow::{bail, Context, Result};

/// The BTF kinds, as the format numbers them: the `kind` of a `Type`.
const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// A name: its place in `Btf::names`.
#[derive(Debug, Clone, Copy, Default)]
struct Name {
    start: u32,
    len: u32,
}

#[derive(Debug, Clone, Copy)]
struct Member {
    name: Name,
    type_id: u32,
    bit_offset: u32,
}

#[derive(Debug, Clone, Copy)]
struct Type {
    kind: u32,
    name: Name,
    /// Referenced type (typedef, qualifiers, pointers).
    type_id: u32,
    /// Its members, `Btf::members[members.0..members.1]`: struct and union members; enum
    /// values (`bit_offset` holds the low 32 bits of the value); function prototype
    /// parameters (`bit_offset` 0).
    members: (u32, u32),
}

/// The kernel's lock types, by their BTF names.
const LOCK_TYPES: &[&str] = &[
    "spinlock_t",
    "spinlock",
    "raw_spinlock_t",
    "raw_spinlock",
    "rwlock_t",
    "mutex",
    "rw_semaphore",
    "rt_mutex",
    "rt_mutex_base",
    "seqlock_t",
    "percpu_rw_semaphore",
];

/// The struct and union types of a BTF blob, by id and by name.
pub struct Btf {
    types: Vec<Type>,
    /// Every type's members, in type order.
    members: Vec<Member>,
    /// Every name, one after the other.
    names: String,
    by_name: HashMap<String, Vec<u32>>,
    /// The id of `DATASEC .data..percpu` (the per-CPU variables), found once.
    percpu: Option<usize>,
}

impl Btf {
    pub fn from_sys_fs() -> Result<Btf> {
        Self::from_file(Path::new("/sys/kernel/btf/vmlinux"))
    }

    /// The running kernel's BTF, read once per run and shared by every family.
    pub fn vmlinux() -> Result<&'static Btf> {
        static VMLINUX: std::sync::OnceLock<std::result::Result<Btf, String>> =
            std::sync::OnceLock::new();
        VMLINUX
            .get_or_init(|| Btf::from_sys_fs().map_err(|err| format!("{err:#}")))
            .as_ref()
            .map_err(|err| anyhow::anyhow!("{err}"))
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
        let btf = btf_rs::Btf::from_bytes(bytes)?;
        Self::copy_of(&btf)
    }

    /// A module's split BTF (`/sys/kernel/btf/<module>`): its type ids follow vmlinux's
    /// and its names may be vmlinux strings, so both blobs are read together.
    pub fn parse_split(base: &[u8], module: &[u8]) -> Result<Btf> {
        let base = btf_rs::Btf::from_bytes(base)?;
        let split = btf_rs::Btf::from_split_bytes(module, &base)
            .context("cannot parse the module's split BTF")?;
        Self::copy_of(&split)
    }

    /// vmlinux's BTF, with `module`'s split BTF when the module is loaded (a built-in
    /// module has no file of its own: its types are in vmlinux).
    pub fn from_sys_fs_with_module(module: &str) -> Result<Btf> {
        let vmlinux = Path::new("/sys/kernel/btf/vmlinux");
        let module_path = Path::new("/sys/kernel/btf").join(module);
        if !module_path.exists() {
            return Self::from_file(vmlinux);
        }
        let read = |path: &Path| {
            std::fs::read(path).with_context(|| {
                format!(
                    "cannot read kernel BTF {} (a kernel built with CONFIG_DEBUG_INFO_BTF is needed)",
                    path.display()
                )
            })
        };
        Self::parse_split(&read(vmlinux)?, &read(&module_path)?)
            .with_context(|| format!("cannot parse BTF in {}", module_path.display()))
    }

    /// Every type of `btf` by id (a split BTF's base types first; id 0 is `void`), in the
    /// shape the lookups read, with the name index.
    fn copy_of(btf: &btf_rs::Btf) -> Result<Btf> {
        let (_, last) = btf.split().unwrap_or(btf.base()).type_id_range();
        let mut copy = Btf {
            types: Vec::with_capacity(last as usize + 1),
            members: Vec::new(),
            names: String::new(),
            by_name: HashMap::new(),
            percpu: None,
        };
        copy.types.push(Type {
            kind: 0,
            name: Name::default(),
            type_id: 0,
            members: (0, 0),
        });
        for id in 1..=last {
            copy.add(btf, &btf.resolve_type_by_id(id)?);
        }
        copy.types.shrink_to_fit();
        copy.members.shrink_to_fit();
        copy.names.shrink_to_fit();
        let (mut by_name, mut percpu) = (HashMap::<String, Vec<u32>>::new(), None);
        for (id, ty) in copy.types.iter().enumerate() {
            let name = copy.name(ty.name);
            if matches!(ty.kind, KIND_STRUCT | KIND_UNION) && !name.is_empty() {
                by_name.entry(name.to_string()).or_default().push(id as u32);
            }
            if ty.kind == KIND_DATASEC && name == ".data..percpu" {
                percpu = Some(id);
            }
        }
        copy.by_name = by_name;
        copy.percpu = percpu;
        Ok(copy)
    }

    /// A name of the copy.
    fn name(&self, name: Name) -> &str {
        let start = name.start as usize;
        self.names
            .get(start..start + name.len as usize)
            .unwrap_or_default()
    }

    /// The members of `ty` (see `Type::members`).
    fn members(&self, ty: &Type) -> &[Member] {
        self.members
            .get(ty.members.0 as usize..ty.members.1 as usize)
            .unwrap_or_default()
    }

    /// The per-CPU variables' section, and its size in bytes.
    fn percpu_section(&self) -> Option<(&Type, u32)> {
        let section = self.types.get(self.percpu?)?;
        // A DATASEC's `type_id` holds its size.
        Some((section, section.type_id))
    }

    /// The type id of the kernel function `name` (a BTF `FUNC`), as a kfunc call names
    /// it; `None` when this kernel has no such function.
    pub fn function_id(&self, name: &str) -> Option<u32> {
        self.types
            .iter()
            .position(|ty| ty.kind == KIND_FUNC && self.name(ty.name) == name)
            .map(|id| id as u32)
    }

    /// The value of the enumerator `name` (`REQ_OP_FLUSH`, ...), in any enum.
    pub fn enum_value(&self, name: &str) -> Option<u32> {
        self.types
            .iter()
            .filter(|ty| matches!(ty.kind, KIND_ENUM | KIND_ENUM64))
            .flat_map(|ty| self.members(ty))
            .find(|value| self.name(value.name) == name)
            .map(|value| value.bit_offset)
    }

    /// The argument types of raw tracepoint `event`, from its `btf_trace_<event>` typedef
    /// (`void (*)(void *, args...)`): for each argument, the name of the struct it points
    /// to (empty when it is not a pointer to a struct).
    pub fn raw_tracepoint_args(&self, event: &str) -> Result<Vec<String>> {
        let typedef = format!("btf_trace_{event}");
        let proto = self
            .types
            .iter()
            .find(|ty| ty.kind == KIND_TYPEDEF && self.name(ty.name) == typedef)
            .and_then(|ty| self.resolve(ty.type_id))
            .filter(|ty| ty.kind == KIND_PTR)
            .and_then(|ptr| self.resolve(ptr.type_id))
            .filter(|ty| ty.kind == KIND_FUNC_PROTO)
            .with_context(|| format!("kernel BTF has no raw tracepoint {event} ({typedef})"))?;
        // The first parameter is the tracepoint's private data, not an argument.
        Ok(self
            .members(proto)
            .iter()
            .skip(1)
            .map(|param| {
                self.resolve(param.type_id)
                    .filter(|ty| ty.kind == KIND_PTR)
                    .and_then(|ptr| self.resolve(ptr.type_id))
                    .filter(|ty| matches!(ty.kind, KIND_STRUCT | KIND_UNION))
                    .map(|target| self.name(target.name).to_string())
                    .unwrap_or_default()
            })
            .collect())
    }

    /// Index of the argument of raw tracepoint `event` that points to `struct target`.
    pub fn raw_tracepoint_arg(&self, event: &str, target: &str) -> Result<u32> {
        let args = self.raw_tracepoint_args(event)?;
        args.iter()
            .position(|arg| arg == target)
            .map(|index| index as u32)
            .with_context(|| {
                format!("raw tracepoint {event} has no struct {target} * argument ({args:?})")
            })
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
        for candidate in self.members(ty) {
            let name = self.name(candidate.name);
            if name == member {
                return Some((candidate.bit_offset, candidate.type_id));
            }
            if name.is_empty() {
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
        self.member(name, path).map(|(offset, _)| offset)
    }

    /// Like `member_offset`, for a member that must be a pointer (a hop in a chain such
    /// as `request.q` -> `request_queue.disk`); an embedded struct is an error.
    pub fn member_pointer_offset(&self, name: &str, path: &str) -> Result<u32> {
        let (offset, kind) = self.member(name, path)?;
        if kind != KIND_PTR {
            bail!("{name}.{path} is not a pointer in this kernel's BTF");
        }
        Ok(offset)
    }

    /// Size in bytes of `struct name`.
    pub fn struct_size(&self, name: &str) -> Option<u32> {
        self.by_name.get(name)?.iter().find_map(|&id| {
            let ty = self.types.get(id as usize)?;
            (ty.kind == KIND_STRUCT).then_some(ty.type_id)
        })
    }

    /// Whether the BTF describes a struct (or union) called `name`.
    pub fn has_struct(&self, name: &str) -> bool {
        self.by_name.get(name).is_some_and(|ids| {
            ids.iter().any(|&id| {
                self.resolve(id)
                    .is_some_and(|ty| matches!(ty.kind, KIND_STRUCT | KIND_UNION))
            })
        })
    }

    /// The path of the lock member (a `spinlock_t`, `mutex`, `rw_semaphore`, ...) that
    /// starts at byte `offset` of `struct name`, through nested structs and unions:
    /// `f_pos_lock`, `vfs_inode.i_rwsem`, `f_pos_lock.wait_lock`. `None` when no lock
    /// starts there.
    pub fn lock_member_at(&self, name: &str, offset: u32) -> Option<String> {
        let ids = self.by_name.get(name)?;
        ids.iter()
            .find_map(|&id| self.lock_path(self.resolve(id)?, offset.checked_mul(8)?, 0))
    }

    fn lock_path(&self, ty: &Type, bits: u32, depth: u32) -> Option<String> {
        if depth > 8 {
            return None;
        }
        for member in self.members(ty) {
            let Some(inner) = self.resolve(member.type_id) else {
                continue;
            };
            if !matches!(inner.kind, KIND_STRUCT | KIND_UNION) {
                continue;
            }
            // A struct's or union's `type_id` holds its size in bytes.
            let end = member
                .bit_offset
                .saturating_add(inner.type_id.saturating_mul(8));
            if bits < member.bit_offset || bits >= end {
                continue;
            }
            let within = bits - member.bit_offset;
            let path = if within == 0 && self.is_lock_type(member.type_id) {
                Some(String::new())
            } else {
                self.lock_path(inner, within, depth + 1)
            };
            if let Some(rest) = path {
                let name = self.name(member.name);
                return Some(match (name.is_empty(), rest.is_empty()) {
                    (true, _) => rest,
                    (false, true) => name.to_string(),
                    (false, false) => format!("{name}.{rest}"),
                });
            }
        }
        None
    }

    /// The lock member at byte `offset` of `struct name` (`lock_member_at`) and the
    /// name of its type (`spinlock_t`, `rwlock_t`, `mutex`, ...); a lock inside a
    /// non-lock struct member (a wait queue head's) is that inner lock's type.
    pub fn lock_member_type_at(&self, name: &str, offset: u32) -> Option<(String, String)> {
        let path = self.lock_member_at(name, offset)?;
        let mut ty = self
            .by_name
            .get(name)?
            .iter()
            .find_map(|&id| self.resolve(id))?;
        let mut type_id = 0;
        for part in path.split('.') {
            let (_, id) = self.member_bits(ty, part)?;
            type_id = id;
            ty = self.resolve(id)?;
        }
        Some((path, self.lock_type_name(type_id)?))
    }

    /// The kernel lock type name (`spinlock_t`, `mutex`, ...) type `id` is, through
    /// typedefs and qualifiers.
    fn lock_type_name(&self, mut id: u32) -> Option<String> {
        for _ in 0..32 {
            let ty = self.types.get(id as usize)?;
            let name = self.name(ty.name);
            if LOCK_TYPES.contains(&name) {
                return Some(name.to_string());
            }
            match ty.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = ty.type_id
                }
                _ => return None,
            }
        }
        None
    }

    /// For each function of `functions` the kernel's BTF has, the structs its
    /// parameters point to, with their sizes in bytes: (struct name, size).
    pub fn struct_pointer_params(
        &self,
        functions: &HashSet<&str>,
    ) -> HashMap<String, Vec<(String, u32)>> {
        let mut params = HashMap::new();
        for ty in &self.types {
            let name = self.name(ty.name);
            if ty.kind != KIND_FUNC || !functions.contains(name) {
                continue;
            }
            let Some(proto) = self
                .types
                .get(ty.type_id as usize)
                .filter(|proto| proto.kind == KIND_FUNC_PROTO)
            else {
                continue;
            };
            let structs: Vec<(String, u32)> = self
                .members(proto)
                .iter()
                .filter_map(|param| {
                    let ptr = self
                        .resolve(param.type_id)
                        .filter(|ty| ty.kind == KIND_PTR)?;
                    let target = self
                        .resolve(ptr.type_id)
                        .filter(|ty| matches!(ty.kind, KIND_STRUCT | KIND_UNION))?;
                    // A struct's `type_id` holds its size in bytes.
                    let name = self.name(target.name);
                    (!name.is_empty()).then(|| (name.to_string(), target.type_id))
                })
                .collect();
            params.insert(name.to_string(), structs);
        }
        params
    }

    /// The per-CPU variable (BTF `DATASEC .data..percpu`) that holds byte `offset` of a
    /// CPU's per-CPU area, and the lock member starting there: `runqueues.__lock`,
    /// `timer_bases.lock` (or the variable alone when it is a lock). `None` when no
    /// lock starts there.
    pub fn percpu_lock_at(&self, offset: u32) -> Option<String> {
        let (section, size) = self.percpu_section()?;
        if offset >= size {
            return None;
        }
        for entry in self.members(section) {
            let var = self.types.get(entry.type_id as usize)?;
            let Some(mut inner) = self.resolve(var.type_id) else {
                continue;
            };
            let mut type_id = var.type_id;
            let mut name = self.name(var.name).to_string();
            let start = entry.bit_offset;
            let Some(mut within) = offset.checked_sub(start) else {
                continue;
            };
            // A per-CPU array of structs (`timer_bases[NR_BASES]`): the element.
            if inner.kind == KIND_ARRAY {
                let Some(&Member {
                    type_id: element,
                    bit_offset: count,
                    ..
                }) = self.members(inner).first()
                else {
                    continue;
                };
                let Some(element_type) = self.resolve(element) else {
                    continue;
                };
                let size = element_type.type_id;
                if !matches!(element_type.kind, KIND_STRUCT | KIND_UNION)
                    || size == 0
                    || within >= size.saturating_mul(count)
                {
                    continue;
                }
                name = format!("{name}[{}]", within / size);
                within %= size;
                (inner, type_id) = (element_type, element);
            }
            if !matches!(inner.kind, KIND_STRUCT | KIND_UNION) || within >= inner.type_id {
                continue;
            }
            if within == 0 && self.is_lock_type(type_id) {
                return Some(name);
            }
            return self
                .lock_path(inner, within * 8, 0)
                .map(|path| format!("{name}.{path}"));
        }
        None
    }

    /// The offset of the per-CPU variable `name` in a CPU's per-CPU area.
    pub fn percpu_offset(&self, name: &str) -> Option<u32> {
        let (section, _) = self.percpu_section()?;
        self.members(section).iter().find_map(|entry| {
            let var = self.types.get(entry.type_id as usize)?;
            (var.kind == KIND_VAR && self.name(var.name) == name).then_some(entry.bit_offset)
        })
    }

    /// Whether type `id` (through typedefs and qualifiers) is one of the kernel's locks.
    fn is_lock_type(&self, mut id: u32) -> bool {
        const LOCKS: &[&str] = LOCK_TYPES;
        for _ in 0..32 {
            let Some(ty) = self.types.get(id as usize) else {
                return false;
            };
            if LOCKS.contains(&self.name(ty.name)) {
                return true;
            }
            match ty.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = ty.type_id
                }
                _ => return false,
            }
        }
        false
    }

    /// Byte offset and BTF kind (typedefs followed) of `path` in `struct name`.
    fn member(&self, name: &str, path: &str) -> Result<(u32, u32)> {
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
                return Ok((bits / 8, ty.kind));
            }
        }
        bail!(last_err.unwrap_or_else(|| format!("struct {name} has no member {path}")))
    }
}

impl Btf {
    /// Adds one btf-rs type to the copy: `type_id` is the referenced type, or the size of
    /// a struct, union or section; `members` as `Type::members` says.
    fn add(&mut self, btf: &btf_rs::Btf, ty: &btf_rs::Type) {
        use btf_rs::{BtfType, Type as T};
        let first = self.members.len() as u32;
        let name_of = |names: &mut String, named: &dyn BtfType| {
            let name = btf.resolve_name(named).unwrap_or_default();
            let start = names.len() as u32;
            names.push_str(&name);
            Name {
                start,
                len: name.len() as u32,
            }
        };
        let mut member = |name: Name, type_id: Option<u32>, bit_offset: u32| {
            self.members.push(Member {
                name,
                type_id: type_id.unwrap_or(0),
                bit_offset,
            })
        };
        let names = &mut self.names;
        let (kind, type_id) = match ty {
            T::Struct(composite) | T::Union(composite) => {
                for field in &composite.members {
                    let name = name_of(names, field);
                    member(name, field.get_type_id(), field.bit_offset());
                }
                let kind = match ty {
                    T::Struct(_) => KIND_STRUCT,
                    _ => KIND_UNION,
                };
                (kind, composite.size() as u32)
            }
            // (element type, count).
            T::Array(array) => {
                member(Name::default(), array.get_type_id(), array.len() as u32);
                (KIND_ARRAY, 0)
            }
            T::Enum(values) => {
                for value in &values.members {
                    member(name_of(names, value), None, value.val());
                }
                (KIND_ENUM, 0)
            }
            // The low 32 bits of each value.
            T::Enum64(values) => {
                for value in &values.members {
                    member(name_of(names, value), None, value.val() as u32);
                }
                (KIND_ENUM64, 0)
            }
            T::FuncProto(proto) => {
                for param in &proto.parameters {
                    member(name_of(names, param), param.get_type_id(), 0);
                }
                (KIND_FUNC_PROTO, 0)
            }
            // (the VAR's id, offset in bytes) per variable.
            T::Datasec(section) => {
                for var in &section.variables {
                    member(Name::default(), var.get_type_id(), var.offset());
                }
                (KIND_DATASEC, section.size() as u32)
            }
            T::Int(_) => (KIND_INT, 0),
            T::Ptr(next) => (KIND_PTR, next.get_type_id().unwrap_or(0)),
            T::Typedef(next) => (KIND_TYPEDEF, next.get_type_id().unwrap_or(0)),
            T::Volatile(next) => (KIND_VOLATILE, next.get_type_id().unwrap_or(0)),
            T::Const(next) => (KIND_CONST, next.get_type_id().unwrap_or(0)),
            T::Restrict(next) => (KIND_RESTRICT, next.get_type_id().unwrap_or(0)),
            T::TypeTag(next) => (KIND_TYPE_TAG, next.get_type_id().unwrap_or(0)),
            T::Func(next) => (KIND_FUNC, next.get_type_id().unwrap_or(0)),
            T::Var(next) => (KIND_VAR, next.get_type_id().unwrap_or(0)),
            // Void, forward declarations, floats, declaration tags: never looked into.
            _ => (0, 0),
        };
        let name = match ty.as_btf_type() {
            Some(named) => name_of(names, named),
            None => Name::default(),
        };
        let members = (first, self.members.len() as u32);
        self.types.push(Type {
            kind,
            name,
            type_id,
            members,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BTF_MAGIC: u16 = 0xeb9f;

    /// A BTF blob: the header, then the type and string sections.
    fn assemble(types: &[u8], strings: &[u8]) -> Vec<u8> {
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
        bytes.extend_from_slice(types);
        bytes.extend_from_slice(strings);
        bytes
    }

    /// Where the string `s` starts in a string table of NUL-terminated strings.
    fn string_offset(strings: &[u8], s: &str) -> u32 {
        let needle = format!("{s}\0");
        (0..strings.len())
            .find(|&p| {
                (p == 0 || strings[p - 1] == 0) && strings[p..].starts_with(needle.as_bytes())
            })
            .map(|p| p as u32)
            .expect("name in table")
    }

    fn push_words(types: &mut Vec<u8>, words: &[u32]) {
        for word in words {
            types.extend_from_slice(&word.to_le_bytes());
        }
    }

    /// A hand-built BTF blob: struct inner { int a; int b; }; struct outer { int x;
    /// union { struct inner in; }; };
    fn blob() -> Vec<u8> {
        let strings = b"\0int\0inner\0a\0b\0outer\0x\0in\0";
        let name = |s: &str| string_offset(strings, s);
        let mut types = Vec::new();
        let mut push = |words: &[u32]| push_words(&mut types, words);
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
        assemble(&types, strings)
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

    /// A module blob on top of `blob()`: its ids start at 5 and its first string is the
    /// base's `int`. 5: enum e { E_TWO = 2 }; 6: struct m { int v; struct inner *p; };
    /// 7: ptr -> 2 (struct inner); 8: ptr -> 6; 9: func proto (void *, struct m *);
    /// 10: ptr -> 9; 11: typedef btf_trace_ev -> 10; 12: ptr -> void.
    fn module_blob(base: &[u8]) -> Vec<u8> {
        let base_str_len = u32::from_le_bytes([base[20], base[21], base[22], base[23]]);
        let base_strings = b"\0int\0inner\0a\0b\0outer\0x\0in\0";
        assert_eq!(base_str_len as usize, base_strings.len());
        let strings = b"e\0E_TWO\0m\0v\0p\0btf_trace_ev\0";
        let name = |s: &str| string_offset(strings, s) + base_str_len;
        let base_int = 1; // "int" at offset 1 of the base's strings
        let mut types = Vec::new();
        let mut push = |words: &[u32]| push_words(&mut types, words);
        push(&[name("e"), KIND_ENUM << 24 | 1, 4, name("E_TWO"), 2]);
        push(&[
            name("m"),
            KIND_STRUCT << 24 | 2,
            16,
            name("v"),
            1,
            0,
            name("p"),
            7,
            64,
        ]);
        push(&[0, KIND_PTR << 24, 2]);
        push(&[0, KIND_PTR << 24, 6]);
        push(&[0, KIND_FUNC_PROTO << 24 | 2, 0, 0, 12, 0, 8]);
        push(&[0, KIND_PTR << 24, 9]);
        push(&[name("btf_trace_ev"), KIND_TYPEDEF << 24, 10]);
        push(&[0, KIND_PTR << 24, 0]);
        let _ = base_int;
        assemble(&types, strings)
    }

    #[test]
    fn split_btf_enums_pointers_and_raw_tracepoint_args() {
        let base = blob();
        let btf = Btf::parse_split(&base, &module_blob(&base)).expect("parse split");
        assert_eq!(btf.member_offset("m", "v").expect("m.v"), 0);
        assert_eq!(btf.member_pointer_offset("m", "p").expect("m.p"), 8);
        assert!(btf.member_pointer_offset("m", "v").is_err(), "v is an int");
        assert!(
            btf.member_pointer_offset("outer", "in").is_err(),
            "embedded"
        );
        assert_eq!(btf.member_offset("outer", "in.b").expect("base types"), 12);
        assert_eq!(btf.enum_value("E_TWO"), Some(2));
        assert_eq!(btf.enum_value("E_NONE"), None);
        assert_eq!(btf.raw_tracepoint_args("ev").expect("args"), vec!["m"]);
        assert_eq!(btf.raw_tracepoint_arg("ev", "m").expect("m"), 0);
        assert!(btf.raw_tracepoint_arg("ev", "inner").is_err());
        assert!(btf.raw_tracepoint_args("nope").is_err());
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(Btf::parse(b"nope").is_err());
        let mut cut = blob();
        cut.truncate(30);
        assert!(Btf::parse(&cut).is_err());
    }

    /// This machine's BTF, or `None` (and a line saying why the test skips).
    fn this_kernel() -> Option<Btf> {
        let btf = Btf::from_sys_fs().ok();
        if btf.is_none() {
            eprintln!("SKIP: no /sys/kernel/btf/vmlinux here");
        }
        btf
    }

    /// `TYPE.MEMBER`'s offset in `btf`; the test fails naming it when it is not there.
    fn offset(btf: &Btf, ty: &str, member: &str) -> u32 {
        btf.member_offset(ty, member)
            .unwrap_or_else(|err| panic!("{ty}.{member}: {err:#}"))
    }

    #[test]
    fn this_kernel_when_available() {
        // Real BTF, when the machine has it: offsets exist and are plausible.
        let Some(btf) = this_kernel() else {
            return;
        };
        let mm = offset(&btf, "task_struct", "mm");
        let lock = offset(&btf, "mm_struct", "mmap_lock");
        let owner = offset(&btf, "mutex", "owner");
        assert!(mm > 0 && mm < 8192, "task_struct.mm at {mm}");
        assert!(lock < 4096, "mm_struct.mmap_lock at {lock}");
        assert_eq!(owner, 0, "mutex.owner is the first member");
        let pid = offset(&btf, "task_struct", "pid");
        let tgid = offset(&btf, "task_struct", "tgid");
        assert_eq!(tgid, pid + 4, "tgid follows pid");
        eprintln!("task_struct.mm={mm} mm_struct.mmap_lock={lock} pid={pid}");
        // The block and FUSE raw tracepoints lockpath reads (5.11+: the request first).
        assert_eq!(
            btf.raw_tracepoint_arg("block_rq_issue", "request")
                .expect("block_rq_issue"),
            0
        );
        assert_eq!(btf.enum_value("REQ_OP_FLUSH"), Some(2));
        assert!(btf.member_pointer_offset("request", "q").is_ok());
        if let Ok(args) = btf.raw_tracepoint_args("fuse_request_send") {
            assert_eq!(args, vec!["fuse_req"]);
            let opcode = offset(&btf, "fuse_req", "in.h.opcode");
            let pid = offset(&btf, "fuse_req", "in.h.pid");
            assert!(pid > opcode, "{opcode} {pid}");
        }
    }

    #[test]
    fn lock_members_by_offset_on_this_kernel() {
        let Some(btf) = this_kernel() else {
            return;
        };
        let f_pos_lock = offset(&btf, "file", "f_pos_lock");
        let wait_lock = offset(&btf, "mutex", "wait_lock");
        let mmap_lock = offset(&btf, "mm_struct", "mmap_lock");
        for (ty, at, member) in [
            ("file", f_pos_lock, Some("f_pos_lock")),
            ("file", f_pos_lock + wait_lock, Some("f_pos_lock.wait_lock")),
            ("mm_struct", mmap_lock, Some("mmap_lock")),
            // No lock starts one byte into one, or at a plain field.
            ("file", f_pos_lock + 1, None),
            ("nope", 0, None),
        ] {
            assert_eq!(btf.lock_member_at(ty, at).as_deref(), member, "{ty} + {at}");
        }
        // The runqueue lock by the per-CPU area's layout.
        let runqueues = btf.percpu_offset("runqueues").expect("per-CPU runqueues");
        let rq_lock = offset(&btf, "rq", "__lock");
        assert_eq!(
            btf.percpu_lock_at(runqueues + rq_lock).as_deref(),
            Some("runqueues.__lock")
        );
        assert_eq!(btf.percpu_lock_at(runqueues + rq_lock + 1), None);
        // An array of them: the second timer base's lock.
        let timer_bases = btf
            .percpu_offset("timer_bases")
            .expect("per-CPU timer_bases");
        let base_lock = offset(&btf, "timer_base", "lock");
        assert_eq!(
            btf.percpu_lock_at(timer_bases + base_lock).as_deref(),
            Some("timer_bases[0].lock")
        );
    }
}
