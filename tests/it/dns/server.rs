//! The authoritative DNS server against a real client: `dig` in the backend's namespace asks the
//! daemon in the prober's, over UDP and TCP, at its IPv4 and IPv6 listeners, while the daemon
//! probes real listeners. Priority failover within the fail window, the other routing methods
//! (Client Subnet included), both families, fail-open, NXDOMAIN/NODATA/REFUSED, the apex's SOA
//! and NS, TTLs, truncation and the retry over TCP, the same answers as `GET /v1/select`, and
//! hostile packets that must neither crash nor stall the server.
use std::{
    net::UdpSocket,
    time::{Duration, Instant},
};

use probed::status::EndpointStatus as S;
use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    dig::Dig,
    lb::{add_backends, go_dark, restore, wait_until},
    topo::*,
    Netns,
};

const ZONE: &str = "tm.example.";
const DNS_V4: &str = "198.18.0.1";
const DNS_V6: &str = "2001:2::1";
const PORT: u16 = 5353;

/// `dig @server -p PORT name type [options]` from `ns`.
fn dig(ns: &Netns, server: &str, name: &str, qtype: &str, options: &[&str]) -> Dig {
    probed_tests::dig::dig(ns, server, PORT, name, qtype, options)
}

fn dig4(ns: &Netns, name: &str, qtype: &str) -> Dig {
    dig(ns, DNS_V4, name, qtype, &[])
}

const V4: [&str; 3] = ["198.18.0.2", "198.18.0.3", "198.18.0.4"];
const V6: [&str; 2] = ["2001:2::2", "2001:2::3"];

/// Fast checks: the fail window is 2 x 100 ms + 100 ms = 300 ms.
const HEALTH: &str = "[profile.health]\nprotocol = \"tcp\"\nport = 80\ninterval = \"100ms\"\ntimeout = \"100ms\"\n\
                      healthy_threshold = 2\nunhealthy_threshold = 2\n";

fn profile(name: &str, extra: &str, endpoints: &[(&str, &str, &str)]) -> String {
    let mut s = format!("\n[[profile]]\nname = \"{name}\"\ndialect = \"lb\"\n{extra}\n{HEALTH}");
    for (ep, address, more) in endpoints {
        s += &format!("\n[[profile.endpoint]]\nname = \"{ep}\"\naddress = \"{address}\"\n{more}\n");
    }
    s
}

fn dns_section(extra: &str) -> String {
    format!(
        "[dns]\nlisten = [\"{DNS_V4}:{PORT}\", \"[{DNS_V6}]:{PORT}\"]\nzone = \"{ZONE}\"\nttl = \"20s\"\n\
         negative_ttl = \"7s\"\n{extra}\n"
    )
}

/// A prober and a backend namespace with every test address listening on port 80.
struct Bed {
    topo: Topology,
    _listeners: Vec<std::net::TcpListener>,
    files: DaemonFiles,
}

impl Bed {
    fn new() -> Bed {
        let topo = Topology::new();
        add_backends(&topo, &V4[1..]);
        add_backends(&topo, &V6[1..]);
        let listeners = V4
            .iter()
            .map(|a| topo.backend.tcp_listen(&format!("{a}:80")))
            .chain(V6.iter().map(|a| topo.backend.tcp_listen(&format!("[{a}]:80"))))
            .collect();
        Bed {
            topo,
            _listeners: listeners,
            files: DaemonFiles::new(),
        }
    }

    fn start(&self, body: &str) -> RunningDaemon {
        let text = self.files.header(PROBER_IF) + body;
        let cfg = self.files.write_config(&text);
        RunningDaemon::start(&self.topo.prober, cfg, Some(&self.files.config_path())).expect("start the daemon")
    }

    fn client(&self) -> &Netns {
        &self.topo.backend
    }
}

fn wait_online(daemon: &RunningDaemon, profile: &str, endpoints: &[&str]) {
    for e in endpoints {
        daemon.wait_status(profile, e, S::Online, Duration::from_secs(5));
    }
}

