//! `probed reload`: the daemon re-reads its file; what applied, what needs a restart.
#[allow(clippy::wildcard_imports)]
use super::*;

pub(super) fn reload(api: &ApiArgs) -> anyhow::Result<ExitCode> {
    let resp = api_get(api, "POST", "/v1/reload")?;
    if resp.status != 200 {
        eprintln!("probed: {}", api_error(&resp.body));
        return Ok(ExitCode::FAILURE);
    }
    let r: probed::daemon::ReloadReport = serde_json::from_str(&resp.body).context("decode the reload report")?;
    println!(
        "reloaded: {} endpoints kept their state, {} added, {} removed",
        r.kept, r.added, r.removed
    );
    if !r.restart_needed.is_empty() {
        println!("restart to apply: {}", r.restart_needed.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}
