//! The L4 engine end to end: SYN probes crafted by the generator (probe_rx run with live frames) or the raw-socket
//! path, replies matched by probe_rx, against the backend namespace's own TCP stack.
use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use probed::engine::{L4Outcome, L4Proto, L4Request, TxChoice, TxPath};
use probed_tests::{
    l4::{assert_backend_reset, collect, run_batch, start_engine, start_engine_with},
    topo::*,
    TestPins, Topology,
};

const OPEN: u16 = 8080;
const CLOSED: u16 = 8081;
const DROPPED: u16 = 8082;
const REJECTED: u16 = 8083;

fn tcp(token: u64, target: &str, timeout_ms: u64) -> L4Request {
    L4Request {
        token,
        target: target.parse().unwrap(),
        proto: L4Proto::Tcp,
        timeout: Duration::from_millis(timeout_ms),
        tunnel: None,
    }
}

fn backend() -> Topology {
    let topo = Topology::new();
    topo.backend.nft_drop("tcp", DROPPED);
    topo.backend
        .nft_reject_icmp("tcp", REJECTED, "admin-prohibited", "admin-prohibited");
    // Count every RST reaching the backend: one per open probe, from probe_rx, and none from
    // the prober's own stack.
    topo.backend.nft_input_rule("tcp flags & rst == rst counter");
    topo
}

fn expected(port: u16, v6: bool) -> L4Outcome {
    match port {
        OPEN => L4Outcome::Open,
        CLOSED => L4Outcome::Refused,
        DROPPED => L4Outcome::Timeout,
        // admin-prohibited: ICMP 3/13, ICMPv6 1/1.
        _ if v6 => L4Outcome::Unreachable { icmp_type: 1, code: 1 },
        _ => L4Outcome::Unreachable { icmp_type: 3, code: 13 },
    }
}

fn outcomes_for_every_port_kind(tx: TxChoice, want_path: TxPath) {
    let topo = backend();
    let _l4 = topo.backend.tcp_listen(&format!("{BACKEND_V4}:{OPEN}"));
    let _l6 = topo.backend.tcp_listen(&format!("[{BACKEND_V6}]:{OPEN}"));
    let pins = TestPins::new();
    let mut reqs = Vec::new();
    for (i, port) in [OPEN, CLOSED, DROPPED, REJECTED].into_iter().enumerate() {
        reqs.push(tcp(i as u64, &format!("{BACKEND_V4}:{port}"), 300));
        reqs.push(tcp(100 + i as u64, &format!("[{BACKEND_V6}]:{port}"), 300));
    }
    let (results, snap) = topo.prober.enter(|| run_batch(&pins, tx, want_path, &reqs));
    assert_eq!(
        (snap.rx.matched_open, snap.rx.matched_refused, snap.rx.matched_unreach),
        (2, 2, 2),
        "{:?}",
        snap.rx
    );
    assert_eq!(snap.rx.rst_sent, 2, "one RST per open probe");
    assert_eq!(results.len(), reqs.len(), "one result per probe: {results:?}");
    for r in &results {
        let port = r.target.port();
        let want = expected(port, r.target.is_ipv6());
        assert_eq!(r.outcome, want, "{} (token {})", r.target, r.token);
        if want == L4Outcome::Timeout {
            assert!(
                r.elapsed >= Duration::from_millis(300),
                "timeout waited the full 300 ms: {:?}",
                r.elapsed
            );
        } else {
            assert!(
                r.elapsed < Duration::from_millis(300),
                "reply time {:?} is an RTT",
                r.elapsed
            );
        }
    }
    // Our RSTs tore the half-open connections down: nothing lingers in SYN-RECV, and the
    // backend saw exactly one RST per open probe (the prober's stack sent none of its own).
    assert_backend_reset(&topo, 2);
}

#[test]
fn xdp_path_open_refused_timeout_unreachable_v4_v6() {
    outcomes_for_every_port_kind(TxChoice::Auto, TxPath::Xdp);
}

#[test]
fn raw_socket_path_gives_the_same_outcomes() {
    outcomes_for_every_port_kind(TxChoice::Force(TxPath::Raw), TxPath::Raw);
}

