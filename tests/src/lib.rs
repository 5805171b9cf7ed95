//! Test harness: network namespaces joined by veth, AnyIP backend blocks, real listeners and
//! nftables rules, all removed on drop (and so on panic).
//!
//! Every test builds its own namespaces with names unique to the process and the test, so
//! tests run in parallel (all of them in one process, the binary tests/it); addresses come from
//! 198.18.0.0/15 and 2001:2::/48 only. The few that must not share the process or the machine
//! say so with `serial`.
pub mod certs;
pub mod chroot;
pub mod daemon;
pub mod dig;
pub mod fleet;
pub mod flood;
pub mod forge;
pub mod grpc;
pub mod http_server;
pub mod knot;
pub mod l4;
pub mod lb;
pub mod manager;
pub mod netns;
pub mod passive;
pub mod procs;
pub mod reflector;
pub mod serial;
pub mod servers;
pub mod star;
pub mod topo;
pub mod tunnel;

pub use netns::Netns;
pub use topo::Topology;

/// Runs a command to completion and panics with its output when it fails.
pub fn run(cmd: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("spawn {cmd}: {e}"));
    if !out.status.success() {
        panic!(
            "{cmd} {} failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A short name unique to this process and call, for namespaces and pin directories.
pub fn unique_name(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A pin directory on bpffs for one test, removed on drop with whatever is left in it.
pub struct TestPins {
    pub path: std::path::PathBuf,
}

impl TestPins {
    pub fn new() -> Self {
        let path = std::path::PathBuf::from("/sys/fs/bpf").join(unique_name("probed-test-"));
        Self { path }
    }
}

impl Default for TestPins {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TestPins {
    fn drop(&mut self) {
        // Sinks pin under a subdirectory (`sinks/`), which outlives the daemon on purpose.
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Cargo's target directory: `CARGO_TARGET_DIR`, else the workspace's target/.
pub fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
        std::path::PathBuf::from,
    )
}

/// `probed check ARGS` run in `ns`, as an operator runs it.
pub fn probed_check(ns: &Netns, args: &[&str]) -> std::process::Output {
    let bin = probed_bin();
    let mut all = vec!["netns", "exec", &ns.name, bin.to_str().unwrap(), "check"];
    all.extend_from_slice(args);
    std::process::Command::new("ip")
        .args(&all)
        .output()
        .expect("run probed check")
}

/// The `probed` binary of this workspace's build (`cargo xtask test` builds it first).
pub fn probed_bin() -> std::path::PathBuf {
    let target = target_dir();
    let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
    let bin = target.join(profile).join("probed");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build -p probe-user` (cargo xtask test does)",
        bin.display()
    );
    bin
}
