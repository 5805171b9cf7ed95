//! The `[[sink]]` kinds that talk to userspace: HAProxy's admin socket and an exec'd
//! program. Their names go into admin commands and argv, so they are held to safe alphabets.
use toml::de::DeValue;

use super::{haproxy_name, ident, HAPROXY_NAME_RULE};
use crate::config::{
    model::*,
    read::{Item, Reader, Table},
};

/// HAProxy weights go from 0 to 256; probed's from 1 to 1000.
const HAPROXY_MAX_WEIGHT: u32 = 256;

/// `kind = "haproxy"`, and its default name (the backend's, when it is a valid sink name).
/// `endpoints` is the followed profile (with the item naming it), when it read well.
pub(super) fn haproxy(
    r: &mut Reader<'_>,
    t: &Table<'_, '_>,
    endpoints: Option<(&Item<String>, &Profile)>,
) -> (Option<SinkKind>, Option<String>) {
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
    let servers = endpoints.and_then(|(item, profile)| haproxy_servers(r, item, profile));
    let name = backend.clone().filter(|b| ident(b));
    let kind = socket
        .zip(backend)
        .zip(down)
        .zip(servers)
        .map(|(((socket, backend), down), servers)| {
            SinkKind::Haproxy(HaproxySink {
                socket,
                backend,
                down,
                servers,
            })
        });
    (kind, name)
}

/// Every endpoint of `profile` and the server written for it; each server must be a name
/// HAProxy takes, written for one endpoint only, and every weight one HAProxy can hold.
fn haproxy_servers(
    r: &mut Reader<'_>,
    item: &Item<String>,
    profile: &Profile,
) -> Option<std::collections::BTreeMap<String, String>> {
    let mut out = std::collections::BTreeMap::new();
    let mut by_server: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    let mut ok = true;
    for ep in &profile.endpoints {
        let server = ep.haproxy_server().unwrap_or(&ep.name);
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
        } else if let Some(other) = by_server.insert(server, &ep.name) {
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

/// `kind = "exec"`, and its default name (the program's file name, when it is a valid one).
pub(super) fn exec(r: &mut Reader<'_>, t: &Table<'_, '_>) -> (Option<SinkKind>, Option<String>) {
    let Some(list) = r.strings(t, "command") else {
        if Reader::get(t, "command").is_none() {
            r.missing(
                t,
                "command",
                "an exec sink needs command = [\"/path/to/program\", \"arg\", ...]",
            );
        }
        return (None, None);
    };
    let Some(program) = list.v.first() else {
        r.bad(&list, "expected the program's absolute path, then its arguments");
        return (None, None);
    };
    let mut ok = true;
    if !program.v.starts_with('/') {
        r.bad(
            program,
            "expected an absolute path: no shell and no PATH search are involved",
        );
        ok = false;
    }
    for arg in &list.v {
        if arg.v.contains('\0') {
            r.bad(arg, "a program argument cannot hold a NUL byte");
            ok = false;
        }
    }
    if !ok || list.v.len() != list_len(t) {
        return (None, None);
    }
    let name = std::path::Path::new(&program.v)
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| ident(n))
        .map(str::to_string);
    let command = list.v.into_iter().map(|i| i.v).collect();
    (Some(SinkKind::Exec(ExecSink { command })), name)
}

/// How many values `command` holds as written (a wrong-typed one is reported by `strings`,
/// which leaves it out of its list).
fn list_len(t: &Table<'_, '_>) -> usize {
    match Reader::get(t, "command").map(toml::Spanned::get_ref) {
        Some(DeValue::Array(a)) => a.len(),
        _ => 1,
    }
}
