//! The rules: turns the spanned TOML tree into a resolved `Config`, or into the full list of
//! what is wrong with it.
use std::{
    collections::{HashMap, HashSet},
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    time::Duration,
};

use ipnet::IpNet;

use crate::kernel::AttachMode;
use toml::de::{DeTable, DeValue};

use super::{
    model::*,
    read::{parse_duration, Item, Reader, Table},
    ConfigError, ConfigErrors,
};
use crate::{
    rules::{
        check_header_level,
        limits::{MAX_HEADERS, MAX_STATUS_RANGES},
        Rule, RuleError, ThresholdError,
    },
    status::{select::WORLD_REGION, AdminState, Routing},
};

/// The kernel's default `net.ipv4.ip_local_port_range`; probe ports must stay clear of it so
/// probes never collide with the node's own outgoing connections.
const EPHEMERAL: (u16, u16) = (32768, 60999);
const DEFAULT_PORTS: PortRange = PortRange {
    first: 61000,
    last: 65000,
};
const DEFAULT_API: &str = "127.0.0.1:9180";
const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/probed";
const DEFAULT_STATE_FILE: &str = "/var/lib/probed/state.json";
const MAX_UDP_PAYLOAD: usize = 500;
const MAX_BODY_MATCH: usize = 1024;

pub(super) fn parse(text: &str, file: &str) -> Result<Config, ConfigErrors> {
    let mut r = Reader {
        text,
        file,
        errors: Vec::new(),
    };
    let root = match DeTable::parse(text) {
        Ok(root) => root,
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            r.error(span, "", None, format!("not valid TOML: {}", e.message().trim_end()));
            return Err(ConfigErrors(r.errors));
        }
    };
    let root_value = toml::Spanned::new(root.span(), DeValue::Table(root.into_inner()));
    let config = read_config(&mut r, &root_value);
    // Rules run in dependency order; the operator reads the file top to bottom.
    r.errors.sort_by_key(|e| (e.line, e.column));
    match config {
        Some(config) if r.errors.is_empty() => Ok(config),
        _ => Err(ConfigErrors(r.errors)),
    }
}

fn read_config(r: &mut Reader<'_>, root: &toml::Spanned<DeValue<'_>>) -> Option<Config> {
    let top = r.table(root, String::new(), &["daemon", "source", "profile"])?;
    let daemon = daemon(r, Reader::get(&top, "daemon"));
    let source = source(r, Reader::get(&top, "source"));
    let mut profiles = Vec::new();
    let mut names: Vec<Option<String>> = Vec::new();
    if let Some(list) = Reader::get(&top, "profile") {
        match list.get_ref() {
            DeValue::Array(items) => {
                let mut seen = HashSet::new();
                for (i, item) in items.iter().enumerate() {
                    let (profile, name) = profile(r, item, i, &mut seen);
                    names.push(name);
                    profiles.push(profile);
                }
            }
            other => r.error(
                list.span(),
                "profile",
                Some(super::read::show(other)),
                "expected [[profile]] tables",
            ),
        }
    }
    name_profiles(&mut r.errors, &names);
    Some(Config {
        daemon: daemon?,
        source: source?,
        profiles: profiles.into_iter().collect::<Option<Vec<_>>>()?,
    })
}

/// Labels errors under `profile[i]` with that profile's name, for readable messages.
fn name_profiles(errors: &mut [ConfigError], names: &[Option<String>]) {
    for e in errors {
        let Some(rest) = e.field.strip_prefix("profile[") else {
            continue;
        };
        let index = rest.split(']').next().and_then(|i| i.parse::<usize>().ok());
        if let Some(name) = index.and_then(|i| names.get(i)).and_then(Clone::clone) {
            e.profile = Some(name);
        }
    }
}

fn opt_table<'a, 'i>(
    r: &mut Reader<'_>,
    v: Option<&'a toml::Spanned<DeValue<'i>>>,
    path: &str,
    keys: &[&str],
) -> Option<Option<Table<'a, 'i>>> {
    match v {
        None => Some(None),
        Some(v) => r.table(v, path.to_string(), keys).map(Some),
    }
}

