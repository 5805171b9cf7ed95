//! `cargo xtask demo`: builds a small fleet in network namespaces and runs probed against it.
use crate::util::{cargo, require_root, sh};

pub fn run(seconds: Option<u64>, cluster: bool) -> anyhow::Result<()> {
    require_root("the demo")?;
    crate::setup::run()?;
    let mut cmd = cargo();
    cmd.args(["run", "--quiet", "-p", "probed-tests", "--bin", "probed-demo", "--"]);
    if let Some(s) = seconds {
        cmd.args(["--seconds", &s.to_string()]);
    }
    if cluster {
        cmd.arg("--cluster");
    }
    sh(&mut cmd)
}
