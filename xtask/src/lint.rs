//! `cargo xtask lint`: no module cycle in probe-user (`cycles.rs`), then formatting and
//! clippy, warnings as errors, for the workspace and for probe-ebpf (outside the workspace). The lint set lives in the manifests' `[lints]` tables;
//! each exception in the code is an `#[expect(lint, reason = "...")]`.
use crate::util::{cargo, root, sh};

/// Where clippy checks probe-ebpf: apart from the eBPF build's own target directory. Clippy
/// checks it for the host (Debian's eBPF toolchain has no clippy); the code is the same.
const EBPF_CLIPPY_TARGET: &str = "target/clippy-ebpf";

pub fn run() -> anyhow::Result<()> {
    let cycles = crate::cycles::find(&root().join("probe-user/src"))?;
    for c in &cycles {
        eprintln!("lint: module cycle: {}", c.join(" <-> "));
    }
    anyhow::ensure!(cycles.is_empty(), "probe-user has module cycles (see above)");
    sh(cargo().args(["fmt", "--all", "--", "--check"]))?;
    sh(cargo()
        .args(["fmt", "--", "--check"])
        .current_dir(root().join("probe-ebpf")))?;
    sh(cargo().args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    let target_dir = root().join(EBPF_CLIPPY_TARGET);
    // With the unstable features the eBPF build itself enables (build.rs sets the same): the
    // passive observers use core's atomic add intrinsic.
    sh(cargo()
        .env("RUSTC_BOOTSTRAP", "1")
        .args(["clippy", "--target-dir"])
        .arg(&target_dir)
        .args(["--", "-D", "warnings"])
        .current_dir(root().join("probe-ebpf")))?;
    eprintln!("lint: clean");
    Ok(())
}