fn daemon(r: &mut Reader<'_>, v: Option<&toml::Spanned<DeValue<'_>>>) -> Option<Daemon> {
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

fn source(r: &mut Reader<'_>, v: Option<&toml::Spanned<DeValue<'_>>>) -> Option<Source> {
    let keys = ["interfaces", "addresses", "port_range", "xdp_mode"];
    let Some(t) = opt_table(r, v, "source", &keys)? else {
        return Some(Source {
            interfaces: Vec::new(),
            addresses: Vec::new(),
            ports: DEFAULT_PORTS,
            xdp_mode: AttachMode::Auto,
        });
    };
    let mut ok = true;
    let mut interfaces = Vec::new();
    for item in r.strings(&t, "interfaces").map(|l| l.v).unwrap_or_default() {
        let name = &item.v;
        // IFNAMSIZ is 16 including the terminating NUL.
        let valid = !name.is_empty()
            && name.len() <= 15
            && name.bytes().all(|b| b.is_ascii_graphic() && b != b'/' && b != b':');
        if valid {
            interfaces.push(name.clone());
        } else {
            r.bad(
                &item,
                "expected an interface name of 1-15 characters without '/', ':' or spaces",
            );
            ok = false;
        }
    }
    let mut addresses = Vec::new();
    for item in r.strings(&t, "addresses").map(|l| l.v).unwrap_or_default() {
        match item.v.parse::<IpAddr>() {
            Ok(ip) if !ip.is_unspecified() && !ip.is_multicast() => addresses.push(ip),
            _ => {
                r.bad(&item, "expected a unicast IPv4 or IPv6 address");
                ok = false;
            }
        }
    }
    let ports = match r.string(&t, "port_range") {
        None => Some(DEFAULT_PORTS),
        Some(item) => port_range(r, &item),
    };
    let xdp_mode = match r.string(&t, "xdp_mode") {
        None => Some(AttachMode::Auto),
        Some(item) => {
            let mode = AttachMode::parse(&item.v);
            if mode.is_none() {
                r.bad(
                    &item,
                    "expected \"auto\" (native XDP when the driver takes it, else generic), \"driver\" or \"skb\"",
                );
            }
            mode
        }
    };
    ok.then_some(())?;
    Some(Source {
        interfaces,
        addresses,
        ports: ports?,
        xdp_mode: xdp_mode?,
    })
}

fn port_range(r: &mut Reader<'_>, item: &Item<String>) -> Option<PortRange> {
    let parsed = item
        .v
        .split_once('-')
        .and_then(|(a, b)| Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?)));
    let Some((first, last)) = parsed.filter(|(a, b)| a <= b && *a >= 1024) else {
        r.bad(
            item,
            "expected \"FIRST-LAST\" with 1024 <= FIRST <= LAST <= 65535, e.g. \"61000-65000\"",
        );
        return None;
    };
    if first <= EPHEMERAL.1 && last >= EPHEMERAL.0 {
        r.bad(
            item,
            format!(
                "overlaps the kernel's ephemeral port range {}-{}; use ports above {}, e.g. \"61000-65000\"",
                EPHEMERAL.0, EPHEMERAL.1, EPHEMERAL.1
            ),
        );
        return None;
    }
    Some(PortRange { first, last })
}

/// Names of profiles and endpoints end up in URLs and metric labels.
fn valid_name(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'[' | b']'))
}

const PROFILE_KEYS: [&str; 7] = [
    "name",
    "enabled",
    "dialect",
    "routing",
    "max_answers",
    "health",
    "endpoint",
];

