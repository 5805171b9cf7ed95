//! Configuration tests: one per rule, each checking the exact field the error names.
use std::{net::IpAddr, time::Duration};

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

// File-level rules.
rule!(syntax_error_has_a_place, "[daemon\napi_listen = 1", "");
rule!(unknown_key, "[daemon]\napi_listn = \"127.0.0.1:1\"", "daemon.api_listn");
rule!(wrong_type, cfg("lb", "", "port = \"80\"", ""), "profile[0].health.port");

// [daemon]
rule!(
    api_listen_garbage,
    "[daemon]\napi_listen = \"localhost\"",
    "daemon.api_listen"
);
rule!(
    api_listen_remote_refused,
    "[daemon]\napi_listen = \"0.0.0.0:9180\"",
    "daemon.api_listen"
);
rule!(
    api_unix_relative,
    "[daemon]\napi_listen = \"unix:probed.sock\"",
    "daemon.api_listen"
);
rule!(pin_dir_relative, "[daemon]\npin_dir = \"bpf/probed\"", "daemon.pin_dir");
rule!(events_empty, "[daemon]\nevents = \"\"", "daemon.events");

// [source]
rule!(
    port_range_overlaps_ephemeral,
    "[source]\nport_range = \"60000-62000\"",
    "source.port_range"
);
rule!(
    port_range_reversed,
    "[source]\nport_range = \"65000-61000\"",
    "source.port_range"
);
rule!(
    source_address_bad,
    "[source]\naddresses = [\"100.64.0.300\"]",
    "source.addresses[0]"
);
rule!(xdp_mode_unknown, "[source]\nxdp_mode = \"native\"", "source.xdp_mode");
rule!(
    interface_name_bad,
    "[source]\ninterfaces = [\"a/b\"]",
    "source.interfaces[0]"
);

// [[profile]]
rule!(
    profile_name_missing,
    "[[profile]]\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\nport = 1",
    "profile[0].name"
);
rule!(
    profile_name_bad,
    cfg("lb", "", "", "").replace("name = \"web\"", "name = \"a b\""),
    "profile[0].name"
);
rule!(dialect_unknown, cfg("xx", "", "", ""), "profile[0].dialect");
rule!(
    routing_unknown,
    cfg("tm", "routing = \"closest\"", "", ""),
    "profile[0].routing"
);
rule!(
    max_answers_out_of_range,
    cfg("tm", "routing = \"multivalue\"\nmax_answers = 9", "", ""),
    "profile[0].max_answers"
);
rule!(
    max_answers_without_multivalue,
    cfg("tm", "max_answers = 2", "", ""),
    "profile[0].max_answers"
);
rule!(
    health_missing,
    "[[profile]]\nname = \"web\"\ndialect = \"lb\"",
    "profile[0].health"
);

#[test]
fn profile_name_duplicate() {
    let text = format!("{}{}", cfg("lb", "", "", ""), cfg("lb", "", "", ""));
    expect_error(&text, "profile[1].name");
}