#[test]
fn ten_thousand_anyip_targets_get_exactly_one_outcome_each() {
    const N: u32 = 10_000;
    let topo = Topology::new();
    topo.anyip("198.19.0.0/16");
    // One wildcard listener answers for the whole AnyIP block; a deep backlog and syncookies
    // keep the backend's stack from dropping SYNs of a burst.
    topo.backend.sysctl("net.ipv4.tcp_syncookies", "1");
    topo.backend.sysctl("net.core.somaxconn", "65535");
    let _listener = topo.backend.tcp_listen("0.0.0.0:80");
    let pins = TestPins::new();
    let reqs = anyip_port80(N);
    let softnet_before = softnet_drops();
    let (results, snap) = topo.prober.enter(|| {
        let (engine, mut rx) = start_engine(&pins, TxChoice::Auto);
        engine.submit(reqs).unwrap();
        let results = collect(&mut rx, N as usize, Duration::from_secs(20));
        // Nothing more may arrive: exactly one result per probe.
        std::thread::sleep(Duration::from_millis(100));
        assert!(rx.try_recv().is_err(), "a probe produced a second result");
        (results, engine.snapshot().unwrap())
    });
    assert_eq!(results.len(), N as usize, "results for every target");
    let mut seen = vec![false; N as usize];
    for r in &results {
        assert!(
            !std::mem::replace(&mut seen[r.token as usize], true),
            "token {} twice",
            r.token
        );
    }
    let open = results.iter().filter(|r| r.outcome == L4Outcome::Open).count();
    // A shortfall here has been seen once under a loaded CI run and not reproduced since: say
    // where the frames went (engine counters, both ends' link statistics, the per-CPU backlog
    // drops of /proc/net/softnet_stat) so the next one can be placed.
    assert_eq!(
        open,
        N as usize,
        "every AnyIP target answered: first other {:?}; engine {snap:?}; softnet drops {} -> {}\n\
         prober:\n{}{}\nbackend:\n{}{}",
        results.iter().find(|r| r.outcome != L4Outcome::Open),
        softnet_before,
        softnet_drops(),
        topo.prober.exec("ip", &["-s", "-s", "link", "show", PROBER_IF]),
        topo.prober.exec("ethtool", &["-S", PROBER_IF]),
        topo.backend.exec("ip", &["-s", "-s", "link", "show", BACKEND_IF]),
        topo.backend.exec("ethtool", &["-S", BACKEND_IF]),
    );
}

/// Packets the kernel dropped for a full per-CPU backlog, summed over the CPUs (the second
/// column of /proc/net/softnet_stat, hexadecimal).
fn softnet_drops() -> u64 {
    std::fs::read_to_string("/proc/net/softnet_stat")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|d| u64::from_str_radix(d, 16).ok())
        .sum()
}

/// The one probe the engine has on the wire (from its pinned in-flight table): flow and entry.
fn live_probe(pins: &TestPins) -> (probe_common::l4::FlowKey, probe_common::l4::Inflight) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        if let Some(live) = probed_tests::forge::inflight(&pins.path).into_iter().next() {
            return live;
        }
        assert!(Instant::now() < deadline, "probe never appeared in PROBE_INFLIGHT");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A TCP segment (IP header on, either family) from the probed backend to probe port `sport`.
fn forged_reply(flow: &probe_common::l4::FlowKey, sport: u16, ack: u32, flags: u8) -> Vec<u8> {
    probed_tests::forge::reply_segment(flow, sport, 0x5eed_0000, ack, flags)
}