fn profile(
    r: &mut Reader<'_>,
    v: &toml::Spanned<DeValue<'_>>,
    index: usize,
    seen: &mut HashSet<String>,
) -> (Option<Profile>, Option<String>) {
    let Some(t) = r.table(v, format!("profile[{index}]"), &PROFILE_KEYS) else {
        return (None, None);
    };
    let mut ok = true;
    let name = match r.string(&t, "name") {
        None => {
            r.missing(&t, "name", "every profile needs a name");
            None
        }
        Some(item) if !valid_name(&item.v) => {
            r.bad(&item, "expected 1-63 letters, digits, '-', '_' or '.'");
            None
        }
        Some(item) if !seen.insert(item.v.clone()) => {
            r.bad(&item, "another profile already has this name");
            None
        }
        Some(item) => Some(item.v),
    };
    let enabled = r.boolean(&t, "enabled").is_none_or(|b| b.v);
    let dialect = match r.string(&t, "dialect") {
        None => {
            r.missing(&t, "dialect", "every profile needs a dialect: lb, tm or ga");
            None
        }
        Some(item) => Dialect::parse(&item.v).or_else(|| {
            r.bad(&item, "expected lb, tm or ga");
            None
        }),
    };
    let routing = routing(r, &t);
    let health = match (Reader::get(&t, "health"), dialect) {
        (None, _) => {
            r.missing(&t, "health", "every profile needs a [profile.health] table");
            None
        }
        // Without a dialect there are no rules to check the health check against.
        (Some(_), None) => None,
        (Some(h), Some(d)) => health(r, h, &t.child("health"), d),
    };
    let endpoints = match (Reader::get(&t, "endpoint"), health.as_ref(), dialect, routing) {
        (None, ..) => Some(Vec::new()),
        (Some(list), Some(health), Some(dialect), Some(routing)) => {
            endpoints(r, list, &t.child("endpoint"), health, dialect, routing)
        }
        (Some(_), ..) => {
            ok = false;
            None
        }
    };
    let shown_name = name.clone();
    let profile = ok.then_some(()).and_then(|()| {
        Some(Profile {
            name: name?,
            enabled,
            dialect: dialect?,
            routing: routing?,
            health: health?,
            endpoints: endpoints?,
        })
    });
    (profile, shown_name)
}

fn routing(r: &mut Reader<'_>, t: &Table<'_, '_>) -> Option<Routing> {
    let max = r.int(t, "max_answers");
    let method = r.string(t, "routing");
    let routing = match method.as_ref().map(|m| m.v.as_str()) {
        None | Some("priority") => Routing::Priority,
        Some("weighted") => Routing::Weighted,
        Some("subnet") => Routing::Subnet,
        Some("geographic") => Routing::Geographic,
        Some("performance") => Routing::Performance,
        Some("multivalue") => {
            let max_answers = match &max {
                None => 2,
                Some(item) => match u8::try_from(item.v).ok().filter(|n| (1..=8).contains(n)) {
                    Some(n) => n,
                    None => {
                        r.bad(item, "multivalue allows 1 to 8 answers");
                        return None;
                    }
                },
            };
            return Some(Routing::Multivalue { max_answers });
        }
        Some(_) => {
            r.bad(
                method.as_ref().expect("matched Some"),
                "expected priority, weighted, multivalue, subnet, geographic or performance",
            );
            return None;
        }
    };
    if let Some(item) = &max {
        r.bad(item, "max_answers only applies to routing = \"multivalue\"");
        return None;
    }
    Some(routing)
}

const HEALTH_KEYS: [&str; 20] = [
    "protocol",
    "port",
    "path",
    "host",
    "method",
    "headers",
    "status",
    "interval",
    "timeout",
    "healthy_threshold",
    "unhealthy_threshold",
    "tolerated_failures",
    "threshold",
    "request",
    "response",
    "body_match",
    "fast_interval",
    "down_interval",
    "initial_jitter",
    "jitter_percent",
];

fn health(r: &mut Reader<'_>, v: &toml::Spanned<DeValue<'_>>, path: &str, d: Dialect) -> Option<HealthCheck> {
    let t = r.table(v, path.to_string(), &HEALTH_KEYS)?;
    let errors_before = r.errors.len();
    let protocol = match r.string(&t, "protocol") {
        None => {
            r.missing(&t, "protocol", "a health check needs a protocol");
            None
        }
        Some(item) => match Protocol::ALL.into_iter().find(|p| p.name() == item.v) {
            Some(p) if d.protocols().contains(&p) => Some(p),
            Some(_) => {
                r.bad(
                    &item,
                    format!("{} allows {}", d.name(), names(d.protocols(), |p| p.name())),
                );
                None
            }
            None => {
                r.bad(&item, "expected tcp, udp, http or https");
                None
            }
        },
    };
    let port = r.int(&t, "port").and_then(|item| port_value(r, &item));
    let (interval, timeout) = interval_timeout(r, &t, d);
    let thresholds = thresholds(r, &t, d);
    let pacing = pacing(r, &t);
    let probe = protocol.and_then(|p| probe(r, &t, d, p));
    (r.errors.len() == errors_before).then_some(())?;
    Some(HealthCheck {
        probe: probe?,
        port,
        interval: interval?,
        timeout: timeout?,
        thresholds: thresholds?,
        pacing,
    })
}

