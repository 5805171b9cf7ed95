//! The conntrack exemption: probes on the raw-socket path leave no conntrack entries in the
//! prober's namespace while the engine's nft table is in place, thousands without it, and the
//! table goes when the engine stops.
use std::{net::SocketAddr, sync::Arc, time::Duration};

use probed::engine::{L4Engine, L4Proto, L4Request, TxChoice, TxPath};
use probed_tests::{
    l4::{collect, start_engine},
    Netns, TestPins, Topology,
};

const TCP_PROBES: u32 = 3000;
const UDP_PROBES: u32 = 1000;
const PROBES: u32 = TCP_PROBES + UDP_PROBES;
/// What "flat" allows: the odd entry from something else in the namespace, never one per probe.
const FLAT: u64 = 50;

/// TCP probes to port 80 of the AnyIP block (a wildcard listener answers), then UDP probes
/// to port 9 (nothing listens; the answer does not matter here, only the entries).
fn burst() -> Vec<L4Request> {
    let udp = L4Proto::Udp {
        payload: Arc::from(&b"probe"[..]),
    };
    (0..PROBES)
        .map(|i| {
            let ip = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(198, 19, 0, 0)) + i % TCP_PROBES);
            let (port, proto) = if i < TCP_PROBES {
                (80, L4Proto::Tcp)
            } else {
                (9, udp.clone())
            };
            L4Request {
                token: u64::from(i),
                target: SocketAddr::new(ip.into(), port),
                proto,
                timeout: Duration::from_millis(1000),
                tunnel: None,
            }
        })
        .collect()
}

fn conntrack_count(ns: &Netns) -> u64 {
    let text = ns.exec("cat", &["/proc/sys/net/netfilter/nf_conntrack_count"]);
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("nf_conntrack_count {text:?}: {e}"))
}

fn has_table(ns: &Netns, name: &str) -> bool {
    ns.exec("nft", &["list", "tables"])
        .lines()
        .any(|l| l.trim() == format!("table inet {name}"))
}

/// Sends the burst from `engine` and waits for every result.
fn probe(engine: &L4Engine, rx: &mut tokio::sync::mpsc::UnboundedReceiver<probed::engine::L4Result>) {
    assert_eq!(engine.tx_path(), TxPath::Raw, "transmit path");
    engine.submit(burst()).unwrap();
    let results = collect(rx, PROBES as usize, Duration::from_secs(30));
    assert_eq!(results.len(), PROBES as usize, "a result for every probe");
    let open = results
        .iter()
        .filter(|r| r.outcome == probed::engine::L4Outcome::Open)
        .count();
    assert_eq!(open, TCP_PROBES as usize, "every TCP probe reached the listener");
}

#[test]
fn raw_path_probes_leave_no_conntrack_entries_and_the_table_goes_on_stop() {
    let topo = Topology::new();
    topo.anyip("198.19.0.0/16");
    topo.backend.sysctl("net.ipv4.tcp_syncookies", "1");
    topo.backend.sysctl("net.core.somaxconn", "65535");
    let _listener = topo.backend.tcp_listen("0.0.0.0:80");
    // A stateful rule, as on a node with a firewall: it turns conntrack on in the prober's
    // namespace, so every packet not exempted gets an entry.
    topo.prober.nft(
        "table inet fw {
            chain input {
                type filter hook input priority filter; policy accept;
                ct state established,related counter
            }
        }",
    );
    let pins = TestPins::new();
    let table = probed::kernel::notrack::table_name(&pins.path);
    let before = conntrack_count(&topo.prober);

    // With the exemption: the count stays flat.
    topo.prober.enter(|| {
        let (engine, mut rx) = start_engine(&pins, TxChoice::Force(TxPath::Raw));
        assert!(has_table(&topo.prober, &table), "table inet {table} installed at start");
        probe(&engine, &mut rx);
    });
    let with = conntrack_count(&topo.prober);
    assert!(
        with < before + FLAT,
        "{PROBES} raw probes with the exemption: conntrack count went from {before} to {with}"
    );
    assert!(
        !has_table(&topo.prober, &table),
        "table inet {table} left after the engine stopped"
    );

    // Without it (removed under a running engine): one entry per probe, which is what the
    // table prevents. The engine's own removal at stop then finds nothing and only warns.
    topo.prober.enter(|| {
        let (engine, mut rx) = start_engine(&pins, TxChoice::Force(TxPath::Raw));
        topo.prober.exec("nft", &["delete", "table", "inet", &table]);
        probe(&engine, &mut rx);
    });
    let without = conntrack_count(&topo.prober);
    eprintln!("conntrack entries: {before} at start, {with} after {PROBES} probes with the table, {without} after as many without");
    assert!(
        without >= with + u64::from(PROBES) * 9 / 10,
        "{PROBES} raw probes without the exemption: conntrack count only went from {with} to {without}"
    );
}

#[test]
fn two_engines_in_one_namespace_keep_their_own_tables() {
    let topo = Topology::new();
    let (a, b) = (TestPins::new(), TestPins::new());
    let (name_a, name_b) = (
        probed::kernel::notrack::table_name(&a.path),
        probed::kernel::notrack::table_name(&b.path),
    );
    assert_ne!(name_a, name_b);
    // A table of the same name left by a crashed run is replaced, not a reason to fail.
    topo.prober
        .nft(&format!("table inet {name_a} {{ chain stale {{ }}; }}"));
    topo.prober.enter(|| {
        let (first, _rx1) = start_engine(&a, TxChoice::Force(TxPath::Raw));
        let listing = topo.prober.exec("nft", &["list", "table", "inet", &name_a]);
        assert!(!listing.contains("stale"), "the stale table was replaced:\n{listing}");
        assert!(listing.contains("notrack"), "{listing}");
        // The second engine only needs its own table here: probe_rx is attached by the first.
        let ifaces = [probed_tests::topo::PROBER_IF.to_string()];
        let guard = probed::kernel::notrack::Guard {
            ifaces: &ifaces,
            sources: &[],
            sport_min: 61000,
            sport_max: 65000,
            uid: 0,
        };
        let second = probed::kernel::notrack::NotrackTable::install(&b.path, &guard)
            .unwrap_or_else(|e| panic!("install {name_b}: {e}"));
        assert!(has_table(&topo.prober, &name_a) && has_table(&topo.prober, &name_b));
        drop(second);
        assert!(
            has_table(&topo.prober, &name_a),
            "{name_a} outlives the other engine's table"
        );
        assert!(!has_table(&topo.prober, &name_b));
        drop(first);
        assert!(!has_table(&topo.prober, &name_a));
    });
}

#[test]
fn an_engine_that_fails_to_start_removes_its_table() {
    let topo = Topology::new();
    let pins = TestPins::new();
    let table = probed::kernel::notrack::table_name(&pins.path);
    let err = topo.prober.enter(|| {
        let mut cfg = probed::engine::EngineConfig::new("nosuch0", &pins.path);
        cfg.tx = TxChoice::Force(TxPath::Raw);
        match L4Engine::start(cfg) {
            Ok(_) => panic!("an engine started on an interface that does not exist"),
            Err(e) => e.to_string(),
        }
    });
    assert!(err.contains("nosuch0"), "the start failed for the interface: {err}");
    assert!(
        !has_table(&topo.prober, &table),
        "table inet {table} left by a failed start"
    );
}