#[test]
fn forged_and_stale_replies_change_no_outcome() {
    use probe_common::packet::{TCP_ACK, TCP_RST, TCP_SYN};
    use probed_tests::forge::send_raw_v4;

    let topo = backend();
    let pins = TestPins::new();
    let target = format!("{BACKEND_V4}:{DROPPED}");
    topo.prober.enter(|| {
        let (engine, mut rx) = start_engine(&pins, TxChoice::Auto);
        let path = probed_tests::l4::xdp_or_refused(&engine);
        engine.submit(vec![tcp(1, &target, 1500)]).unwrap();
        // The probe is on the wire to a port that drops it; find its flow and cookie.
        let (flow, entry) = live_probe(&pins);
        let reply = |sport: u16, ack: u32, flags: u8| forged_reply(&flow, sport, ack, flags);
        let free_port = if flow.sport < 65000 {
            flow.sport + 1
        } else {
            flow.sport - 1
        };
        let forged = [
            reply(flow.sport, entry.cookie.wrapping_add(2), TCP_SYN | TCP_ACK), // wrong ack
            reply(flow.sport, entry.cookie.wrapping_add(7), TCP_RST | TCP_ACK), // wrong ack
            reply(free_port, entry.cookie.wrapping_add(1), TCP_SYN | TCP_ACK),  // no such probe
        ];
        topo.backend.enter(|| {
            for pkt in &forged {
                send_raw_v4(flow.saddr_v4().into(), pkt);
            }
        });
        let results = collect(&mut rx, 1, Duration::from_secs(3));
        assert_eq!(results.len(), 1);
        assert_eq!(
            results[0].outcome,
            L4Outcome::Timeout,
            "forged replies must not decide the probe"
        );
        let snap = engine.snapshot().unwrap();
        assert_eq!(
            (snap.rx.syn_ack, snap.rx.rst),
            (2, 1),
            "the forged segments reached probe_rx: {:?}",
            snap.rx
        );
        assert_eq!(snap.rx.forged, 2, "wrong acks counted as forged: {:?}", snap.rx);
        assert_eq!(
            snap.rx.stale, 1,
            "reply to an unprobed port counted as stale: {:?}",
            snap.rx
        );
        assert_eq!(snap.rx.matched_open + snap.rx.matched_refused, 0);
        // probe_rx is also the generator, for frames marked by metadata the wire cannot
        // carry: none of the frames from the backend took that path.
        assert_eq!(
            (snap.tx.sent, snap.tx.no_job),
            (u64::from(path == TxPath::Xdp), 0),
            "wire traffic reached the generator: {:?}",
            snap.tx
        );
    });
}

/// Strict parsing: a SYN+ACK that carries the live probe's very cookie but comes as an IPv4
/// fragment is passed on untouched, never read past.
#[test]
fn a_fragment_with_the_right_cookie_decides_nothing() {
    use probe_common::packet::{TCP_ACK, TCP_SYN};
    use probed_tests::forge::send_raw_v4;

    let topo = backend();
    let pins = TestPins::new();
    let target = format!("{BACKEND_V4}:{DROPPED}");
    topo.prober.enter(|| {
        let (engine, mut rx) = start_engine(&pins, TxChoice::Auto);
        engine.submit(vec![tcp(1, &target, 1500)]).unwrap();
        let (flow, entry) = live_probe(&pins);
        let whole = forged_reply(&flow, flow.sport, entry.cookie.wrapping_add(1), TCP_SYN | TCP_ACK);
        // (A header shorter than 20 bytes cannot be sent from a raw socket: the sender's
        // kernel refuses it. probe-common's `Ipv4Hdr::is_plain` tests cover that case.)
        let mut first_fragment = whole;
        first_fragment[6] |= 0x20; // More Fragments
        topo.backend
            .enter(|| send_raw_v4(flow.saddr_v4().into(), &first_fragment));
        let results = collect(&mut rx, 1, Duration::from_secs(3));
        assert_eq!(results.len(), 1);
        assert_eq!(
            results[0].outcome,
            L4Outcome::Timeout,
            "a fragment must not decide the probe"
        );
        let snap = engine.snapshot().unwrap();
        assert_eq!(snap.rx.matched_open, 0, "{:?}", snap.rx);
    });
}

