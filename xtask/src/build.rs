//! `cargo xtask build`: probe-user's build script builds the eBPF object (probe-ebpf, for
//! bpfel-unknown-none with BTF) and embeds it, so building the workspace builds both.
use crate::util::{cargo, sh};

pub fn run_build(release: bool, all_targets: bool) -> anyhow::Result<()> {
    let mut cmd = cargo();
    cmd.args(["build", "--workspace"]);
    if all_targets {
        cmd.arg("--all-targets");
    }
    if release {
        cmd.arg("--release");
    }
    sh(&mut cmd)
}

pub fn run(release: bool) -> anyhow::Result<()> {
    crate::setup::run()?;
    run_build(release, false)?;
    let obj = crate::util::root().join("target/ebpf/bpfel-unknown-none/release/probe");
    eprintln!("eBPF object: {}", obj.display());
    Ok(())
}
