//! Kfunc calls in the eBPF object. aya 0.14 relocates no kfunc calls, so the kernel side
//! calls a kfunc through a stand-in: a helper call with a number no helper has
//! (`profiler_common::lockname::KMEM_CACHE_CALL_MARK`). Before loading, each stand-in is
//! rewritten for the running kernel: into a call of the kfunc (its BTF id in vmlinux)
//! where the kernel has it, else into `r0 = 0`, which the caller takes as "none". An
//! instruction is replaced by one of the same size, so no jump moves.

use anyhow::{Context, Result};
use object::{Object, ObjectSection, SectionKind};
use profiler_common::lockname::KMEM_CACHE_CALL_MARK;

use crate::btf::Btf;

/// The kfunc that names a slab object's cache (Linux 6.13).
pub const KMEM_CACHE_KFUNC: &str = "bpf_get_kmem_cache";

/// `BPF_JMP | BPF_CALL`.
const CALL: u8 = 0x85;
/// `BPF_ALU64 | BPF_MOV | BPF_K`.
const MOV64_IMM: u8 = 0xb7;
/// Source register field of a call to a kernel function (`BPF_PSEUDO_KFUNC_CALL`).
const PSEUDO_KFUNC_CALL: u8 = 2;

/// Each stand-in and the kfunc it stands for.
const STAND_INS: &[(i32, &str)] = &[(KMEM_CACHE_CALL_MARK, KMEM_CACHE_KFUNC)];

/// `object` with every stand-in call rewritten for the kernel `btf` describes (`None`:
/// no BTF, so no kfunc either).
pub fn patch_object(object: &[u8], btf: Option<&Btf>) -> Result<Vec<u8>> {
    let file = object::File::parse(object).context("the eBPF object is not ELF")?;
    let kfuncs: Vec<(i32, Option<u32>)> = STAND_INS
        .iter()
        .map(|&(mark, name)| (mark, btf.and_then(|btf| btf.function_id(name))))
        .collect();
    let mut patched = object.to_vec();
    for section in file.sections() {
        if section.kind() != SectionKind::Text {
            continue;
        }
        let Some((offset, size)) = section.file_range() else {
            continue;
        };
        let code = patched
            .get_mut(offset as usize..(offset + size) as usize)
            .context("an eBPF program section lies outside the object")?;
        patch_code(code, &kfuncs);
    }
    Ok(patched)
}

/// Rewrites the stand-in calls among the 8-byte instructions of `code`; `kfuncs` maps
/// each stand-in to the kfunc's BTF id, `None` where the kernel lacks it.
fn patch_code(code: &mut [u8], kfuncs: &[(i32, Option<u32>)]) {
    for insn in code.chunks_exact_mut(8) {
        // Opcode, registers (dst low nibble, src high), 16-bit offset, 32-bit immediate.
        if insn[0] != CALL || insn[1] != 0 || insn[2] != 0 || insn[3] != 0 {
            continue;
        }
        let imm = i32::from_le_bytes([insn[4], insn[5], insn[6], insn[7]]);
        let Some(&(_, kfunc)) = kfuncs.iter().find(|(mark, _)| *mark == imm) else {
            continue;
        };
        let (opcode, regs, imm) = match kfunc {
            Some(btf_id) => (CALL, PSEUDO_KFUNC_CALL << 4, btf_id),
            None => (MOV64_IMM, 0, 0),
        };
        insn[0] = opcode;
        insn[1] = regs;
        insn[4..8].copy_from_slice(&imm.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insn(opcode: u8, regs: u8, imm: i32) -> [u8; 8] {
        let mut bytes = [opcode, regs, 0, 0, 0, 0, 0, 0];
        bytes[4..].copy_from_slice(&imm.to_le_bytes());
        bytes
    }

    #[test]
    fn stand_ins_become_the_kfunc_or_a_zero() {
        let helper = insn(CALL, 0, 113); // bpf_probe_read_kernel: left alone
        let stand_in = insn(CALL, 0, KMEM_CACHE_CALL_MARK);
        let code: Vec<u8> = [helper, stand_in, helper].concat();

        let mut with = code.clone();
        patch_code(&mut with, &[(KMEM_CACHE_CALL_MARK, Some(63863))]);
        assert_eq!(with[..8], helper);
        assert_eq!(with[8..16], insn(CALL, 0x20, 63863));
        assert_eq!(with[16..], helper);

        let mut without = code.clone();
        patch_code(&mut without, &[(KMEM_CACHE_CALL_MARK, None)]);
        assert_eq!(without[8..16], insn(MOV64_IMM, 0, 0));
        assert_eq!(without[..8], helper);
    }

    #[test]
    fn the_built_object_keeps_no_stand_in() {
        let object = crate::ebpf_object::EBPF_OBJECT;
        if object.is_empty() {
            eprintln!("SKIP: built without the eBPF object");
            return;
        }
        let stand_in = insn(CALL, 0, KMEM_CACHE_CALL_MARK);
        let count = |bytes: &[u8]| bytes.windows(8).filter(|w| *w == stand_in).count();
        assert!(count(object) > 0, "the lock programs call the stand-in");
        let patched = patch_object(object, None).expect("patch");
        assert_eq!(patched.len(), object.len());
        assert_eq!(count(&patched), 0);
    }
}
