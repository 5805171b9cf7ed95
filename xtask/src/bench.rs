//! `cargo xtask bench WHICH`: benchmarks, run in release, reporting side-by-side ratios.
use anyhow::bail;

use crate::util::{cargo, require_root, sh};

pub fn run(which: &str, extra: &[String]) -> anyhow::Result<()> {
    require_root("benchmarks")?;
    crate::setup::run()?;
    let mut cmd = cargo();
    match which {
        "l4" => cmd.args(["run", "--release", "-p", "probed-tests", "--bin", "bench-l4"]),
        "http" => cmd.args(["run", "--release", "-p", "probe-user", "--example", "bench_http"]),
        "schedule" => {
            // The scheduler alone on a virtual clock (1M targets), then live on the kernel engine.
            sh(cargo().args(["run", "--release", "-p", "probe-user", "--example", "bench_schedule"]))?;
            cmd.args(["run", "--release", "-p", "probed-tests", "--bin", "bench-schedule"])
        }
        "sinks" => cmd.args(["run", "--release", "-p", "probed-tests", "--bin", "bench-sinks"]),
        "peers" => {
            // probed as the operator runs it (the release binary), against HAProxy and nginx.
            sh(cargo().args(["build", "--release", "-p", "probe-user", "--bin", "probed"]))?;
            cmd.args(["run", "--release", "-p", "probed-tests", "--bin", "bench-peers", "--"])
                .args(extra)
        }
        "dns" => {
            // probed as the operator runs it, so that its process's CPU is its own, against gdnsd.
            sh(cargo().args(["build", "--release", "-p", "probe-user", "--bin", "probed"]))?;
            cmd.args(["run", "--release", "-p", "probed-tests", "--bin", "bench-dns", "--"])
                .args(extra)
        }
        "million" => {
            // probed as the operator runs it, so that its RSS and CPU are its own.
            sh(cargo().args(["build", "--release", "-p", "probe-user", "--bin", "probed"]))?;
            cmd.args(["run", "--release", "-p", "probed-tests", "--bin", "bench-million", "--"])
                .args(extra)
        }
        "cluster" => cmd
            .args(["run", "--release", "-p", "probed-tests", "--bin", "bench-cluster", "--"])
            .args(extra),
        other => bail!("unknown benchmark {other:?}: choose l4, http, schedule, sinks, peers, dns, cluster or million"),
    };
    sh(&mut cmd)
}
