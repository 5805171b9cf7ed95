//! The reference against the reader. Each test writes small configurations around one key, in
//! every setting a test context gives it (each dialect, protocol and routing method, nested
//! endpoints, each sink kind, DNS, cluster), and checks what `Config::parse` makes of them: that
//! each table takes exactly the reference's keys, that each key is read, that writing a default
//! out changes nothing, and that the documented bounds are the reader's.
use std::fmt::Write;

use super::*;
use crate::config::{Config, ConfigErrors};

/// Every table, the top level first.
fn all() -> impl Iterator<Item = &'static Section> {
    std::iter::once(&ROOT).chain(SECTIONS)
}

fn section(path: &str) -> &'static Section {
    all()
        .find(|s| s.path == path)
        .unwrap_or_else(|| panic!("no section {path:?}"))
}

/// A configuration built for a test: its tables, each with its lines, in the order written, and
/// raw TOML after them.
#[derive(Clone, Debug)]
struct Doc {
    tables: Vec<(&'static str, Vec<(String, String)>)>,
    tail: &'static str,
}

impl Doc {
    fn new() -> Doc {
        Doc {
            tables: vec![("", Vec::new())],
            tail: "",
        }
    }

    fn with(mut self, path: &'static str, lines: &[(&str, &str)]) -> Doc {
        let lines = lines.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.tables.push((path, lines));
        self
    }

    /// The same document without table `path`.
    fn without(mut self, path: &str) -> Doc {
        self.tables.retain(|(p, _)| *p != path);
        self
    }

    fn has(&self, path: &str) -> bool {
        self.tables.iter().any(|(p, _)| *p == path)
    }

