//! `cargo xtask bench WHICH`: benchmarks, run in release, reporting side-by-side ratios. Each is
//! a binary of the bench crate (bench/src/bin/NAME.rs).
use anyhow::bail;

use crate::util::{cargo, require_root, sh};

/// The benchmarks `cargo xtask bench` knows, each with the binaries it runs in turn.
const BENCHMARKS: &[(&str, &[&str])] = &[
    ("l4", &["l4"]),
    ("http", &["http"]),
    // HTTPS and gRPC checks (TLS presence and verified, full and resumed) beside plain HTTP.
    ("tls", &["tls"]),
    // The scheduler alone on a virtual clock (1M checks), then live on the kernel engine.
    ("schedule", &["schedule-virtual", "schedule-live"]),
    ("sinks", &["sinks"]),
    ("peers", &["peers"]),
    ("dns", &["dns"]),
    ("million", &["million"]),
    ("cluster", &["cluster"]),
    // What the passive observers cost per forwarded packet, against the node without them.
    ("passive", &["passive"]),
];

pub fn run(which: &str, extra: &[String]) -> anyhow::Result<()> {
    let Some((_, bins)) = BENCHMARKS.iter().find(|(name, _)| *name == which) else {
        let names: Vec<&str> = BENCHMARKS.iter().map(|(name, _)| *name).collect();
        bail!("unknown benchmark {which:?}: choose one of {}", names.join(", "));
    };
    require_root("benchmarks")?;
    crate::setup::run()?;
    if matches!(which, "peers" | "dns" | "million") {
        // probed as the operator runs it (the release binary), so that its process's CPU and
        // RSS are its own: against HAProxy and nginx (peers), gdnsd (dns), or alone (million).
        sh(cargo().args(["build", "--release", "-p", "probe-user", "--bin", "probed"]))?;
    }
    for bin in *bins {
        let mut cmd = cargo();
        cmd.args(["run", "--release", "-p", "probed-bench", "--bin", bin, "--"]);
        // The arguments are one binary's: a benchmark of several takes none.
        if bins.len() == 1 {
            cmd.args(extra);
        }
        sh(&mut cmd)?;
    }
    Ok(())
}
