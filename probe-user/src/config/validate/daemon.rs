//! `[daemon]`: where the API listens, where events go, the bpffs pin directory and the state
//! file.
use std::{net::SocketAddr, path::PathBuf};

use toml::de::DeValue;

use super::opt_table;
use crate::config::{
    model::*,
    read::{Item, Reader},
};

const DEFAULT_API: &str = "127.0.0.1:9180";
const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/probed";
const DEFAULT_STATE_FILE: &str = "/var/lib/probed/state.json";

pub(super) fn daemon(r: &mut Reader<'_>, v: Option<&toml::Spanned<DeValue<'_>>>) -> Option<Daemon> {
    let keys = ["api_listen", "api_allow_remote", "events", "pin_dir", "state_file"];
    let Some(t) = opt_table(r, v, "daemon", &keys)? else {
        return Some(Daemon {
            api: ApiListen::Tcp(DEFAULT_API.parse().expect("default API address parses")),
            events: EventsOutput::Stdout,
            pin_dir: PathBuf::from(DEFAULT_PIN_DIR),
            state_file: PathBuf::from(DEFAULT_STATE_FILE),
        });
    };
    let allow_remote = r.boolean(&t, "api_allow_remote").is_some_and(|b| b.v);
    let api = match r.string(&t, "api_listen") {
        None => Some(ApiListen::Tcp(DEFAULT_API.parse().expect("default API address parses"))),
        Some(item) => api_listen(r, &item, allow_remote),
    };
    let events = match r.string(&t, "events") {
        None => Some(EventsOutput::Stdout),
        Some(item) if item.v == "-" => Some(EventsOutput::Stdout),
        Some(item) if item.v.trim().is_empty() => {
            r.bad(&item, "expected a file path, or \"-\" for standard output");
            None
        }
        Some(item) => Some(EventsOutput::File(PathBuf::from(&item.v))),
    };
    let pin_dir = match r.string(&t, "pin_dir") {
        None => Some(PathBuf::from(DEFAULT_PIN_DIR)),
        Some(item) if item.v.starts_with('/') => Some(PathBuf::from(&item.v)),
        Some(item) => {
            r.bad(&item, "expected an absolute path on bpffs, e.g. \"/sys/fs/bpf/probed\"");
            None
        }
    };
    let state_file = match r.string(&t, "state_file") {
        None => Some(PathBuf::from(DEFAULT_STATE_FILE)),
        Some(item) if item.v.starts_with('/') && !item.v.ends_with('/') => Some(PathBuf::from(&item.v)),
        Some(item) => {
            r.bad(
                &item,
                "expected an absolute file path, e.g. \"/var/lib/probed/state.json\"",
            );
            None
        }
    };
    Some(Daemon {
        api: api?,
        events: events?,
        pin_dir: pin_dir?,
        state_file: state_file?,
    })
}

fn api_listen(r: &mut Reader<'_>, item: &Item<String>, allow_remote: bool) -> Option<ApiListen> {
    if let Some(path) = item.v.strip_prefix("unix:") {
        if path.starts_with('/') {
            return Some(ApiListen::Unix(PathBuf::from(path)));
        }
        r.bad(
            item,
            "a unix socket needs an absolute path, e.g. \"unix:/run/probed.sock\"",
        );
        return None;
    }
    let Ok(addr) = item.v.parse::<SocketAddr>() else {
        r.bad(
            item,
            "expected a loopback address and port like \"127.0.0.1:9180\", or \"unix:/run/probed.sock\"",
        );
        return None;
    };
    if !addr.ip().is_loopback() && !allow_remote {
        r.bad(
            item,
            "the API is loopback-only unless daemon.api_allow_remote = true (it can disable endpoints)",
        );
        return None;
    }
    Some(ApiListen::Tcp(addr))
}