#[test]
fn priority_fails_over_within_the_fail_window_over_udp_tcp_and_both_listeners() {
    let bed = Bed::new();
    let body = dns_section("")
        + &profile(
            "web",
            "routing = \"priority\"\ndns_ttl = \"10s\"",
            &[
                ("a", V4[0], "priority = 1"),
                ("b", V4[1], "priority = 2"),
                ("a6", V6[0], "priority = 3"),
            ],
        );
    let daemon = bed.start(&body);
    wait_online(&daemon, "web", &["a", "b", "a6"]);
    let c = bed.client();
    let name = "web.tm.example.";
    for (server, opts) in [
        (DNS_V4, &[][..]),
        (DNS_V4, &["+tcp"][..]),
        (DNS_V6, &[][..]),
        (DNS_V6, &["+tcp"][..]),
    ] {
        let d = dig(c, server, name, "A", opts);
        assert_eq!(d.status, "NOERROR", "{}", d.raw);
        assert!(d.flags.contains(&"aa".to_string()), "authoritative: {}", d.raw);
        assert_eq!(d.addresses(), [V4[0]], "{server} {opts:?}: {}", d.raw);
        assert_eq!(d.answers[0].1, 10, "the profile's dns_ttl: {}", d.raw);
    }
    assert_eq!(dig4(c, name, "AAAA").addresses(), [V6[0]]);

    // The first endpoint goes dark: the answer moves once its fail window has passed.
    let dark = Instant::now();
    go_dark(&bed.topo.backend, V4[0]);
    daemon.wait_status("web", "a", S::Degraded, Duration::from_secs(3));
    let degraded_after = dark.elapsed();
    let d = dig4(c, name, "A");
    assert_eq!(d.addresses(), [V4[1]], "the next query after the verdict: {}", d.raw);
    assert!(
        degraded_after < Duration::from_millis(1500),
        "fail window 300 ms, took {degraded_after:?}"
    );
    // Back after the success window.
    restore(&bed.topo.backend);
    daemon.wait_status("web", "a", S::Online, Duration::from_secs(3));
    assert_eq!(dig4(c, name, "A").addresses(), [V4[0]]);

    // Every endpoint failing: fail-open answers as if they were all Online.
    for a in V4.iter().take(2).chain(V6.iter().take(1)) {
        go_dark(&bed.topo.backend, a);
    }
    daemon.wait_status("web", "a", S::Degraded, Duration::from_secs(3));
    daemon.wait_status("web", "b", S::Degraded, Duration::from_secs(3));
    daemon.wait_status("web", "a6", S::Degraded, Duration::from_secs(3));
    let d = dig4(c, name, "A");
    assert_eq!(d.status, "NOERROR");
    assert_eq!(d.addresses(), [V4[0]], "fail-open: {}", d.raw);
    restore(&bed.topo.backend);
    daemon.stop();
}

