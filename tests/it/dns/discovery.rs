//! Issue 45, endpoints from DNS: Knot serves `svc.example.` in the prober's namespace and
//! takes dynamic updates; one profile takes its endpoints from the A and AAAA records of
//! `web.svc.example.`, another from the SRV records of `_http._tcp.api.svc.example.`. The
//! reference is dig's view of the same server: probed's endpoints are the addresses dig gets,
//! after each nsupdate within the records' TTL and the discovery's bounds. An endpoint whose
//! record stays keeps its health; a resolver that stops answering changes nothing, across a
//! restart too; the fleet API may not change a discovered profile.
use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use probed::status::EndpointStatus as S;
use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    dig::{dig, try_dig},
    knot::{nsupdate, Knot, KnotZone},
    lb::{add_backends, Backend},
    topo::*,
    Netns,
};

const ZONE: &str = "svc.example.";
const KNOT_PORT: u16 = 5300;

/// TTL 1 s everywhere, the negative TTL too: a change shows at the next lookup.
const ZONE_TEXT: &str = "$ORIGIN svc.example.\n$TTL 1\n\
    @ IN SOA ns1 admin 1 3600 600 86400 1\n\
    @ IN NS ns1\n\
    ns1 IN A 198.18.0.1\n\
    web IN A 198.18.0.2\n\
    web IN AAAA 2001:2::2\n\
    _http._tcp.api IN SRV 1 30 80 b1\n\
    _http._tcp.api IN SRV 2 10 80 b2\n\
    b1 IN A 198.18.0.3\n\
    b2 IN A 198.18.0.4\n";

fn config(files: &DaemonFiles) -> String {
    let health = "[profile.health]\nprotocol = \"tcp\"\ninterval = \"100ms\"\ntimeout = \"100ms\"\n\
                  healthy_threshold = 2\nunhealthy_threshold = 2\n\n";
    let discovery = |name: &str, kind: &str, port: &str| {
        format!(
            "[profile.discovery]\nname = \"{name}\"\ntype = \"{kind}\"\n{port}\
             resolvers = [\"{PROBER_V4}:{KNOT_PORT}\"]\nmin_ttl = \"1s\"\nmax_ttl = \"2s\"\ntimeout = \"500ms\"\n\n"
        )
    };
    files.header(PROBER_IF)
        + "[[profile]]\nname = \"web\"\ndialect = \"lb\"\nrouting = \"weighted\"\nendpoints_from = \"dns\"\n\n"
        + &discovery("web.svc.example", "A+AAAA", "port = 80\n")
        + health
        + "[[profile]]\nname = \"api\"\ndialect = \"lb\"\nrouting = \"weighted\"\nendpoints_from = \"dns\"\n\n"
        + &discovery("_http._tcp.api.svc.example.", "SRV", "")
        + health
}