#[test]
fn a_small_inflight_table_holds_probes_back_instead_of_losing_them() {
    const N: u32 = 1_000;
    let topo = Topology::new();
    topo.anyip("198.19.0.0/22");
    let _listener = topo.backend.tcp_listen("0.0.0.0:80");
    let pins = TestPins::new();
    let reqs = anyip_port80(N);
    let results = topo.prober.enter(|| {
        let (engine, mut rx) = probed_tests::l4::start_engine_with(&pins, TxChoice::Auto, |c| c.max_inflight = 64);
        engine.submit(reqs).unwrap();
        let results = collect(&mut rx, N as usize, Duration::from_secs(20));
        let snap = engine.snapshot().unwrap();
        assert_eq!(
            snap.tx.inflight_full, 0,
            "the kernel table never overflowed: {:?}",
            snap.tx
        );
        assert_eq!(snap.engine.backlog, 0);
        results
    });
    assert_eq!(results.len(), N as usize);
    assert!(results.iter().all(|r| r.outcome == L4Outcome::Open), "all open");
}

/// One TCP probe (2 s timeout) to port 80 of each of the first `n` addresses of 198.19.0.0/16.
fn anyip_port80(n: u32) -> Vec<L4Request> {
    (0..n)
        .map(|i| {
            let ip = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(198, 19, 0, 0)) + i);
            L4Request {
                token: u64::from(i),
                target: SocketAddr::new(ip.into(), 80),
                proto: L4Proto::Tcp,
                timeout: Duration::from_secs(2),
                tunnel: None,
            }
        })
        .collect()
}

#[test]
fn xdp_reflector_backend_answers_probes_without_the_backend_stack() {
    // The benchmark's stand-in for a remote fleet: prove it answers like a stack would, and
    // that the prober's RST is consumed by it.
    let topo = Topology::new();
    topo.anyip("198.19.0.0/22");
    let mut reflector = probed_tests::reflector::Reflector::attach(&topo.backend, BACKEND_IF);
    let pins = TestPins::new();
    let reqs = anyip_port80(500);
    let dark = std::net::Ipv4Addr::new(198, 19, 0, 7);
    let (results, later) = topo.prober.enter(|| {
        // At XDP whatever PROBED_HOOK says: the reflector's XDP_TX toward a prober veth that
        // runs no XDP program is dropped by veth (be0's xdp_tx_errors count them), so this
        // fixture only stands in for a fleet in front of the XDP hook.
        let (engine, mut rx) = start_engine_with(&pins, TxChoice::Auto, |c| c.hook = probed::kernel::Hook::Xdp);
        engine.submit(reqs).unwrap();
        let results = collect(&mut rx, 500, Duration::from_secs(10));
        let snap = engine.snapshot().unwrap();
        assert_eq!(snap.rx.rst_sent, 500, "{:?}", snap.rx);
        // A target the reflector keeps dark times out; the others still answer.
        reflector.set_dark(dark, true);
        let mut two = anyip_port80(8)[6..].to_vec();
        two.iter_mut().for_each(|r| r.timeout = Duration::from_millis(300));
        engine.submit(two).unwrap();
        (results, collect(&mut rx, 2, Duration::from_secs(5)))
    });
    assert_eq!(results.len(), 500);
    assert!(
        results.iter().all(|r| r.outcome == L4Outcome::Open),
        "no listener exists: only the reflector answers"
    );
    let outcome = |ip: std::net::Ipv4Addr| later.iter().find(|r| r.target.ip() == ip).map(|r| r.outcome);
    assert_eq!(outcome(dark), Some(L4Outcome::Timeout), "{later:?}");
    assert_eq!(outcome(std::net::Ipv4Addr::new(198, 19, 0, 6)), Some(L4Outcome::Open));
    assert_eq!(reflector.syns(), 501, "the SYNs it answered, the dark one not");
}

#[test]
fn the_daemons_object_holds_probe_rx_and_the_fixtures_object_the_test_programs() {
    // The reflector answers every SYN: it must never be loadable from what the daemon embeds.
    let names = |obj: &[u8]| -> Vec<String> {
        let ebpf = aya::Ebpf::load(obj).expect("load the eBPF object (root needed)");
        let mut names: Vec<String> = ebpf.programs().map(|(name, _)| name.to_string()).collect();
        names.sort();
        names
    };
    assert_eq!(
        names(probed::kernel::BPF_OBJECT),
        ["probe_fib_src", "probe_rx", "probe_rx_tc"]
    );
    assert_eq!(
        names(probed::kernel::FIXTURE_OBJECT),
        ["test_reflector", "test_slot_lb"]
    );
}

