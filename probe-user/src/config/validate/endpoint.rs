//! `[[profile.endpoint]]`: address, port, weight and priority, admin state, headers and the
//! routing keys (subnets, region), each checked against what earlier endpoints of the profile
//! already claimed.
use std::{
    collections::{HashMap, HashSet},
    net::{IpAddr, SocketAddr},
};

use ipnet::IpNet;
use toml::de::DeValue;

use super::{port_value, valid_name};
use crate::config::{
    model::*,
    read::{Reader, Table},
    reference,
};
use crate::sinks::haproxy::config::{haproxy_name, HAPROXY_NAME_RULE};
use crate::status::{routing::WORLD_REGION, AdminState, Method, Routing};

/// What a nested endpoint (`profile = "CHILD"`) takes; the rest comes from its child.
const NESTED_KEYS: [&str; 8] = [
    "name",
    "profile",
    "weight",
    "priority",
    "state",
    "subnets",
    "region",
    "min_child_endpoints",
];

/// A profile's endpoints as the file lists them: plain ones and nested profiles.
pub(super) type Endpoints = (Vec<Endpoint>, Vec<NestedEndpoint>);

/// What an endpoint is read against: its profile's health check, dialect and routing.
pub(super) type Rules<'h> = (&'h HealthCheck, Dialect, Routing);

/// A profile's endpoints being read, from one array or from several runs of tables in turn
/// (a large block's, see sections.rs): numbered, and checked against each other, as one list.
pub(super) struct EndpointList<'h> {
    path: String,
    rules: Rules<'h>,
    out: Vec<Endpoint>,
    nested: Vec<NestedEndpoint>,
    taken: Taken,
    /// The next endpoint's index in the profile.
    next: usize,
    /// The errors there were before the first endpoint.
    before: usize,
}

impl<'h> EndpointList<'h> {
    /// `expected`: how many endpoints the file holds, if known. Room for all of them at once:
    /// growing by doubling held up to three copies' worth at the last step, at a million
    /// endpoints a few hundred MB.
    pub fn new(r: &Reader<'_>, path: String, rules: Rules<'h>, expected: usize) -> Self {
        EndpointList {
            path,
            rules,
            out: Vec::with_capacity(expected),
            nested: Vec::new(),
            taken: Taken::default(),
            next: 0,
            before: r.errors.len(),
        }
    }

    /// `endpoint = [...]`, or the `[[profile.endpoint]]` tables of one tree.
    pub fn array(&mut self, r: &mut Reader<'_>, list: &toml::Spanned<DeValue<'_>>) {
        let Some(items) = r.tables_of(list, &self.path, "expected [[profile.endpoint]] tables") else {
            return;
        };
        self.out.reserve_exact(items.len());
        for item in items {
            self.item(r, item);
        }
    }

    fn item(&mut self, r: &mut Reader<'_>, item: &toml::Spanned<DeValue<'_>>) {
        let i = self.next;
        self.next += 1;
        let at = format!("{}[{i}]", self.path);
        let is_nested = matches!(item.get_ref(), DeValue::Table(t) if t.iter().any(|(k, _)| k.get_ref() == "profile"));
        if is_nested {
            if let Some(n) = nested_endpoint(r, item, &at, i, self.rules.2, &mut self.taken) {
                self.nested.push(n);
            }
        } else if let Some(ep) = endpoint(r, item, &at, i, self.rules, &mut self.taken) {
            self.out.push(ep);
        }
    }

    /// The list, or None if any of it was wrong.
    pub fn finish(self, r: &Reader<'_>) -> Option<Endpoints> {
        (r.errors.len() == self.before).then_some((self.out, self.nested))
    }
}

