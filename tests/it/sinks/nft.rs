//! The nftables sink with real traffic: a client namespace, the prober's namespace as the load
//! balancer (an nft `dnat ... map @slots` ruleset that probed fills), three backends. Many
//! short client connections reach all three; one backend dropped leaves rotation after its
//! fail window (no new connection reaches it, and no other slot moves), and comes back after
//! its success window. The same over IPv6, an nft set of eligible addresses, a restart that
//! rewrites nothing, and the errors of a sink whose structure is missing or of the wrong type.
use std::{collections::BTreeMap, time::Duration};

use probed::status::EndpointStatus as S;
use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    lb::{add_backends, connect_many, count_ruleset, doc_block, go_dark, restore, syns, wait_until, Backend},
    topo::*,
    Netns,
};

const VIP_V4: &str = "198.18.100.100";
const VIP_V6: &str = "2001:2:100::100";
const BACKENDS_V4: [&str; 3] = ["198.18.0.2", "198.18.0.3", "198.18.0.4"];
const BACKENDS_V6: [&str; 3] = ["2001:2::2", "2001:2::3", "2001:2::4"];

/// The operator's rulesets, as docs/operations/sinks.md shows them: probed fills the maps only.
fn lb_ruleset_v4() -> String {
    doc_block("lb-ruleset-v4")
}

fn lb_ruleset_v6() -> String {
    doc_block("lb-ruleset-v6")
}

