//! Configuration tests: one per rule, each checking the exact field the error names. One file
//! per section, as in `validate/`; here the helpers and the tests of the file as a whole.
use std::net::IpAddr;

use super::*;
use crate::status::{AdminState, Routing};

/// One profile with one endpoint; `health` gets `protocol = "http"` unless it sets a protocol.
fn cfg(dialect: &str, profile: &str, health: &str, endpoint: &str) -> String {
    let protocol = if health.contains("protocol") {
        ""
    } else {
        "protocol = \"http\"\n"
    };
    format!(
        "[[profile]]\nname = \"web\"\ndialect = \"{dialect}\"\n{profile}\n[profile.health]\n{protocol}{health}\n\
         [[profile.endpoint]]\naddress = \"192.0.2.1\"\n{endpoint}\n"
    )
}

fn refused(text: &str) -> ConfigErrors {
    match Config::parse(text, "t.toml") {
        Ok(c) => panic!("accepted a bad config: {c:?}\n{text}"),
        Err(e) => e,
    }
}

/// The config is refused with exactly one error, on `field`.
fn expect_error(text: &str, field: &str) {
    let errs = refused(text);
    assert!(
        errs.iter().any(|e| e.field == field),
        "no error on {field}; got:\n{errs}\n--- config:\n{text}"
    );
    assert_eq!(errs.len(), 1, "expected one error on {field}, got:\n{errs}");
}

/// The (healthy, unhealthy) thresholds the engine gets.
fn both(t: Thresholds) -> (u32, u32) {
    (t.healthy(), t.unhealthy())
}

fn ok(text: &str) -> Config {
    Config::parse(text, "t.toml").unwrap_or_else(|e| panic!("refused:\n{e}\n--- config:\n{text}"))
}

macro_rules! rule {
    ($name:ident, $text:expr, $field:expr) => {
        #[test]
        fn $name() {
            expect_error(&$text, $field);
        }
    };
}

// Declared after `rule!` so the section files can use it.
mod cluster;
mod daemon;
mod dns;
mod endpoint;
mod grpc;
mod health;
mod http;
mod nested;
mod passive;
mod profile;
mod sink;
mod source;

// File-level rules.
rule!(syntax_error_has_a_place, "[daemon\napi_listen = 1", "");
rule!(unknown_key, "[daemon]\napi_listn = \"127.0.0.1:1\"", "daemon.api_listn");
rule!(wrong_type, cfg("lb", "", "port = \"80\"", ""), "profile[0].health.port");

#[test]
fn every_error_is_reported_at_once() {
    let text = r#"
[daemon]
api_listen = "0.0.0.0:80"

[source]
port_range = "40000-41000"

[[profile]]
name = "web"
dialect = "tm"

[profile.health]
protocol = "tcp"
path = "/"
interval = "45s"
tolerated_failures = 12

[[profile.endpoint]]
address = "nowhere"
port = 0
"#;
    let errs = refused(text);
    let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
    for want in [
        "daemon.api_listen",
        "source.port_range",
        "profile[0].health.path",
        "profile[0].health.interval",
        "profile[0].health.tolerated_failures",
    ] {
        assert!(fields.contains(&want), "{want} missing from:\n{errs}");
    }
    assert_eq!(errs.len(), 5, "{errs}");
}

#[test]
fn error_names_file_line_column_field_value_and_range() {
    let text = cfg("tm", "", "interval = \"45s\"", "");
    let errs = refused(&text);
    let e = &errs.0[0];
    assert_eq!((e.line, e.column), (7, 12), "{e}");
    assert_eq!(e.profile.as_deref(), Some("web"));
    assert_eq!(e.value.as_deref(), Some("\"45s\""));
    assert_eq!(
        e.to_string(),
        "t.toml:7:12: profile \"web\" health.interval = \"45s\": tm allows 10s or 30s"
    );
}

#[test]
fn bad_health_check_still_reports_its_own_error() {
    let errs = refused(&cfg("tm", "", "interval = \"45s\"", "state = \"on\""));
    let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
    // Endpoint rules need a valid health check (the port default comes from it), so they wait.
    assert!(fields.contains(&"profile[0].health.interval"), "{errs}");
}

#[test]
fn syntax_error_points_at_the_line() {
    let errs = refused("[daemon]\napi_listen = \n");
    assert_eq!(errs.0[0].line, 2, "{errs}");
}

/// Profiles are read one `[[profile]]` block at a time (validate/sections.rs): the same config
/// as the file read whole, and errors at the file's own lines, wherever the block is.
#[test]
fn profile_blocks_read_one_at_a_time_give_what_the_whole_file_gives() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/probed.toml");
    let text = std::fs::read_to_string(path).unwrap();
    // `[dns]` (with its `[[dns.region]]`s) moved from the end to between two profiles.
    let (head, dns) = text.split_at(text.find("\n[dns]").expect("the example has [dns]") + 1);
    let fourth = head.match_indices("\n[[profile]]").nth(3).expect("a fourth profile").0 + 1;
    let moved = format!("{}{dns}\n{}", &head[..fourth], &head[fourth..]);
    assert_ne!(moved, text);
    let whole = ok(&text);
    assert_eq!(ok(&moved), whole);
    // The same file the split cannot read block by block: a dotted `profile` key up front
    // makes it TOML's error, from the whole file.
    let errs = refused(&format!("profile.x = 1\n{text}"));
    assert!(errs.iter().any(|e| e.problem.contains("not valid TOML")), "{errs}");
}