/// The longest any pacing interval or jitter may be.
const MAX_PACING: Duration = Duration::from_secs(300);

/// fast_interval, down_interval, initial_jitter (durations) and jitter_percent; all optional
/// and the same for every dialect, since none of the seeds has them.
fn pacing(r: &mut Reader<'_>, t: &Table<'_, '_>) -> Pacing {
    let gap = |r: &mut Reader<'_>, key: &str, zero_ok: bool| -> Option<Duration> {
        let item = r.string(t, key)?;
        let v = duration(r, &item)?;
        if (v.is_zero() && !zero_ok) || v > MAX_PACING {
            let low = if zero_ok { "0s" } else { "more than 0s" };
            r.bad(&item, format!("{key} allows {low} up to 300s"));
            return None;
        }
        Some(v)
    };
    let fast_interval = gap(r, "fast_interval", false);
    let down_interval = gap(r, "down_interval", false);
    let initial_jitter = gap(r, "initial_jitter", true).unwrap_or_default();
    let jitter_percent = match r.int(t, "jitter_percent") {
        None => 0,
        Some(item) => match u8::try_from(item.v).ok().filter(|p| *p <= 100) {
            Some(p) => p,
            None => {
                r.bad(&item, "jitter_percent allows 0 to 100");
                0
            }
        },
    };
    Pacing {
        fast_interval,
        down_interval,
        initial_jitter,
        jitter_percent,
    }
}

fn names<T: Copy>(items: &[T], name: impl Fn(T) -> &'static str) -> String {
    let all: Vec<&str> = items.iter().map(|i| name(*i)).collect();
    match all.as_slice() {
        [one] => one.to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
        [] => "nothing".to_string(),
    }
}

fn port_value(r: &mut Reader<'_>, item: &Item<i64>) -> Option<u16> {
    match u16::try_from(item.v).ok().filter(|p| *p >= 1) {
        Some(p) => Some(p),
        None => {
            r.bad(item, "expected a port from 1 to 65535");
            None
        }
    }
}

fn duration(r: &mut Reader<'_>, item: &Item<String>) -> Option<Duration> {
    let d = parse_duration(&item.v);
    if d.is_none() {
        r.bad(item, "expected a duration like \"2s\" or \"500ms\"");
    }
    d
}

fn interval_timeout(r: &mut Reader<'_>, t: &Table<'_, '_>, d: Dialect) -> (Option<Duration>, Option<Duration>) {
    let interval = match r.string(t, "interval") {
        None => Some(d.default_interval()),
        Some(item) => duration(r, &item).and_then(|v| match d.check_interval(v) {
            Ok(()) => Some(v),
            Err(e) => {
                broke(r, &item, e);
                None
            }
        }),
    };
    let timeout_item = r.string(t, "timeout");
    // tm's timeout range follows the interval; with a bad interval there is nothing to check against.
    let Some(interval) = interval else {
        return (None, None);
    };
    let timeout = match timeout_item {
        None => Some(d.default_timeout(interval)),
        Some(item) => duration(r, &item).and_then(|v| match d.check_timeout(interval, v) {
            Ok(()) => Some(v),
            Err(e) => {
                broke(r, &item, e);
                None
            }
        }),
    };
    (Some(interval), timeout)
}

/// A shared rule broken by `item`: the config error already names the field and the value,
/// so only what is allowed is added.
fn broke<T>(r: &mut Reader<'_>, item: &Item<T>, e: RuleError) {
    r.bad(item, e.rule.to_string());
}

/// Every threshold key of any dialect; each dialect reads only its own.
const THRESHOLD_KEYS: [&str; 4] = [
    "healthy_threshold",
    "unhealthy_threshold",
    "tolerated_failures",
    "threshold",
];