/// With no source address configured, the generator's route lookup picks the route's preferred
/// source, and a route change takes effect on the next probe, with no restart.
#[test]
fn generator_sends_from_the_routes_preferred_source_and_follows_route_changes() {
    const PORT: u16 = 8090;
    let topo = Topology::new();
    topo.anyip("198.19.7.0/24");
    topo.anyip("2001:2:0:7::/64");
    let _listener = topo.backend.tcp_listen(&format!("[::]:{PORT}"));
    let prober_mac = topo.prober.mac(PROBER_IF);
    for (v4, v6) in [("198.18.0.9", "2001:2::9")] {
        topo.prober.ip(&["addr", "add", &format!("{v4}/24"), "dev", PROBER_IF]);
        topo.prober
            .ip(&["-6", "addr", "add", &format!("{v6}/64"), "dev", PROBER_IF, "nodad"]);
        for a in [v4, v6] {
            topo.backend.static_neighbour(a, &prober_mac, BACKEND_IF);
        }
    }
    // One counter per source address: SYNs only (probe_rx's RSTs come from the same source).
    for (fam, src) in [
        ("ip", PROBER_V4),
        ("ip", "198.18.0.9"),
        ("ip6", PROBER_V6),
        ("ip6", "2001:2::9"),
    ] {
        topo.backend.nft_input_rule(&format!(
            "{fam} saddr {src} tcp dport {PORT} tcp flags & (syn | ack) == syn counter"
        ));
    }
    let syns_from = |src: &str| topo.backend.nft_rule_packets(&format!("saddr {src} "));
    let route = |src_v4: &str, src_v6: &str| {
        topo.prober.ip(&[
            "route",
            "replace",
            "198.19.7.0/24",
            "via",
            BACKEND_V4,
            "dev",
            PROBER_IF,
            "src",
            src_v4,
        ]);
        topo.prober.ip(&[
            "-6",
            "route",
            "replace",
            "2001:2:0:7::/64",
            "via",
            BACKEND_V6,
            "dev",
            PROBER_IF,
            "src",
            src_v6,
        ]);
    };
    let pins = TestPins::new();
    topo.prober.enter(|| {
        let (engine, mut rx) = start_engine(&pins, TxChoice::Auto);
        if probed_tests::l4::xdp_or_refused(&engine) == TxPath::Raw {
            // The raw path picks sources in userspace, cached per target: following a route
            // change at once is the generator's.
            eprintln!("note: the generator's source choice is not tested without it");
            return;
        }
        let mut round = |token: u64| {
            engine
                .submit(vec![
                    tcp(token, &format!("198.19.7.5:{PORT}"), 1000),
                    tcp(token + 1, &format!("[2001:2:0:7::5]:{PORT}"), 1000),
                ])
                .unwrap();
            let results = collect(&mut rx, 2, Duration::from_secs(3));
            assert_eq!(results.len(), 2, "{results:?}");
            for r in &results {
                assert_eq!(r.outcome, L4Outcome::Open, "{r:?}");
            }
        };
        route("198.18.0.9", "2001:2::9");
        round(1);
        assert_eq!(
            (syns_from("198.18.0.9"), syns_from("2001:2::9")),
            (1, 1),
            "the route's preferred sources"
        );
        assert_eq!((syns_from(PROBER_V4), syns_from(PROBER_V6)), (0, 0));
        route(PROBER_V4, PROBER_V6);
        round(3);
        assert_eq!(
            (syns_from(PROBER_V4), syns_from(PROBER_V6)),
            (1, 1),
            "the new route's sources, at once"
        );
        assert_eq!((syns_from("198.18.0.9"), syns_from("2001:2::9")), (1, 1));
    });
}

