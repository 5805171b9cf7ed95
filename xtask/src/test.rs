//! `cargo xtask test`: set-up, build, unit tests, then the privileged integration tests, then
//! the Debian package built and tested.
use crate::util::{cargo, require_root, sh};

/// The kernel layer's suites that the generic-XDP and tcx passes run again (module paths in
/// tests/it, as test-name filters).
const KERNEL_SUITES: [&str; 5] = [
    "kernel::l4_engine::",
    "kernel::udp::",
    "kernel::http::",
    "kernel::node_trust::",
    "kernel::tunnel::",
];
/// Suites that follow PROBED_XDP_MODE but not PROBED_HOOK: in the generic-XDP pass only.
const XDP_MODE_SUITES: [&str; 2] = ["kernel::rx_counters::", "kernel::harness_cleanup::"];

pub fn run(filter: Option<&str>) -> anyhow::Result<()> {
    require_root("the integration tests")?;
    crate::setup::run()?;
    crate::build::run_build(false, true)?;
    let mut unit = cargo();
    unit.args(["test", "-p", "probe-common", "-p", "probe-user", "-p", "xtask"]);
    if let Some(f) = filter {
        unit.arg(f);
    }
    sh(&mut unit)?;
    // The fuzz checks over their committed seeds, built without libFuzzer, in the workspace's
    // target directory so that the crates it shares with probe-user are built once.
    if filter.is_none() {
        let mut seeds = cargo();
        seeds
            .args([
                "test",
                "--manifest-path",
                "fuzz/Cargo.toml",
                "--no-default-features",
                "--lib",
            ])
            .env("CARGO_TARGET_DIR", crate::util::root().join("target"));
        sh(&mut seeds)?;
    }
    // The integration tests: one binary (tests/it), a module per layer, so that a filter such
    // as `kernel::` selects a layer.
    let mut integration = cargo();
    integration.args(["test", "-p", "probed-tests"]);
    if let Some(f) = filter {
        integration.arg(f);
    }
    sh(&mut integration)?;
    // The integration tests run probe_rx in native mode (what `auto` picks on veth). Drivers
    // without native XDP get generic mode, so the kernel engine's suites run once more there.
    if filter.is_none() {
        // The engine's suites, whose engine attaches as PROBED_XDP_MODE and PROBED_HOOK say:
        // once more in generic mode, and once at tcx ingress (`[source] hook = "tcx"`, the hook
        // beside another XDP owner). Not kernel::vlan (tcx sees one tag fewer), kernel::hooks
        // (each test names its hook) nor kernel::flood (its daemon attaches as its config says).
        let passes: [(&str, &str, &[&str]); 2] = [
            ("PROBED_XDP_MODE", "skb", &XDP_MODE_SUITES),
            ("PROBED_HOOK", "tcx", &[]),
        ];
        for (var, value, more) in passes {
            let mut again = cargo();
            again
                .args(["test", "-p", "probed-tests", "--test", "it", "--"])
                .args(KERNEL_SUITES)
                .args(more)
                .env(var, value);
            sh(&mut again)?;
        }
    }
    // The Debian package, from the release build: inspected, linted, then installed, run,
    // upgraded and purged in a throwaway Debian root (tests/it/package; ignored in the pass
    // above, which has no package to give them).
    if filter.is_none_or(|f| f.contains("package")) {
        let deb = crate::deb::build()?;
        let mut package = cargo();
        package
            .args(["test", "-p", "probed-tests", "--test", "it", "--", "--ignored"])
            .arg(filter.unwrap_or("package::"))
            .env("PROBED_DEB", &deb);
        sh(&mut package)?;
    }
    Ok(())
}
