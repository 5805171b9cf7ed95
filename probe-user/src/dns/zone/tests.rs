use std::sync::Arc;

use super::*;
use crate::{
    changes::{EndpointState, ProfileChange},
    rng::SplitMix64,
};

const CONFIG: &str = r#"
[dns]
listen = ["198.18.0.1:5353"]
zone = "TM.example"
ttl = "30s"
negative_ttl = "5s"

[[dns.region]]
name = "eu"
subnets = ["198.18.10.0/24", "2001:2:10::/48"]

[[profile]]
name = "web"
dialect = "tm"
routing = "priority"
dns_ttl = "10s"
health = { protocol = "tcp", port = 80 }
endpoint = [
  { name = "a", address = "198.18.1.1", priority = 1 },
  { name = "b", address = "198.18.1.2", priority = 2 },
  { name = "a6", address = "2001:2::1", priority = 3 },
]

[[profile]]
name = "multi"
dialect = "tm"
routing = "multivalue"
max_answers = 2
health = { protocol = "tcp", port = 80 }
endpoint = [
  { name = "a", address = "198.18.2.1" },
  { name = "b", address = "198.18.2.2" },
  { name = "c", address = "198.18.2.3" },
  { name = "x", address = "2001:2::2:1" },
  { name = "y", address = "2001:2::2:2" },
]

[[profile]]
name = "geo"
dialect = "tm"
routing = "geographic"
dns_name = "api.eu"
health = { protocol = "tcp", port = 80 }
endpoint = [
  { name = "eu", address = "198.18.3.1", region = "eu" },
  { name = "rest", address = "198.18.3.2", region = "world" },
]

[[profile]]
name = "net"
dialect = "tm"
routing = "subnet"
health = { protocol = "tcp", port = 80 }
endpoint = [
  { name = "inside", address = "198.18.4.1", subnets = ["198.18.20.0/24"] },
  { name = "default", address = "198.18.4.2" },
]

[[profile]]
name = "off"
enabled = false
dialect = "tm"
health = { protocol = "tcp", port = 80 }
endpoint = [{ name = "a", address = "198.18.5.1" }]
"#;

fn config() -> Config {
    Config::parse(CONFIG, "test.toml").unwrap()
}

/// Every endpoint Online (the off profile's Inactive), as a snapshot at seq 10.
fn snapshot(config: &Config) -> Snapshot {
    let mut s = Snapshot {
        seq: 10,
        ..Snapshot::default()
    };
    for p in &config.profiles {
        let status = if p.enabled {
            ProfileStatus::Online
        } else {
            ProfileStatus::Disabled
        };
        s.profiles.push((Arc::from(p.name.as_str()), status, false));
        for e in &p.endpoints {
            let mut state = EndpointState::tcp(e.address, 80, true);
            if !p.enabled {
                state.status = EndpointStatus::Inactive;
            }
            s.endpoints.push((Arc::from(p.name.as_str()), e.name.clone(), state));
        }
    }
    s
}

fn regions(c: &Config) -> Regions {
    Regions::new(&c.dns.as_ref().unwrap().regions, None)
}

fn zone() -> Zone {
    let c = config();
    Zone::build(&c, c.dns.as_ref().unwrap(), regions(&c), &snapshot(&c), 7)
}

fn ask(zone: &Zone, name: &str, qtype: QType, from: &str) -> Reply {
    let q = Question {
        name,
        qtype,
        client: Client {
            address: from.parse().unwrap(),
        },
    };
    zone.answer(&q, &mut SplitMix64(3))
}

fn addrs(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|a| a.parse().unwrap()).collect()
}

/// What `web` (priority, dns_ttl 10 s) answers with these addresses.
fn web_answer(list: &[&str]) -> Reply {
    Reply::Addresses {
        ttl: 10,
        addresses: addrs(list),
        by_location: false,
    }
}

fn health(seq: u64, profile: &str, endpoint: &str, status: EndpointStatus) -> Change {
    let mut state = EndpointState::tcp("198.18.1.1".parse().unwrap(), 80, status == EndpointStatus::Online);
    state.status = status;
    Change::health(seq, profile, endpoint, state, false)
}