fn thresholds(r: &mut Reader<'_>, t: &Table<'_, '_>, d: Dialect) -> Option<Thresholds> {
    let mut ok = true;
    let mine = d.threshold_keys();
    for key in THRESHOLD_KEYS
        .into_iter()
        .filter(|k| !mine.iter().any(|m| m.name == *k))
    {
        if let Some(item) = r.int(t, key) {
            r.bad(
                &item,
                format!("{d} does not use {key}; it uses {}", d.threshold_key_names()),
            );
            ok = false;
        }
    }
    let mut values = Vec::with_capacity(mine.len());
    for key in mine {
        let value = match r.int(t, key.name) {
            None => key.default,
            Some(item) => key.check(d, item.v).unwrap_or_else(|e| {
                let problem = match e {
                    ThresholdError::OutOfRange { min, max, .. } => format!("{d} allows {min} to {max}"),
                    other => other.to_string(),
                };
                r.bad(&item, problem);
                ok = false;
                key.default
            }),
        };
        values.push(value);
    }
    ok.then_some(())?;
    match d.thresholds(&values) {
        Ok(thresholds) => Some(thresholds),
        Err(e) => {
            r.missing(t, mine[0].name, e.to_string());
            None
        }
    }
}

/// Reports every key in `keys` that is set although `protocol` does not use it.
fn not_for(r: &mut Reader<'_>, t: &Table<'_, '_>, keys: &[&str], why: &str) -> bool {
    let mut clean = true;
    for key in keys {
        if let Some(v) = Reader::get(t, key) {
            r.error(
                v.span(),
                &t.child(key),
                Some(super::read::show(v.get_ref())),
                why.to_string(),
            );
            clean = false;
        }
    }
    clean
}

const HTTP_ONLY: [&str; 6] = ["path", "host", "method", "headers", "status", "body_match"];
const UDP_ONLY: [&str; 2] = ["request", "response"];

fn probe(r: &mut Reader<'_>, t: &Table<'_, '_>, d: Dialect, p: Protocol) -> Option<Probe> {
    let why_http = format!("only HTTP and HTTPS checks use this; the protocol is {}", p.name());
    let why_udp = format!("only UDP checks use this; the protocol is {}", p.name());
    match p {
        Protocol::Tcp => {
            let a = not_for(r, t, &HTTP_ONLY, &why_http);
            let b = not_for(r, t, &UDP_ONLY, &why_udp);
            (a && b).then_some(Probe::Tcp)
        }
        Protocol::Udp => {
            let clean = not_for(r, t, &HTTP_ONLY, &why_http);
            let mut payload = |key: &str| {
                let item = r.string(t, key)?;
                if item.v.len() > MAX_UDP_PAYLOAD {
                    r.bad(&item, format!("at most {MAX_UDP_PAYLOAD} bytes"));
                    return Some(Err(()));
                }
                Some(Ok(item.v))
            };
            let request = payload("request").transpose().ok()?;
            let response = payload("response").transpose().ok()?;
            clean.then_some(Probe::Udp(UdpCheck {
                request: request.unwrap_or_default(),
                response,
            }))
        }
        Protocol::Http | Protocol::Https => {
            let clean = not_for(r, t, &UDP_ONLY, &why_udp);
            let http = http(r, t, d, p == Protocol::Https);
            clean.then_some(())?;
            http.map(Probe::Http)
        }
    }
}