#[test]
fn errors_in_later_profile_blocks_point_at_their_lines() {
    let block = |name: &str, port: &str| {
        format!(
            "[[profile]]\nname = \"{name}\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\n\
             [[profile.endpoint]]\naddress = \"198.18.0.1\"\nport = {port}\n"
        )
    };
    // Blocks are 8 lines: the bad port is on the second block's last line (16), the duplicate
    // name on the third block's second line (2 * 8 + 3 lines of [dns] + 2 = 21).
    let text = format!(
        "{}{}[dns]\nlisten = [\"198.18.0.53:53\"]\nzone = \"tm.example.\"\n{}",
        block("a", "80"),
        block("b", "0"),
        block("a", "81")
    );
    let errs = refused(&text);
    let at = |field: &str| {
        errs.iter()
            .find(|e| e.field == field)
            .map_or_else(|| panic!("no error on {field}: {errs}"), |e| (e.line, e.column))
    };
    assert_eq!(at("profile[1].endpoint[0].port"), (16, 8), "{errs}");
    assert_eq!(at("profile[2].name"), (21, 8), "{errs}");
    assert_eq!(errs.len(), 2, "{errs}");
    // A syntax error in a block: its line in the file.
    let broken = format!(
        "{}{}",
        block("a", "80"),
        block("b", "80").replace("port = 80", "port = ")
    );
    assert_eq!(refused(&broken).0[0].line, 16);
}

/// A profile of more endpoints than one run (validate/sections.rs) gives what the same
/// endpoints written as one inline array give, and errors in later runs name the endpoint's
/// index in the profile and its line in the file.
#[test]
fn a_profiles_endpoint_runs_give_what_one_array_gives() {
    let n = 2600;
    let address = |i: usize| format!("198.18.{}.{}", i / 200, i % 200 + 1);
    let head = "[[profile]]\nname = \"big\"\ndialect = \"tm\"\n";
    let health = "[profile.health]\nprotocol = \"http\"\npath = \"/h\"\n";
    let mut tables = format!("[daemon]\nevents = \"stdout\"\n{head}");
    let mut inline = format!("[daemon]\nevents = \"stdout\"\n{head}endpoint = [\n");
    for i in 0..n {
        tables += &format!(
            "[[profile.endpoint]]\naddress = \"{}\"\nweight = {}\n",
            address(i),
            i % 7 + 1
        );
        let mut own = String::new();
        if i % 1000 == 3 {
            tables += "headers = [\"X-Probe: yes\"]\n";
            own = ", headers = [\"X-Probe: yes\"]".to_string();
        }
        inline += &format!("  {{ address = \"{}\", weight = {}{own} }},\n", address(i), i % 7 + 1);
        // The health table in the middle of the endpoints splits them.
        if i == 1500 {
            tables += health;
        }
    }
    inline += "]\n";
    inline += health;
    tables += "[[profile]]\nname = \"small\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\nport = 9\n";
    inline += "[[profile]]\nname = \"small\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\nport = 9\n";
    let from_tables = ok(&tables);
    assert_eq!(from_tables.profiles[0].endpoints.len(), n);
    assert_eq!(from_tables.profiles[0].endpoints[2003].headers().len(), 1);
    assert_eq!(from_tables, ok(&inline));

    // A bad weight and a repeated address in the third run.
    let bad = tables
        .replacen(
            &format!("address = \"{}\"\nweight = 2\n", address(2101)),
            &format!("address = \"{}\"\nweight = 0\n", address(2101)),
            1,
        )
        .replacen(&format!("\"{}\"", address(2500)), &format!("\"{}\"", address(7)), 1);
    let errs = refused(&bad);
    let line_of = |needle: &str| bad[..bad.find(needle).unwrap()].matches('\n').count() + 1;
    let weight = errs
        .iter()
        .find(|e| e.field == "profile[0].endpoint[2101].weight")
        .unwrap_or_else(|| panic!("{errs}"));
    assert_eq!(
        weight.line,
        line_of(&format!("{}\"\nweight = 0", address(2101))) + 1,
        "{errs}"
    );
    assert_eq!(weight.profile.as_deref(), Some("big"));
    let twice = errs
        .iter()
        .find(|e| e.field == "profile[0].endpoint[2500].address")
        .unwrap_or_else(|| panic!("{errs}"));
    assert!(twice.problem.contains("listed twice"), "{errs}");
    assert_eq!(errs.len(), 2, "{errs}");

    // `endpoint` written in the head too: TOML's error, as from the whole file.
    let both = tables.replacen("dialect = \"tm\"\n", "dialect = \"tm\"\nendpoint = []\n", 1);
    let errs = refused(&both);
    assert!(errs.iter().any(|e| e.problem.contains("not valid TOML")), "{errs}");
}

