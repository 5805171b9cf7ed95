//! `[profile.health]` tests outside HTTP: protocol, port, interval and timeout, thresholds,
//! UDP payloads and pacing, and each dialect's defaults.
use std::time::Duration;

use super::*;

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
    assert_eq!(p.routing, Routing::of(crate::status::Method::Priority));

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

rule!(
    agent_port_zero,
    cfg("lb", "", "agent_port = 0", ""),
    "profile[0].health.agent_port"
);
rule!(
    agent_interval_too_short,
    cfg("lb", "", "agent_port = 9999\nagent_interval = \"50ms\"", ""),
    "profile[0].health.agent_interval"
);
rule!(
    agent_timeout_too_long,
    cfg("lb", "", "agent_port = 9999\nagent_timeout = \"61s\"", ""),
    "profile[0].health.agent_timeout"
);
rule!(
    agent_send_without_port,
    cfg("lb", "", "agent_send = \"hello\\n\"", ""),
    "profile[0].health.agent_send"
);
rule!(
    agent_send_too_long,
    cfg(
        "lb",
        "",
        &format!("agent_port = 9999\nagent_send = \"{}\"", "x".repeat(501)),
        ""
    ),
    "profile[0].health.agent_send"
);

#[test]
fn an_agent_takes_the_checks_timing_unless_told_and_is_no_part_of_the_check() {
    let plain = ok(&cfg("lb", "", "agent_port = 9999", ""));
    let h = &plain.profiles[0].health;
    let agent = h.agent.as_ref().expect("an agent");
    assert_eq!(
        (agent.port, agent.interval, agent.timeout),
        (9999, h.interval, h.timeout)
    );
    assert_eq!(agent.send, "");
    let told = ok(&cfg(
        "lb",
        "",
        "agent_port = 9999\nagent_interval = \"500ms\"\nagent_timeout = \"300ms\"\nagent_send = \"ping\\n\"",
        "",
    ));
    let agent = told.profiles[0].health.agent.as_ref().unwrap();
    assert_eq!(
        (agent.interval, agent.timeout),
        (Duration::from_millis(500), Duration::from_millis(300))
    );
    assert_eq!(agent.send, "ping\n");
    // The check's identity leaves the agent out: a reload that adds or edits one keeps every
    // endpoint's check (and health).
    let (p0, p1) = (&plain.profiles[0], &told.profiles[0]);
    let none = ok(&cfg("lb", "", "", ""));
    for other in [p1, &none.profiles[0]] {
        let a = crate::daemon::checks::CheckSpec::resolve(p0, &p0.endpoints[0]).unwrap();
        let b = crate::daemon::checks::CheckSpec::resolve(other, &other.endpoints[0]).unwrap();
        assert_eq!(a.spec.key(), b.spec.key());
    }
}

#[test]
fn every_protocol_reads_into_its_kind_and_says_itself_back() {
    // The registry (probe::kinds) maps a protocol to a kind; the settings that kind reads must
    // speak that very protocol, and the port is the kind's default where it has one.
    for p in Protocol::ALL {
        let default = crate::probe::kinds::default_port(*p);
        let port = if default.is_some() { "" } else { "port = 7\n" };
        let c = ok(&cfg("lb", "", &format!("protocol = \"{p}\"\n{port}"), ""));
        let profile = c.profile("web").unwrap();
        assert_eq!(profile.health.protocol(), *p);
        assert_eq!(profile.health.probe.kind(), crate::probe::kinds::kind_of(*p), "{p}");
        assert_eq!(profile.endpoints[0].port, default.unwrap_or(7), "{p}");
    }
}

fn tcp_tunnel(health: &str, address: &str) -> String {
    format!(
        "[[profile]]\nname = \"dsr\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\nport = 80\n{health}\n\
         [[profile.endpoint]]\naddress = \"{address}\"\n"
    )
}

