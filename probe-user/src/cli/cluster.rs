//! `probed cluster`: the members and who probes what.
#[allow(clippy::wildcard_imports)]
use super::*;

pub(super) fn cluster(api: &ApiArgs, json: bool) -> anyhow::Result<ExitCode> {
    let resp = api_get(api, "GET", "/v1/cluster")?;
    if resp.status != 200 {
        anyhow::bail!("{}", api_error(&resp.body));
    }
    if json {
        println!("{}", resp.body);
        return Ok(ExitCode::SUCCESS);
    }
    let view: probed::daemon::views::ClusterView = serde_json::from_str(&resp.body).context("decode the cluster")?;
    print!("{}", probed::render::render_cluster(&view));
    Ok(ExitCode::SUCCESS)
}
