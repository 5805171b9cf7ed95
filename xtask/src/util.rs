//! Running commands with clear failures, and where the workspace lives.
use std::{path::PathBuf, process::Command};

use anyhow::{bail, Context};

/// The workspace root (the parent of xtask/).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Where cargo puts its output: `CARGO_TARGET_DIR` (relative to the workspace, where `cargo()`
/// runs) or the workspace's target/.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), |d| root().join(d))
}

/// Runs `cmd`, echoing it, and fails with its exit status when it fails.
pub fn sh(cmd: &mut Command) -> anyhow::Result<()> {
    eprintln!("+ {}", render(cmd));
    let status = cmd
        .status()
        .with_context(|| format!("could not start {}", render(cmd)))?;
    if !status.success() {
        bail!("{} failed ({status})", render(cmd));
    }
    Ok(())
}

/// Runs `cmd` quietly and returns its stdout, or None when it cannot start or fails.
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn render(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// cargo, as the caller invoked it (rustup's), rooted at the workspace.
pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// Fails unless running as root: loading XDP programs and creating namespaces needs it.
pub fn require_root(what: &str) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("{what} needs root (CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN for namespaces); run it with sudo");
    }
    Ok(())
}
