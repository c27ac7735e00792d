//! Sets `bpf_target_arch` for this crate as aya-ebpf's build script does for itself:
//! from `--cfg bpf_target_arch="..."` in the rust flags when given (the aarch64 object of
//! `cargo xtask dist`), else the architecture of the machine that builds.

fn main() {
    println!(
        "cargo::rustc-check-cfg=cfg(bpf_target_arch, values(\"x86_64\", \"aarch64\", \"arm\", \"riscv64\", \"powerpc64\", \"s390x\", \"mips\", \"loongarch64\"))"
    );
    println!("cargo::rerun-if-env-changed=CARGO_CFG_BPF_TARGET_ARCH");
    let arch = std::env::var("CARGO_CFG_BPF_TARGET_ARCH").unwrap_or_else(|_| {
        let host = std::env::var("HOST").unwrap_or_default();
        host.split('-').next().unwrap_or_default().to_string()
    });
    println!("cargo::rustc-cfg=bpf_target_arch=\"{arch}\"");
}
