//! `probed sinks`: each sink, in sync or not.
#[allow(clippy::wildcard_imports)]
use super::*;

pub(super) fn sinks(api: &ApiArgs, json: bool) -> anyhow::Result<ExitCode> {
    let resp = api_get(api, "GET", "/v1/sinks")?;
    if resp.status != 200 {
        anyhow::bail!("{}", api_error(&resp.body));
    }
    if json {
        println!("{}", resp.body);
        return Ok(ExitCode::SUCCESS);
    }
    let views: Vec<probed::sinks::SinkView> = serde_json::from_str(&resp.body).context("decode the sinks")?;
    println!(
        "{:<16} {:<12} {:>6} {:>8} {:<8} {:>7}  TARGET / LAST ERROR",
        "SINK", "PROFILE", "GEN", "ENTRIES", "IN SYNC", "ERRORS"
    );
    for v in &views {
        println!(
            "{:<16} {:<12} {:>6} {:>8} {:<8} {:>7}  {}{}",
            v.name,
            v.profile,
            v.generation,
            v.entries,
            if v.in_sync { "yes" } else { "NO" },
            v.errors_total,
            v.target,
            v.last_error.as_ref().map(|e| format!("; {e}")).unwrap_or_default()
        );
        // A route sink's prefixes, each on a line of its own under it.
        for r in &v.routes {
            let metric = r.metric.map(|m| format!(" metric {m}")).unwrap_or_default();
            println!("  {:<30} {}{metric}: {}", r.prefix, r.state, r.cause);
        }
    }
    // Exit 1 when any sink does not hold what it should, for scripts and monitoring.
    Ok(if views.iter().all(|v| v.in_sync) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