// [profile.health]
rule!(
    protocol_missing,
    "[[profile]]\nname = \"web\"\ndialect = \"lb\"\n[profile.health]\nport = 1",
    "profile[0].health.protocol"
);
rule!(
    protocol_udp_in_tm,
    cfg("tm", "", "protocol = \"udp\"\nport = 53", ""),
    "profile[0].health.protocol"
);
rule!(
    protocol_udp_in_ga,
    cfg("ga", "", "protocol = \"udp\"\nport = 53", ""),
    "profile[0].health.protocol"
);
rule!(port_zero, cfg("lb", "", "port = 0", ""), "profile[0].health.port");
rule!(
    port_too_big,
    cfg("lb", "", "port = 70000", ""),
    "profile[0].health.port"
);
rule!(
    path_with_tcp_in_tm,
    cfg("tm", "", "protocol = \"tcp\"\nport = 22\npath = \"/\"", ""),
    "profile[0].health.path"
);
rule!(
    path_without_slash,
    cfg("ga", "", "path = \"health\"", ""),
    "profile[0].health.path"
);
rule!(
    path_bad_char,
    cfg("ga", "", "path = \"/a b\"", ""),
    "profile[0].health.path"
);
rule!(
    path_too_long,
    cfg("lb", "", &format!("path = \"/{}\"", "a".repeat(80)), ""),
    "profile[0].health.path"
);
rule!(
    method_head_in_tm,
    cfg("tm", "", "method = \"HEAD\"", ""),
    "profile[0].health.method"
);
rule!(
    method_unknown_in_lb,
    cfg("lb", "", "method = \"POST\"", ""),
    "profile[0].health.method"
);
rule!(
    method_with_tcp,
    cfg("lb", "", "protocol = \"tcp\"\nport = 1\nmethod = \"GET\"", ""),
    "profile[0].health.method"
);
rule!(
    headers_over_eight,
    cfg(
        "tm",
        "",
        &format!(
            "headers = [{}]",
            (0..9).map(|i| format!("\"X-{i}:v\"")).collect::<Vec<_>>().join(",")
        ),
        ""
    ),
    "profile[0].health.headers"
);
rule!(
    header_without_colon,
    cfg("tm", "", "headers = [\"X-Probe\"]", ""),
    "profile[0].health.headers[0]"
);
rule!(
    host_header_with_star,
    cfg("tm", "", "headers = [\"Host:*.example.com\"]", ""),
    "profile[0].health.headers[0]"
);
rule!(
    headers_in_lb,
    cfg("lb", "", "headers = [\"X-A:b\"]", ""),
    "profile[0].health.headers"
);
rule!(
    header_the_prober_sets,
    cfg("tm", "", "headers = [\"Content-Length:5\"]", ""),
    "profile[0].health.headers[0]"
);
rule!(
    header_without_value,
    cfg("tm", "", "headers = [\"X-Probe:\"]", ""),
    "profile[0].health.headers[0]"
);
rule!(
    header_twice_in_one_level,
    cfg("tm", "", "headers = [\"X-A:1\", \"x-a:2\"]", ""),
    "profile[0].health.headers"
);
rule!(
    status_empty,
    cfg("tm", "", "status = []", ""),
    "profile[0].health.status"
);
rule!(
    host_in_tm,
    cfg("tm", "", "host = \"a.example.com\"", ""),
    "profile[0].health.host"
);
rule!(
    host_with_star,
    cfg("lb", "", "host = \"*.example.com\"", ""),
    "profile[0].health.host"
);
rule!(
    status_class_bad_in_lb,
    cfg("lb", "", "status = [\"2xx\", \"6xx\"]", ""),
    "profile[0].health.status[1]"
);
rule!(
    status_range_in_lb,
    cfg("lb", "", "status = [\"200-299\"]", ""),
    "profile[0].health.status[0]"
);
rule!(
    status_range_reversed_in_tm,
    cfg("tm", "", "status = [\"299-200\"]", ""),
    "profile[0].health.status"
);
rule!(
    status_over_eight_in_tm,
    cfg("tm", "", "status = \"200,201,202,203,204,205,206,207,208\"", ""),
    "profile[0].health.status"
);
rule!(
    status_in_ga,
    cfg("ga", "", "status = [\"200-299\"]", ""),
    "profile[0].health.status"
);
rule!(
    interval_syntax,
    cfg("lb", "", "interval = \"2 seconds\"", ""),
    "profile[0].health.interval"
);
rule!(
    interval_tm_not_10_or_30,
    cfg("tm", "", "interval = \"45s\"", ""),
    "profile[0].health.interval"
);
rule!(
    interval_ga_over_50,
    cfg("ga", "", "interval = \"51s\"", ""),
    "profile[0].health.interval"
);
rule!(
    interval_ga_fraction,
    cfg("ga", "", "interval = \"1500ms\"", ""),
    "profile[0].health.interval"
);
rule!(
    interval_lb_too_long,
    cfg("lb", "", "interval = \"301s\"", ""),
    "profile[0].health.interval"
);
rule!(
    timeout_tm_over_10,
    cfg("tm", "", "interval = \"30s\"\ntimeout = \"11s\"", ""),
    "profile[0].health.timeout"
);
rule!(
    timeout_tm_fast_over_9,
    cfg("tm", "", "interval = \"10s\"\ntimeout = \"10s\"", ""),
    "profile[0].health.timeout"
);
rule!(
    timeout_tm_under_5,
    cfg("tm", "", "timeout = \"4s\"", ""),
    "profile[0].health.timeout"
);
rule!(
    timeout_ga_not_3,
    cfg("ga", "", "timeout = \"5s\"", ""),
    "profile[0].health.timeout"
);
rule!(
    timeout_lb_too_long,
    cfg("lb", "", "timeout = \"61s\"", ""),
    "profile[0].health.timeout"
);
rule!(
    healthy_threshold_lb_zero,
    cfg("lb", "", "healthy_threshold = 0", ""),
    "profile[0].health.healthy_threshold"
);
rule!(
    unhealthy_threshold_lb_eleven,
    cfg("lb", "", "unhealthy_threshold = 11", ""),
    "profile[0].health.unhealthy_threshold"
);
rule!(
    tolerated_failures_tm_ten,
    cfg("tm", "", "tolerated_failures = 10", ""),
    "profile[0].health.tolerated_failures"
);
rule!(
    threshold_ga_one,
    cfg("ga", "", "threshold = 1", ""),
    "profile[0].health.threshold"
);
rule!(
    threshold_of_other_dialect,
    cfg("lb", "", "tolerated_failures = 2", ""),
    "profile[0].health.tolerated_failures"
);
rule!(
    udp_request_with_http,
    cfg("lb", "", "request = \"ping\"", ""),
    "profile[0].health.request"
);
rule!(
    udp_request_too_long,
    cfg(
        "lb",
        "",
        &format!("protocol = \"udp\"\nport = 53\nrequest = \"{}\"", "x".repeat(501)),
        ""
    ),
    "profile[0].health.request"
);
rule!(
    body_match_with_head,
    cfg("lb", "", "body_match = \"OK\"", ""),
    "profile[0].health.body_match"
);
rule!(
    body_match_with_tcp,
    cfg("tm", "", "protocol = \"tcp\"\nport = 1\nbody_match = \"OK\"", ""),
    "profile[0].health.body_match"
);