/// The profile's endpoints by name, as the fleet API shows them.
fn endpoints(daemon: &RunningDaemon, profile: &str) -> Vec<serde_json::Value> {
    daemon.get(&format!("/v1/profiles/{profile}/endpoints"))["endpoints"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn names(daemon: &RunningDaemon, profile: &str) -> BTreeSet<String> {
    endpoints(daemon, profile)
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

/// What dig gets from the same server, as the endpoints' names (`ADDRESS:80`).
fn dig_names(ns: &Netns, name: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for qtype in ["A", "AAAA"] {
        let d = dig(
            ns,
            PROBER_V4,
            KNOT_PORT,
            name,
            qtype,
            &["+norec", "+time=1", "+tries=1"],
        );
        for a in d.addresses() {
            out.insert(if a.contains(':') {
                format!("[{a}]:80")
            } else {
                format!("{a}:80")
            });
        }
    }
    out
}

fn wait_for(what: &str, within: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < within, "{what} within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    start.elapsed()
}

fn start_knot(ns: &Netns) -> Knot {
    let zone = KnotZone {
        name: ZONE,
        text: ZONE_TEXT,
        listen: &[PROBER_V4],
        port: KNOT_PORT,
        updates_from: Some("198.18.0.0/24"),
    };
    // Knot binds before it loads the zone: ready is an authoritative SOA.
    Knot::start(ns, &zone, || {
        try_dig(ns, PROBER_V4, KNOT_PORT, ZONE, "SOA", &["+norec", "+time=1"])
            .is_ok_and(|d| d.status == "NOERROR" && d.flags.iter().any(|f| f == "aa"))
    })
}

#[test]
fn endpoints_follow_the_records_that_nsupdate_adds_and_removes() {
    let topo = Topology::new();
    add_backends(&topo, &["198.18.0.3", "198.18.0.4", "198.18.0.5"]);
    let _servers: Vec<Backend> = ["198.18.0.2", "198.18.0.3", "198.18.0.4", "198.18.0.5", "2001:2::2"]
        .iter()
        .map(|b| Backend::start(&topo.backend, b))
        .collect();
    let mut knot = start_knot(&topo.prober);
    let files = DaemonFiles::new();
    let daemon =
        RunningDaemon::start(&topo.prober, files.write_config(&config(&files)), None).expect("start the daemon");

    // The first lookup: both families of web, both SRV targets of api, each checked.
    let web = dig_names(&topo.prober, "web.svc.example.");
    assert_eq!(web.len(), 2, "dig's view: {web:?}");
    wait_for("web's endpoints are dig's addresses", Duration::from_secs(5), || {
        names(&daemon, "web") == web
    });
    for e in &web {
        daemon.wait_status("web", e, S::Online, Duration::from_secs(5));
    }
    wait_for("api's endpoints", Duration::from_secs(5), || {
        names(&daemon, "api").len() == 2
    });
    let api = endpoints(&daemon, "api");
    let b1 = api
        .iter()
        .find(|e| e["name"] == "198.18.0.3:80")
        .expect("b1's endpoint");
    assert_eq!(
        (b1["weight"].as_u64(), b1["priority"].as_u64()),
        (Some(30), Some(2)),
        "{api:?}"
    );
    let b2 = api
        .iter()
        .find(|e| e["name"] == "198.18.0.4:80")
        .expect("b2's endpoint");
    assert_eq!(
        (b2["weight"].as_u64(), b2["priority"].as_u64()),
        (Some(10), Some(3)),
        "{api:?}"
    );
    daemon.wait_status("api", "198.18.0.3:80", S::Online, Duration::from_secs(5));
    let shown = daemon.get("/v1/status/web")["discovery"].clone();
    assert_eq!(
        (&shown["name"], &shown["type"], &shown["endpoints"]),
        (
            &serde_json::json!("web.svc.example."),
            &serde_json::json!("A+AAAA"),
            &serde_json::json!(2)
        ),
        "{shown}"
    );
    assert!(
        shown["answered_unix_ms"].as_u64().is_some() && shown.get("failing").is_none(),
        "{shown}"
    );
    let kept = daemon
        .endpoint("web", "198.18.0.2:80")
        .last_change
        .map(|c| c.at_unix_ms);

    // A record added: it joins within the TTL (1 s) and the discovery's bounds.
    nsupdate(
        &topo.prober,
        PROBER_V4,
        KNOT_PORT,
        ZONE,
        &["update add web.svc.example. 1 A 198.18.0.5"],
    );
    let web = dig_names(&topo.prober, "web.svc.example.");
    assert_eq!(web.len(), 3);
    let took = wait_for("the added record's endpoint", Duration::from_secs(4), || {
        names(&daemon, "web") == web
    });
    eprintln!("an added record became an endpoint in {took:?}");
    daemon.wait_status("web", "198.18.0.5:80", S::Online, Duration::from_secs(3));
    // A record removed: its endpoint goes; the others keep their health.
    nsupdate(
        &topo.prober,
        PROBER_V4,
        KNOT_PORT,
        ZONE,
        &["update delete web.svc.example. AAAA 2001:2::2"],
    );
    let web = dig_names(&topo.prober, "web.svc.example.");
    assert_eq!(web.len(), 2);
    let took = wait_for("the removed record's endpoint leaves", Duration::from_secs(4), || {
        names(&daemon, "web") == web
    });
    eprintln!("a removed record's endpoint left in {took:?}");
    assert_eq!(
        daemon
            .endpoint("web", "198.18.0.2:80")
            .last_change
            .map(|c| c.at_unix_ms),
        kept,
        "an endpoint whose record stayed kept its health"
    );
    // An SRV record's weight changed: the endpoint takes it, health kept.
    nsupdate(
        &topo.prober,
        PROBER_V4,
        KNOT_PORT,
        ZONE,
        &[
            "update delete _http._tcp.api.svc.example. SRV 1 30 80 b1.svc.example.",
            "update add _http._tcp.api.svc.example. 1 SRV 1 60 80 b1.svc.example.",
        ],
    );
    wait_for("b1's new weight", Duration::from_secs(4), || {
        endpoints(&daemon, "api")
            .iter()
            .any(|e| e["name"] == "198.18.0.3:80" && e["weight"] == 60)
    });
    assert_eq!(daemon.endpoint("api", "198.18.0.3:80").status, S::Online);

    // The fleet API may not change what DNS owns.
    let (code, v) = daemon.call_with(
        "POST",
        "/v1/profiles/web/endpoints",
        &serde_json::json!({"remove": ["198.18.0.2:80"]}),
    );
    assert_eq!(code, 409, "{v}");
    assert!(v.to_string().contains("endpoints_from"), "{v}");

    // The resolver stops answering: the last good set stays, through several lookups.
    knot.stop();
    let before = names(&daemon, "web");
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(names(&daemon, "web"), before, "a failing resolver changes nothing");
    let shown = daemon.get("/v1/status/web")["discovery"].clone();
    assert!(
        shown["failing"].as_str().is_some_and(|w| w.contains("198.18.0.1:5300")),
        "the status says why: {shown}"
    );
    assert_eq!(names(&daemon, "api").len(), 2);
    // And across a restart: the journal holds them.
    daemon.stop();
    let daemon = RunningDaemon::start(&topo.prober, files.write_config(&config(&files)), None).expect("restart");
    assert_eq!(names(&daemon, "web"), before, "the last good set after a restart");
    for e in &before {
        daemon.wait_status("web", e, S::Online, Duration::from_secs(5));
    }
    // The resolver back (its zone file as first written): the profile follows it.
    drop(knot);
    let _knot = start_knot(&topo.prober);
    let web = dig_names(&topo.prober, "web.svc.example.");
    wait_for("back to the zone file's records", Duration::from_secs(6), || {
        names(&daemon, "web") == web
    });
    daemon.stop();
}
