//! `probed enable|disable|always-serve|drain PROFILE [ENDPOINT]`.
#[allow(clippy::wildcard_imports)]
use super::*;

/// `probed enable|disable|always-serve|drain PROFILE ENDPOINT`.
pub(super) fn admin(a: &AdminArgs, action: AdminAction) -> anyhow::Result<ExitCode> {
    let path = match &a.endpoint {
        Some(endpoint) => format!(
            "/v1/endpoints/{}/{}/{action}",
            percent_encode(&a.profile),
            percent_encode(endpoint)
        ),
        None if !action.for_profiles() => {
            anyhow::bail!("{action} applies to one endpoint: name it")
        }
        None => format!("/v1/profiles/{}/{action}", percent_encode(&a.profile)),
    };
    let resp = api_get(&a.api, "POST", &path)?;
    if resp.status != 200 {
        eprintln!("probed: {}", api_error(&resp.body));
        return Ok(ExitCode::FAILURE);
    }
    let v = serde_json::from_str::<serde_json::Value>(&resp.body).ok();
    let field = |key: &str| v.as_ref().and_then(|v| v.get(key)).map(ToString::to_string);
    match &a.endpoint {
        Some(endpoint) => {
            let admin = field("admin").map_or_else(|| action.to_string(), |s| s.trim_matches('"').to_string());
            println!("{}/{endpoint}: {admin}", a.profile);
        }
        None => {
            let status = field("status").map_or_else(|| action.to_string(), |s| s.trim_matches('"').to_string());
            println!("{}: {status}", a.profile);
        }
    }
    Ok(ExitCode::SUCCESS)
}
