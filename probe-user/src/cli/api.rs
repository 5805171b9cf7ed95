//! What the API subcommands share: the client, its errors, and path encoding.
#[allow(clippy::wildcard_imports)]
use super::*;

pub(super) fn api_get(api: &ApiArgs, method: &str, path: &str) -> anyhow::Result<probed::api::client::Response> {
    api_client(api)?
        .request(method, path)
        .map_err(|e| api_failure(e, &api.api))
}

/// A client for the daemon `api` names, with its token when given.
pub(super) fn api_client(api: &ApiArgs) -> anyhow::Result<probed::api::client::Client> {
    let client = probed::api::client::Client::new(&api.api);
    Ok(match &api.token_file {
        Some(f) => client.with_token_file(f)?,
        None => client,
    })
}

/// A failure to talk to the API at `addr`, with what the operator should look at.
pub(super) fn api_failure(e: probed::api::client::ClientError, addr: &str) -> anyhow::Error {
    use probed::api::client::ClientError;
    let hint = match &e {
        ClientError::Connect { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
            format!("the socket {addr} is for root and the members of daemon.api_socket_group (default probed)")
        }
        ClientError::Timeout { .. } => "the daemon accepted but did not answer; is it stuck?".to_string(),
        _ => format!("is `probed run` up, with daemon.api_listen = {addr:?}? (--api sets the address)"),
    };
    anyhow::Error::new(e).context(hint)
}

pub(super) fn api_error(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
        .unwrap_or_else(|| body.to_string())
}

/// Escapes what a path segment cannot hold as is (endpoint names like `[2001:db8::1]:80`).
pub(super) fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