// [[profile.endpoint]]
rule!(
    endpoint_address_bad,
    cfg("lb", "", "", "").replace("192.0.2.1", "192.0.2"),
    "profile[0].endpoint[0].address"
);
rule!(endpoint_address_missing, "[[profile]]\nname = \"w\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"http\"\n[[profile.endpoint]]\nport = 80", "profile[0].endpoint[0].address");
rule!(
    endpoint_port_bad,
    cfg("lb", "", "", "port = 65536"),
    "profile[0].endpoint[0].port"
);
rule!(
    endpoint_port_missing_for_tcp,
    cfg("lb", "", "protocol = \"tcp\"", ""),
    "profile[0].endpoint[0].port"
);
rule!(
    endpoint_weight_zero,
    cfg("lb", "routing = \"weighted\"", "", "weight = 0"),
    "profile[0].endpoint[0].weight"
);
rule!(
    endpoint_priority_too_big,
    cfg("tm", "", "", "priority = 1001"),
    "profile[0].endpoint[0].priority"
);
rule!(
    endpoint_state_unknown,
    cfg("tm", "", "", "state = \"on\""),
    "profile[0].endpoint[0].state"
);
rule!(
    endpoint_headers_in_lb,
    cfg("lb", "", "", "headers = [\"X-A:b\"]"),
    "profile[0].endpoint[0].headers"
);
rule!(
    endpoint_host_header_with_star,
    cfg("tm", "", "", "headers = [\"Host:*\"]"),
    "profile[0].endpoint[0].headers[0]"
);
rule!(
    endpoint_subnets_without_subnet_routing,
    cfg("tm", "", "", "subnets = [\"10.0.0.0/8\"]"),
    "profile[0].endpoint[0].subnets"
);
rule!(
    endpoint_subnet_bad_cidr,
    cfg("tm", "routing = \"subnet\"", "", "subnets = [\"10.0.0.0/33\"]"),
    "profile[0].endpoint[0].subnets[0]"
);
rule!(
    endpoint_region_missing_for_geographic,
    cfg("ga", "routing = \"geographic\"", "", ""),
    "profile[0].endpoint[0].region"
);
rule!(
    endpoint_region_without_geographic,
    cfg("ga", "", "", "region = \"eu\""),
    "profile[0].endpoint[0].region"
);