#[test]
fn names_outside_the_zone_are_refused_and_the_apex_has_soa_and_ns() {
    let z = zone();
    assert_eq!(z.origin(), "tm.example.");
    assert_eq!(ask(&z, "example.", QType::A, "192.0.2.1"), Reply::Refused);
    assert_eq!(ask(&z, "xtm.example.", QType::A, "192.0.2.1"), Reply::Refused);
    assert_eq!(
        ask(&z, "tm.example.", QType::Soa, "192.0.2.1"),
        Reply::Apex { soa: true, ns: false }
    );
    assert_eq!(
        ask(&z, "tm.example.", QType::Ns, "192.0.2.1"),
        Reply::Apex { soa: false, ns: true }
    );
    assert_eq!(
        ask(&z, "tm.example.", QType::A, "192.0.2.1"),
        Reply::NoData { by_location: false }
    );
    assert_eq!(z.nameservers(), ["ns1.tm.example."]);
    assert_eq!(z.soa().minimum, 5);
    assert_eq!(z.soa().serial, 7);
    // The default name server is ns1.<zone> at the listen address, answered by the zone.
    let ns1: IpAddr = "198.18.0.1".parse().unwrap();
    assert_eq!(z.nameserver_addresses("ns1.tm.example."), [ns1]);
    assert_eq!(
        ask(&z, "ns1.tm.example.", QType::A, "192.0.2.1"),
        Reply::Addresses {
            ttl: 30,
            addresses: vec![ns1],
            by_location: false
        }
    );
    assert_eq!(
        ask(&z, "ns1.tm.example.", QType::Aaaa, "192.0.2.1"),
        Reply::NoData { by_location: false }
    );
}

#[test]
fn name_servers_inside_the_zone_answer_their_addresses_and_make_their_parents_exist() {
    let text = CONFIG.replace(
        "negative_ttl = \"5s\"\n",
        "negative_ttl = \"5s\"\n\
         [[dns.nameserver]]\nname = \"a.ns.tm.example.\"\naddresses = [\"198.18.0.53\", \"2001:2::53\"]\n\
         [[dns.nameserver]]\nname = \"ns.other.example.\"\n",
    );
    let config = Config::parse(&text, "t.toml").unwrap();
    let dns = config.dns.clone().unwrap();
    let z = Zone::build(&config, &dns, regions(&config), &snapshot(&config), 7);
    assert_eq!(z.nameservers(), ["a.ns.tm.example.", "ns.other.example."]);
    assert_eq!(z.soa().mname, "a.ns.tm.example.");
    assert!(z.nameserver_addresses("ns.other.example.").is_empty());
    let both: Vec<IpAddr> = vec!["198.18.0.53".parse().unwrap(), "2001:2::53".parse().unwrap()];
    let addresses = |a: &[IpAddr]| Reply::Addresses {
        ttl: 30,
        addresses: a.to_vec(),
        by_location: false,
    };
    assert_eq!(
        ask(&z, "a.ns.tm.example.", QType::A, "192.0.2.1"),
        addresses(&both[..1])
    );
    assert_eq!(
        ask(&z, "a.ns.tm.example.", QType::Aaaa, "192.0.2.1"),
        addresses(&both[1..])
    );
    assert_eq!(ask(&z, "a.ns.tm.example.", QType::Any, "192.0.2.1"), addresses(&both));
    let nodata = Reply::NoData { by_location: false };
    assert_eq!(ask(&z, "a.ns.tm.example.", QType::Other, "192.0.2.1"), nodata);
    assert_eq!(
        ask(&z, "ns.tm.example.", QType::A, "192.0.2.1"),
        nodata,
        "an empty non-terminal"
    );
    assert_eq!(
        ask(&z, "b.ns.tm.example.", QType::A, "192.0.2.1"),
        Reply::NxDomain { by_location: false }
    );
    assert_eq!(
        ask(&z, "ns1.tm.example.", QType::A, "192.0.2.1"),
        Reply::NxDomain { by_location: false },
        "no default once name servers are given"
    );
}

#[test]
fn unknown_and_disabled_names_are_nxdomain_and_parents_of_names_are_nodata() {
    let z = zone();
    let nx = Reply::NxDomain { by_location: false };
    let nodata = Reply::NoData { by_location: false };
    for (name, qtype, want) in [
        ("nope.tm.example.", QType::A, &nx),
        ("off.tm.example.", QType::A, &nx),
        ("x.web.tm.example.", QType::A, &nx),
        ("eu.tm.example.", QType::A, &nodata),
        ("web.tm.example.", QType::Other, &nodata),
    ] {
        assert_eq!(&ask(&z, name, qtype, "192.0.2.1"), want, "{name}");
    }
}

#[test]
fn priority_answers_per_family_with_the_profile_ttl_and_fails_over() {
    let mut z = zone();
    let web = "web.tm.example.";
    assert_eq!(ask(&z, web, QType::A, "192.0.2.1"), web_answer(&["198.18.1.1"]));
    assert_eq!(ask(&z, web, QType::Aaaa, "192.0.2.1"), web_answer(&["2001:2::1"]));
    assert!(z.apply(&health(11, "web", "a", EndpointStatus::Degraded)));
    assert_eq!(ask(&z, web, QType::A, "192.0.2.1"), web_answer(&["198.18.1.2"]));
    assert!(
        !z.apply(&health(11, "web", "a", EndpointStatus::Online)),
        "an old change"
    );
    assert!(z.apply(&health(12, "web", "b", EndpointStatus::Disabled)));
    // Only the IPv6 endpoint is eligible: no fail-open, so A has no data.
    assert_eq!(
        ask(&z, web, QType::A, "192.0.2.1"),
        Reply::NoData { by_location: false }
    );
    assert!(z.apply(&health(13, "web", "a6", EndpointStatus::Degraded)));
    // Every eligible endpoint Degraded: fail-open answers as if they were Online.
    assert_eq!(ask(&z, web, QType::A, "192.0.2.1"), web_answer(&["198.18.1.1"]));
}