/// Targets routed out of a second interface: the generator, running on the first, redirects
/// their probes there when probe_rx is attached there too (to match the replies), and
/// refuses them (no route) when it is not.
#[test]
fn probes_routed_out_of_a_second_interface_are_matched_there() {
    const PORT: u16 = 8091;
    let topo = Topology::new();
    topo.second_link();
    topo.anyip("198.19.7.0/24");
    topo.backend
        .ip(&["route", "add", "local", "198.19.9.0/24", "dev", "lo"]);
    topo.prober
        .ip(&["route", "add", "198.19.9.0/24", "via", BACKEND2_V4, "dev", PROBER_IF2]);
    let _listener = topo.backend.tcp_listen(&format!("0.0.0.0:{PORT}"));
    for dev in [BACKEND_IF, BACKEND_IF2] {
        topo.backend.nft_input_rule(&format!(
            "iifname \"{dev}\" tcp dport {PORT} tcp flags & (syn | ack) == syn counter"
        ));
    }
    let syns_on = |dev: &str| topo.backend.nft_rule_packets(&format!("iifname \"{dev}\" "));
    let pins = TestPins::new();
    let round = |more: Vec<String>| {
        topo.prober.enter(|| {
            let (engine, mut rx) = start_engine_with(&pins, TxChoice::Auto, |c| c.more_ifaces = more);
            let path = probed_tests::l4::xdp_or_refused(&engine);
            engine
                .submit(vec![
                    tcp(1, &format!("198.19.7.5:{PORT}"), 500),
                    tcp(2, &format!("198.19.9.5:{PORT}"), 500),
                ])
                .unwrap();
            let mut results = collect(&mut rx, 2, Duration::from_secs(3));
            results.sort_by_key(|r| r.token);
            (path, results.into_iter().map(|r| r.outcome).collect::<Vec<_>>())
        })
    };
    if round(Vec::new()).0 == TxPath::Raw {
        // Without the generator there is no XDP redirect to refuse or to make: the stack
        // sends each probe by its route, and what this test is about cannot be seen here.
        eprintln!("note: probes routed out of a second interface: not tested without the XDP generator");
        return;
    }
    let round = |more| round(more).1;
    // The SYNs each round adds on each backend link (the round above that found the path
    // sent its own).
    let counted = || (syns_on(BACKEND_IF), syns_on(BACKEND_IF2));
    let added = |before: (u64, u64)| {
        let now = counted();
        (now.0 - before.0, now.1 - before.1)
    };
    // probe_rx on pr0 only: a probe routed out of pr1 could not have its reply matched, so
    // it is not sent and reports no route.
    let before = counted();
    assert_eq!(round(Vec::new()), [L4Outcome::Open, L4Outcome::NoRoute]);
    assert_eq!(added(before), (1, 0));
    // probe_rx on both: both open, each probe by its own link.
    let before = counted();
    assert_eq!(round(vec![PROBER_IF2.into()]), [L4Outcome::Open, L4Outcome::Open]);
    assert_eq!(added(before), (1, 1));
}