#[test]
fn zone_answers_nxdomain_nodata_refused_soa_ns_and_multivalue_of_both_families() {
    let bed = Bed::new();
    let servers = format!(
        "[[dns.nameserver]]\nname = \"ns1.tm.example.\"\naddresses = [\"{DNS_V4}\", \"{DNS_V6}\"]\n\
         [[dns.nameserver]]\nname = \"ns2.elsewhere.example.\"\n"
    );
    let body = dns_section(&servers)
        + &profile(
            "multi",
            "routing = \"multivalue\"\nmax_answers = 2",
            &[
                ("a", V4[0], ""),
                ("b", V4[1], ""),
                ("c", V4[2], ""),
                ("x", V6[0], ""),
                ("y", V6[1], ""),
            ],
        )
        + &profile("only4", "dns_name = \"v4.only\"", &[("a", V4[0], "")])
        + &profile("off", "enabled = false", &[("a", V4[0], "")]);
    let daemon = bed.start(&body);
    wait_online(&daemon, "multi", &["a", "b", "c", "x", "y"]);
    let c = bed.client();

    let d = dig4(c, "multi.tm.example.", "A");
    assert_eq!(d.addresses(), [V4[0], V4[1]], "{}", d.raw);
    assert_eq!(d.answers[0].1, 20, "the zone's TTL");
    let d = dig4(c, "multi.tm.example.", "AAAA");
    assert_eq!(d.addresses(), [V6[0], V6[1]], "{}", d.raw);
    let d = dig4(c, "MULTI.tm.EXAMPLE.", "ANY");
    assert_eq!(d.addresses().len(), 4, "both families: {}", d.raw);

    // NODATA: the name exists, the family does not; the SOA carries the negative TTL.
    let d = dig4(c, "v4.only.tm.example.", "AAAA");
    assert_eq!(d.status, "NOERROR", "{}", d.raw);
    assert!(d.answers.is_empty(), "{}", d.raw);
    assert_eq!(d.authority.len(), 1, "{}", d.raw);
    assert_eq!((d.authority[0].1, d.authority[0].2.as_str()), (7, "SOA"), "{}", d.raw);
    // An empty non-terminal is NODATA too; an unknown name and a disabled profile NXDOMAIN.
    assert_eq!(dig4(c, "only.tm.example.", "A").status, "NOERROR");
    for name in ["nope.tm.example.", "off.tm.example.", "x.multi.tm.example."] {
        let d = dig4(c, name, "A");
        assert_eq!(d.status, "NXDOMAIN", "{name}: {}", d.raw);
        assert_eq!(d.authority[0].2, "SOA", "{name}: {}", d.raw);
    }
    // Outside the zone: not ours.
    let d = dig4(c, "www.example.org.", "A");
    assert_eq!(d.status, "REFUSED", "{}", d.raw);
    assert!(!d.flags.contains(&"aa".to_string()));
    // The apex.
    let d = dig4(c, ZONE, "SOA");
    assert_eq!(d.answers.len(), 1, "{}", d.raw);
    assert!(
        d.answers[0].3.starts_with("ns1.tm.example. hostmaster.tm.example."),
        "{}",
        d.raw
    );
    assert!(d.answers[0].3.ends_with(" 7"), "minimum = negative TTL: {}", d.raw);
    // RFC 3225 3: the DO bit comes back as the query set it.
    let d = dig(c, DNS_V4, "multi.tm.example.", "A", &["+dnssec"]);
    assert!(d.raw.contains("; EDNS: version: 0, flags: do;"), "{}", d.raw);
    let d = dig(c, DNS_V4, "multi.tm.example.", "A", &["+edns=0", "+nodnssec"]);
    assert!(d.raw.contains("; EDNS: version: 0, flags:;"), "{}", d.raw);
    // Unknown EDNS options are ignored (RFC 6891 6.1.2), and a client cookie (RFC 7873) gets a
    // full answer without a server cookie: probed does not do cookies (docs/operations/dns.md says why).
    for opt in ["+ednsopt=65001:abcd", "+cookie=0123456789abcdef"] {
        let d = dig(c, DNS_V4, "multi.tm.example.", "A", &[opt]);
        assert_eq!(d.status, "NOERROR", "{opt}: {}", d.raw);
        assert_eq!(d.addresses().len(), 2, "{opt}: {}", d.raw);
        // Neither comes back: no server cookie, no echo of the unknown option.
        assert!(
            !d.raw.contains("; COOKIE:") && !d.raw.contains("OPT=65001"),
            "{opt}: {}",
            d.raw
        );
    }
    // The apex's NS, with the addresses of the one inside the zone as glue; that one's own
    // name answers them authoritatively, the one outside the zone is not ours.
    let d = dig4(c, ZONE, "NS");
    let ns: Vec<&str> = d.answers.iter().map(|r| r.3.as_str()).collect();
    assert_eq!(ns, ["ns1.tm.example.", "ns2.elsewhere.example."], "{}", d.raw);
    let glue: Vec<(&str, &str, &str)> = d
        .additional
        .iter()
        .map(|r| (r.0.as_str(), r.2.as_str(), r.3.as_str()))
        .collect();
    assert_eq!(
        glue,
        [("ns1.tm.example.", "A", DNS_V4), ("ns1.tm.example.", "AAAA", DNS_V6)],
        "{}",
        d.raw
    );
    for (qtype, want) in [("A", DNS_V4), ("AAAA", DNS_V6)] {
        let d = dig4(c, "ns1.tm.example.", qtype);
        assert_eq!(
            (d.status.as_str(), d.addresses()),
            ("NOERROR", vec![want.to_string()]),
            "{}",
            d.raw
        );
        assert!(d.flags.contains(&"aa".to_string()), "{}", d.raw);
    }
    assert_eq!(dig4(c, "ns2.elsewhere.example.", "A").status, "REFUSED");
    let metrics = daemon.get("/metrics");
    let text = metrics.as_str().unwrap();
    for (series, at_least) in [
        ("probed_dns_answers_total{rcode=\"noerror\"}", 6.0),
        ("probed_dns_answers_total{rcode=\"nxdomain\"}", 3.0),
        ("probed_dns_answers_total{rcode=\"refused\"}", 1.0),
    ] {
        let n = probed_tests::daemon::metric(text, series);
        assert!(n >= at_least, "{series} = {n}");
    }

    // Disabling the profile through the API: NXDOMAIN at once, and back once enabled.
    let (code, v) = daemon.call("POST", "/v1/profiles/multi/disable");
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["status"], "Disabled", "{v}");
    assert_eq!(dig4(c, "multi.tm.example.", "A").status, "NXDOMAIN");
    let (code, v) = daemon.call("POST", "/v1/profiles/multi/enable");
    assert_eq!(code, 200, "{v}");
    let d = dig4(c, "multi.tm.example.", "A");
    assert_eq!(d.status, "NOERROR", "{}", d.raw);
    assert_eq!(d.addresses().len(), 2, "CheckingEndpoint is eligible: {}", d.raw);
    // The same by reload.
    let enabled = bed.files.header(PROBER_IF) + &body;
    std::fs::write(
        bed.files.config_path(),
        enabled.replace("name = \"multi\"", "name = \"multi\"\nenabled = false"),
    )
    .unwrap();
    let (code, v) = daemon.call("POST", "/v1/reload");
    assert_eq!(code, 200, "{v}");
    assert_eq!(dig4(c, "multi.tm.example.", "A").status, "NXDOMAIN");
    std::fs::write(bed.files.config_path(), &enabled).unwrap();
    let (code, v) = daemon.call("POST", "/v1/reload");
    assert_eq!(code, 200, "{v}");
    assert_eq!(dig4(c, "multi.tm.example.", "A").status, "NOERROR");
    daemon.stop();
}

