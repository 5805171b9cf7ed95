//! `[daemon]`: where the API listens and who may change state through it, where events go,
//! the bpffs pin directory, the state file, the L7 worker threads and where HTTP checks run.
use std::{net::SocketAddr, path::PathBuf};

use toml::de::DeValue;

use super::opt_table;
use crate::config::{
    model::*,
    read::{Item, Reader, Table},
    reference,
};

const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/probed";
const DEFAULT_STATE_FILE: &str = "/var/lib/probed/state.json";

pub(super) fn daemon(r: &mut Reader<'_>, v: Option<&toml::Spanned<DeValue<'_>>>) -> Option<Daemon> {
    let Some(t) = opt_table(r, v, "daemon", &reference::DAEMON)? else {
        return Some(Daemon {
            api: Api::new(default_listen()),
            events: EventsOutput::Stdout,
            pin_dir: PathBuf::from(DEFAULT_PIN_DIR),
            state_file: PathBuf::from(DEFAULT_STATE_FILE),
            l7_workers: None,
            http_probes: HttpProbes::Kernel,
        });
    };
    let api = api(r, &t);
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
    let l7_workers = match r.int(&t, "l7_workers") {
        None => Some(None),
        Some(item) => match u16::try_from(item.v)
            .ok()
            .filter(|n| (1..=Daemon::MAX_L7_WORKERS).contains(n))
        {
            Some(n) => Some(Some(n)),
            None => {
                r.bad(
                    &item,
                    format!(
                        "expected 1 to {} threads for HTTP(S) and UDP request/response probes (leave it out for one per core)",
                        Daemon::MAX_L7_WORKERS
                    ),
                );
                None
            }
        },
    };
    let http_probes = match r.string(&t, "http_probes") {
        None => Some(HttpProbes::Kernel),
        Some(item) => match item.v.as_str() {
            "kernel" => Some(HttpProbes::Kernel),
            "sockets" => Some(HttpProbes::Sockets),
            _ => {
                r.bad(
                    &item,
                    format!(
                        "expected one of {:?}: where plain HTTP checks run (in probe_rx where the check allows it, or each through a socket)",
                        HttpProbes::NAMES
                    ),
                );
                None
            }
        },
    };
    Some(Daemon {
        api: api?,
        events: events?,
        pin_dir: pin_dir?,
        state_file: state_file?,
        l7_workers: l7_workers?,
        http_probes: http_probes?,
    })
}

fn default_listen() -> ApiListen {
    ApiListen::Unix(PathBuf::from(Api::DEFAULT_SOCKET))
}

/// The `api_*` keys; the socket keys only go with a unix listener, the token only with TCP.
fn api(r: &mut Reader<'_>, t: &Table<'_, '_>) -> Option<Api> {
    let allow_remote = r.boolean(t, "api_allow_remote").is_some_and(|b| b.v);
    let listen = match r.string(t, "api_listen") {
        None => Some(default_listen()),
        Some(item) => api_listen(r, &item, allow_remote),
    };
    let unix = matches!(listen, Some(ApiListen::Unix(_)));
    let tcp = matches!(listen, Some(ApiListen::Tcp(_)));
    let mut ok = listen.is_some();
    let mut out = Api::new(listen.unwrap_or_else(default_listen));
    if let Some(item) = r.string(t, "api_socket_group") {
        match socket_group(&item.v) {
            _ if tcp => r.bad(
                &item,
                "applies to a unix socket only (api_listen = \"unix:/run/probed/api.sock\"); over TCP, mutating routes need api_token_file",
            ),
            Some(g) => out.socket_group = g,
            None => r.bad(
                &item,
                "expected a group name (letters, digits, '_', '-', '.', at most 32, not starting with '-') or a numeric gid",
            ),
        }
        ok &= !tcp && socket_group(&item.v).is_some();
    }
    if let Some(item) = r.int(t, "api_socket_mode") {
        let mode = u32::try_from(item.v).ok().filter(|m| *m <= 0o777 && m & 0o600 == 0o600);
        match mode {
            _ if tcp => r.bad(&item, "applies to a unix socket only (api_listen = \"unix:...\")"),
            Some(m) => out.socket_mode = m,
            None => r.bad(
                &item,
                format!(
                    "{} is not an allowed socket mode: write it in octal, 0o600 to 0o777, with the owner's read and write bits (0o600) set, e.g. 0o660",
                    if item.v >= 0 { format!("0o{:o}", item.v) } else { item.v.to_string() }
                ),
            ),
        }
        ok &= !tcp && mode.is_some();
    }
    if let Some(item) = r.string(t, "api_token_file") {
        if unix {
            r.bad(
                &item,
                "applies to a TCP listener only; on the unix socket the peer's uid and groups decide",
            );
            ok = false;
        } else if item.v.starts_with('/') && !item.v.ends_with('/') {
            out.token_file = Some(PathBuf::from(&item.v));
        } else {
            r.bad(&item, "expected an absolute file path, e.g. \"/etc/probed/api.token\"");
            ok = false;
        }
    }
    ok.then_some(out)
}

/// A group name as `useradd` accepts it, or a numeric gid.
fn socket_group(s: &str) -> Option<ApiGroup> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().ok().map(ApiGroup::Gid);
    }
    let valid = (1..=32).contains(&s.len())
        && !s.starts_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    valid.then(|| ApiGroup::Name(s.to_string()))
}

fn api_listen(r: &mut Reader<'_>, item: &Item<String>, allow_remote: bool) -> Option<ApiListen> {
    if let Some(path) = item.v.strip_prefix("unix:") {
        if path.starts_with('/') {
            return Some(ApiListen::Unix(PathBuf::from(path)));
        }
        r.bad(
            item,
            "a unix socket needs an absolute path, e.g. \"unix:/run/probed/api.sock\"",
        );
        return None;
    }
    let Ok(addr) = item.v.parse::<SocketAddr>() else {
        r.bad(
            item,
            "expected \"unix:/run/probed/api.sock\" or a loopback address and port like \"127.0.0.1:9180\"",
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