    fn get(&self, path: &str, key: &str) -> Option<&str> {
        let (_, lines) = self.tables.iter().find(|(p, _)| *p == path)?;
        lines.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The same document with `key` of table `path` set to `value`, a TOML literal, or left out.
    fn set(&self, path: &str, key: &str, value: Option<&str>) -> Doc {
        let mut doc = self.clone();
        let (_, lines) = doc
            .tables
            .iter_mut()
            .find(|(p, _)| *p == path)
            .unwrap_or_else(|| panic!("no table {path:?} in the document"));
        lines.retain(|(k, _)| k != key);
        if let Some(v) = value {
            lines.push((key.to_string(), v.to_string()));
        }
        doc
    }

    /// Whether table `path` is written: not when its parent (or an ancestor's parent) sets its
    /// key directly, as a test does to give it a value of the wrong kind.
    fn shown(&self, path: &str) -> bool {
        if path.is_empty() {
            return true;
        }
        let (parent, last) = path.rsplit_once('.').unwrap_or(("", path));
        self.get(parent, last).is_none() && self.shown(parent)
    }

    fn text(&self) -> String {
        let mut out = String::new();
        for (path, lines) in self.tables.iter().filter(|(p, _)| self.shown(p)) {
            if !path.is_empty() {
                out.push_str(section(path).header);
                out.push('\n');
            }
            for (k, v) in lines {
                let _ = writeln!(out, "{k} = {v}");
            }
            out.push('\n');
        }
        out.push_str(self.tail);
        out
    }

    /// The dialect of the (first) profile.
    fn dialect(&self) -> Option<usize> {
        let d = self.get("profile", "dialect")?;
        ["\"lb\"", "\"tm\"", "\"ga\""].iter().position(|x| *x == d)
    }

    fn parse(&self) -> Result<Config, ConfigErrors> {
        Config::parse(&self.text(), "t.toml")
    }
}

/// The field an error names for `key` of table `path`, in the first of each array of tables:
/// `profile[0].endpoint[0].weight`.
fn field(path: &str, key: &str) -> String {
    let (mut out, mut prefix) = (String::new(), String::new());
    for part in path.split('.').filter(|p| !p.is_empty()) {
        for s in [&mut out, &mut prefix] {
            if !s.is_empty() {
                s.push('.');
            }
            s.push_str(part);
        }
        if section(&prefix).header.starts_with("[[") {
            out.push_str("[0]");
        }
    }
    if out.is_empty() {
        key.to_string()
    } else {
        format!("{out}.{key}")
    }
}

fn quoted(s: &str) -> String {
    format!("\"{s}\"")
}

/// One profile, "web", with one endpoint.
fn profile(dialect: &str, protocol: &str, routing: &str) -> Doc {
    let mut endpoint = vec![("address", "\"192.0.2.1\"")];
    if routing == "geographic" {
        endpoint.push(("region", "\"eu\""));
    }
    Doc::new()
        .with(
            "profile",
            &[
                ("name", "\"web\""),
                ("dialect", &quoted(dialect)),
                ("routing", &quoted(routing)),
            ],
        )
        .with("profile.health", &[("protocol", &quoted(protocol)), ("port", "80")])
        .with("profile.endpoint", &endpoint)
}

/// The child of the nested context's endpoint.
const CHILD: &str = "[[profile]]\nname = \"child\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\n\
                     port = 80\n[[profile.endpoint]]\naddress = \"192.0.2.2\"\n";

/// Every setting a key is tried in, each a valid configuration, with what it parses to.
fn contexts() -> Vec<(Doc, Config)> {
    let mut out = Vec::new();
    // Every dialect, protocol and routing method; tm and ga refuse udp.
    for dialect in ["lb", "tm", "ga"] {
        for protocol in ["tcp", "udp", "http", "https", "grpc", "grpcs"] {
            for routing in ["priority", "multivalue", "subnet", "geographic"] {
                let doc = profile(dialect, protocol, routing);
                if let Ok(config) = doc.parse() {
                    out.push((doc, config));
                }
            }
        }
    }
    assert_eq!(out.len(), 64, "every combination but udp under tm and ga parses");
    let base = || profile("lb", "tcp", "priority");
    let mut nested =
        base()
            .set("profile.endpoint", "address", None)
            .set("profile.endpoint", "profile", Some("\"child\""));
    nested.tail = CHILD;
    let dns = base()
        .with("dns", &[("listen", "[\"192.0.2.53:53\"]"), ("zone", "\"tm.example.\"")])
        .with(
            "dns.nameserver",
            &[("name", "\"ns1.tm.example.\""), ("addresses", "[\"192.0.2.53\"]")],
        )
        .with("dns.rate_limit", &[])
        .with("dns.tcp", &[])
        .with(
            "dns.region",
            &[("name", "\"eu\""), ("subnets", "[\"198.51.100.0/24\"]")],
        );
    let sink = |lines: &[(&str, &str)]| base().with("sink", &[&[("profile", "\"web\"")], lines].concat());
    let dns_records = |discovery: &[(&str, &str)]| {
        base()
            .set("profile", "endpoints_from", Some("\"dns\""))
            .set("profile", "routing", Some("\"weighted\""))
            .without("profile.endpoint")
            .with("profile.discovery", discovery)
    };
    let special = [
        base().with("daemon", &[]),
        base().with("daemon", &[("api_listen", "\"127.0.0.1:9180\"")]),
        base().with("source", &[]),
        nested,
        sink(&[
            ("kind", "\"nftables\""),
            ("family", "\"ip\""),
            ("table", "\"lb\""),
            ("map", "\"web_slots\""),
        ]),
        sink(&[
            ("kind", "\"nftables\""),
            ("family", "\"inet\""),
            ("table", "\"lb\""),
            ("set", "\"web_up\""),
        ]),
        sink(&[("kind", "\"bpf\""), ("map", "\"web_lb\"")]),
        sink(&[
            ("kind", "\"haproxy\""),
            ("socket", "\"/run/haproxy/admin.sock\""),
            ("backend", "\"web\""),
        ]),
        sink(&[("kind", "\"exec\""), ("command", "[\"/usr/local/bin/feed\", \"web\"]")]),
        sink(&[("kind", "\"route\""), ("prefixes", "[\"198.51.100.10/32\"]")]),
        dns.clone(),
        dns.set("dns", "geoip_db", Some("\"/var/lib/GeoIP/country.mmdb\"")),
        // Room for the dns.tcp bounds that depend on each other.
        dns.set("dns.tcp", "max_clients", Some("16384"))
            .set("dns.tcp", "max_lifetime", Some("\"3600s\"")),
        dns.set("dns.tcp", "max_clients_per_prefix", Some("1"))
            .set("dns.tcp", "idle_timeout", Some("\"100ms\"")),
        // A profile whose endpoints the fleet API owns: it lists none.
        base()
            .set("profile", "endpoints_from", Some("\"api\""))
            .without("profile.endpoint"),
        // An agent check beside the health check.
        base().set("profile.health", "agent_port", Some("9999")),
        // A TCP check through the data path's tunnel to a VIP.
        base().set("profile.health", "tunnel", Some("\"ipip\"")).set(
            "profile.health",
            "tunnel_vip",
            Some("\"198.51.100.10\""),
        ),
        // The same in UDP (GUE), on its default port.
        base().set("profile.health", "tunnel", Some("\"gue\"")).set(
            "profile.health",
            "tunnel_vip",
            Some("\"198.51.100.10\""),
        ),
        // An HTTPS check that verifies the chain (against the system's roots).
        profile("lb", "https", "priority").set("profile.health", "tls_verify", Some("\"ca\"")),
        // A profile whose endpoints are a name's records: A and AAAA, then SRV.
        dns_records(&[
            ("name", "\"web.svc.example\""),
            ("port", "8080"),
            ("resolvers", "[\"192.0.2.53\"]"),
        ]),
        dns_records(&[
            ("name", "\"_http._tcp.web.svc.example.\""),
            ("type", "\"SRV\""),
            ("resolvers", "[\"192.0.2.53:5353\"]"),
        ]),
        // Passive detection, on the interface toward the backends, with a ratio (which the window
        // and min_attempts go with).
        base().with(
            "profile.passive",
            &[("interfaces", "[\"eth1\"]"), ("failure_ratio", "50")],
        ),
        base().with(
            "cluster",
            &[
                ("node", "\"lb-1\""),
                ("listen", "\"192.0.2.10:7946\""),
                ("key_file", "\"/etc/probed/cluster.key\""),
            ],
        ),
    ];
    for doc in special {
        let config = doc
            .parse()
            .unwrap_or_else(|e| panic!("a test context is refused:\n{e}\n---\n{}", doc.text()));
        out.push((doc, config));
    }
    for s in all() {
        assert!(
            out.iter().any(|(d, _)| d.has(s.path)),
            "no test context has {}",
            s.header
        );
    }
    out
}

/// The contexts that have table `path`.
fn having<'c>(contexts: &'c [(Doc, Config)], path: &'c str) -> impl Iterator<Item = &'c (Doc, Config)> + 'c {
    contexts.iter().filter(move |(d, _)| d.has(path))
}

fn errors_on(doc: &Doc, field: &str) -> Vec<String> {
    match doc.parse() {
        Ok(_) => Vec::new(),
        Err(e) => e
            .iter()
            .filter(|e| e.field == field)
            .map(|e| e.problem.clone())
            .collect(),
    }
}

#[test]
fn tables_and_their_keys_line_up() {
    let mut paths = std::collections::HashSet::new();
    for s in all() {
        assert!(paths.insert(s.path), "{} twice", s.header);
        let mut names = std::collections::HashSet::new();
        for key in s.keys() {
            assert!(names.insert(key.name), "{} lists {} twice", s.header, key.name);
            assert!(!key.about.is_empty(), "{}.{} has no description", s.path, key.name);
            let child = if s.path.is_empty() {
                key.name.to_string()
            } else {
                format!("{}.{}", s.path, key.name)
            };
            let sub = all().find(|c| c.path == child);
            match key.ty {
                Type::Table => assert_eq!(sub.map(|c| c.header), Some(&*format!("[{child}]"))),
                Type::Tables => assert_eq!(sub.map(|c| c.header), Some(&*format!("[[{child}]]"))),
                _ => assert!(sub.is_none(), "{child} is a table of its own"),
            }
        }
        if let Some((parent, last)) = s.path.rsplit_once('.').or((!s.path.is_empty()).then_some(("", s.path))) {
            assert!(section(parent).accepts(last), "{} is no key of its parent", s.header);
        }
    }
}

/// (a) The reader takes each table's keys from the reference: an unknown key is refused with
/// exactly the reference's list, in its order.
#[test]
fn every_table_takes_exactly_the_reference_keys() {
    let contexts = contexts();
    for s in all() {
        let (doc, _) = having(&contexts, s.path).next().expect("a context has every table");
        let names: Vec<&str> = s.names().collect();
        let want = format!("unknown key; expected one of: {}", names.join(", "));
        let problems = errors_on(
            &doc.set(s.path, "zz_not_a_key", Some("1")),
            &field(s.path, "zz_not_a_key"),
        );
        assert_eq!(problems, [want], "{}", s.header);
    }
}

/// Whether the reader looks at `key` in `doc`: a value of the wrong type is an error on it.
fn reads(doc: &Doc, s: &Section, key: &Key) -> bool {
    !errors_on(&doc.set(s.path, key.name, Some(DATE)), &field(s.path, key.name)).is_empty()
}

/// (a) Every documented key is read where it applies: a value of no key's type (a date) is an
/// error on that very key in at least one context.
#[test]
fn every_key_is_read() {
    let contexts = contexts();
    for s in all() {
        for key in s.keys() {
            let field = field(s.path, key.name);
            let read = having(&contexts, s.path).any(|(doc, _)| reads(doc, s, key));
            assert!(read, "{field}: the reader never looks at it");
        }
    }
}

/// (b) A default written out gives the configuration that leaving the key out gives, wherever
/// the reader takes the value.
#[test]
fn defaults_written_out_change_nothing() {
    let contexts = contexts();
    let mut checked = 0;
    for s in all() {
        for key in s.keys() {
            let mut compared = 0;
            for (doc, _) in having(&contexts, s.path) {
                let value = match key.default {
                    Unset::Value(v) => v,
                    Unset::Dialect(per) => match doc.dialect() {
                        Some(d) => per[d],
                        None => continue,
                    },
                    Unset::Required | Unset::Text(_) => continue,
                };
                let (Ok(written), Ok(left_out)) = (
                    doc.set(s.path, key.name, Some(value)).parse(),
                    doc.set(s.path, key.name, None).parse(),
                ) else {
                    continue;
                };
                assert_eq!(
                    written,
                    left_out,
                    "{} = {value} is not the default\n---\n{}",
                    field(s.path, key.name),
                    doc.text()
                );
                compared += 1;
            }
            if matches!(key.default, Unset::Value(_) | Unset::Dialect(_)) {
                assert!(
                    compared > 0,
                    "{}: no context takes the default",
                    field(s.path, key.name)
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 50, "{checked} defaults checked");
}

/// A value of no key's type.
const DATE: &str = "1979-05-27T07:32:00Z";

/// Values at each documented bound, each with its neighbour outside (if any).
fn bounds(allowed: Allowed) -> Vec<(String, Option<String>)> {
    let below = |min: u64, f: &dyn Fn(u64) -> String| (min > 0).then(|| f(min - 1));
    match allowed {
        Allowed::Int(min, max) => vec![
            (min.to_string(), Some((min - 1).to_string())),
            (max.to_string(), Some((max + 1).to_string())),
        ],
        Allowed::Octal(min, max) => vec![
            (format!("0o{min:o}"), Some(format!("0o{:o}", min - 1))),
            (format!("0o{max:o}"), Some(format!("0o{:o}", max + 1))),
        ],
        Allowed::Millis(min, max) => {
            let f = |ms: u64| format!("\"{ms}ms\"");
            vec![(f(min), below(min, &f)), (f(max), Some(f(max + 1)))]
        }
        Allowed::Seconds(min, max) => {
            let f = |s: u64| format!("\"{s}s\"");
            vec![(f(min), below(min, &f)), (f(max), Some(f(max + 1)))]
        }
        Allowed::Bytes(min, max) => {
            let f = |n: u64| quoted(&"a".repeat(n as usize));
            vec![
                (f(min as u64), below(min as u64, &f)),
                (f(max as u64), Some(f(max as u64 + 1))),
            ]
        }
        Allowed::OneOf(words) => words
            .iter()
            .map(|w| (quoted(w), Some("\"zz-not-a-value\"".to_string())))
            .collect(),
        Allowed::Any | Allowed::Text(_) => Vec::new(),
    }
}

/// The documented ranges and words are the reader's: each bound is taken in some context, and
/// wherever it is and the key is read, the value just outside is refused on that key.
#[test]
fn documented_bounds_are_the_readers() {
    let contexts = contexts();
    let mut checked = 0;
    for s in all() {
        for key in s.keys() {
            let field = field(s.path, key.name);
            for (inside, outside) in bounds(key.allowed) {
                let mut taken = false;
                for (doc, _) in having(&contexts, s.path) {
                    if doc.set(s.path, key.name, Some(&inside)).parse().is_err() {
                        continue;
                    }
                    taken = true;
                    if let Some(outside) = outside.as_ref().filter(|_| reads(doc, s, key)) {
                        let bad = doc.set(s.path, key.name, Some(outside));
                        assert!(
                            !errors_on(&bad, &field).is_empty(),
                            "{field} = {outside} is taken, though {inside} is documented as the bound\n---\n{}",
                            bad.text()
                        );
                    }
                }
                assert!(
                    taken,
                    "{field} = {inside} is documented as allowed, but no context takes it"
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 80, "{checked} bounds checked");
}

#[test]
fn the_example_is_a_valid_configuration() {
    let config = Config::parse(EXAMPLE, "example.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.endpoint_count(), 2);
}

#[test]
fn the_page_is_a_section_5_page_with_every_table() {
    let page = man_page();
    assert!(page.contains("\n.TH probed.toml 5 \"\" \"probed "), "{}", &page[..200]);
    for s in SECTIONS {
        assert!(page.contains(&format!("\n.SS {}\n", s.header)), "{}", s.header);
    }
    // Nothing the reference says may start a line as a request by accident.
    for line in page.lines().filter(|l| l.starts_with('.') || l.starts_with('\'')) {
        let request = line[1..].split(' ').next().unwrap_or_default();
        assert!(
            ["TH", "SH", "SS", "PP", "TP", "br", "RS", "RE", "nf", "fi", "ie", "el", "\\}", "ds"]
                .iter()
                .any(|r| request.starts_with(r)),
            "{line:?}"
        );
    }
}

/// A key the reference gives to some protocols is refused, naming where it applies, on a check
/// of every other protocol, and never so on its own: the reader asks the reference.
#[test]
fn protocol_keys_are_refused_by_the_reference_on_every_other_protocol() {
    use crate::config::Protocol;
    let mut tried = 0;
    for (path, section) in [("profile.health", &HEALTH), ("profile.endpoint", &ENDPOINT)] {
        for key in section.keys() {
            let Only::Protocols(list, _) = key.only else {
                continue;
            };
            for &p in Protocol::ALL {
                let doc = profile("lb", p.as_str(), "priority").set(path, key.name, Some("\"x\""));
                let said = doc.parse().err().map(|e| e.to_string()).unwrap_or_default();
                let refused = said.contains(&format!("{} applies to protocol = ", key.name));
                assert_eq!(refused, !list.contains(&p), "{path}.{} on {p}:\n{said}", key.name);
                tried += 1;
            }
        }
    }
    assert!(tried > 100, "{tried}");
}

/// The same for the keys of sink kinds.
#[test]
fn sink_keys_are_refused_by_the_reference_on_every_other_kind() {
    use crate::config::SinkType;
    let mut tried = 0;
    for key in SINK.keys() {
        let Only::Sinks(list, _) = key.only else {
            continue;
        };
        for &kind in SinkType::ALL {
            let doc = profile("lb", "tcp", "priority").with(
                "sink",
                &[
                    ("profile", "\"web\""),
                    ("kind", &quoted(kind.as_str())),
                    (key.name, "\"x\""),
                ],
            );
            let said = doc.parse().err().map(|e| e.to_string()).unwrap_or_default();
            let refused = said.contains(&format!("{} applies to kind = ", key.name));
            assert_eq!(refused, !list.contains(&kind), "sink.{} on {kind}:\n{said}", key.name);
            tried += 1;
        }
    }
    assert!(tried > 50, "{tried}");
}