/// `profile = "CHILD"`: the child is checked to exist, and loops refused, once every profile
/// is read (`validate::nested`).
fn nested_endpoint(
    r: &mut Reader<'_>,
    v: &toml::Spanned<DeValue<'_>>,
    path: &str,
    index: usize,
    routing: Routing,
    taken: &mut Taken,
) -> Option<NestedEndpoint> {
    let t = r.table(v, path.to_string(), &reference::ENDPOINT)?;
    let before = r.errors.len();
    let own = reference::ENDPOINT.names().filter(|k| !NESTED_KEYS.contains(k));
    super::refuse_keys(r, &t, own, |_| {
        "a nested endpoint (profile = ...) takes its addresses, ports and checks from its child profile".into()
    });
    let child = r.string(&t, "profile").and_then(|item| {
        if valid_name(&item.v) {
            Some(item.v)
        } else {
            r.bad(&item, "expected the name of another profile");
            None
        }
    });
    let weight = bounded(r, &t, "weight", 1, 1000, 1);
    let priority = priority(r, &t, index, routing, taken);
    let state = match state(r, &t) {
        Some(state @ (AdminState::AlwaysServe | AdminState::Drain)) => {
            let item = r.string(&t, "state").expect("read just above");
            r.bad(
                &item,
                format!(
                    "a nested endpoint cannot be {state}: its health and its traffic are its child's (SPEC 8); use enabled or disabled"
                ),
            );
            None
        }
        other => other,
    };
    let subnets = subnets(r, &t, routing, index, taken);
    let region = region(r, &t, routing, taken);
    let min_child_endpoints = bounded(
        r,
        &t,
        "min_child_endpoints",
        1,
        1000,
        NestedEndpoint::DEFAULT_MIN_CHILD_ENDPOINTS,
    );
    let name = match r.string(&t, "name") {
        Some(item) if !valid_name(&item.v) => {
            r.bad(&item, super::NAME_RULE);
            None
        }
        Some(item) => Some(item.v),
        None => child.clone(),
    };
    if let Some(n) = &name {
        if !taken.names.insert(n.clone()) {
            r.missing(
                &t,
                "name",
                format!("another endpoint of this profile is named {n:?}; set name"),
            );
        }
    }
    (r.errors.len() == before).then_some(())?;
    Some(NestedEndpoint {
        name: name?,
        child: child?,
        weight: weight?,
        priority: priority?,
        state: state?,
        subnets: subnets?,
        region: region?,
        min_child_endpoints: min_child_endpoints?,
    })
}

/// What earlier endpoints of the same profile already claimed.
#[derive(Default)]
pub(crate) struct Taken {
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
    let t = r.table(v, path.to_string(), &reference::ENDPOINT)?;
    let before = r.errors.len();
    // Read by nested endpoints only: on a plain one it would be silently ignored.
    super::refuse_keys(r, &t, ["min_child_endpoints"], |key| {
        format!("{key} applies to a nested endpoint (one with profile = \"CHILD\")")
    });
    // Every key of another protocol's, as the reference has it.
    let p = health.protocol();
    super::refuse_foreign(
        r,
        &t,
        &reference::ENDPOINT,
        |only| only.admits_protocol(p),
        &format!("the profile's protocol is {p}"),
    );
    // The order is the order errors at the same place are reported in.
    let address = address(r, &t, health);
    let port = port(r, &t, health);
    let weight = bounded(r, &t, "weight", 1, 1000, 1);
    let priority = priority(r, &t, index, routing, taken);
    let state = state(r, &t);
    let headers = own_headers(r, &t, health.protocol(), dialect);
    let subnets = subnets(r, &t, routing, index, taken);
    let region = region(r, &t, routing, taken);
    let name = name(r, &t, address, port, taken);
    let haproxy_server = haproxy_server(r, &t);
    let check = crate::probe::http::config::check_override(r, &t, health.protocol());
    (r.errors.len() == before).then_some(())?;
    Some(Endpoint {
        name: name?.into(),
        address: address?,
        port: port?,
        weight: weight?,
        priority: priority?,
        state: state?,
        extra: crate::config::Extra::of(crate::config::EndpointExtra {
            headers: headers.into(),
            subnets: subnets?.into(),
            region: region?.map(Into::into),
            haproxy_server: haproxy_server.map(Into::into),
            check,
        }),
    })
}

/// The HAProxy server name a `haproxy` sink writes for this endpoint. Checked here for its
/// alphabet (it is spliced into admin socket commands); whether it collides with another
/// endpoint's server is the sink's rule, since only a sink gives it a meaning.
fn haproxy_server(r: &mut Reader<'_>, t: &Table<'_, '_>) -> Option<String> {
    let item = r.string(t, "haproxy_server")?;
    if haproxy_name(&item.v) {
        Some(item.v)
    } else {
        r.bad(&item, HAPROXY_NAME_RULE);
        None
    }
}

fn address(r: &mut Reader<'_>, t: &Table<'_, '_>, health: &HealthCheck) -> Option<IpAddr> {
    match r.string(t, "address") {
        None => {
            r.missing(t, "address", "every endpoint needs an address");
            None
        }
        Some(item) => match item.v.parse::<IpAddr>() {
            Ok(ip) if !ip.is_unspecified() && !ip.is_multicast() => match health.probe.tunnel() {
                Some(t) if t.vip.is_ipv4() != ip.is_ipv4() => {
                    r.bad(
                        &item,
                        format!(
                            "the tunnel's outer header goes to this address and its inner one to tunnel_vip \
                             {}: ipip carries IPv4 in IPv4 and IPv6 in IPv6, so both must be of one family",
                            t.vip
                        ),
                    );
                    None
                }
                Some(crate::probe::tunnel::TunnelTo { source: Some(src), .. }) if src.is_ipv4() != ip.is_ipv4() => {
                    r.bad(
                        &item,
                        format!(
                            "the tunnel's outer header goes to this address from tunnel_source {src}: \
                             both must be of one family (the outer header is of the endpoint's)"
                        ),
                    );
                    None
                }
                _ => Some(ip),
            },
            _ => {
                r.bad(&item, "expected a unicast IPv4 or IPv6 address");
                None
            }
        },
    }
}