/// A profile with two endpoints; the second's extra lines are `second`.
fn two(dialect: &str, profile: &str, first: &str, second: &str) -> String {
    format!(
        "{}[[profile.endpoint]]\naddress = \"192.0.2.2\"\n{second}\n",
        cfg(dialect, profile, "", first)
    )
}

rule!(
    endpoint_priority_duplicate,
    two("tm", "", "priority = 1", "priority = 1"),
    "profile[0].endpoint[1].priority"
);
rule!(
    endpoint_name_duplicate,
    two("tm", "", "name = \"a\"", "name = \"a\""),
    "profile[0].endpoint[1].name"
);
rule!(
    endpoint_listed_twice,
    two("tm", "routing = \"weighted\"", "", "").replace("192.0.2.2", "192.0.2.1"),
    "profile[0].endpoint[1].address"
);
rule!(
    endpoint_subnet_mapped_twice,
    two(
        "tm",
        "routing = \"subnet\"",
        "subnets = [\"10.0.0.0/8\"]",
        "subnets = [\"10.0.0.0/8\"]"
    ),
    "profile[0].endpoint[1].subnets[0]"
);
rule!(
    endpoint_two_catch_alls,
    two("tm", "routing = \"subnet\"", "", ""),
    "profile[0].endpoint[1].subnets"
);
rule!(
    endpoint_region_duplicate,
    two("ga", "routing = \"geographic\"", "region = \"eu\"", "region = \"eu\""),
    "profile[0].endpoint[1].region"
);

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

#[test]
fn empty_file_gets_defaults() {
    let c = ok("");
    assert_eq!(c.daemon.api, ApiListen::Tcp("127.0.0.1:9180".parse().unwrap()));
    assert_eq!(c.daemon.events, EventsOutput::Stdout);
    assert_eq!(c.daemon.pin_dir, std::path::PathBuf::from("/sys/fs/bpf/probed"));
    assert_eq!(
        c.source.ports,
        PortRange {
            first: 61000,
            last: 65000
        }
    );
    assert_eq!(c.source.xdp_mode, crate::kernel::AttachMode::Auto);
    assert!(c.profiles.is_empty());
}

#[test]
fn xdp_mode_is_read() {
    for (text, want) in [
        ("auto", crate::kernel::AttachMode::Auto),
        ("driver", crate::kernel::AttachMode::Driver),
        ("skb", crate::kernel::AttachMode::Skb),
    ] {
        let c = ok(&format!("[source]\nxdp_mode = \"{text}\"\n"));
        assert_eq!(c.source.xdp_mode, want, "{text}");
    }
}

#[test]
fn remote_api_allowed_when_asked() {
    let c = ok("[daemon]\napi_listen = \"0.0.0.0:9180\"\napi_allow_remote = true\n");
    assert_eq!(c.daemon.api, ApiListen::Tcp("0.0.0.0:9180".parse().unwrap()));
    let c = ok("[daemon]\napi_listen = \"unix:/run/probed.sock\"\nevents = \"/var/log/probed.jsonl\"\n");
    assert_eq!(c.daemon.api, ApiListen::Unix("/run/probed.sock".into()));
}

#[test]
fn tm_defaults_and_thresholds() {
    let c = ok(&cfg("tm", "", "", ""));
    let p = &c.profiles[0];
    assert_eq!(p.health.interval, Duration::from_secs(30));
    assert_eq!(p.health.timeout, Duration::from_secs(10));
    assert_eq!(both(p.thresholds()), (1, 4));
    let http = p.health.http().unwrap();
    assert_eq!((http.method, http.path.as_str()), (Method::Get, "/"));
    assert!(http.status_ok(200) && !http.status_ok(204) && !http.status_ok(301));
    assert_eq!(p.endpoints[0].port, 80);
    assert_eq!(p.routing, Routing::Priority);

    let fast = ok(&cfg("tm", "", "interval = \"10s\"\ntolerated_failures = 0", ""));
    assert_eq!(fast.profiles[0].health.timeout, Duration::from_secs(9));
    assert_eq!(both(fast.profiles[0].thresholds()), (1, 1));
}