/// The probe interface disappearing under a running engine (a NIC unplugged, a veth of a
/// container removed): probe_rx can match nothing there any more, so the engine stops (the
/// daemon then exits for its service manager to restart it) instead of reporting failures
/// the backends did not cause; stopping it afterwards detaches cleanly.
#[test]
fn the_engine_stops_when_its_interface_is_deleted() {
    let topo = backend();
    let _listener = topo.backend.tcp_listen(&format!("{BACKEND_V4}:{OPEN}"));
    let pins = TestPins::new();
    let target = format!("{BACKEND_V4}:{OPEN}");
    topo.prober.enter(|| {
        let (engine, mut rx) = start_engine(&pins, TxChoice::Auto);
        engine.submit(vec![tcp(1, &target, 300)]).unwrap();
        let before = collect(&mut rx, 1, Duration::from_secs(2));
        assert_eq!(before.first().map(|r| r.outcome), Some(L4Outcome::Open));
        topo.prober.ip(&["link", "del", PROBER_IF]);
        // Probes asked for now get no result at all, neither a timeout nor "no route".
        let _ = engine.submit(vec![tcp(2, &target, 300), tcp(3, &target, 300)]);
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            match rx.try_recv() {
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => break,
                Ok(r) => panic!("a result after the interface went: {r:?}"),
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => {
                    assert!(Instant::now() < deadline, "the engine still runs without its interface");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        assert!(
            engine.submit(vec![tcp(4, &target, 300)]).is_err(),
            "a stopped engine refuses work"
        );
        drop(engine);
    });
    assert!(
        !pins.path.join("PROBE_INFLIGHT").exists(),
        "the pins went with the engine"
    );
}

/// `pkt` (an IPv6 packet) with `ext` inserted after its fixed header as header `kind`.
fn with_ext_header(pkt: &[u8], kind: u8, ext: &[u8]) -> Vec<u8> {
    let mut out = pkt[..40].to_vec();
    let payload_len = u16::from_be_bytes([out[4], out[5]]) + ext.len() as u16;
    out[4..6].copy_from_slice(&payload_len.to_be_bytes());
    out[6] = kind;
    out.extend_from_slice(ext);
    out.extend_from_slice(&pkt[40..]);
    out
}

/// Strict but not blind: a SYN+ACK with IPv4 options, or behind an IPv6 destination-options
/// header, is read past its options and matched (and answered with the RST); one behind an
/// IPv6 fragment header decides nothing, though it carries the right cookie.
#[test]
fn ip_options_and_extension_headers_are_read_past_ipv6_fragments_are_not() {
    use probe_common::packet::{TCP_ACK, TCP_SYN};
    use probed_tests::forge::{send_raw_v4, send_raw_v6};

    // A second silent port tells the two IPv6 probes apart.
    const DROPPED2: u16 = DROPPED + 10;
    let topo = backend();
    topo.backend.nft_drop("tcp", DROPPED2);
    let pins = TestPins::new();
    let v4 = format!("{BACKEND_V4}:{DROPPED}");
    let v6 = format!("[{BACKEND_V6}]:{DROPPED}");
    let v6b = format!("[{BACKEND_V6}]:{DROPPED2}");
    topo.prober.enter(|| {
        let (engine, mut rx) = start_engine(&pins, TxChoice::Auto);
        engine
            .submit(vec![tcp(1, &v4, 2000), tcp(2, &v6, 2000), tcp(3, &v6b, 2000)])
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut live = probed_tests::forge::inflight(&pins.path);
        while live.len() < 3 {
            assert!(Instant::now() < deadline, "three probes in flight: {live:?}");
            std::thread::sleep(Duration::from_millis(5));
            live = probed_tests::forge::inflight(&pins.path);
        }
        live.sort_by_key(|(k, _)| (k.family, k.dport));
        let (f4, e4) = live[0];
        let (f6a, e6a) = live[1];
        let (f6b, e6b) = live[2];
        let syn_ack = TCP_SYN | TCP_ACK;
        // IPv4: four bytes of options (three NOPs and an end of list), IHL 6.
        let plain = forged_reply(&f4, f4.sport, e4.cookie.wrapping_add(1), syn_ack);
        let mut opts = plain[..20].to_vec();
        opts.extend_from_slice(&[1, 1, 1, 0]);
        opts.extend_from_slice(&plain[20..]);
        opts[0] = 0x46;
        let total = opts.len() as u16;
        opts[2..4].copy_from_slice(&total.to_be_bytes());
        // IPv6: a destination-options header (PadN to 8 bytes) in front of TCP.
        let dstopts = with_ext_header(
            &forged_reply(&f6a, f6a.sport, e6a.cookie.wrapping_add(1), syn_ack),
            60,
            &[6, 0, 1, 4, 0, 0, 0, 0],
        );
        // IPv6: the first fragment (M set) of the same reply for the other probe.
        let fragment = with_ext_header(
            &forged_reply(&f6b, f6b.sport, e6b.cookie.wrapping_add(1), syn_ack),
            44,
            &[6, 0, 0, 1, 0x12, 0x34, 0x56, 0x78],
        );
        topo.backend.enter(|| {
            send_raw_v4(f4.saddr_v4().into(), &opts);
            send_raw_v6(f6a.saddr, &dstopts);
            send_raw_v6(f6b.saddr, &fragment);
        });
        let mut results = collect(&mut rx, 3, Duration::from_secs(4));
        results.sort_by_key(|r| r.token);
        let outcomes: Vec<_> = results.iter().map(|r| r.outcome).collect();
        assert_eq!(
            outcomes,
            [L4Outcome::Open, L4Outcome::Open, L4Outcome::Timeout],
            "IPv4 options and IPv6 destination options read past; an IPv6 fragment not"
        );
        let snap = engine.snapshot().unwrap();
        assert_eq!((snap.rx.matched_open, snap.rx.rst_sent), (2, 2), "{:?}", snap.rx);
    });
}

/// The generator's frames are told apart by metadata only this start's key can make: probe_rx
/// run (BPF_PROG_RUN, through bpftool) on a frame whose metadata is the fixed marker of older
/// releases, `probedTX` (what any local XDP program could have added), treats it as a wire
/// frame: the generator never runs for it.
#[test]
fn a_frame_with_a_guessable_marker_does_not_reach_the_generator() {
    let topo = backend();
    let pins = TestPins::new();
    let dir = std::env::temp_dir().join(probed_tests::unique_name("probed-marker-"));
    std::fs::create_dir_all(&dir).unwrap();
    topo.prober.enter(|| {
        let (engine, _rx) = start_engine(&pins, TxChoice::Auto);
        // probe_rx is the program that uses this engine's PROBE_TX_CTL map.
        let ctl = pins.path.join("PROBE_TX_CTL");
        let map: serde_json::Value = serde_json::from_str(&probed_tests::run(
            "bpftool",
            &["-j", "map", "show", "pinned", ctl.to_str().unwrap()],
        ))
        .unwrap();
        let map_id = map["id"].as_u64().unwrap();
        let progs: serde_json::Value =
            serde_json::from_str(&probed_tests::run("bpftool", &["-j", "prog", "show"])).unwrap();
        let prog = progs
            .as_array()
            .unwrap()
            .iter()
            .find(|p| {
                p["type"] == "xdp"
                    && p["map_ids"]
                        .as_array()
                        .is_some_and(|ids| ids.iter().any(|i| i.as_u64() == Some(map_id)))
            })
            .expect("probe_rx among the loaded programs");
        let id = prog["id"].as_u64().unwrap().to_string();
        // A frame (IPv4, nothing in particular) after eight bytes of metadata.
        let mut data = b"probedTX".to_vec();
        data.extend_from_slice(&[0xff; 6]);
        data.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x08, 0x00]);
        data.extend_from_slice(&[0x45, 0, 0, 20, 0, 0, 0x40, 0, 64, 6, 0, 0, 198, 18, 0, 2, 198, 18, 0, 1]);
        data.resize(8 + 60, 0);
        let name = std::ffi::CString::new(PROBER_IF).unwrap();
        // SAFETY: a NUL-terminated name; this thread is in the prober's namespace.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        assert_ne!(ifindex, 0, "{PROBER_IF} in the prober's namespace");
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
        // egress_ifindex; metadata is what lies between data_meta and data.
        let mut ctx = Vec::new();
        for v in [8u32, u32::try_from(data.len()).unwrap(), 0, ifindex, 0, 0] {
            ctx.extend_from_slice(&v.to_ne_bytes());
        }
        let (data_in, ctx_in) = (dir.join("data"), dir.join("ctx"));
        std::fs::write(&data_in, &data).unwrap();
        std::fs::write(&ctx_in, &ctx).unwrap();
        let before = engine.snapshot().unwrap().tx;
        let out = probed_tests::run(
            "bpftool",
            &[
                "prog",
                "run",
                "id",
                &id,
                "data_in",
                data_in.to_str().unwrap(),
                "ctx_in",
                ctx_in.to_str().unwrap(),
            ],
        );
        let after = engine.snapshot().unwrap().tx;
        assert!(out.contains("Return value"), "{out}");
        assert_eq!(
            (after.sent, after.no_job),
            (before.sent, before.no_job),
            "the generator ran for a frame marked by a guessable value: {out}"
        );
    });
    let _ = std::fs::remove_dir_all(&dir);
}