/// The endpoint's own port, else the health check's, else the protocol's well-known one.
fn port(r: &mut Reader<'_>, t: &Table<'_, '_>, health: &HealthCheck) -> Option<u16> {
    // Read once: a wrong-typed port is one error, and it is not also "missing".
    let given = Reader::get(t, "port").is_some();
    let own_port = r.int(t, "port").and_then(|item| port_value(r, &item));
    let protocol = health.protocol();
    let port = own_port
        .or(health.port)
        .or_else(|| crate::probe::kinds::default_port(protocol));
    if port.is_none() && !given {
        r.missing(
            t,
            "port",
            format!(
                "a {} check needs a port: set health.port or the endpoint's port",
                protocol.as_str()
            ),
        );
    }
    port
}

/// The priority, by default the endpoint's position; unique within the profile under
/// priority routing, where it decides which endpoint answers.
fn priority(r: &mut Reader<'_>, t: &Table<'_, '_>, index: usize, routing: Routing, taken: &mut Taken) -> Option<u32> {
    let priority = bounded(r, t, "priority", 1, 1000, u32::try_from(index + 1).unwrap_or(u32::MAX));
    if let (Some(p), Method::Priority) = (priority, routing.method) {
        if !taken.priorities.insert(p) {
            let item = r.int(t, "priority");
            match item {
                Some(item) => r.bad(&item, "another endpoint of this profile has this priority"),
                None => r.missing(
                    t,
                    "priority",
                    "the default priority (position) collides with another endpoint's; set priority",
                ),
            }
        }
    }
    priority
}

fn state(r: &mut Reader<'_>, t: &Table<'_, '_>) -> Option<AdminState> {
    match r.string(t, "state") {
        None => Some(AdminState::Enabled),
        Some(item) => match item.v.parse() {
            Ok(state) => Some(state),
            Err(_) => {
                r.bad(&item, format!("expected {}", AdminState::NAMES.join(", ")));
                None
            }
        },
    }
}

/// The endpoint's own level of headers: tm HTTP(S) checks and gRPC checks (metadata) have one.
fn own_headers(r: &mut Reader<'_>, t: &Table<'_, '_>, protocol: Protocol, dialect: Dialect) -> Vec<Header> {
    match r.strings(t, "headers") {
        None => Vec::new(),
        // Refused with the endpoint's other keys of another protocol's (`refuse_foreign`).
        Some(_) if crate::probe::kinds::kind_of(protocol) != crate::probe::KindId::Http => Vec::new(),
        // gRPC metadata, in every dialect, by the profile's rules.
        Some(list) if matches!(protocol, Protocol::Grpc | Protocol::Grpcs) => {
            crate::probe::http::config::metadata(r, &list)
        }
        Some(list) if dialect != Dialect::Tm => {
            r.bad(&list, format!("{} has no custom headers", dialect.name()));
            Vec::new()
        }
        Some(list) => crate::probe::http::config::headers(r, &list),
    }
}