fn http(r: &mut Reader<'_>, t: &Table<'_, '_>, d: Dialect, tls: bool) -> Option<HttpCheck> {
    let before = r.errors.len();
    let path = match r.string(t, "path") {
        None => HttpPath::root(),
        Some(item) => HttpPath::parse(&item.v).unwrap_or_else(|e| {
            broke(r, &item, e);
            HttpPath::root()
        }),
    };
    let method = match r.string(t, "method") {
        None => Method::default_for(d),
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
        Some(item) if d == Dialect::Tm => {
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
        Some(list) if d != Dialect::Tm => {
            r.bad(&list, format!("{} has no custom headers; use host", d.name()));
            Vec::new()
        }
        Some(list) => headers(r, &list),
    };
    let healthy_status = match r.strings(t, "status") {
        None => d.default_status().to_vec(),
        Some(list) => status(r, &list, d),
    };
    let body_match = match r.string(t, "body_match") {
        None => None,
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
    (r.errors.len() == before).then_some(HttpCheck {
        tls,
        method,
        path,
        host,
        headers,
        healthy_status,
        body_match,
    })
}

/// One level of `name:value` headers, by the rules the prober follows too.
fn headers(r: &mut Reader<'_>, list: &Item<Vec<Item<String>>>) -> Vec<Header> {
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

const ENDPOINT_KEYS: [&str; 9] = [
    "name", "address", "port", "weight", "priority", "state", "headers", "subnets", "region",
];

fn endpoints(
    r: &mut Reader<'_>,
    list: &toml::Spanned<DeValue<'_>>,
    path: &str,
    health: &HealthCheck,
    dialect: Dialect,
    routing: Routing,
) -> Option<Vec<Endpoint>> {
    let DeValue::Array(items) = list.get_ref() else {
        r.error(
            list.span(),
            path,
            Some(super::read::show(list.get_ref())),
            "expected [[profile.endpoint]] tables",
        );
        return None;
    };
    let before = r.errors.len();
    let mut out = Vec::new();
    let mut taken = Taken::default();
    for (i, item) in items.iter().enumerate() {
        if let Some(ep) = endpoint(
            r,
            item,
            &format!("{path}[{i}]"),
            i,
            (health, dialect, routing),
            &mut taken,
        ) {
            out.push(ep);
        }
    }
    (r.errors.len() == before).then_some(out)
}

/// What earlier endpoints of the same profile already claimed.
#[derive(Default)]
struct Taken {
    names: HashSet<String>,
    priorities: HashSet<u32>,
    subnets: HashMap<IpNet, usize>,
    catch_all: bool,
    regions: HashSet<String>,
}

fn endpoint(
    r: &mut Reader<'_>,
    v: &toml::Spanned<DeValue<'_>>,
    path: &str,
    index: usize,
    (health, dialect, routing): (&HealthCheck, Dialect, Routing),
    taken: &mut Taken,
) -> Option<Endpoint> {
    let t = r.table(v, path.to_string(), &ENDPOINT_KEYS)?;
    let before = r.errors.len();
    let address = match r.string(&t, "address") {
        None => {
            r.missing(&t, "address", "every endpoint needs an address");
            None
        }
        Some(item) => match item.v.parse::<IpAddr>() {
            Ok(ip) if !ip.is_unspecified() && !ip.is_multicast() => Some(ip),
            _ => {
                r.bad(&item, "expected a unicast IPv4 or IPv6 address");
                None
            }
        },
    };
    let own_port = r.int(&t, "port").and_then(|item| port_value(r, &item));
    let protocol = health.protocol();
    let port = own_port.or(health.port).or(match protocol {
        Protocol::Http => Some(80),
        Protocol::Https => Some(443),
        Protocol::Tcp | Protocol::Udp => None,
    });
    if port.is_none() && r.int(&t, "port").is_none() {
        r.missing(
            &t,
            "port",
            format!(
                "a {} check needs a port: set health.port or the endpoint's port",
                protocol.name()
            ),
        );
    }
    let weight = bounded(r, &t, "weight", 1, 1000, 1);
    let priority = bounded(r, &t, "priority", 1, 1000, u32::try_from(index + 1).unwrap_or(u32::MAX));
    if let (Some(p), Routing::Priority) = (priority, routing) {
        if !taken.priorities.insert(p) {
            let item = r.int(&t, "priority");
            match item {
                Some(item) => r.bad(&item, "another endpoint of this profile has this priority"),
                None => r.missing(
                    &t,
                    "priority",
                    "the default priority (position) collides with another endpoint's; set priority",
                ),
            }
        }
    }
    let state = match r.string(&t, "state") {
        None => Some(AdminState::Enabled),
        Some(item) => match item.v.as_str() {
            "enabled" => Some(AdminState::Enabled),
            "disabled" => Some(AdminState::Disabled),
            "always-serve" => Some(AdminState::AlwaysServe),
            _ => {
                r.bad(&item, "expected enabled, disabled or always-serve");
                None
            }
        },
    };
    let headers = match r.strings(&t, "headers") {
        None => Vec::new(),
        Some(list) if !protocol.is_http() => {
            r.bad(
                &list,
                format!(
                    "only HTTP and HTTPS checks send headers; the protocol is {}",
                    protocol.name()
                ),
            );
            Vec::new()
        }
        Some(list) if dialect != Dialect::Tm => {
            r.bad(&list, format!("{} has no custom headers", dialect.name()));
            Vec::new()
        }
        Some(list) => headers(r, &list),
    };
    let subnets = subnets(r, &t, routing, index, taken);
    let region = region(r, &t, routing, taken);
    let name = match r.string(&t, "name") {
        Some(item) if !valid_name(&item.v) => {
            r.bad(&item, "expected 1-63 letters, digits, '-', '_' or '.'");
            None
        }
        Some(item) => {
            if !taken.names.insert(item.v.clone()) {
                r.bad(&item, "another endpoint of this profile has this name");
            }
            Some(item.v)
        }
        None => match (address, port) {
            (Some(a), Some(p)) => {
                let name = SocketAddr::new(a, p).to_string();
                if !taken.names.insert(name.clone()) {
                    r.missing(&t, "address", format!("{name} is listed twice in this profile"));
                }
                Some(name)
            }
            _ => None,
        },
    };
    (r.errors.len() == before).then_some(())?;
    Some(Endpoint {
        name: name?,
        address: address?,
        port: port?,
        weight: weight?,
        priority: priority?,
        state: state?,
        headers,
        subnets: subnets?,
        region: region?,
    })
}

fn bounded(r: &mut Reader<'_>, t: &Table<'_, '_>, key: &str, lo: u32, hi: u32, default: u32) -> Option<u32> {
    let Some(item) = r.int(t, key) else {
        return Some(default);
    };
    match u32::try_from(item.v).ok().filter(|n| (lo..=hi).contains(n)) {
        Some(n) => Some(n),
        None => {
            r.bad(&item, format!("expected {lo} to {hi}"));
            None
        }
    }
}

fn subnets(
    r: &mut Reader<'_>,
    t: &Table<'_, '_>,
    routing: Routing,
    index: usize,
    taken: &mut Taken,
) -> Option<Vec<IpNet>> {
    let list = r.strings(t, "subnets");
    if routing != Routing::Subnet {
        if let Some(list) = list {
            r.bad(&list, "subnets only apply to routing = \"subnet\"");
            return None;
        }
        return Some(Vec::new());
    }
    let Some(list) = list.filter(|l| !l.v.is_empty()) else {
        // One endpoint without subnets catches every unmapped source.
        if std::mem::replace(&mut taken.catch_all, true) {
            r.missing(
                t,
                "subnets",
                "another endpoint already catches unmapped sources; give this one subnets",
            );
            return None;
        }
        return Some(Vec::new());
    };
    let mut out = Vec::new();
    for item in &list.v {
        match item.v.parse::<IpNet>() {
            Ok(net) => {
                let net = net.trunc();
                if let Some(other) = taken.subnets.insert(net, index) {
                    r.bad(item, format!("endpoint[{other}] already maps this subnet"));
                }
                out.push(net);
            }
            Err(_) => r.bad(item, "expected a CIDR like \"10.0.0.0/8\" or \"2001:db8::/32\""),
        }
    }
    Some(out)
}

fn region(r: &mut Reader<'_>, t: &Table<'_, '_>, routing: Routing, taken: &mut Taken) -> Option<Option<String>> {
    let item = r.string(t, "region");
    match (item, routing) {
        (None, Routing::Geographic) => {
            r.missing(
                t,
                "region",
                format!("geographic routing needs a region (or {WORLD_REGION:?})"),
            );
            None
        }
        (None, _) => Some(None),
        (Some(item), Routing::Geographic) => {
            let ok = valid_name(&item.v) && item.v.bytes().all(|b| !b.is_ascii_uppercase());
            if !ok {
                r.bad(&item, "expected a lower-case region name like \"eu-west\"");
                None
            } else if !taken.regions.insert(item.v.clone()) {
                r.bad(
                    &item,
                    "another endpoint already serves this region; a region maps to one endpoint",
                );
                None
            } else {
                Some(Some(item.v))
            }
        }
        (Some(item), _) => {
            r.bad(&item, "region only applies to routing = \"geographic\"");
            None
        }
    }
}
