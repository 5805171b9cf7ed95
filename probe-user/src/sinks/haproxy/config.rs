//! The haproxy sink's settings, its keys and its reader. Its names go into admin commands, so
//! they are held to a safe alphabet.
use std::path::PathBuf;

use serde::Serialize;

use crate::{
    rules::SinkType,
    schema::{
        keys::{
            words,
            Allowed::OneOf,
            Key,
            Reload::Applies,
            Type,
            Unset::{Required, Value},
        },
        read::{Item, Reader, Table},
    },
    sinks::names::ident,
    wire_enum::wire_enum,
};

/// One backend of a running HAProxy, driven through its admin socket: probed sets each
/// followed server's state and weight; servers it does not follow are left alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HaproxySink {
    /// `stats socket PATH level admin` in haproxy.cfg; absolute.
    pub socket: PathBuf,
    pub backend: String,
    /// What a server whose endpoint is not eligible is put in.
    pub down: HaproxyDown,
    /// Every endpoint of the profile, by name, and the server written for it (its name unless
    /// the endpoint sets `haproxy_server`). Part of the sink's settings, so a reload that
    /// renames a server restarts the sink.
    pub servers: std::collections::BTreeMap<String, String>,
}

wire_enum! {
    /// The state HAProxy holds a server in while its endpoint is not eligible.
    #[derive(Debug)]
    pub enum HaproxyDown {
        /// No traffic at all, established sessions included once they end (`state maint`).
        Maint = "maint",
        /// No new sessions, except persistent ones (`state drain`).
        Drain = "drain",
    }
}

/// One endpoint of the followed profile, as the sink names its server.
pub(crate) struct Server<'a> {
    pub name: &'a str,
    /// `haproxy_server`, when the endpoint sets one.
    pub server: Option<&'a str>,
    pub weight: u32,
}

/// Its keys.
pub const KEYS: &[Key] = &[
    Key::new(
        "socket",
        Type::String,
        Required,
        words("an absolute path"),
        Applies,
        "HAProxy's admin socket (stats socket PATH level admin in haproxy.cfg).",
    )
    .sinks(&[SinkType::Haproxy], ""),
    Key::new(
        "backend",
        Type::String,
        Required,
        words("1 to 63 letters, digits, '-', '_', '.' or ':'"),
        Applies,
        "The HAProxy backend whose servers probed sets: each endpoint's server (its name, or its \
             haproxy_server) gets its state and weight.",
    )
    .sinks(&[SinkType::Haproxy], ""),
    Key::new(
        "down",
        Type::String,
        Value("\"maint\""),
        OneOf(&["maint", "drain"]),
        Applies,
        "The state of a server whose endpoint is not eligible: maint (no traffic) or drain (no new \
             sessions but persistent ones).",
    )
    .sinks(&[SinkType::Haproxy], ""),
];

/// What HAProxy takes in a backend or server name (its identifier alphabet), kept to what
/// cannot break an admin socket command line: no spaces, ';', '/' or quotes.
pub(crate) const HAPROXY_NAME_RULE: &str = "expected 1-63 letters, digits, '-', '_', '.' or ':'";

pub(crate) fn haproxy_name(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// HAProxy weights go from 0 to 256; probed's from 1 to 1000.
pub(super) const HAPROXY_MAX_WEIGHT: u32 = 256;

/// `kind = "haproxy"`, and its default name (the backend's, when it is a valid sink name).
/// `endpoints` is the followed profile (with the item naming it), when it read well.
pub(crate) fn read(
    r: &mut Reader<'_>,
    t: &Table<'_, '_>,
    endpoints: Option<(&Item<String>, &[Server<'_>])>,
) -> (Option<HaproxySink>, Option<String>) {
    let socket = match r.string(t, "socket") {
        None => {
            r.missing(
                t,
                "socket",
                "a haproxy sink needs socket = \"/path\", HAProxy's `stats socket PATH level admin`",
            );
            None
        }
        Some(item) if !item.v.starts_with('/') || item.v.contains('\0') => {
            r.bad(&item, "expected an absolute path (the `stats socket` of haproxy.cfg)");
            None
        }
        Some(item) => Some(std::path::PathBuf::from(item.v)),
    };
    let backend = match r.string(t, "backend") {
        None => {
            r.missing(
                t,
                "backend",
                "a haproxy sink needs backend = \"NAME\", the backend whose servers it sets",
            );
            None
        }
        Some(item) if !haproxy_name(&item.v) => {
            r.bad(&item, HAPROXY_NAME_RULE);
            None
        }
        Some(item) => Some(item.v),
    };
    let down = match r.string(t, "down") {
        None => Some(HaproxyDown::Maint),
        Some(item) => match item.v.parse::<HaproxyDown>() {
            Ok(down) => Some(down),
            Err(_) => {
                r.bad(
                    &item,
                    "expected maint (no traffic) or drain (no new sessions but persistent ones)",
                );
                None
            }
        },
    };
    let servers = endpoints.and_then(|(item, endpoints)| haproxy_servers(r, item, endpoints));
    let name = backend.clone().filter(|b| ident(b));
    let kind = socket
        .zip(backend)
        .zip(down)
        .zip(servers)
        .map(|(((socket, backend), down), servers)| HaproxySink {
            socket,
            backend,
            down,
            servers,
        });
    (kind, name)
}

/// Every endpoint of the followed profile and the server written for it; each server must be
/// a name HAProxy takes, written for one endpoint only, and every weight one HAProxy can hold.
fn haproxy_servers(
    r: &mut Reader<'_>,
    item: &Item<String>,
    endpoints: &[Server<'_>],
) -> Option<std::collections::BTreeMap<String, String>> {
    let mut out = std::collections::BTreeMap::new();
    let mut by_server: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    let mut ok = true;
    for ep in endpoints {
        let server = ep.server.unwrap_or(ep.name);
        if !haproxy_name(server) {
            r.bad(
                item,
                format!(
                    "endpoint {:?} of this profile would be HAProxy server {server:?}, which is not a \
                     server name ({HAPROXY_NAME_RULE}); set haproxy_server on it",
                    ep.name
                ),
            );
            ok = false;
        } else if let Some(other) = by_server.insert(server, ep.name) {
            r.bad(
                item,
                format!(
                    "endpoints {other:?} and {:?} of this profile both name HAProxy server {server:?}; \
                     each server follows one endpoint",
                    ep.name
                ),
            );
            ok = false;
        }
        if ep.weight > HAPROXY_MAX_WEIGHT {
            r.bad(
                item,
                format!(
                    "endpoint {:?} of this profile has weight {}; HAProxy weights go up to {HAPROXY_MAX_WEIGHT}",
                    ep.name, ep.weight
                ),
            );
            ok = false;
        }
        out.insert(ep.name.to_string(), server.to_string());
    }
    ok.then_some(out)
}
