//! The `bpf(2)` map commands lockpath issues itself (aya does not offer them): creating a
//! map, reading and removing an entry in one step, and writing or removing an entry of a
//! map the programs also write, with the kernel's conditions.

use std::os::fd::{AsFd, AsRawFd};

use anyhow::{bail, Context, Result};
use aya::maps::{Map, MapData};

pub(crate) const BPF_MAP_CREATE: libc::c_long = 0;
pub(crate) const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
pub(crate) const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
pub(crate) const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
pub(crate) const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
pub(crate) const BPF_MAP_LOOKUP_AND_DELETE_ELEM: libc::c_long = 21;
pub(crate) const BPF_MAP_TYPE_HASH: u32 = 1;
pub(crate) const BPF_F_NO_PREALLOC: u32 = 1;
/// The kernel's internal "operation not supported" (not in libc).
pub(crate) const ENOTSUPP: i32 = 524;

/// `union bpf_attr` for BPF_MAP_CREATE (the fields used; the kernel takes a shorter
/// attribute as zero-extended).
#[repr(C)]
#[derive(Default)]
pub(crate) struct CreateAttr {
    pub(crate) map_type: u32,
    pub(crate) key_size: u32,
    pub(crate) value_size: u32,
    pub(crate) max_entries: u32,
    pub(crate) map_flags: u32,
    pub(crate) inner_map_fd: u32,
    pub(crate) numa_node: u32,
    pub(crate) map_name: [u8; 16],
}

/// `union bpf_attr` for the element commands (`value` is `next_key` for GET_NEXT_KEY).
#[repr(C)]
#[derive(Default)]
pub(crate) struct ElemAttr {
    pub(crate) map_fd: u32,
    pub(crate) _pad: u32,
    pub(crate) key: u64,
    pub(crate) value: u64,
    pub(crate) flags: u64,
}

pub(crate) fn bpf<T>(command: libc::c_long, attr: &mut T) -> std::io::Result<i64> {
    // SAFETY: `attr` is a live, initialized `repr(C)` prefix of `union bpf_attr` of
    // the given size; the pointers inside it point to buffers of the map's key and
    // value sizes owned by the caller for the duration of the call.
    let result = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            command,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    match result {
        -1 => Err(std::io::Error::last_os_error()),
        fd => Ok(fd),
    }
}

pub(crate) fn elem(fd: i32, key: &[u8], value: &mut [u8], flags: u64) -> ElemAttr {
    ElemAttr {
        map_fd: fd as u32,
        _pad: 0,
        key: key.as_ptr() as u64,
        value: value.as_mut_ptr() as u64,
        flags,
    }
}

/// BPF_MAP_DELETE_ELEM's attribute: the kernel wants every field after the key zero.
pub(crate) fn delete(fd: i32, key: &[u8]) -> std::io::Result<i64> {
    let mut attr = ElemAttr {
        map_fd: fd as u32,
        key: key.as_ptr() as u64,
        ..Default::default()
    };
    bpf(BPF_MAP_DELETE_ELEM, &mut attr)
}

/// `BPF_NOEXIST` / `BPF_EXIST` of BPF_MAP_UPDATE_ELEM.
pub(crate) const BPF_NOEXIST: u64 = 1;
pub(crate) const BPF_EXIST: u64 = 2;

/// Writes `value` under `key` in a hash map the programs also write, with `flags`
/// (`BPF_EXIST`: only over an entry still there; `BPF_NOEXIST`: only where none is).
/// Returns whether it was written (false: the entry was, or was not, there).
pub(crate) fn write_entry<K: aya::Pod, V: aya::Pod>(
    map: &Map,
    key: &K,
    value: &V,
    flags: u64,
) -> Result<bool> {
    let fd = raw_fd(map)?;
    // SAFETY: `K` and `V` are plain data (`Pod`); their bytes are read for the call only.
    let key = unsafe {
        std::slice::from_raw_parts(key as *const K as *const u8, std::mem::size_of::<K>())
    };
    let mut value_bytes = vec![0u8; std::mem::size_of::<V>()];
    // SAFETY: as above, copied into a buffer of the value's size.
    value_bytes.copy_from_slice(unsafe {
        std::slice::from_raw_parts(value as *const V as *const u8, std::mem::size_of::<V>())
    });
    let mut attr = elem(fd, key, &mut value_bytes, flags);
    match bpf(BPF_MAP_UPDATE_ELEM, &mut attr) {
        Ok(_) => Ok(true),
        Err(err) if matches!(err.raw_os_error(), Some(libc::ENOENT) | Some(libc::EEXIST)) => {
            Ok(false)
        }
        Err(err) => Err(err).context("cannot write a map entry"),
    }
}

/// Removes `key` from a hash map the programs also write, if its value is still one
/// that `is_ours` recognizes (the programs may have replaced it meanwhile).
pub(crate) fn remove_entry<K: aya::Pod, V: aya::Pod>(
    map: &Map,
    key: &K,
    is_ours: impl Fn(&V) -> bool,
) -> Result<()> {
    let typed: aya::maps::HashMap<&MapData, K, V> =
        aya::maps::HashMap::try_from(map).context("unexpected map type")?;
    if typed.get(key, 0).is_ok_and(|value| is_ours(&value)) {
        let fd = raw_fd(map)?;
        // SAFETY: `K` is plain data; its bytes are read for the call only.
        let key = unsafe {
            std::slice::from_raw_parts(key as *const K as *const u8, std::mem::size_of::<K>())
        };
        match delete(fd, key) {
            Ok(_) => {}
            Err(err) if err.raw_os_error() == Some(libc::ENOENT) => {}
            Err(err) => return Err(err).context("cannot remove a map entry"),
        }
    }
    Ok(())
}

pub(crate) fn raw_fd(map: &Map) -> Result<i32> {
    match map {
        Map::HashMap(data) => Ok(data.fd().as_fd().as_raw_fd()),
        _ => bail!("not a hash map"),
    }
}