rule!(
    tunnel_without_vip,
    tcp_tunnel("tunnel = \"ipip\"", "192.0.2.1"),
    "profile[0].health.tunnel_vip"
);
rule!(
    tunnel_vip_without_tunnel,
    tcp_tunnel("tunnel_vip = \"198.51.100.10\"", "192.0.2.1"),
    "profile[0].health.tunnel_vip"
);
rule!(
    tunnel_of_an_unknown_kind,
    tcp_tunnel("tunnel = \"vxlan\"\ntunnel_vip = \"198.51.100.10\"", "192.0.2.1"),
    "profile[0].health.tunnel"
);
rule!(
    tunnel_vip_not_an_address,
    tcp_tunnel("tunnel = \"ipip\"\ntunnel_vip = \"vip.example\"", "192.0.2.1"),
    "profile[0].health.tunnel_vip"
);
rule!(
    tunnel_on_an_https_check,
    cfg("lb", "", "protocol = \"https\"\ntunnel = \"ipip\"", ""),
    "profile[0].health.tunnel"
);
rule!(
    tunnel_on_a_plain_udp_check,
    cfg(
        "lb",
        "",
        "protocol = \"udp\"\nport = 53\ntunnel = \"ipip\"\ntunnel_vip = \"198.51.100.10\"",
        ""
    ),
    "profile[0].health.tunnel"
);
rule!(
    tunnel_mtu_on_a_udp_check,
    cfg(
        "lb",
        "",
        "protocol = \"udp\"\nport = 53\nresponse = \"x\"\ntunnel = \"ipip\"\ntunnel_vip = \"198.51.100.10\"\ntunnel_mtu = 1500",
        ""
    ),
    "profile[0].health.tunnel_mtu"
);

#[test]
fn a_udp_request_response_check_takes_the_tunnel() {
    let c = ok(&cfg(
        "lb",
        "",
        "protocol = \"udp\"\nport = 53\nrequest = \"ping\"\nresponse = \"pong\"\ntunnel = \"gue\"\ntunnel_vip = \"198.51.100.10\"",
        "",
    ));
    assert_eq!(
        c.profiles[0].health.probe.tunnel_vip(),
        Some("198.51.100.10".parse().unwrap())
    );
}
rule!(
    tunnel_with_a_body_to_match,
    cfg(
        "lb",
        "",
        "tunnel = \"ipip\"\ntunnel_vip = \"198.51.100.10\"\nmethod = \"GET\"\nbody_match = \"ok\"",
        ""
    ),
    "profile[0].health.body_match"
);
rule!(
    tunnel_with_keep_alive,
    cfg(
        "lb",
        "",
        "tunnel = \"gue\"\ntunnel_vip = \"198.51.100.10\"\nkeep_alive = true",
        ""
    ),
    "profile[0].health.keep_alive"
);

rule!(
    tunnel_mtu_without_a_tunnel,
    tcp_tunnel("tunnel_mtu = 1500", "192.0.2.1"),
    "profile[0].health.tunnel_mtu"
);
rule!(
    tunnel_mtu_below_ipv6s_minimum,
    tcp_tunnel(
        "tunnel = \"ipip\"\ntunnel_vip = \"198.51.100.10\"\ntunnel_mtu = 576",
        "192.0.2.1"
    ),
    "profile[0].health.tunnel_mtu"
);

rule!(
    tunnel_source_without_a_tunnel,
    tcp_tunnel("tunnel_source = \"192.0.2.100\"", "192.0.2.1"),
    "profile[0].health.tunnel_source"
);
rule!(
    tunnel_source_not_an_address,
    tcp_tunnel(
        "tunnel = \"ipip\"\ntunnel_vip = \"198.51.100.10\"\ntunnel_source = \"lb.example\"",
        "192.0.2.1"
    ),
    "profile[0].health.tunnel_source"
);

