//! `[[profile]]` tests: name, dialect, routing, and a health table being there.
use super::*;

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
    cfg("tm", "routing = \"multivalue\"\nmax_answers = 33", "", ""),
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

/// A profile whose endpoints are the records of a name, with `discovery` as its table's lines.
fn dns_profile(routing: &str, discovery: &str) -> String {
    format!(
        "[[profile]]\nname = \"web\"\ndialect = \"lb\"\nrouting = \"{routing}\"\nendpoints_from = \"dns\"\n\
         [profile.discovery]\n{discovery}\n[profile.health]\nprotocol = \"tcp\"\n"
    )
}

#[test]
fn a_dns_profile_reads_its_discovery_with_its_defaults() {
    let c = ok(&dns_profile(
        "weighted",
        "name = \"Web.Svc.Example\"\nport = 8080\nresolvers = [\"192.0.2.53\", \"[2001:db8::53]:5353\"]",
    ));
    let d = c.profiles[0].discovery.as_ref().expect("a discovery");
    assert_eq!(d.name, "web.svc.example.");
    assert_eq!(d.records, DiscoveryRecords::Both);
    assert_eq!(d.port, Some(8080));
    assert_eq!(
        d.resolvers,
        ["192.0.2.53:53".parse().unwrap(), "[2001:db8::53]:5353".parse().unwrap()]
    );
    assert_eq!(
        (d.min_ttl, d.max_ttl, d.timeout),
        (
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(60),
            std::time::Duration::from_secs(1)
        )
    );
    assert!(c.profiles[0].endpoints.is_empty());
    let c = ok(&dns_profile(
        "multivalue",
        "name = \"_http._tcp.web.example.\"\ntype = \"srv\"\nresolvers = \"192.0.2.53\"\nmin_ttl = \"120s\"",
    ));
    let d = c.profiles[0].discovery.as_ref().unwrap();
    assert_eq!((d.records, d.port), (DiscoveryRecords::Srv, None));
    assert_eq!(
        d.max_ttl,
        std::time::Duration::from_secs(120),
        "no shorter than min_ttl"
    );
}

#[test]
fn a_discovery_is_refused_where_it_cannot_work() {
    let good = "name = \"web.svc.example\"\nport = 80\nresolvers = [\"192.0.2.53\"]";
    // No table, a table without dns, a routing the records cannot feed.
    expect_error(
        &dns_profile("weighted", good).replace(&format!("[profile.discovery]\n{good}\n"), ""),
        "profile[0].discovery",
    );
    expect_error(
        &cfg("lb", &format!("[profile.discovery]\n{good}\n"), "", ""),
        "profile[0].discovery",
    );
    expect_error(&dns_profile("priority", good), "profile[0].routing");
    // Listed endpoints with dns.
    expect_error(
        &format!(
            "{}[[profile.endpoint]]\naddress = \"192.0.2.1\"\nport = 80\n",
            dns_profile("weighted", good)
        ),
        "profile[0].endpoint",
    );
    // Each key's own rule.
    let with = |lines: &str| dns_profile("weighted", lines);
    expect_error(
        &with("port = 80\nresolvers = [\"192.0.2.53\"]"),
        "profile[0].discovery.name",
    );
    expect_error(
        &with("name = \"web\"\nport = 80\nresolvers = [\"192.0.2.53\"]"),
        "profile[0].discovery.name",
    );
    expect_error(
        &with("name = \"web.example\"\nresolvers = [\"192.0.2.53\"]"),
        "profile[0].discovery.port",
    );
    expect_error(
        &with("name = \"_h._tcp.web.example\"\ntype = \"SRV\"\nport = 80\nresolvers = [\"192.0.2.53\"]"),
        "profile[0].discovery.port",
    );
    expect_error(
        &with("name = \"web.example\"\ntype = \"MX\"\nport = 80\nresolvers = [\"192.0.2.53\"]"),
        "profile[0].discovery.type",
    );
    expect_error(
        &with("name = \"web.example\"\nport = 80"),
        "profile[0].discovery.resolvers",
    );
    expect_error(
        &with("name = \"web.example\"\nport = 80\nresolvers = [\"ns1.example\"]"),
        "profile[0].discovery.resolvers[0]",
    );
    expect_error(
        &with("name = \"web.example\"\nport = 80\nresolvers = [\"192.0.2.53\", \"192.0.2.53:53\"]"),
        "profile[0].discovery.resolvers[1]",
    );
    expect_error(
        &with(&format!("{good}\nmin_ttl = \"30s\"\nmax_ttl = \"10s\"")),
        "profile[0].discovery.max_ttl",
    );
}