#[test]
fn subnet_and_geographic_follow_the_client_subnet_and_match_select() {
    let bed = Bed::new();
    // The same names are asked many times a second from one client: rate limiting is off.
    let body = dns_section(
        "[dns.rate_limit]\nresponses_per_second = 0\n[[dns.region]]\nname = \"eu\"\nsubnets = [\"198.18.30.0/24\"]\n\
         [[dns.region]]\nname = \"us\"\nsubnets = [\"198.18.40.0/24\", \"2001:2:40::/48\"]\n",
    ) + &profile(
        "net",
        "routing = \"subnet\"",
        &[("inside", V4[0], "subnets = [\"198.18.20.0/24\"]"), ("rest", V4[1], "")],
    ) + &profile(
        "geo",
        "routing = \"geographic\"",
        &[
            ("eu", V4[0], "region = \"eu\""),
            ("us", V4[1], "region = \"us\""),
            ("world", V4[2], "region = \"world\""),
        ],
    ) + &profile(
        "w",
        "routing = \"weighted\"",
        &[("one", V4[0], "weight = 1"), ("three", V4[1], "weight = 3")],
    );
    let daemon = bed.start(&body);
    wait_online(&daemon, "geo", &["eu", "us", "world"]);
    wait_online(&daemon, "net", &["inside", "rest"]);
    let c = bed.client();

    let ecs = |name: &str, subnet: &str| dig(c, DNS_V4, name, "A", &[&format!("+subnet={subnet}")]);
    let d = ecs("net.tm.example.", "198.18.20.0/24");
    assert_eq!(d.addresses(), [V4[0]], "{}", d.raw);
    assert_eq!(
        d.subnet.as_deref(),
        Some("198.18.20.0/24/24"),
        "scope = source prefix: {}",
        d.raw
    );
    assert_eq!(ecs("net.tm.example.", "198.18.21.0/24").addresses(), [V4[1]]);
    // Without a Client Subnet the query's own source decides (198.18.0.2: unmapped).
    assert_eq!(dig4(c, "net.tm.example.", "A").addresses(), [V4[1]]);

    assert_eq!(ecs("geo.tm.example.", "198.18.30.0/24").addresses(), [V4[0]]);
    assert_eq!(ecs("geo.tm.example.", "198.18.40.0/24").addresses(), [V4[1]]);
    assert_eq!(ecs("geo.tm.example.", "2001:2:40::/48").addresses(), [V4[1]]);
    assert_eq!(ecs("geo.tm.example.", "192.0.2.0/24").addresses(), [V4[2]]);
    // A region's endpoint down: no failover to another region (NODATA), by location.
    go_dark(&bed.topo.backend, V4[0]);
    daemon.wait_status("geo", "eu", S::Degraded, Duration::from_secs(3));
    let d = ecs("geo.tm.example.", "198.18.30.0/24");
    assert_eq!((d.status.as_str(), d.answers.len()), ("NOERROR", 0), "{}", d.raw);
    assert_eq!(d.subnet.as_deref(), Some("198.18.30.0/24/24"), "{}", d.raw);
    // A location-free method says its answer holds for every client: scope 0.
    let d = ecs("w.tm.example.", "198.18.30.0/24");
    assert_eq!(d.subnet.as_deref(), Some("198.18.30.0/24/0"), "{}", d.raw);

    // The API's select gives the same endpoints for the same source.
    for (profile, source) in [
        ("geo", "198.18.40.1"),
        ("geo", "198.18.30.1"),
        ("geo", "192.0.2.1"),
        ("net", "198.18.20.1"),
        ("net", "198.18.21.1"),
    ] {
        let v = daemon.get(&format!("/v1/select/{profile}?source={source}&family=ipv4"));
        let mut api: Vec<String> = v["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        api.sort();
        let dns = ecs(&format!("{profile}.tm.example."), &format!("{source}/32")).addresses();
        assert_eq!(api, dns, "{profile} from {source}: API {v}");
    }
    restore(&bed.topo.backend);

    // Weighted: about three answers of four go to the endpoint of weight 3.
    let mut three = 0;
    for _ in 0..80 {
        if dig4(c, "w.tm.example.", "A").addresses() == [V4[1]] {
            three += 1;
        }
    }
    assert!((40..=75).contains(&three), "weight 3 of 4 got {three} of 80");
    daemon.stop();
}

#[test]
fn large_answers_are_truncated_over_udp_and_complete_over_tcp() {
    let bed = Bed::new();
    // 24 IPv6 endpoints: 24 AAAA records are more than a 512-byte UDP answer holds.
    let many: Vec<String> = (0..24).map(|i| format!("2001:2:0:0:1::{:x}", i + 1)).collect();
    let mac = bed.topo.backend.mac(BACKEND_IF);
    for a in &many {
        bed.topo
            .backend
            .ip(&["-6", "addr", "add", &format!("{a}/128"), "dev", BACKEND_IF, "nodad"]);
        bed.topo.prober.static_neighbour(a, &mac, PROBER_IF);
    }
    let _l: Vec<_> = many
        .iter()
        .map(|a| bed.topo.backend.tcp_listen(&format!("[{a}]:80")))
        .collect();
    let endpoints: Vec<(String, &str)> = many
        .iter()
        .enumerate()
        .map(|(i, a)| (format!("e{i}"), a.as_str()))
        .collect();
    let eps: Vec<(&str, &str, &str)> = endpoints.iter().map(|(n, a)| (n.as_str(), *a, "")).collect();
    let body = dns_section("") + &profile("big", "routing = \"multivalue\"\nmax_answers = 32", &eps);
    let daemon = bed.start(&body);
    wait_online(&daemon, "big", &["e0", "e23"]);
    let c = bed.client();
    let udp = dig(c, DNS_V4, "big.tm.example.", "AAAA", &["+noedns", "+ignore"]);
    assert!(udp.flags.contains(&"tc".to_string()), "truncated: {}", udp.raw);
    assert!(udp.answers.len() < 24, "{}", udp.raw);
    // dig retries over TCP by itself when the answer is truncated.
    let full = dig(c, DNS_V4, "big.tm.example.", "AAAA", &["+noedns"]);
    assert!(!full.flags.contains(&"tc".to_string()), "{}", full.raw);
    assert_eq!(full.addresses().len(), 24, "{}", full.raw);
    daemon.stop();
}

/// Raw packets a client can send: too short, counts that lie, a compression loop, a query
/// that is a response, a huge name. Each is dropped or answered with an error; the server
/// answers a normal query after each, and probing goes on through a flood.
#[test]
fn hostile_packets_get_formerr_or_nothing_and_a_flood_does_not_stop_probing() {
    let bed = Bed::new();
    // The flood comes from the client that asks the normal queries: rate limiting, which would
    // hold those back as it should (rate_limit.rs tests it), is off here.
    let body = dns_section("[dns.rate_limit]\nresponses_per_second = 0") + &profile("web", "", &[("a", V4[0], "")]);
    let daemon = bed.start(&body);
    wait_online(&daemon, "web", &["a"]);
    let server = format!("{DNS_V4}:{PORT}");
    let header = |id: u16, flags: u16, qd: u16, an: u16| {
        let mut h = Vec::new();
        for v in [id, flags, qd, an, 0, 0] {
            h.extend_from_slice(&v.to_be_bytes());
        }
        h
    };
    let question = |name: &[u8]| {
        let mut q = name.to_vec();
        q.extend_from_slice(&[0, 1, 0, 1]);
        q
    };
    let www = b"\x03web\x02tm\x07example\x00";
    let cases: Vec<(&str, Vec<u8>, Option<u8>)> = vec![
        ("5 bytes", vec![1, 2, 3, 4, 5], None),
        (
            "a header alone claiming 65535 questions",
            header(2, 0x0100, 65535, 0),
            Some(1),
        ),
        (
            "a name that points at itself",
            [header(3, 0x0100, 1, 0), vec![0xc0, 12, 0, 1, 0, 1]].concat(),
            Some(1),
        ),
        (
            "a name cut off",
            [header(4, 0x0100, 1, 0), b"\x03web\x02t".to_vec()].concat(),
            Some(1),
        ),
        (
            "two questions",
            [header(5, 0x0100, 2, 0), question(www), question(www)].concat(),
            Some(1),
        ),
        (
            "a response, not a query",
            [header(6, 0x8100, 1, 0), question(www)].concat(),
            None,
        ),
        (
            "answers that are not there",
            [header(7, 0x0100, 1, 9000), question(www)].concat(),
            Some(1),
        ),
    ];
    bed.client().enter(|| {
        let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        for (what, packet, rcode) in &cases {
            sock.send_to(packet, &server).unwrap();
            let mut buf = [0u8; 1500];
            match (sock.recv(&mut buf), rcode) {
                (Ok(n), Some(code)) => {
                    assert!(n >= 12, "{what}: a {n}-byte answer");
                    assert_eq!(buf[3] & 0x0f, *code, "{what}: rcode {}", buf[3] & 0x0f);
                }
                (Ok(n), None) => panic!("{what}: expected no answer, got {n} bytes"),
                (Err(_), Some(_)) => panic!("{what}: no answer"),
                (Err(_), None) => {}
            }
            // The server still answers a real query.
            sock.send_to(&[header(99, 0x0100, 1, 0), question(www)].concat(), &server)
                .unwrap();
            let n = sock.recv(&mut buf).unwrap_or_else(|e| panic!("after {what}: {e}"));
            assert!(n > 12 && buf[3] & 0x0f == 0, "after {what}: rcode {}", buf[3] & 0x0f);
        }
    });

    // A flood of queries for 2 s from the client: the endpoint's checks go on (no change of
    // its status, results keep coming), and the server still answers afterwards.
    let before = daemon.endpoint("web", "a");
    let sent = bed.client().enter(|| {
        let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
        sock.set_nonblocking(true).unwrap();
        let query = [header(100, 0x0100, 1, 0), question(www)].concat();
        let end = Instant::now() + Duration::from_secs(2);
        let mut sent = 0u64;
        let mut buf = [0u8; 1500];
        while Instant::now() < end && sent < 2_000_000 {
            if sock.send_to(&query, &server).is_ok() {
                sent += 1;
            }
            while sock.recv(&mut buf).is_ok() {}
        }
        sent
    });
    let after = daemon.endpoint("web", "a");
    assert_eq!(after.status, S::Online, "{after:?}");
    assert_eq!(after.last_change, before.last_change, "no transition during the flood");
    let metrics = daemon.get("/metrics");
    let age = probed_tests::daemon::metric(metrics.as_str().unwrap(), "probed_last_result_age_seconds");
    assert!(age < 1.0, "results kept coming during {sent} queries: age {age} s");
    wait_until("the server answers after the flood", Duration::from_secs(2), || {
        dig4(bed.client(), "web.tm.example.", "A").addresses() == [V4[0]]
    });
    daemon.stop();
}

#[test]
fn an_address_the_server_cannot_listen_on_stops_the_start() {
    let bed = Bed::new();
    let body = dns_section("").replace(DNS_V4, "198.18.77.1") + &profile("web", "", &[("a", V4[0], "")]);
    let text = bed.files.header(PROBER_IF) + &body;
    let cfg = bed.files.write_config(&text);
    let Err(err) = RunningDaemon::start(&bed.topo.prober, cfg, None) else {
        panic!("started without its DNS listener");
    };
    assert!(
        err.contains("listen for DNS on UDP 198.18.77.1:5353"),
        "the error names the address: {err}"
    );
}

/// SPEC 8: a parent whose endpoints are two child profiles. Its answers come from the child its
/// method picks; a child disabled makes its nested endpoint Stopped and moves the answers to
/// the other; too few available child endpoints make it Degraded; a loop is refused.
#[test]
fn nested_profiles_answer_from_their_children_and_fail_over_between_them() {
    let bed = Bed::new();
    let body = dns_section("")
        + &profile("api", "routing = \"priority\"", &[])
        + "\n[[profile.endpoint]]\nprofile = \"eu\"\npriority = 1\nmin_child_endpoints = 2\n\
           \n[[profile.endpoint]]\nprofile = \"us\"\npriority = 2\n"
        + &profile(
            "eu",
            "",
            &[("e1", V4[0], "priority = 1"), ("e2", V4[1], "priority = 2")],
        )
        + &profile("us", "", &[("u1", V4[2], ""), ("u6", V6[1], "")]);
    let daemon = bed.start(&body);
    wait_online(&daemon, "eu", &["e1", "e2"]);
    wait_online(&daemon, "us", &["u1", "u6"]);
    let c = bed.client();
    let api = "api.tm.example.";
    let nested_status = |d: &RunningDaemon, name: &str| {
        let v = d.get("/v1/status/api");
        let n = v["nested"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no nested {name}: {v}"));
        n["status"].as_str().unwrap().to_string()
    };
    wait_until("the nested endpoints are Online", Duration::from_secs(3), || {
        nested_status(&daemon, "eu") == "Online" && nested_status(&daemon, "us") == "Online"
    });
    assert_eq!(dig4(c, api, "A").addresses(), [V4[0]], "eu's first endpoint");
    assert_eq!(
        dig4(c, api, "AAAA").addresses(),
        Vec::<String>::new(),
        "eu has no IPv6: NODATA"
    );
    let v = daemon.get("/v1/select/api?source=198.18.0.2&family=ipv4");
    assert_eq!(v["endpoints"], serde_json::json!(["eu/e1"]), "{v}");

    // eu disabled: its nested endpoint is Stopped, us answers.
    let (code, v) = daemon.call("POST", "/v1/profiles/eu/disable");
    assert_eq!(code, 200, "{v}");
    assert_eq!(nested_status(&daemon, "eu"), "Stopped");
    assert_eq!(dig4(c, api, "A").addresses(), [V4[2]]);
    let (code, _) = daemon.call("POST", "/v1/profiles/eu/enable");
    assert_eq!(code, 200);
    wait_online(&daemon, "eu", &["e1", "e2"]);
    assert_eq!(dig4(c, api, "A").addresses(), [V4[0]]);

    // One of eu's two endpoints fails: one is up, fewer than min_child_endpoints = 2, so eu is
    // Degraded in api and us answers, although e1 still serves eu's own name.
    go_dark(&bed.topo.backend, V4[1]);
    daemon.wait_status("eu", "e2", S::Degraded, Duration::from_secs(3));
    wait_until("eu is Degraded in api", Duration::from_secs(2), || {
        nested_status(&daemon, "eu") == "Degraded"
    });
    assert_eq!(dig4(c, api, "A").addresses(), [V4[2]]);
    let events = daemon.events();
    assert!(
        events
            .iter()
            .any(|e| e.profile == "api" && e.endpoint == "eu" && e.to == Some(S::Degraded) && e.target == "profile:eu"),
        "the events show the nested endpoint as such: {events:#?}"
    );
    let metrics = daemon.get("/metrics");
    let degraded = probed_tests::daemon::metric(
        metrics.as_str().unwrap(),
        "probed_nested_endpoints{profile=\"api\",status=\"Degraded\"}",
    );
    assert_eq!(degraded, 1.0);
    restore(&bed.topo.backend);

    // A loop is refused, and the running configuration stays.
    let looped = bed.files.header(PROBER_IF) + &body + "\n[[profile.endpoint]]\nprofile = \"api\"\n";
    std::fs::write(bed.files.config_path(), looped).unwrap();
    let (code, v) = daemon.call("POST", "/v1/reload");
    assert_ne!(code, 200, "{v}");
    assert!(v.to_string().contains("would loop"), "{v}");
    assert!(dig4(c, api, "A").status == "NOERROR");
    daemon.stop();
}

/// Geographic routing by a GeoIP database (MaxMind's format, written here): a Client Subnet in
/// a German block goes to the region listing DE, a French one to the region of continent EU, an
/// American one to the US region, an unknown one to `world`; `/v1/select` agrees.
#[test]
fn geographic_routing_follows_a_geoip_database() {
    let bed = Bed::new();
    let mut w = mmdb_writer::Writer::new("GeoLite2-Country");
    for (net, country, continent) in [
        ("198.18.50.0/24", "DE", "EU"),
        ("198.18.51.0/24", "FR", "EU"),
        ("198.18.60.0/24", "US", "NA"),
    ] {
        let record = serde_json::json!({"country": {"iso_code": country}, "continent": {"code": continent}});
        w.insert(net.parse::<ipnet::IpNet>().unwrap(), &record).unwrap();
    }
    let db = bed.files.dir.join("geo.mmdb");
    std::fs::write(&db, w.to_bytes().unwrap()).unwrap();
    let body = dns_section(&format!(
        "geoip_db = \"{}\"\n[[dns.region]]\nname = \"de\"\ncountries = [\"DE\"]\n\
         [[dns.region]]\nname = \"europe\"\ncontinents = [\"EU\"]\n\
         [[dns.region]]\nname = \"us\"\ncountries = [\"US\"]\n",
        db.display()
    )) + &profile(
        "geo",
        "routing = \"geographic\"",
        &[
            ("de", V4[0], "region = \"de\""),
            ("europe", V4[1], "region = \"europe\""),
            ("us", V4[2], "region = \"us\""),
            ("world", V6[0], "region = \"world\""),
        ],
    );
    let daemon = bed.start(&body);
    wait_online(&daemon, "geo", &["de", "europe", "us", "world"]);
    let c = bed.client();
    for (subnet, qtype, want) in [
        ("198.18.50.0/24", "A", V4[0]),
        ("198.18.51.0/24", "A", V4[1]),
        ("198.18.60.0/24", "A", V4[2]),
        ("192.0.2.0/24", "AAAA", V6[0]),
    ] {
        let d = dig(c, DNS_V4, "geo.tm.example.", qtype, &[&format!("+subnet={subnet}")]);
        assert_eq!(d.addresses(), [want], "{subnet}: {}", d.raw);
        let source = subnet.replace("0/24", "1");
        let v = daemon.get(&format!("/v1/select/geo?source={source}"));
        assert_eq!(v["addresses"], serde_json::json!([want]), "{v}");
    }
    // A database that is not one stops a reload, and the running one stays.
    std::fs::write(&db, b"not a database").unwrap();
    let (code, v) = daemon.call("POST", "/v1/reload");
    assert_ne!(code, 200, "{v}");
    assert!(v.to_string().contains("geo.mmdb"), "the error names the file: {v}");
    let d = dig(c, DNS_V4, "geo.tm.example.", "A", &["+subnet=198.18.60.0/24"]);
    assert_eq!(d.addresses(), [V4[2]]);
    daemon.stop();
}

/// Performance routing answers with the endpoint this node measures closest (its checks'
/// round-trip time), and moves when the times change: two HTTP backends whose health answers
/// take 80 ms and none, then the other way round.
#[test]
fn performance_follows_the_measured_round_trip_times() {
    use probed_tests::http_server::Route;
    let bed = Bed::new();
    let slow = bed.topo.backend.http_server(&format!("{}:8080", V4[0]));
    let fast = bed.topo.backend.http_server(&format!("{}:8080", V4[1]));
    slow.route("/health", Route::status(200).delayed(Duration::from_millis(80)));
    fast.route("/health", Route::status(200));
    let body = dns_section("")
        + "\n[[profile]]\nname = \"perf\"\ndialect = \"lb\"\nrouting = \"performance\"\n\n[profile.health]\n\
           protocol = \"http\"\nport = 8080\npath = \"/health\"\ninterval = \"100ms\"\ntimeout = \"500ms\"\n\
           healthy_threshold = 2\nunhealthy_threshold = 2\n"
        + &format!(
            "\n[[profile.endpoint]]\nname = \"a\"\naddress = \"{}\"\n\n[[profile.endpoint]]\nname = \"b\"\naddress = \"{}\"\n",
            V4[0], V4[1]
        );
    let daemon = bed.start(&body);
    wait_online(&daemon, "perf", &["a", "b"]);
    let c = bed.client();
    // The server learns the times once a second.
    wait_until("the fast endpoint answers", Duration::from_secs(3), || {
        dig4(c, "perf.tm.example.", "A").addresses() == [V4[1]]
    });
    slow.route("/health", Route::status(200));
    fast.route("/health", Route::status(200).delayed(Duration::from_millis(80)));
    wait_until("the answer follows the times", Duration::from_secs(3), || {
        dig4(c, "perf.tm.example.", "A").addresses() == [V4[0]]
    });
    assert_eq!(
        daemon.get("/v1/select/perf?source=198.18.0.2")["addresses"],
        serde_json::json!([V4[0]])
    );
    daemon.stop();
}

/// Issue 45: the zone follows the fleet API. dig answers a profile whose endpoints the API
/// owns with what the batches made: no address at first, the endpoints a batch adds once
/// Online, a re-prioritised one in its new place, and not one a batch removed; a reload of the
/// file keeps them in the answers.
#[test]
fn the_zone_answers_what_fleet_batches_make_of_an_api_profile() {
    use serde_json::json;
    let bed = Bed::new();
    let body = dns_section("") + &profile("web", "routing = \"priority\"\nendpoints_from = \"api\"", &[]);
    let daemon = bed.start(&body);
    let c = bed.client();
    let name = "web.tm.example.";
    assert!(dig4(c, name, "A").addresses().is_empty(), "no endpoint yet");
    let batch = |b: serde_json::Value| {
        let (code, v) = daemon.call_with("POST", "/v1/profiles/web/endpoints", &b);
        assert_eq!(code, 200, "{v}");
        v
    };
    batch(json!({"put": [
        {"name": "a", "address": V4[0], "priority": 1},
        {"name": "b", "address": V4[1], "priority": 2},
    ]}));
    wait_online(&daemon, "web", &["a", "b"]);
    assert_eq!(dig4(c, name, "A").addresses(), [V4[0]], "priority: a first");
    // b moves ahead of a: the answer follows at once (the endpoint's health is kept).
    batch(json!({"set": [{"name": "a", "priority": 3}, {"name": "b", "priority": 1}]}));
    assert_eq!(
        daemon.endpoint("web", "b").status,
        S::Online,
        "a priority change keeps health"
    );
    wait_until("b answers first", Duration::from_secs(2), || {
        dig4(c, name, "A").addresses() == [V4[1]]
    });
    // b removed: a answers again, b never.
    batch(json!({"remove": ["b"]}));
    wait_until("a answers once b is gone", Duration::from_secs(2), || {
        dig4(c, name, "A").addresses() == [V4[0]]
    });
    let (code, v) = daemon.call("POST", "/v1/reload");
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        dig4(c, name, "A").addresses(),
        [V4[0]],
        "the reload kept the API's endpoint"
    );
    assert_eq!(dig(c, DNS_V4, name, "A", &["+tcp"]).addresses(), [V4[0]]);
    daemon.stop();
}