/// The slot table the LB namespace's map holds: slot -> backend address.
fn slots(lb: &Netns, family: &str, table: &str, map: &str) -> BTreeMap<u64, String> {
    let json = lb.exec("nft", &["-j", "list", "map", family, table, map]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let elems = v["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|i| i.get("map"))
        .and_then(|m| m["elem"].as_array().cloned())
        .unwrap_or_default();
    elems
        .iter()
        .map(|e| (e[0].as_u64().unwrap(), e[1].as_str().unwrap().to_string()))
        .collect()
}

fn config(files: &DaemonFiles, backends: &[&str], sinks: &str) -> String {
    let mut text = files.header(PROBER_IF)
        + "[[profile]]\nname = \"web\"\ndialect = \"lb\"\nrouting = \"weighted\"\n\n[profile.health]\n\
           protocol = \"tcp\"\nport = 80\ninterval = \"100ms\"\ntimeout = \"100ms\"\nhealthy_threshold = 2\n\
           unhealthy_threshold = 2\n";
    for (i, b) in backends.iter().enumerate() {
        text += &format!("\n[[profile.endpoint]]\nname = \"b{i}\"\naddress = \"{b}\"\n");
    }
    text + sinks
}

/// The sink as docs/operations/sinks.md configures it.
fn map_sink_v4() -> String {
    "\n".to_string() + &doc_block("map-sink-v4")
}
const MAP_SINK_V6: &str =
    "\n[[sink]]\nprofile = \"web\"\nkind = \"nftables\"\nfamily = \"ip6\"\ntable = \"lb6\"\nmap = \"web_slots6\"\n";
const SET_SINK: &str =
    "\n[[sink]]\nprofile = \"web\"\nkind = \"nftables\"\nfamily = \"ip\"\ntable = \"lb\"\nset = \"web_up\"\n";

/// The failover scenario over one family: all three backends get traffic; the middle one
/// dropped leaves the map after its fail window with no other slot moved; restored, it comes
/// back after its success window.
fn failover(v6: bool) {
    let topo = Topology::new();
    let client = topo.client();
    let (backends, vip, family, table, map, sink) = if v6 {
        (BACKENDS_V6, VIP_V6, "ip6", "lb6", "web_slots6", MAP_SINK_V6.to_string())
    } else {
        (BACKENDS_V4, VIP_V4, "ip", "lb", "web_slots", map_sink_v4())
    };
    add_backends(&topo, &backends[1..]);
    let _servers: Vec<Backend> = backends.iter().map(|b| Backend::start(&topo.backend, b)).collect();
    topo.prober.nft(&if v6 { lb_ruleset_v6() } else { lb_ruleset_v4() });
    topo.backend.nft(&count_ruleset(&backends));
    let files = DaemonFiles::new();
    let cfg = files.write_config(&config(&files, &backends, &sink));
    let daemon = RunningDaemon::start(&topo.prober, cfg, None).expect("start the daemon");
    for b in ["b0", "b1", "b2"] {
        daemon.wait_status("web", b, S::Online, Duration::from_secs(5));
    }
    wait_until(
        "the map holds 64 slots over the three backends",
        Duration::from_secs(3),
        || {
            let s = slots(&topo.prober, family, table, map);
            s.len() == 64 && backends.iter().all(|b| s.values().any(|v| v == b))
        },
    );
    let before = slots(&topo.prober, family, table, map);
    assert_eq!(
        connect_many(&client, vip, 300),
        300,
        "every connection through the VIP succeeds"
    );
    for b in &backends {
        assert!(
            syns(&topo.backend, b) > 30,
            "{b} gets its share: {}",
            syns(&topo.backend, b)
        );
    }

    // b1 goes dark: after its fail window (2 x 100 ms timeouts + 100 ms) it leaves the map.
    go_dark(&topo.backend, backends[1]);
    daemon.wait_status("web", "b1", S::Degraded, Duration::from_secs(3));
    wait_until("b1 leaves the map", Duration::from_secs(1), || {
        !slots(&topo.prober, family, table, map)
            .values()
            .any(|v| v == backends[1])
    });
    let without = slots(&topo.prober, family, table, map);
    for (slot, b) in &before {
        if b != backends[1] {
            assert_eq!(&without[slot], b, "slot {slot} of a healthy backend did not move");
        }
    }
    let dark_before = syns(&topo.backend, backends[1]);
    assert_eq!(
        connect_many(&client, vip, 300),
        300,
        "the other two take every connection"
    );
    assert_eq!(
        syns(&topo.backend, backends[1]),
        dark_before,
        "no new connection reaches the failed backend"
    );

    // Back: after its success window it is in the map again, with its old share.
    restore(&topo.backend);
    daemon.wait_status("web", "b1", S::Online, Duration::from_secs(3));
    wait_until("b1 returns to the map", Duration::from_secs(1), || {
        slots(&topo.prober, family, table, map)
            .values()
            .any(|v| v == backends[1])
    });
    let back = slots(&topo.prober, family, table, map);
    let moved = without.iter().filter(|(s, b)| back[*s] != **b).count();
    let regained = back.values().filter(|b| *b == backends[1]).count();
    assert_eq!(moved, regained, "only the slots b1 takes back move");
    let returned_before = syns(&topo.backend, backends[1]);
    assert_eq!(connect_many(&client, vip, 300), 300);
    assert!(
        syns(&topo.backend, backends[1]) > returned_before + 30,
        "b1 gets traffic again"
    );

    let sinks = daemon.get("/v1/sinks");
    assert_eq!(sinks[0]["in_sync"], true, "{sinks}");
    assert_eq!(sinks[0]["entries"], 64, "{sinks}");
    // The profile's status names the sinks that follow it.
    let web = daemon.get("/v1/status/web");
    assert_eq!(web["sinks"][0]["name"], sinks[0]["name"], "{web}");
    assert_eq!(web["sinks"][0]["in_sync"], true, "{web}");
    daemon.stop();
    // Stopping is fail-static: the map keeps the last eligible set.
    assert_eq!(slots(&topo.prober, family, table, map), back);
}

#[test]
fn nft_map_moves_new_connections_off_a_failed_backend_and_back() {
    failover(false);
}

#[test]
fn nft_map_over_ipv6() {
    failover(true);
}

#[test]
fn nft_set_holds_the_eligible_addresses_and_a_restart_rewrites_nothing() {
    let topo = Topology::new();
    let _a = topo.backend.tcp_listen(&format!("{BACKEND_V4}:80"));
    topo.prober.nft(&lb_ruleset_v4().replace(
        "\tchain prerouting",
        "\tset web_up { typeof ip daddr; }\n\tchain prerouting",
    ));
    let files = DaemonFiles::new();
    // The second endpoint has nothing listening: it is refused, Degraded, not in the set.
    let backends = [BACKEND_V4, "198.18.0.9"];
    topo.prober
        .static_neighbour("198.18.0.9", &topo.backend.mac(BACKEND_IF), PROBER_IF);
    topo.backend.ip(&["addr", "add", "198.18.0.9/24", "dev", BACKEND_IF]);
    let text = config(&files, &backends, &(SET_SINK.to_string() + &map_sink_v4()));
    let cfg = files.write_config(&text);
    let set = || {
        let listing = topo.prober.exec("nft", &["list", "set", "ip", "lb", "web_up"]);
        listing
            .split("elements = {")
            .nth(1)
            .map(|e| e.split('}').next().unwrap().trim().to_string())
    };
    let daemon = RunningDaemon::start(&topo.prober, cfg.clone(), None).expect("start");
    daemon.wait_status("web", "b0", S::Online, Duration::from_secs(5));
    daemon.wait_status("web", "b1", S::Degraded, Duration::from_secs(5));
    wait_until("the set holds the one eligible address", Duration::from_secs(2), || {
        set().as_deref() == Some(BACKEND_V4)
    });
    let map_before = slots(&topo.prober, "ip", "lb", "web_slots");
    assert!(map_before.values().all(|b| b == BACKEND_V4) && map_before.len() == 64);
    daemon.stop();

    // Restart: the state file resumes the same health, so the sinks find nothing to write.
    let daemon = RunningDaemon::start(&topo.prober, cfg, None).expect("restart");
    std::thread::sleep(Duration::from_millis(300));
    let sinks = daemon.get("/v1/sinks");
    for s in sinks.as_array().unwrap() {
        assert_eq!(
            (s["in_sync"].as_bool(), s["last_written"].as_u64()),
            (Some(true), Some(0)),
            "{s}"
        );
    }
    assert_eq!(slots(&topo.prober, "ip", "lb", "web_slots"), map_before);
    assert_eq!(set().as_deref(), Some(BACKEND_V4));

    // Someone flushes the map: the next read-back (within 5 s) finds it and probed refills it.
    topo.prober.exec("nft", &["flush", "map", "ip", "lb", "web_slots"]);
    wait_until("the flushed map is refilled", Duration::from_secs(7), || {
        slots(&topo.prober, "ip", "lb", "web_slots") == map_before
    });
    let metrics = daemon.call("GET", "/metrics").1;
    assert!(
        metrics
            .as_str()
            .unwrap()
            .contains("probed_sink_drift_total{sink=\"web_slots\"} 1"),
        "{metrics}"
    );
    // A key past the 64 slots (left by a larger `slots` before a reload, or added by hand) is
    // not a slot: the next read-back removes it, and touches nothing else.
    topo.prober.exec(
        "nft",
        &["add", "element", "ip", "lb", "web_slots", "{ 100 : 198.18.0.9 }"],
    );
    assert_eq!(slots(&topo.prober, "ip", "lb", "web_slots").len(), 65);
    wait_until("the stale key is removed", Duration::from_secs(7), || {
        slots(&topo.prober, "ip", "lb", "web_slots") == map_before
    });
}

#[test]
fn a_sink_whose_structure_is_missing_or_wrong_stops_the_start_and_a_reload() {
    let topo = Topology::new();
    let _a = topo.backend.tcp_listen(&format!("{BACKEND_V4}:80"));
    let files = DaemonFiles::new();
    // No table at all.
    let cfg = files.write_config(&config(&files, &[BACKEND_V4], &map_sink_v4()));
    let err = RunningDaemon::start(&topo.prober, cfg, None).err().expect("refused");
    assert!(
        err.contains("sink web_slots") && err.contains("declare it in the ruleset"),
        "{err}"
    );
    // A map of the wrong type.
    topo.prober
        .nft("table ip lb {\n map web_slots { typeof numgen inc mod 64 : ether daddr; }\n}\n");
    let cfg = files.write_config(&config(&files, &[BACKEND_V4], &map_sink_v4()));
    let err = RunningDaemon::start(&topo.prober, cfg, None).err().expect("refused");
    assert!(err.contains("ether_addr"), "{err}");
    // A running daemon refuses a reload that adds a sink of a missing map, and keeps going.
    let cfg = files.write_config(&config(&files, &[BACKEND_V4], ""));
    let daemon = RunningDaemon::start(&topo.prober, cfg, Some(&files.config_path())).expect("start");
    std::fs::write(files.config_path(), config(&files, &[BACKEND_V4], MAP_SINK_V6)).unwrap();
    let (code, v) = daemon.call("POST", "/v1/reload");
    assert_eq!(code, 422, "{v}");
    assert!(v["error"].as_str().unwrap().contains("web_slots6"), "{v}");
    daemon.wait_status("web", "b0", S::Online, Duration::from_secs(5));
    assert_eq!(daemon.get("/v1/sinks"), serde_json::json!([]));
}

/// A reload moves only what it changes (issue 45): with every backend healthy and clients
/// connecting through the VIP, reloads that change the health check's timing and thresholds,
/// then the sink's own keys (`on_stop`, with `clear` first: a sink replaced rather than handed
/// over would empty the map), move no slot, never leave the map short, change no endpoint's
/// status, and lose no client connection.
#[test]
fn reloads_of_health_and_sink_keys_move_no_slot() {
    let topo = Topology::new();
    let client = topo.client();
    add_backends(&topo, &BACKENDS_V4[1..]);
    let _servers: Vec<Backend> = BACKENDS_V4.iter().map(|b| Backend::start(&topo.backend, b)).collect();
    topo.prober.nft(&lb_ruleset_v4());
    let files = DaemonFiles::new();
    let sink = map_sink_v4().replace("kind = \"nftables\"\n", "kind = \"nftables\"\non_stop = \"clear\"\n");
    let first = config(&files, &BACKENDS_V4, &sink);
    let cfg = files.write_config(&first);
    let daemon = RunningDaemon::start(&topo.prober, cfg, Some(&files.config_path())).expect("start the daemon");
    for b in ["b0", "b1", "b2"] {
        daemon.wait_status("web", b, S::Online, Duration::from_secs(5));
    }
    wait_until("the map holds 64 slots", Duration::from_secs(3), || {
        slots(&topo.prober, "ip", "lb", "web_slots").len() == 64
    });
    let before = slots(&topo.prober, "ip", "lb", "web_slots");
    let changes_before = |d: &RunningDaemon| {
        (0..3)
            .map(|i| d.endpoint("web", &format!("b{i}")).last_change.map(|c| c.at_unix_ms))
            .collect::<Vec<_>>()
    };
    let last_changes = changes_before(&daemon);
    let mut steps = probed_tests::lb::timing_edits(&first);
    steps.push((
        "the sink's on_stop",
        first.replace("on_stop = \"clear\"\n", "on_stop = \"keep\"\n"),
    ));
    steps.push(("back to the first file", first.clone()));
    for (what, text) in steps {
        std::fs::write(files.config_path(), &text).unwrap();
        let (code, v) = daemon.call("POST", "/v1/reload");
        assert_eq!(code, 200, "reload ({what}): {v}");
        let watch_until = std::time::Instant::now() + Duration::from_millis(800);
        while std::time::Instant::now() < watch_until {
            assert_eq!(
                slots(&topo.prober, "ip", "lb", "web_slots"),
                before,
                "a reload of {what} moved a slot"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(connect_many(&client, VIP_V4, 100), 100, "clients after {what}");
        // A sink replaced rather than handed over would have cleared the map and written
        // every slot again (too fast for the sampling above to catch, but counted).
        let sinks = daemon.get("/v1/sinks");
        assert_eq!(sinks[0]["last_written"], 0, "a reload of {what}: {sinks}");
        for b in ["b0", "b1", "b2"] {
            assert_eq!(daemon.endpoint("web", b).status, S::Online, "{b} after {what}");
        }
    }
    assert_eq!(changes_before(&daemon), last_changes, "no endpoint changed status");
    let sinks = daemon.get("/v1/sinks");
    assert_eq!(sinks[0]["in_sync"], true, "{sinks}");
    assert!(
        std::fs::read_to_string(files.events())
            .unwrap()
            .lines()
            .all(|l| !l.contains("\"CheckingEndpoint\"") || !l.contains("\"from\":\"Online\"")),
        "no endpoint went back to CheckingEndpoint"
    );
    daemon.stop();
}

/// Issue 45, the fleet API: a profile whose endpoints the API owns (`endpoints_from = "api"`)
/// starts empty; batches add, re-weight and remove backends while clients connect through the
/// VIP, each moving only the slots of what it changed. A stale generation and a bad item are
/// refused whole. A restart and a reload of the file keep what the API made, health included.
#[test]
fn fleet_batches_move_only_what_they_change_and_survive_a_restart_and_a_reload() {
    use serde_json::json;
    let topo = Topology::new();
    let client = topo.client();
    add_backends(&topo, &BACKENDS_V4[1..]);
    let _servers: Vec<Backend> = BACKENDS_V4.iter().map(|b| Backend::start(&topo.backend, b)).collect();
    topo.prober.nft(&lb_ruleset_v4());
    let files = DaemonFiles::new();
    let text = config(&files, &[], &map_sink_v4()).replace(
        "routing = \"weighted\"\n",
        "routing = \"weighted\"\nendpoints_from = \"api\"\n",
    );
    let cfg = files.write_config(&text);
    let daemon = RunningDaemon::start(&topo.prober, cfg, Some(&files.config_path())).expect("start the daemon");
    let batch = |d: &RunningDaemon, body: serde_json::Value| d.call_with("POST", "/v1/profiles/web/endpoints", &body);
    let item = |name: &str, addr: &str| json!({"name": name, "address": addr});

    let (code, v) = batch(
        &daemon,
        json!({"put": [item("b0", BACKENDS_V4[0]), item("b1", BACKENDS_V4[1])]}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        (v["added"].as_u64(), v["generation"].as_u64()),
        (Some(2), Some(1)),
        "{v}"
    );
    for b in ["b0", "b1"] {
        daemon.wait_status("web", b, S::Online, Duration::from_secs(5));
    }
    let map = || slots(&topo.prober, "ip", "lb", "web_slots");
    let holds = |m: &BTreeMap<u64, String>, b: &str| m.values().filter(|v| *v == b).count();
    wait_until("b0 and b1 fill the map", Duration::from_secs(3), || {
        let m = map();
        m.len() == 64 && holds(&m, BACKENDS_V4[0]) > 0 && holds(&m, BACKENDS_V4[1]) > 0
    });
    assert_eq!(connect_many(&client, VIP_V4, 100), 100);
    let b0_change = daemon.endpoint("web", "b0").last_change.map(|c| c.at_unix_ms);

    // b2 joins: the slots it takes come from the others, and no other slot moves.
    let before = map();
    let (code, v) = batch(&daemon, json!({"generation": 1, "put": [item("b2", BACKENDS_V4[2])]}));
    assert_eq!(code, 200, "{v}");
    daemon.wait_status("web", "b2", S::Online, Duration::from_secs(5));
    wait_until("b2 takes its share", Duration::from_secs(3), || {
        holds(&map(), BACKENDS_V4[2]) > 0
    });
    let after = map();
    for (slot, b) in &after {
        if b != BACKENDS_V4[2] {
            assert_eq!(before.get(slot), Some(b), "slot {slot} moved though its backend stayed");
        }
    }
    assert_eq!(connect_many(&client, VIP_V4, 100), 100);

    // A stale generation and a bad item are refused, and change nothing.
    let (code, v) = batch(&daemon, json!({"generation": 1, "remove": ["b0"]}));
    assert_eq!(code, 409, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("is at generation 2, not 1"),
        "{v}"
    );
    let (code, v) = batch(
        &daemon,
        json!({"remove": ["b0"], "put": [{"name": "b9", "address": "198.18.0.99", "weight": 0}]}),
    );
    assert_eq!(code, 400, "{v}");
    assert_eq!(v["problems"][0]["field"], "put[0].weight", "{v}");
    assert_eq!(v["problems"][0]["problem"], "expected 1 to 1000", "{v}");
    assert_eq!(
        daemon.endpoint("web", "b0").status,
        S::Online,
        "nothing of a refused batch applied"
    );
    assert_eq!(map(), after);

    // b1 leaves: only its slots move.
    let (code, v) = batch(&daemon, json!({"remove": ["b1"]}));
    assert_eq!(code, 200, "{v}");
    wait_until("b1 leaves the map", Duration::from_secs(3), || {
        holds(&map(), BACKENDS_V4[1]) == 0
    });
    let without = map();
    for (slot, b) in &after {
        if b != BACKENDS_V4[1] {
            assert_eq!(
                without.get(slot),
                Some(b),
                "slot {slot} moved though its backend stayed"
            );
        }
    }
    assert_eq!(connect_many(&client, VIP_V4, 100), 100);
    let (code, v) = daemon.call("GET", "/v1/status/web/b1");
    assert_eq!(code, 404, "b1 is gone: {v}");

    // A restart keeps the API's endpoints, their health (from the state file) and generation.
    daemon.stop();
    let cfg = files.write_config(&text);
    let daemon = RunningDaemon::start(&topo.prober, cfg, Some(&files.config_path())).expect("restart the daemon");
    let view = daemon.get("/v1/profiles/web/endpoints");
    assert_eq!(view["generation"], 3, "{view}");
    let names: Vec<&str> = view["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["b0", "b2"], "{view}");
    let page = daemon.get("/v1/profiles/web/endpoints?offset=1&limit=1");
    assert_eq!(
        (page["total"].as_u64(), page["offset"].as_u64()),
        (Some(2), Some(1)),
        "{page}"
    );
    assert_eq!(page["endpoints"][0]["name"], "b2", "{page}");
    assert_eq!(page["endpoints"].as_array().map(Vec::len), Some(1), "{page}");
    for b in ["b0", "b2"] {
        let status = daemon.endpoint("web", b).status;
        assert!(
            matches!(status, S::Online),
            "{b} resumed healthy from the state file: {status:?}"
        );
    }
    assert_eq!(
        daemon.endpoint("web", "b0").last_change.map(|c| c.at_unix_ms),
        b0_change
    );
    // A reload of the file (which lists no endpoint for web) keeps them, untouched.
    let (code, v) = daemon.call("POST", "/v1/reload");
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["kept"], 2, "{v}");
    for b in ["b0", "b2"] {
        assert_eq!(daemon.endpoint("web", b).status, S::Online, "{b} after the reload");
    }
    wait_until("the map holds b0 and b2", Duration::from_secs(3), || {
        let m = map();
        m.len() == 64 && holds(&m, BACKENDS_V4[0]) > 0 && holds(&m, BACKENDS_V4[2]) > 0
    });
    assert_eq!(connect_many(&client, VIP_V4, 100), 100);
    // A reload whose rules the API's endpoints break (geographic routing wants a region of
    // each) is refused whole, naming them; the running profile is untouched.
    let geographic = text.replace("routing = \"weighted\"\n", "routing = \"geographic\"\n");
    std::fs::write(files.config_path(), &geographic).unwrap();
    let (code, v) = daemon.call("POST", "/v1/reload");
    assert_eq!(code, 422, "{v}");
    let why = v["error"].as_str().unwrap();
    assert!(
        why.contains("the endpoints the API gave it break its new rules") && why.contains("endpoints[b0].region"),
        "{v}"
    );
    assert_eq!(daemon.get("/v1/profiles/web/endpoints")["generation"], 3);
    assert_eq!(daemon.endpoint("web", "b2").status, S::Online);
    daemon.stop();
}

/// Issue 45, drain: an endpoint drained through the API (`probed drain`) keeps being probed,
/// its slots go to the others, and a client connection already on it goes on working (the
/// kernel's conntrack keeps its DNAT), while no new connection reaches it; enabled again, it
/// takes its slots back at once, its health kept.
#[test]
fn a_drained_backend_keeps_its_established_flows_and_gets_no_new_ones() {
    use std::io::{BufRead, BufReader, Write};
    let topo = Topology::new();
    let client = topo.client();
    add_backends(&topo, &BACKENDS_V4[1..]);
    // Each backend greets with its address, then echoes lines until the client closes.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let servers: Vec<std::thread::JoinHandle<()>> = BACKENDS_V4
        .iter()
        .map(|b| {
            let listener = topo.backend.tcp_listen(&format!("{b}:80"));
            listener.set_nonblocking(true).unwrap();
            let (stop, me) = (stop.clone(), b.to_string());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((s, _)) => {
                            let me = me.clone();
                            std::thread::spawn(move || {
                                s.set_nonblocking(false).unwrap();
                                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                                let mut w = s.try_clone().unwrap();
                                let _ = writeln!(w, "{me}");
                                for line in BufReader::new(s).lines().map_while(Result::ok) {
                                    if writeln!(w, "{line}").is_err() {
                                        break;
                                    }
                                }
                            });
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(2)),
                    }
                }
            })
        })
        .collect();
    topo.prober.nft(&lb_ruleset_v4());
    topo.backend.nft(&count_ruleset(&BACKENDS_V4));
    let files = DaemonFiles::new();
    let cfg = files.write_config(&config(&files, &BACKENDS_V4, &map_sink_v4()));
    let daemon = RunningDaemon::start(&topo.prober, cfg, None).expect("start the daemon");
    for b in ["b0", "b1", "b2"] {
        daemon.wait_status("web", b, S::Online, Duration::from_secs(5));
    }
    let map = || slots(&topo.prober, "ip", "lb", "web_slots");
    wait_until("all three in the map", Duration::from_secs(3), || {
        let m = map();
        m.len() == 64 && BACKENDS_V4.iter().all(|b| m.values().any(|v| v == b))
    });
    // A client connection through the VIP, and the backend it reached.
    let vip: std::net::SocketAddr = format!("{VIP_V4}:80").parse().unwrap();
    let stream = client
        .enter(move || std::net::TcpStream::connect_timeout(&vip, Duration::from_secs(2)).expect("connect to the VIP"));
    stream.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut lines = BufReader::new(stream.try_clone().unwrap()).lines();
    let mut out = stream;
    let served_by = lines.next().expect("a greeting").unwrap();
    let i = BACKENDS_V4
        .iter()
        .position(|b| *b == served_by)
        .expect("one of the backends");
    let name = format!("b{i}");

    let (code, v) = daemon.call("POST", &format!("/v1/endpoints/web/{name}/drain"));
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        (v["status"].as_str(), v["eligible"].as_bool()),
        (Some("Online"), Some(false)),
        "{v}"
    );
    wait_until("the drained backend leaves the map", Duration::from_secs(2), || {
        let m = map();
        m.len() == 64 && !m.values().any(|b| *b == served_by)
    });
    // The established flow goes on, on the same backend.
    for n in 0..5 {
        writeln!(out, "ping {n}").unwrap();
        assert_eq!(
            lines.next().expect("an echo").unwrap(),
            format!("ping {n}"),
            "the drained backend's flow"
        );
    }
    // No new connection reaches it.
    let before = syns(&topo.backend, &served_by);
    assert_eq!(connect_many(&client, VIP_V4, 100), 100);
    assert_eq!(
        syns(&topo.backend, &served_by),
        before,
        "a new connection reached the drained backend"
    );
    // Still probed: its status is its health's.
    assert_eq!(daemon.endpoint("web", &name).status, S::Online);
    let (code, v) = daemon.call("POST", &format!("/v1/endpoints/web/{name}/enable"));
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        (v["status"].as_str(), v["eligible"].as_bool()),
        (Some("Online"), Some(true)),
        "health kept: {v}"
    );
    wait_until("it takes its slots back", Duration::from_secs(2), || {
        map().values().any(|b| *b == served_by)
    });
    writeln!(out, "still here").unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "still here");
    drop(out);
    drop(lines);
    daemon.stop();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in servers {
        let _ = s.join();
    }
}