#[test]
fn multivalue_gives_up_to_n_of_each_family_and_any_gives_both() {
    let z = zone();
    let name = "multi.tm.example.";
    let Reply::Addresses { addresses, ttl, .. } = ask(&z, name, QType::A, "192.0.2.1") else {
        panic!("no A answer");
    };
    assert_eq!(addresses, addrs(&["198.18.2.1", "198.18.2.2"]));
    assert_eq!(ttl, 30, "the zone's TTL when the profile sets none");
    let Reply::Addresses { addresses, .. } = ask(&z, name, QType::Any, "192.0.2.1") else {
        panic!("no ANY answer");
    };
    assert_eq!(
        addresses,
        addrs(&["198.18.2.1", "198.18.2.2", "2001:2::2:1", "2001:2::2:2"])
    );
}

#[test]
fn geographic_and_subnet_follow_the_client_and_say_so() {
    let mut z = zone();
    let geo = "api.eu.tm.example.";
    let got = |z: &Zone, name, from| match ask(z, name, QType::A, from) {
        Reply::Addresses {
            addresses, by_location, ..
        } => {
            assert!(by_location);
            addresses
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(got(&z, geo, "198.18.10.9"), addrs(&["198.18.3.1"]));
    assert_eq!(got(&z, geo, "::ffff:198.18.10.9"), addrs(&["198.18.3.1"]));
    assert_eq!(got(&z, geo, "192.0.2.1"), addrs(&["198.18.3.2"]));
    // No failover to another region.
    assert!(z.apply(&health(11, "geo", "eu", EndpointStatus::Degraded)));
    assert_eq!(
        ask(&z, geo, QType::A, "198.18.10.9"),
        Reply::NoData { by_location: true }
    );

    let net = "net.tm.example.";
    assert_eq!(got(&z, net, "198.18.20.5"), addrs(&["198.18.4.1"]));
    assert_eq!(got(&z, net, "198.18.21.5"), addrs(&["198.18.4.2"]));
}

#[test]
fn a_profile_disabled_by_the_stream_answers_nxdomain() {
    let mut z = zone();
    let change = Change::Profile(ProfileChange {
        seq: 11,
        at_unix_ms: 0,
        profile: "web".into(),
        from: Some(ProfileStatus::Online),
        to: Some(ProfileStatus::Disabled),
        fail_open: false,
    });
    assert!(z.apply(&change));
    assert_eq!(
        ask(&z, "web.tm.example.", QType::A, "192.0.2.1"),
        Reply::NxDomain { by_location: false }
    );
}

#[test]
fn performance_follows_the_rtts_it_is_given() {
    let text = CONFIG.replace("routing = \"priority\"", "routing = \"performance\"");
    let c = Config::parse(&text, "t.toml").unwrap();
    let mut z = Zone::build(&c, c.dns.as_ref().unwrap(), regions(&c), &snapshot(&c), 1);
    assert!(z.wants_rtts());
    z.set_rtt("web", "a", Some(Duration::from_millis(30)));
    z.set_rtt("web", "b", Some(Duration::from_millis(3)));
    let Reply::Addresses { addresses, .. } = ask(&z, "web.tm.example.", QType::A, "192.0.2.1") else {
        panic!("no answer");
    };
    assert_eq!(addresses, addrs(&["198.18.1.2"]));
}

#[test]
fn only_answers_that_follow_from_the_question_alone_are_deterministic() {
    let z = zone();
    assert!(z.deterministic("web.tm.example."), "priority");
    assert!(z.deterministic("multi.tm.example."), "multivalue");
    assert!(!z.deterministic("api.eu.tm.example."), "geographic: by location");
    assert!(!z.deterministic("net.tm.example."), "subnet: by location");
    assert!(z.deterministic("nope.tm.example."), "NXDOMAIN");
    assert!(z.deterministic("tm.example."), "the apex");
    let text = CONFIG.replace("routing = \"priority\"", "routing = \"weighted\"");
    let c = Config::parse(&text, "t.toml").unwrap();
    let z = Zone::build(&c, c.dns.as_ref().unwrap(), regions(&c), &snapshot(&c), 1);
    assert!(!z.deterministic("web.tm.example."), "weighted: at random");
}