#[test]
fn empty_file_gets_defaults() {
    let c = ok("");
    assert_eq!(c.daemon.api.listen, ApiListen::Unix("/run/probed/api.sock".into()));
    assert_eq!(c.daemon.api.socket_group, ApiGroup::Default);
    assert_eq!(c.daemon.api.socket_mode, 0o660);
    assert_eq!(c.daemon.api.token_file, None);
    assert_eq!(c.daemon.events, EventsOutput::Stdout);
    assert_eq!(c.daemon.pin_dir, std::path::PathBuf::from("/sys/fs/bpf/probed"));
    assert_eq!(
        c.source.ports,
        PortRange {
            first: 61000,
            last: 65095
        }
    );
    assert_eq!(c.source.xdp_mode, crate::kernel::AttachMode::Auto);
    assert!(c.profiles.is_empty());
}

#[test]
fn example_config_parses() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/probed.toml");
    let c = Config::load(path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.profiles.len(), 8);
    assert_eq!(c.endpoint_count(), 19);
    let cart = c.profile("cart").unwrap();
    assert_eq!(cart.health.protocol(), crate::config::Protocol::Grpcs);
    let own = cart.endpoints[1]
        .check_override()
        .expect("the second endpoint's own keys");
    assert_eq!(own.service.as_deref(), Some("shop.CartV2"));
    let www = c.profile("www").unwrap();
    assert_eq!(
        (www.nested[0].child.as_str(), www.nested[0].min_child_endpoints),
        ("edge", 2)
    );
    let dns = c.dns.as_ref().unwrap();
    assert_eq!(dns.name_of(www), "www.tm.example.");
    assert_eq!(dns.regions.len(), 2);
    let api = c.profile("api").unwrap();
    assert_eq!(both(api.thresholds()), (1, 4));
    assert_eq!(api.endpoints[2].state, AdminState::AlwaysServe);
    assert_eq!(
        *api.endpoints[1].headers(),
        [Header::parse("Host:api-b.example.com").unwrap()]
    );
    let dns = c.profile("dns").unwrap();
    assert_eq!(dns.routing, Routing::multivalue(2));
    assert_eq!(dns.endpoints[2].address, "2001:db8::53".parse::<IpAddr>().unwrap());
    assert_eq!(&*dns.endpoints[2].name, "[2001:db8::53]:53");
    assert_eq!(c.source.ipv6().count(), 1);
    assert!(!c.profile("staging").unwrap().enabled);
}

/// dist/probed.toml, which the Debian package installs as /etc/probed/probed.toml: valid as
/// shipped, probing nothing, with the paths the unit and the maintainer scripts prepare.
#[test]
fn packaged_config_is_valid_and_probes_nothing() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../dist/probed.toml");
    let c = Config::load(path).unwrap_or_else(|e| panic!("{e}"));
    assert!(c.profiles.is_empty() && c.sinks.is_empty() && c.dns.is_none());
    assert!(c.source.interfaces.is_empty());
    assert_eq!(c.daemon.api.listen, ApiListen::Unix("/run/probed/api.sock".into()));
    assert_eq!(c.daemon.api.socket_group, ApiGroup::Name("probed".into()));
    assert_eq!(c.daemon.events, EventsOutput::Stdout);
    assert_eq!(c.daemon.state_file, std::path::Path::new("/var/lib/probed/state.json"));
    assert_eq!(c.daemon.pin_dir, std::path::Path::new("/sys/fs/bpf/probed"));
}

/// The commented-out example in the packaged config is valid once its setting lines (`# key =
/// value` and `# [table]`, exactly one space after the '#') are uncommented: what the file tells
/// the operator to do. Prose and indented examples stay comments.
#[test]
fn packaged_config_example_is_valid_uncommented() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../dist/probed.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let setting = |rest: &str| {
        rest.starts_with('[')
            || rest
                .split_once(" = ")
                .is_some_and(|(key, _)| !key.is_empty() && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
    };
    let uncommented: String = text
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(rest) if setting(rest) => rest,
            _ => l,
        })
        .fold(String::new(), |acc, l| acc + l + "\n");
    let c = ok(&uncommented);
    assert_eq!(c.profiles.len(), 1, "{uncommented}");
    assert_eq!(c.endpoint_count(), 3);
    assert!(c.source.interfaces.is_empty(), "indented examples stay comments");
}

#[test]
fn missing_file_is_one_error() {
    let errs = Config::load("/nonexistent/probed.toml").unwrap_err();
    assert_eq!(errs.len(), 1);
    assert!(
        errs.0[0]
            .to_string()
            .starts_with("/nonexistent/probed.toml: cannot read"),
        "{errs}"
    );
}