/// The name, by default `address:port`; unique within the profile either way.
fn name(
    r: &mut Reader<'_>,
    t: &Table<'_, '_>,
    address: Option<IpAddr>,
    port: Option<u16>,
    taken: &mut Taken,
) -> Option<String> {
    match r.string(t, "name") {
        Some(item) if !valid_name(&item.v) => {
            r.bad(&item, super::NAME_RULE);
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
                    r.missing(t, "address", format!("{name} is listed twice in this profile"));
                }
                Some(name)
            }
            _ => None,
        },
    }
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
    if routing.method != Method::Subnet {
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
    match (item, routing.method) {
        (None, Method::Geographic) => {
            r.missing(
                t,
                "region",
                format!("geographic routing needs a region (or {WORLD_REGION:?})"),
            );
            None
        }
        (None, _) => Some(None),
        (Some(item), Method::Geographic) => {
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

/// The keys an endpoint of the fleet API may not set: a nested profile and the endpoint's own
/// TLS and gRPC keys are the file's (their files and names are the operator's, not a control
/// plane's).
fn file_only(key: &str) -> bool {
    matches!(key, "profile" | "min_child_endpoints" | "service") || crate::probe::http::config::TLS_KEYS.contains(&key)
}

impl Taken {
    /// What `endpoints` (a profile's, less those a batch replaces or removes) claim of what is
    /// unique under `routing`: priorities, subnets, regions. Names are not taken here: the
    /// fleet holds them by name already (a put of a name it has replaces that endpoint).
    pub(crate) fn claimed<'e>(endpoints: impl Iterator<Item = (usize, &'e Endpoint)>, routing: Routing) -> Taken {
        let mut taken = Taken::default();
        if !routing.needs().unique_keys {
            return taken;
        }
        for (i, e) in endpoints {
            match routing.method {
                Method::Priority => {
                    taken.priorities.insert(e.priority);
                }
                Method::Subnet if e.subnets().is_empty() => taken.catch_all = true,
                Method::Subnet => taken.subnets.extend(e.subnets().iter().map(|n| (*n, i))),
                _ => taken.regions.extend(e.region().map(str::to_string)),
            }
        }
        taken
    }
}

/// One endpoint of a fleet API batch (`items[i]`, a JSON object) read by the file's rules for
/// `[[profile.endpoint]]` against its profile's check and routing: the same keys, defaults and
/// errors (with `at` for the field and no line), `position` its default priority less one.
pub(crate) fn api_endpoint(
    item: &serde_json::Map<String, serde_json::Value>,
    at: &str,
    position: usize,
    rules: Rules<'_>,
    taken: &mut Taken,
) -> Result<Endpoint, Vec<crate::config::ConfigError>> {
    let bad = crate::config::ConfigError::batch;
    let mut errors = Vec::new();
    for (key, value) in item {
        if file_only(key) {
            errors.push(bad(
                format!("{at}.{key}"),
                Some(value.to_string()),
                "nested profiles and an endpoint's own TLS and gRPC keys are set in the file; the fleet API \
                 takes name, address, port, weight, priority, state, headers, subnets, region and haproxy_server"
                    .into(),
            ));
        }
    }
    let mut text = String::from("e = {");
    for (i, (key, value)) in item.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&serde_json::Value::String(key.clone()).to_string());
        text.push_str(" = ");
        if let Err(problem) = toml_value(value, &mut text) {
            errors.push(bad(format!("{at}.{key}"), Some(value.to_string()), problem.into()));
        }
    }
    text.push('}');
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut r = Reader {
        text: &text,
        file: "batch",
        errors: Vec::new(),
        base: 0,
    };
    let parsed = super::parse_toml(&mut r, &text);
    let ep = parsed.as_ref().and_then(|root| {
        let v = root.get_ref().get("e")?;
        endpoint(&mut r, v, at, position, rules, taken)
    });
    let mut errors = r.errors;
    for e in &mut errors {
        (e.line, e.column) = (0, 0);
    }
    match ep {
        Some(ep) if errors.is_empty() => Ok(ep),
        _ => Err(errors),
    }
}

/// `v` as a TOML value, onto `out`: JSON strings are TOML basic strings as serde_json writes
/// them, objects inline tables. JSON's null has no TOML form.
fn toml_value(v: &serde_json::Value, out: &mut String) -> Result<(), &'static str> {
    use serde_json::Value as J;
    match v {
        J::Null => return Err("null is not a value here; leave the key out for its default"),
        J::Bool(_) | J::Number(_) | J::String(_) => out.push_str(&v.to_string()),
        J::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                toml_value(item, out)?;
            }
            out.push(']');
        }
        J::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&J::String(k.clone()).to_string());
                out.push_str(" = ");
                toml_value(item, out)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// `e` as the fleet API's item: the keys `api_endpoint` reads it back from, defaults left out
/// but for the name (an item read back is the same endpoint whatever its position).
pub(crate) fn api_item(e: &Endpoint) -> serde_json::Map<String, serde_json::Value> {
    use serde_json::Value as J;
    let mut m = serde_json::Map::new();
    m.insert("name".into(), J::String(e.name.to_string()));
    m.insert("address".into(), J::String(e.address.to_string()));
    m.insert("port".into(), J::from(e.port));
    m.insert("weight".into(), J::from(e.weight));
    m.insert("priority".into(), J::from(e.priority));
    if e.state != AdminState::Enabled {
        m.insert("state".into(), J::String(e.state.as_str().to_string()));
    }
    if !e.headers().is_empty() {
        let headers = e.headers().iter().map(|h| J::String(h.to_string())).collect();
        m.insert("headers".into(), J::Array(headers));
    }
    if !e.subnets().is_empty() {
        let nets = e.subnets().iter().map(|n| J::String(n.to_string())).collect();
        m.insert("subnets".into(), J::Array(nets));
    }
    if let Some(region) = e.region() {
        m.insert("region".into(), J::String(region.to_string()));
    }
    if let Some(server) = e.haproxy_server() {
        m.insert("haproxy_server".into(), J::String(server.to_string()));
    }
    m
}
