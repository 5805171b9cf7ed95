//! The HTTP(S) and gRPC keys of `[profile.health]`: path, method, host, headers, status codes
//! and body match, by the dialect's rules; a gRPC check's service and metadata; the TLS keys
//! of checks over TLS. Endpoint headers go through `headers` too.
use super::model::*;
use crate::{
    rules::{
        check_header_level,
        limits::{MAX_HEADERS, MAX_STATUS_RANGES},
        Dialect, Header, HostName, HttpPath, Method, Protocol, Rule, StatusRange,
    },
    schema::read::{broke, names, Item, Reader, Table},
};

const MAX_BODY_MATCH: usize = 1024;

/// The longest gRPC service name (as the prober allows).
const MAX_SERVICE: usize = crate::probe::http::request::MAX_GRPC_SERVICE;

/// Headers a gRPC check sets itself, or that HTTP/2 forbids: none may come as metadata.
const GRPC_RESERVED: [&str; 8] = [
    "host",
    "content-type",
    "te",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// The notice of a certificate nearing its end comes this many days before, by default.
const DEFAULT_CERT_WARN_DAYS: u16 = 14;
const MAX_CERT_WARN_DAYS: u16 = 3650;

/// The keys of a TLS client, on a profile and on an endpoint alike.
pub(crate) const TLS_KEYS: [&str; 6] = [
    "tls_verify",
    "ca_file",
    "server_name",
    "client_cert",
    "client_key",
    "min_version",
];

/// Whether protocol `p` of this kind runs over TLS.
pub(crate) const fn speaks_tls(p: Protocol) -> bool {
    matches!(p, Protocol::Https | Protocol::Grpcs)
}

pub(crate) fn read(r: &mut Reader<'_>, t: &Table<'_, '_>, d: Dialect, p: Protocol) -> Option<HttpSettings> {
    let before = r.errors.len();
    let tls = speaks_tls(p);
    let grpc = matches!(p, Protocol::Grpc | Protocol::Grpcs);
    // gRPC's path, method, status and body match are refused by the caller, with the reason.
    let path = match r.string(t, "path") {
        None => HttpPath::root(),
        Some(_) if grpc => HttpPath::root(),
        Some(item) => HttpPath::parse(&item.v).unwrap_or_else(|e| {
            broke(r, &item, e);
            HttpPath::root()
        }),
    };
    let method = match r.string(t, "method") {
        None => Method::default_for(d),
        Some(_) if grpc => Method::default_for(d),
        Some(item) => match item.v.parse::<Method>() {
            Ok(m) if d.methods().contains(&m) => m,
            _ => {
                r.bad(&item, format!("{d} allows {}", names(d.methods(), Method::name)));
                Method::default_for(d)
            }
        },
    };
    let host = match r.string(t, "host") {
        None => None,
        Some(item) if d == Dialect::Tm && !grpc => {
            r.bad(&item, "tm sets the Host through headers = [\"Host:name\"]");
            None
        }
        Some(item) => HostName::parse(&item.v).map_or_else(
            |e| {
                broke(r, &item, e);
                None
            },
            Some,
        ),
    };
    let headers = match r.strings(t, "headers") {
        None => Vec::new(),
        // gRPC metadata is part of the call in every dialect.
        Some(list) if grpc => metadata(r, &list),
        Some(list) if d != Dialect::Tm => {
            r.bad(&list, format!("{} has no custom headers; use host", d.name()));
            Vec::new()
        }
        Some(list) => headers(r, &list),
    };
    let service = service(r, t, p).or_else(|| grpc.then(String::new));
    let healthy_status = match r.strings(t, "status") {
        None => d.default_status().to_vec(),
        Some(_) if grpc => d.default_status().to_vec(),
        Some(list) => status(r, &list, d),
    };
    let body_match = match r.string(t, "body_match") {
        None => None,
        Some(_) if grpc => None,
        Some(item) if method == Method::Head => {
            r.bad(&item, "a HEAD response has no body; set method = \"GET\"");
            None
        }
        Some(item) if item.v.is_empty() || item.v.len() > MAX_BODY_MATCH => {
            r.bad(&item, format!("expected 1 to {MAX_BODY_MATCH} bytes"));
            None
        }
        Some(item) => Some(item.v),
    };
    let (tls_verify, server_name) = tls_settings(r, t, p);
    let client_cert = client_cert(r, t, p);
    let tls13_only = min_version(r, t, p).unwrap_or(false);
    let tls_reverify_s = tls_reverify(r, t, p, &tls_verify);
    let cert_warn_days = match r.int(t, "cert_warn_days") {
        None => DEFAULT_CERT_WARN_DAYS,
        // Refused with the table's other TLS keys (`refuse_foreign`).
        Some(_) if !tls => DEFAULT_CERT_WARN_DAYS,
        Some(item) => match u16::try_from(item.v).ok().filter(|d| *d <= MAX_CERT_WARN_DAYS) {
            Some(d) => d,
            None => {
                r.bad(&item, format!("expected 0 (no warning) to {MAX_CERT_WARN_DAYS} days"));
                DEFAULT_CERT_WARN_DAYS
            }
        },
    };
    // Refused for gRPC with the table's other foreign keys (`refuse_foreign`).
    let keep_alive = !grpc && r.boolean(t, "keep_alive").is_some_and(|item| item.v);
    // Refused on the other protocols with the table's other foreign keys (`refuse_foreign`).
    let tunnel = if p == Protocol::Http {
        crate::probe::tunnel::read(r, t).flatten()
    } else {
        None
    };
    if tunnel.is_some() {
        whole_in_the_kernel(r, t);
    }
    (r.errors.len() == before).then_some(HttpSettings {
        tls,
        method,
        path,
        host,
        headers,
        healthy_status,
        body_match,
        tls_verify,
        server_name,
        client_cert,
        tls13_only,
        tls_reverify_s,
        cert_warn_days,
        keep_alive,
        grpc: service,
        tunnel,
    })
}

/// A check through a tunnel runs whole in the kernel (a socket cannot take the tunnel): the
/// keys that need a socket are refused with it.
fn whole_in_the_kernel(r: &mut Reader<'_>, t: &Table<'_, '_>) {
    if let Some(item) = r.string(t, "body_match") {
        r.bad(
            &item,
            "a check through a tunnel runs in the kernel, which reads the status line only: \
             leave out body_match, or tunnel",
        );
    }
    if let Some(item) = r.boolean(t, "keep_alive").filter(|i| i.v) {
        r.bad(
            &item,
            "a check through a tunnel opens a connection per probe in the kernel; keep_alive \
             holds a socket's: leave out one of them",
        );
    }
}

/// `tls_reverify`: with `tls_verify = "ca"` only (a check that verifies nothing has nothing to
/// verify again), from 1 s to a day.
fn tls_reverify(r: &mut Reader<'_>, t: &Table<'_, '_>, p: Protocol, verify: &TlsVerifySetting) -> u32 {
    use std::time::Duration;
    let default = crate::probe::http::tls::DEFAULT_REVERIFY_S;
    let Some(item) = r.string(t, "tls_reverify") else {
        return default;
    };
    if !speaks_tls(p) {
        return default;
    }
    if !matches!(verify, TlsVerifySetting::Ca { .. }) {
        r.bad(
            &item,
            "only a check with tls_verify = \"ca\" verifies certificates again; set it, or leave tls_reverify out",
        );
        return default;
    }
    match crate::schema::read::parse_duration(&item.v) {
        Some(d) if d.subsec_nanos() == 0 && (Duration::from_secs(1)..=Duration::from_secs(86_400)).contains(&d) => {
            u32::try_from(d.as_secs()).unwrap_or(default)
        }
        _ => {
            r.bad(&item, "expected whole seconds from 1s to 86400s, like \"300s\"");
            default
        }
    }
}

/// An endpoint's own TLS keys and gRPC service, read by the profile's rules; None when it
/// sets none of them. A key that its protocol does not use is refused as on the profile.
pub(crate) fn check_override(r: &mut Reader<'_>, t: &Table<'_, '_>, p: Protocol) -> Option<Box<CheckOverride>> {
    let set = |key: &str| Reader::get(t, key).is_some();
    if !TLS_KEYS.iter().chain(&["service"]).any(|k| set(k)) {
        return None;
    }
    let verify_set = set("tls_verify") || set("ca_file");
    let (verify, server_name) = tls_settings(r, t, p);
    let client_cert = client_cert(r, t, p);
    let tls13_only = min_version(r, t, p);
    let service = service(r, t, p);
    Some(Box::new(CheckOverride {
        tls_verify: verify_set.then_some(verify),
        server_name,
        client_cert,
        tls13_only,
        service,
    }))
}

/// `min_version`, over TLS only: Some(true) for TLS 1.3 alone; None when left out.
fn min_version(r: &mut Reader<'_>, t: &Table<'_, '_>, p: Protocol) -> Option<bool> {
    let item = r.string(t, "min_version")?;
    if !speaks_tls(p) {
        return None;
    }
    match item.v.as_str() {
        "1.2" => Some(false),
        "1.3" => Some(true),
        _ => {
            r.bad(&item, "expected \"1.2\" (TLS 1.2 and 1.3) or \"1.3\" (TLS 1.3 only)");
            None
        }
    }
}

/// `service`, gRPC only; None when left out.
fn service(r: &mut Reader<'_>, t: &Table<'_, '_>, p: Protocol) -> Option<String> {
    let item = r.string(t, "service")?;
    if !matches!(p, Protocol::Grpc | Protocol::Grpcs) {
        return None;
    }
    if item.v.len() > MAX_SERVICE || item.v.chars().any(char::is_control) {
        r.bad(
            &item,
            format!("expected a gRPC service name of at most {MAX_SERVICE} bytes, without control characters"),
        );
        return None;
    }
    Some(item.v)
}

/// A gRPC check's `headers`: sent as metadata, so neither what the call sets itself nor what
/// HTTP/2 forbids.
pub(crate) fn metadata(r: &mut Reader<'_>, list: &Item<Vec<Item<String>>>) -> Vec<Header> {
    let out = headers(r, list);
    for (item, h) in list.v.iter().zip(&out) {
        let name = h.name().to_ascii_lowercase();
        if GRPC_RESERVED.contains(&name.as_str()) || name.starts_with("grpc-") {
            r.bad(
                item,
                "a gRPC check sets this itself (host sets the authority) or HTTP/2 forbids it; metadata may not",
            );
        }
    }
    out
}

/// `client_cert` and `client_key`, both or neither, over TLS only: read here (the key only if
/// its owner alone may read it, as the API token's file), so that a start or reload with a
/// pair that cannot be used is refused, naming the file.
fn client_cert(r: &mut Reader<'_>, t: &Table<'_, '_>, p: Protocol) -> Option<ClientCertFiles> {
    let cert = r.string(t, "client_cert");
    let key = r.string(t, "client_key");
    if !speaks_tls(p) {
        return None;
    }
    let (cert, key) = match (cert, key) {
        (None, None) => return None,
        (Some(cert), Some(key)) => (cert, key),
        (Some(_), None) => {
            r.missing(
                t,
                "client_key",
                "client_cert needs its key: client_key = \"/path/key.pem\"",
            );
            return None;
        }
        (None, Some(_)) => {
            r.missing(
                t,
                "client_cert",
                "client_key needs its certificate: client_cert = \"/path/cert.pem\"",
            );
            return None;
        }
    };
    for item in [&cert, &key] {
        if !item.v.starts_with('/') {
            r.bad(item, "expected an absolute path to a PEM file");
            return None;
        }
    }
    let files = ClientCertFiles {
        cert: cert.v.clone().into(),
        key: key.v.clone().into(),
    };
    let key_pem = match crate::secret::read_private(&files.key, crate::kernel::process::euid(), 64 * 1024) {
        Ok(pem) => pem,
        Err(e) => {
            r.bad(&key, format!("the key file {}", crate::errors::chain(&e)));
            return None;
        }
    };
    // Parsed and matched only: the client that presents it is built when checks are made.
    if let Err(e) = crate::probe::http::tls::certified_key(&files.cert, (&files.key, &key_pem)) {
        r.bad(&cert, e.to_string());
        return None;
    }
    Some(files)
}

/// `tls_verify`, `ca_file` and `server_name`: over TLS only. A CA file is read here, so that a
/// start or reload with one that gives no root is refused, naming it.
fn tls_settings(r: &mut Reader<'_>, t: &Table<'_, '_>, p: Protocol) -> (TlsVerifySetting, Option<HostName>) {
    let verify = r.string(t, "tls_verify");
    let ca_file = r.string(t, "ca_file");
    let server_name = r.string(t, "server_name");
    if !speaks_tls(p) {
        return (TlsVerifySetting::Presence, None);
    }
    let server_name = server_name.and_then(|item| {
        HostName::parse(&item.v).map_or_else(
            |e| {
                broke(r, &item, e);
                None
            },
            Some,
        )
    });
    let verify = match verify.as_ref().map(|i| i.v.as_str()) {
        None | Some("presence") => {
            if let Some(item) = &ca_file {
                r.bad(item, "a CA file is for tls_verify = \"ca\"");
            }
            TlsVerifySetting::Presence
        }
        Some("ca") => {
            let ca_file = ca_file.and_then(|item| {
                if !item.v.starts_with('/') {
                    r.bad(&item, "expected an absolute path to a PEM file of CA certificates");
                    return None;
                }
                let path = std::path::PathBuf::from(&item.v);
                match crate::probe::http::tls::roots_from_file(&path) {
                    Ok(_) => Some(path),
                    Err(e) => {
                        r.bad(&item, e.to_string());
                        None
                    }
                }
            });
            TlsVerifySetting::Ca { ca_file }
        }
        Some(_) => {
            if let Some(item) = &verify {
                r.bad(
                    item,
                    "expected presence (a certificate must be shown) or ca (it must chain to ca_file or the system's roots, and match the name)",
                );
            }
            TlsVerifySetting::Presence
        }
    };
    (verify, server_name)
}

/// One level of `name:value` headers, by the rules the prober follows too.
pub(crate) fn headers(r: &mut Reader<'_>, list: &Item<Vec<Item<String>>>) -> Vec<Header> {
    let mut out = Vec::new();
    for item in &list.v {
        match Header::parse(&item.v) {
            Ok(h) => out.push(h),
            Err(e) => broke(r, item, e),
        }
    }
    // Count and repeated names are rules of the whole level, so they go on the list.
    if out.len() == list.v.len() {
        if let Err(e) = check_header_level(&out) {
            broke(r, list, e);
        }
    } else if list.v.len() > MAX_HEADERS {
        r.bad(list, Rule::TooManyHeaders.to_string());
    }
    out
}

fn status(r: &mut Reader<'_>, list: &Item<Vec<Item<String>>>, d: Dialect) -> Vec<StatusRange> {
    let mut out = Vec::new();
    match d {
        Dialect::Ga => {
            r.bad(list, "ga has no configurable status codes");
        }
        // Nothing would ever be healthy.
        Dialect::Lb | Dialect::Tm if list.v.is_empty() => r.bad(list, Rule::NoStatus.to_string()),
        Dialect::Lb => {
            for item in &list.v {
                match StatusRange::parse_class(&item.v) {
                    // 1xx is never a final answer to a request.
                    Ok(class) if class.first() >= 200 => out.push(class),
                    _ => r.bad(item, "lb takes status classes 2xx, 3xx, 4xx or 5xx"),
                }
            }
        }
        Dialect::Tm => {
            // Accept the seed's own notation too: one string "200-299, 301-301".
            let parts: Vec<&str> = list.v.iter().flat_map(|i| i.v.split(',')).map(str::trim).collect();
            if parts.len() > MAX_STATUS_RANGES {
                r.bad(list, format!("tm allows at most {MAX_STATUS_RANGES} ranges"));
            }
            for part in parts {
                match StatusRange::parse_range(part) {
                    Ok(range) => out.push(range),
                    Err(_) => r.bad(
                        list,
                        format!("{part:?}: tm takes ranges like \"200-299\" within 100-599"),
                    ),
                }
            }
        }
    }
    out
}