/// Issue 45, slow start: a backend back from Degraded takes its slots back over the profile's
/// `slow_start` (10 s here), a few at a time, while the other two keep theirs; clients through
/// the VIP reach it rarely at first and at its whole share once the ramp is over. The first
/// verdicts after the start take no ramp.
#[test]
fn a_returning_backend_takes_its_slots_back_over_its_slow_start() {
    let topo = Topology::new();
    let client = topo.client();
    add_backends(&topo, &BACKENDS_V4[1..]);
    let _servers: Vec<Backend> = BACKENDS_V4.iter().map(|b| Backend::start(&topo.backend, b)).collect();
    topo.prober.nft(&lb_ruleset_v4());
    topo.backend.nft(&count_ruleset(&BACKENDS_V4));
    let files = DaemonFiles::new();
    let text = config(&files, &BACKENDS_V4, &map_sink_v4()).replace(
        "routing = \"weighted\"\n",
        "routing = \"weighted\"\nslow_start = \"10s\"\n",
    );
    let daemon = RunningDaemon::start(&topo.prober, files.write_config(&text), None).expect("start the daemon");
    for b in ["b0", "b1", "b2"] {
        daemon.wait_status("web", b, S::Online, Duration::from_secs(5));
    }
    let map = || slots(&topo.prober, "ip", "lb", "web_slots");
    let b1 = BACKENDS_V4[1];
    let share = |m: &BTreeMap<u64, String>| m.values().filter(|b| *b == b1).count();
    // No ramp after the start: each takes its whole share as soon as it is Online.
    wait_until("all three in the map", Duration::from_secs(3), || {
        let m = map();
        m.len() == 64 && BACKENDS_V4.iter().all(|b| m.values().any(|v| v == b))
    });
    let whole = share(&map());
    assert!((21..=22).contains(&whole), "b1's share of 64 slots: {whole}");

    go_dark(&topo.backend, b1);
    daemon.wait_status("web", "b1", S::Degraded, Duration::from_secs(3));
    wait_until("b1 leaves the map", Duration::from_secs(1), || share(&map()) == 0);
    restore(&topo.backend);
    daemon.wait_status("web", "b1", S::Online, Duration::from_secs(3));
    let back = std::time::Instant::now();
    // At once: a connection in twenty or fewer, where its whole share is one in three.
    let before = syns(&topo.backend, b1);
    assert_eq!(connect_many(&client, VIP_V4, 100), 100);
    let early = syns(&topo.backend, b1) - before;
    assert!(
        early <= 10,
        "{early} of 100 connections reached b1 at the start of its ramp"
    );

    // Its slots come back a few at a time; a slot of the others moves only to b1.
    let mut last = map();
    let mut counts = vec![(0u128, share(&last))];
    let mut mid_ramp = None;
    while share(&last) < whole && back.elapsed() < Duration::from_secs(14) {
        std::thread::sleep(Duration::from_millis(50));
        let now = map();
        assert_eq!(now.len(), 64, "every slot is filled throughout");
        for (slot, b) in &now {
            if last[slot] != *b {
                assert_eq!(
                    b, b1,
                    "slot {slot} moved from {} to another healthy backend",
                    last[slot]
                );
            }
        }
        if mid_ramp.is_none() && back.elapsed() >= Duration::from_secs(5) {
            mid_ramp = Some(daemon.get("/v1/status/web/b1")["ramp"].clone());
        }
        counts.push((back.elapsed().as_millis(), share(&now)));
        last = now;
    }
    eprintln!("b1's slots over its ramp (ms since Online, slots): {counts:?}");
    assert_eq!(share(&last), whole, "back to its whole share: {counts:?}");
    let took = counts.last().unwrap().0;
    assert!(
        (9_000..=12_000).contains(&took),
        "the ramp took {took} ms for a slow_start of 10 s: {counts:?}"
    );
    assert!(counts[0].1 <= 2, "{counts:?}");
    assert!(
        counts.windows(2).all(|w| w[0].1 <= w[1].1),
        "never fewer slots: {counts:?}"
    );
    let mut distinct: Vec<usize> = counts.iter().map(|c| c.1).collect();
    distinct.dedup();
    assert!(distinct.len() >= 10, "in steps, not at once: {counts:?}");
    let mid = mid_ramp
        .expect("sampled at 5 s")
        .as_u64()
        .expect("a ramp while it ramps");
    assert!((200..=800).contains(&mid), "ramp at 5 s of 10: {mid}");
    assert!(
        daemon.get("/v1/status/web/b1").get("ramp").is_none(),
        "no ramp once whole"
    );
    // Whole: one connection in three.
    let before = syns(&topo.backend, b1);
    assert_eq!(connect_many(&client, VIP_V4, 300), 300);
    let after = syns(&topo.backend, b1) - before;
    assert!(after > 60, "{after} of 300 connections reached b1 after its ramp");
    daemon.stop();
}