#[test]
fn a_tunnel_source_of_the_other_family_is_refused_on_the_endpoint() {
    let text = tcp_tunnel(
        "tunnel = \"ipip\"\ntunnel_vip = \"198.51.100.10\"\ntunnel_source = \"2001:db8::100\"",
        "192.0.2.1",
    );
    expect_error(&text, "profile[0].endpoint[0].address");
    let errors = refused(&text).to_string();
    assert!(errors.contains("tunnel_source 2001:db8::100"), "{errors}");
}

#[test]
fn a_full_size_tunnel_check_says_its_size_in_its_identity() {
    let c = ok(&tcp_tunnel(
        "tunnel = \"ipip\"\ntunnel_vip = \"198.51.100.10\"\ntunnel_mtu = 1500",
        "192.0.2.1",
    ));
    let crate::probe::kinds::Probe::Tcp(t) = &c.profiles[0].health.probe else {
        panic!()
    };
    assert_eq!(t.tunnel.unwrap().mtu, Some(1500));
    let mut with = String::new();
    crate::probe::tunnel::identity(t.tunnel.as_ref(), &mut with);
    let mut without = String::new();
    crate::probe::tunnel::identity(
        Some(&crate::probe::tunnel::TunnelTo {
            mtu: None,
            ..t.tunnel.unwrap()
        }),
        &mut without,
    );
    assert!(
        with.contains("tunnel_mtu") && !without.contains("tunnel_mtu"),
        "{with} / {without}"
    );
}

#[test]
fn a_plain_http_check_takes_the_tunnel_too() {
    let c = ok(&cfg(
        "lb",
        "",
        "tunnel = \"gue\"\ntunnel_vip = \"198.51.100.10\"\npath = \"/health\"",
        "",
    ));
    let probe = &c.profiles[0].health.probe;
    assert_eq!(probe.tunnel_vip(), Some("198.51.100.10".parse().unwrap()));
    let crate::probe::kinds::Probe::Http(h) = probe else {
        panic!("{probe:?}")
    };
    assert_eq!(h.tunnel.unwrap().encap, crate::engine::Encap::Gue { port: 6080 });
}
rule!(
    tunnel_endpoint_of_the_other_family,
    tcp_tunnel("tunnel = \"ipip\"\ntunnel_vip = \"198.51.100.10\"", "2001:db8::1"),
    "profile[0].endpoint[0].address"
);

#[test]
fn a_tunnelled_check_reads_its_vip() {
    let c = Config::parse(
        &tcp_tunnel("tunnel = \"ipip\"\ntunnel_vip = \"2001:db8::10\"", "2001:db8::1"),
        "t.toml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.profiles[0].health.probe.tunnel_vip(),
        Some("2001:db8::10".parse().unwrap())
    );
}
rule!(
    tunnel_port_on_ipip,
    tcp_tunnel(
        "tunnel = \"ipip\"\ntunnel_vip = \"198.51.100.10\"\ntunnel_port = 6080",
        "192.0.2.1"
    ),
    "profile[0].health.tunnel_port"
);
rule!(
    tunnel_port_zero,
    tcp_tunnel(
        "tunnel = \"gue\"\ntunnel_vip = \"198.51.100.10\"\ntunnel_port = 0",
        "192.0.2.1"
    ),
    "profile[0].health.tunnel_port"
);

#[test]
fn a_gue_tunnel_takes_katrans_port_unless_told() {
    let read = |extra: &str| {
        let text = tcp_tunnel(
            &format!("tunnel = \"gue\"\ntunnel_vip = \"198.51.100.10\"\n{extra}"),
            "192.0.2.1",
        );
        let c = Config::parse(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
        match &c.profiles[0].health.probe {
            crate::probe::kinds::Probe::Tcp(t) => t.tunnel.unwrap().encap,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(read(""), crate::engine::Encap::Gue { port: 6080 });
    assert_eq!(read("tunnel_port = 9886"), crate::engine::Encap::Gue { port: 9886 });
}