#[test]
fn lb_and_ga_defaults() {
    let lb = ok(&cfg("lb", "", "", ""));
    let h = &lb.profiles[0].health;
    assert_eq!(
        (h.interval, h.timeout),
        (Duration::from_secs(2), Duration::from_secs(5))
    );
    assert_eq!(both(h.thresholds), (3, 3));
    let http = h.http().unwrap();
    assert_eq!(http.method, Method::Head);
    assert!(http.status_ok(204) && http.status_ok(302) && !http.status_ok(404));

    let ga = ok(&cfg("ga", "", "threshold = 5", ""));
    let h = &ga.profiles[0].health;
    assert_eq!(
        (h.interval, h.timeout),
        (Duration::from_secs(2), Duration::from_secs(3))
    );
    assert_eq!(both(h.thresholds), (5, 5));
}

#[test]
fn example_config_parses() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/probed.toml");
    let c = Config::load(path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.profiles.len(), 6);
    assert_eq!(c.endpoint_count(), 16);
    let api = c.profile("api").unwrap();
    assert_eq!(both(api.thresholds()), (1, 4));
    assert_eq!(api.endpoints[2].state, AdminState::AlwaysServe);
    assert_eq!(
        api.endpoints[1].headers,
        [Header::parse("Host:api-b.example.com").unwrap()]
    );
    let dns = c.profile("dns").unwrap();
    assert_eq!(dns.routing, Routing::Multivalue { max_answers: 2 });
    assert_eq!(dns.endpoints[2].address, "2001:db8::53".parse::<IpAddr>().unwrap());
    assert_eq!(dns.endpoints[2].name, "[2001:db8::53]:53");
    assert_eq!(c.source.ipv6().count(), 1);
    assert!(!c.profile("staging").unwrap().enabled);
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

// Pacing: fast/down intervals and jitter, off unless set.
rule!(
    fast_interval_zero,
    cfg("lb", "", "fast_interval = \"0s\"", ""),
    "profile[0].health.fast_interval"
);
rule!(
    down_interval_too_long,
    cfg("lb", "", "down_interval = \"301s\"", ""),
    "profile[0].health.down_interval"
);
rule!(
    initial_jitter_not_a_duration,
    cfg("lb", "", "initial_jitter = \"soon\"", ""),
    "profile[0].health.initial_jitter"
);
rule!(
    jitter_percent_over_100,
    cfg("lb", "", "jitter_percent = 101", ""),
    "profile[0].health.jitter_percent"
);

#[test]
fn pacing_is_off_by_default_and_read_when_set() {
    let plain = ok(&cfg("lb", "", "", ""));
    assert_eq!(plain.profiles[0].health.pacing, Pacing::default());
    let paced = ok(&cfg(
        "tm",
        "",
        "fast_interval = \"2s\"\ndown_interval = \"60s\"\ninitial_jitter = \"500ms\"\njitter_percent = 10",
        "",
    ));
    let p = paced.profiles[0].health.pacing;
    assert_eq!(p.fast_interval, Some(Duration::from_secs(2)));
    assert_eq!(p.down_interval, Some(Duration::from_secs(60)));
    assert_eq!(p.initial_jitter, Duration::from_millis(500));
    assert_eq!(p.jitter_percent, 10);
}

#[test]
fn hosts_may_carry_a_port_or_be_an_address() {
    for host in ["a.example.com:8080", "198.18.0.2", "[2001:2::2]:8443"] {
        let c = ok(&cfg("lb", "", &format!("host = \"{host}\""), ""));
        let http = c.profiles[0].health.http().unwrap();
        assert_eq!(http.host.as_ref().map(HostName::as_str), Some(host));
    }
}

#[test]
fn rule_messages_come_from_the_shared_rules() {
    let errs = refused(&cfg("tm", "", "headers = [\"Connection:close\"]", ""));
    assert_eq!(
        errs.0[0].problem,
        "the prober sets connection itself; any header but content-length, transfer-encoding, connection, \
         upgrade, te is allowed"
    );
    let errs = refused(&cfg("ga", "", "path = \"/a b\"", ""));
    assert!(
        errs.0[0]
            .problem
            .starts_with("' ' is not allowed; use letters, digits and - / ."),
        "{errs}"
    );
}
