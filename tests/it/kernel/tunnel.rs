//! Probes through the data path's own tunnel (issue 49): the generator wraps a SYN to the
//! service address (the VIP) in an outer header to one backend, the backend unwraps it and
//! answers from the VIP straight to the prober (direct return), and probe_rx matches the
//! answer to the backend that was probed although every backend answers from the same
//! address (each probe's source port is its own: the in-flight table is keyed by the whole
//! flow). Backends share one link with the prober (a bridge), each in a namespace of its own,
//! healthy or broken in one of the ways DSR backends break; the verdict of each is compared
//! with a reference client's: a socket whose route to the VIP goes through an encapsulating
//! device toward that backend (policy routing by mark), on the same prober namespace.
use std::{net::IpAddr, net::SocketAddr, time::Duration};

use probed::engine::{Encap, L4Outcome, L4Proto, L4Request, Tunnel, TxChoice, TxPath};
use probed_tests::{
    l4::{collect, start_engine, xdp_or_refused},
    tunnel::{
        backend_v4, backend_v6, dsr_rig, reference, reference_full, reference_http, Backend, DsrRig, Wrap, BACKENDS,
        CLIENT_MTU, GUE_PORT, PORT, TIMEOUT, VIP4, VIP6, WEB,
    },
    TestPins,
};

/// What a client sending through the tunnel meets (a socket tells an ICMP error by its errno
/// only), and what the probe says: (probe, reference), each open, refused, timeout or
/// unreachable. The verdicts are always equal; the one difference in kind is SPEC's: ICMPv6
/// "no route" (1/0) fails a socket at once, while a probe ends only on the codes that say the
/// target refuses (1/1, 1/4-6) and otherwise waits for its timeout.
fn expected(b: Backend, v6: bool, wrap: Wrap) -> (&'static str, &'static str) {
    match b {
        // A SYN (and an HTTP request) is small: it passes where full-size packets do not.
        Backend::Healthy | Backend::MtuTooSmall => ("open", "open"),
        Backend::ServiceOnOwnAddressOnly => ("refused", "refused"),
        Backend::RpFilterStrict if v6 => ("open", "open"),
        // IPv4 drops a packet for another host when it does not forward; IPv6 answers "no
        // route" (ICMPv6 1/0).
        Backend::VipMissing if v6 => ("timeout", "unreachable"),
        // Protocol unreachable (3/2) about the outer packet, read through it to the probe; a
        // client's socket is not told (its tunnel device is). IPv6's "unknown next header" is
        // a parameter problem, which ends no probe.
        // With GUE the backend says "port unreachable" about the outer UDP datagram, which
        // probe_rx does not read through (it would have to know every GUE port).
        Backend::NoTunnel if !v6 && wrap == Wrap::Ipip => ("unreachable", "timeout"),
        Backend::VipMissing | Backend::RpFilterStrict | Backend::TunnelDown | Backend::NoTunnel => {
            ("timeout", "timeout")
        }
    }
}

/// The class of a probe's outcome, as a socket's errno can tell it.
fn class(o: L4Outcome) -> &'static str {
    match o {
        L4Outcome::Open => "open",
        L4Outcome::Refused => "refused",
        L4Outcome::Timeout => "timeout",
        L4Outcome::Unreachable { .. } => "unreachable",
        _ => "other",
    }
}

#[test]
fn probes_through_the_tunnel_give_each_backend_the_verdict_a_tunnelled_client_gets() {
    verdicts(TxChoice::Auto);
}

/// The raw-socket path (a NIC that cannot transmit XDP frames) wraps the same probe itself.
#[test]
fn the_raw_socket_path_wraps_tunnelled_probes_the_same() {
    verdicts(TxChoice::Force(TxPath::Raw));
}

/// The encapsulation of a reference client's wrapping.
fn encap(wrap: Wrap) -> Encap {
    match wrap {
        Wrap::Ipip => Encap::Ipip,
        Wrap::Gue => Encap::Gue { port: GUE_PORT },
    }
}

const WRAPS: [Wrap; 2] = [Wrap::Ipip, Wrap::Gue];

/// The token of backend k's probe: wrapping w, family f (0 IPv4), tunnelled or plain.
fn token(k: usize, w: usize, f: usize, plain: bool) -> u64 {
    (((k * 2 + w) * 2 + f) * 2 + usize::from(plain)) as u64
}

/// Probes every backend through each tunnel and plainly, on transmit path `tx`, and compares
/// each verdict with the reference client's through the same tunnel.
fn verdicts(tx: TxChoice) {
    let rig = dsr_rig();
    let pins = TestPins::new();
    let vips: [IpAddr; 2] = [VIP4.parse().unwrap(), VIP6.parse().unwrap()];
    let mut reqs = Vec::new();
    for k in 0..BACKENDS.len() {
        for (w, wrap) in WRAPS.into_iter().enumerate() {
            for (f, vip) in vips.iter().enumerate() {
                let backend = if f == 0 { backend_v4(k) } else { backend_v6(k) };
                // Through the tunnel to the VIP, and, beside it, the plain check of the
                // backend's own address that today's checkers make.
                reqs.push(L4Request {
                    token: token(k, w, f, false),
                    target: SocketAddr::new(*vip, PORT),
                    proto: L4Proto::Tcp,
                    timeout: TIMEOUT,
                    tunnel: Some(Tunnel {
                        backend,
                        encap: encap(wrap),
                        mtu: 0,
                        source: None,
                    }),
                });
                reqs.push(L4Request {
                    token: token(k, w, f, true),
                    target: SocketAddr::new(backend, PORT),
                    proto: L4Proto::Tcp,
                    timeout: TIMEOUT,
                    tunnel: None,
                });
            }
        }
    }
    let results = rig.topo.prober.enter(|| {
        let (engine, mut rx) = start_engine(&pins, tx);
        let path = if tx == TxChoice::Auto {
            xdp_or_refused(&engine)
        } else {
            engine.tx_path()
        };
        engine.submit(reqs.clone()).unwrap();
        let results = collect(&mut rx, reqs.len(), Duration::from_secs(5));
        let snap = engine.snapshot().unwrap();
        eprintln!("transmit path {path:?}: {:?}", snap.tx);
        std::thread::sleep(Duration::from_millis(2500));
        (results, snap, engine.snapshot().unwrap().roads)
    });
    let (results, snap, roads_later) = (results.0, results.1, results.2);
    assert_eq!(results.len(), reqs.len(), "one result per probe: {results:?}");
    // probe_rx deleted the roads of the probes it answered; those that timed out wait out their
    // flow's rest in userspace's hands, then go too.
    let timed_out = results
        .iter()
        .filter(|r| {
            r.token % 2 == 0
                && !matches!(
                    r.outcome,
                    L4Outcome::Open | L4Outcome::Refused | L4Outcome::Unreachable { .. }
                )
        })
        .count();
    assert_eq!(snap.roads, timed_out, "roads held right after the round");
    assert_eq!(roads_later, 0, "roads left behind");
    assert_eq!(snap.rx.forged, 0, "{:?}", snap.rx);
    assert_eq!(snap.inflight, 0, "nothing left in flight");
    let mut table = String::new();
    let mut wrong = Vec::new();
    for (k, case) in BACKENDS.into_iter().enumerate() {
        for (w, wrap) in WRAPS.into_iter().enumerate() {
            for (f, vip) in vips.iter().enumerate() {
                let got = |plain| {
                    results
                        .iter()
                        .find(|r| r.token == token(k, w, f, plain))
                        .unwrap()
                        .outcome
                };
                let (tunnelled, plain) = (got(false), got(true));
                let oracle = reference(&rig, k, *vip, wrap);
                let want = expected(case, f == 1, wrap);
                table.push_str(&format!(
                    "  {:<24} {:<5} {:<13} tunnel {:<16} reference {:<12} plain check {plain}\n",
                    format!("{case:?}"),
                    format!("{wrap:?}"),
                    if f == 0 { backend_v4(k) } else { backend_v6(k) }.to_string(),
                    tunnelled.to_string(),
                    oracle,
                ));
                if (class(tunnelled), oracle) != want || tunnelled.healthy() != (oracle == "open") {
                    wrong.push(format!(
                        "{case:?} {wrap:?} family {f}: tunnel {tunnelled}, reference {oracle}, expected {want:?}"
                    ));
                }
                // The plain check sees none of it: the service answers on the backend's own
                // address.
                if plain != L4Outcome::Open {
                    wrong.push(format!("{case:?} family {f}: the plain check said {plain}"));
                }
            }
        }
    }
    eprintln!("verdicts through the tunnel:\n{table}");
    assert!(wrong.is_empty(), "{wrong:#?}\n{table}");
    // What probe_rx sent on the probes' flows took the tunnel too: the healthy backend got
    // the RST ending each of its four tunnelled probes through it (the reference client's
    // connections end with a FIN), and nothing reached a VIP by the link.
    let rsts = rig.wrapped_rsts(0);
    eprintln!("RSTs through the healthy backend's tunnel: {rsts}; rx {:?}", snap.rx);
    assert!(snap.rx.tunnel_sent >= 4, "{:?}", snap.rx);
    assert!(rsts >= 4, "RSTs through the tunnel: {rsts}");
    assert_eq!(rig.unwrapped_to_vip(), 0, "a segment reached a VIP unwrapped");
}

/// `tunnel_mtu`: a probe whose outer packet is as big as a full-size client packet wrapped
/// finds the backend whose link cannot carry one (its MTU the clients' own), which a SYN alone
/// passes; the verdict is the reference client's when it sends a full-size segment through
/// the same tunnel. The healthy backend passes both ways; on the raw-socket path too.
#[test]
fn full_size_probes_find_a_tunnel_path_too_small_for_full_size_client_packets() {
    let rig = dsr_rig();
    let pins = TestPins::new();
    let vips: [IpAddr; 2] = [VIP4.parse().unwrap(), VIP6.parse().unwrap()];
    let cases = [Backend::Healthy, Backend::MtuTooSmall];
    let index = |b: Backend| BACKENDS.iter().position(|x| *x == b).unwrap();
    let token = |c: usize, w: usize, f: usize, full: bool| (((c * 2 + w) * 2 + f) * 2 + usize::from(full)) as u64;
    let mut reqs = Vec::new();
    for (c, case) in cases.into_iter().enumerate() {
        let k = index(case);
        for (w, wrap) in WRAPS.into_iter().enumerate() {
            for (f, vip) in vips.iter().enumerate() {
                for full in [false, true] {
                    reqs.push(L4Request {
                        token: token(c, w, f, full),
                        target: SocketAddr::new(*vip, PORT),
                        proto: L4Proto::Tcp,
                        timeout: TIMEOUT,
                        tunnel: Some(Tunnel {
                            backend: if f == 0 { backend_v4(k) } else { backend_v6(k) },
                            encap: encap(wrap),
                            mtu: if full { CLIENT_MTU } else { 0 },
                            source: None,
                        }),
                    });
                }
            }
        }
    }
    for tx in [TxChoice::Auto, TxChoice::Force(TxPath::Raw)] {
        let results = run_probes(&rig, &pins, tx, &reqs);
        assert_eq!(results.len(), reqs.len(), "one result per probe: {results:?}");
        let mut table = String::new();
        let mut wrong = Vec::new();
        for (c, case) in cases.into_iter().enumerate() {
            let k = index(case);
            for (w, wrap) in WRAPS.into_iter().enumerate() {
                for (f, vip) in vips.iter().enumerate() {
                    let got = |full| {
                        results
                            .iter()
                            .find(|r| r.token == token(c, w, f, full))
                            .unwrap()
                            .outcome
                    };
                    let (small, full) = (class(got(false)), class(got(true)));
                    let (connect, segment) = (reference(&rig, k, *vip, wrap), reference_full(&rig, k, *vip, wrap));
                    table.push_str(&format!(
                        "  {:<12} {:<5} {:<13} SYN {small:<8} full-size {full:<8} client connects {connect:<8} full-size segment {segment}\n",
                        format!("{case:?}"),
                        format!("{wrap:?}"),
                        if f == 0 { backend_v4(k) } else { backend_v6(k) }.to_string(),
                    ));
                    let want_full = if case == Backend::Healthy { "open" } else { "timeout" };
                    if (small, connect) != ("open", "open") || (full, segment) != (want_full, want_full) {
                        wrong.push(format!("{case:?} {wrap:?} family {f}"));
                    }
                }
            }
        }
        eprintln!("{tx:?}: full-size probes through the tunnel:\n{table}");
        assert!(wrong.is_empty(), "{wrong:#?}\n{table}");
    }
}

/// `tunnel_source`: the outer header leaves from an address of the node's own choosing (the
/// load balancers' tunnel source, which backends may admit alone), while the probe inside keeps
/// the node's source, so the backend's direct answer comes back as before. Everything sent on
/// the flows (SYN, request, RST) leaves from it; XDP and the raw-socket path.
#[test]
fn a_tunnel_source_of_its_own_carries_every_segment() {
    let rig = dsr_rig();
    let pins = TestPins::new();
    let (src4, src6) = ("198.18.0.100", "2001:2::100");
    rig.topo.prober.ip(&[
        "addr",
        "add",
        &format!("{src4}/32"),
        "dev",
        probed_tests::topo::PROBER_IF,
    ]);
    rig.topo.prober.ip(&[
        "-6",
        "addr",
        "add",
        &format!("{src6}/128"),
        "dev",
        probed_tests::topo::PROBER_IF,
        "nodad",
    ]);
    // Neighbours both ways for the new addresses, as the rig does for its own.
    let (b4, b6) = (backend_v4(0).to_string(), backend_v6(0).to_string());
    rig.topo.prober.exec("ping", &["-c1", "-W1", "-I", src4, &b4]);
    rig.topo.prober.exec("ping", &["-6", "-c1", "-W1", "-I", src6, &b6]);
    let b0 = &rig.backends[0];
    b0.nft_input_rule(&format!("ip saddr {src4} counter"));
    b0.nft_input_rule(&format!("ip6 saddr {src6} counter"));
    let vips: [IpAddr; 2] = [VIP4.parse().unwrap(), VIP6.parse().unwrap()];
    let mut reqs = Vec::new();
    for (w, wrap) in WRAPS.into_iter().enumerate() {
        for (f, vip) in vips.iter().enumerate() {
            let tunnel = Some(Tunnel {
                backend: if f == 0 { backend_v4(0) } else { backend_v6(0) },
                encap: encap(wrap),
                mtu: 0,
                source: Some(if f == 0 { src4 } else { src6 }.parse().unwrap()),
            });
            let token = ((w * 2 + f) * 2) as u64;
            reqs.push(L4Request {
                token,
                target: SocketAddr::new(*vip, PORT),
                proto: L4Proto::Tcp,
                timeout: TIMEOUT,
                tunnel,
            });
            let web = SocketAddr::new(*vip, WEB);
            let request = format!("GET /health HTTP/1.1\r\nHost: {web}\r\nConnection: close\r\n\r\n");
            reqs.push(L4Request {
                token: token + 1,
                target: web,
                proto: L4Proto::Http {
                    request: std::sync::Arc::from(request.as_bytes()),
                },
                timeout: TIMEOUT,
                tunnel,
            });
        }
    }
    for tx in [TxChoice::Auto, TxChoice::Force(TxPath::Raw)] {
        let before = b0.nft_rule_packets(&format!("saddr {src4} ")) + b0.nft_rule_packets(&format!("saddr {src6} "));
        let results = run_probes(&rig, &pins, tx, &reqs);
        assert_eq!(results.len(), reqs.len(), "{tx:?}: one result per probe: {results:?}");
        for r in &results {
            let want = if r.token % 2 == 0 {
                L4Outcome::Open
            } else {
                L4Outcome::HttpStatus { status: 200 }
            };
            assert_eq!(r.outcome, want, "{tx:?}: probe {} of {}", r.token, r.target);
        }
        // Per TCP probe its SYN and RST, per HTTP probe its SYN, request and RST (and the RSTs
        // answering the backend's FIN): all from the tunnel source.
        std::thread::sleep(Duration::from_millis(100));
        let from_source =
            b0.nft_rule_packets(&format!("saddr {src4} ")) + b0.nft_rule_packets(&format!("saddr {src6} ")) - before;
        eprintln!("{tx:?}: {from_source} packets from the tunnel source");
        assert!(
            from_source >= 4 * 2 + 4 * 3,
            "{tx:?}: {from_source} packets from the tunnel source"
        );
    }
    assert_eq!(rig.unwrapped_to_vip(), 0, "a segment reached a VIP unwrapped");
}

/// Runs `reqs` on an engine in the prober's namespace on transmit path `tx` (XDP or refused
/// when it is `Auto`), and collects their results.
fn run_probes(rig: &DsrRig, pins: &TestPins, tx: TxChoice, reqs: &[L4Request]) -> Vec<probed::engine::L4Result> {
    rig.topo.prober.enter(|| {
        let (engine, mut rx) = start_engine(pins, tx);
        if tx == TxChoice::Auto {
            xdp_or_refused(&engine);
        }
        engine.submit(reqs.to_vec()).unwrap();
        collect(&mut rx, reqs.len(), Duration::from_secs(5))
    })
}

/// The class of an HTTP probe's outcome, as the reference client tells it.
fn http_class(o: L4Outcome) -> String {
    match o {
        L4Outcome::HttpStatus { status } => status.to_string(),
        L4Outcome::HttpResponseTimeout => "response timeout".into(),
        other => class(other).into(),
    }
}

/// HTTP checks through the tunnel, in the kernel: the generator wraps the SYN, probe_rx
/// answers the SYN+ACK (from the VIP) with the request wrapped the same way, reads the status
/// line of the response (from the VIP again) and ends the connection with a wrapped RST. The
/// status each backend gives equals the one a client through that backend's tunnel reads,
/// for a healthy path and a failing one; every backend reaches its VIP through the tunnel
/// only, so a request sent unwrapped would be lost (and counted).
#[test]
fn http_checks_through_the_tunnel_read_the_status_a_tunnelled_client_reads() {
    let rig = dsr_rig();
    let pins = TestPins::new();
    let vips: [IpAddr; 2] = [VIP4.parse().unwrap(), VIP6.parse().unwrap()];
    let paths = ["/health", "/down"];
    let token = |k: usize, w: usize, f: usize, p: usize| (((k * 2 + w) * 2 + f) * 2 + p) as u64;
    let mut reqs = Vec::new();
    for k in 0..BACKENDS.len() {
        for (w, wrap) in WRAPS.into_iter().enumerate() {
            for (f, vip) in vips.iter().enumerate() {
                for (p, path) in paths.iter().enumerate() {
                    let target = SocketAddr::new(*vip, WEB);
                    let request = format!("GET {path} HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n");
                    reqs.push(L4Request {
                        token: token(k, w, f, p),
                        target,
                        proto: L4Proto::Http {
                            request: std::sync::Arc::from(request.as_bytes()),
                        },
                        timeout: TIMEOUT,
                        tunnel: Some(Tunnel {
                            backend: if f == 0 { backend_v4(k) } else { backend_v6(k) },
                            encap: encap(wrap),
                            mtu: 0,
                            source: None,
                        }),
                    });
                }
            }
        }
    }
    let (results, snap, later) = rig.topo.prober.enter(|| {
        let (engine, mut rx) = start_engine(&pins, TxChoice::Auto);
        xdp_or_refused(&engine);
        engine.submit(reqs.clone()).unwrap();
        let results = collect(&mut rx, reqs.len(), Duration::from_secs(5));
        let snap = engine.snapshot().unwrap();
        // The roads go once their flows have rested (2 s).
        std::thread::sleep(Duration::from_millis(2500));
        (results, snap, engine.snapshot().unwrap())
    });
    assert!(snap.roads > 0, "HTTP probes' roads stay while their flows rest");
    assert_eq!(later.roads, 0, "roads left behind");
    assert_eq!(results.len(), reqs.len(), "one result per probe: {results:?}");
    assert_eq!(snap.rx.forged, 0, "{:?}", snap.rx);
    let mut table = String::new();
    let mut wrong = Vec::new();
    for (k, case) in BACKENDS.into_iter().enumerate() {
        for (w, wrap) in WRAPS.into_iter().enumerate() {
            for (f, vip) in vips.iter().enumerate() {
                for (p, path) in paths.iter().enumerate() {
                    let got = results.iter().find(|r| r.token == token(k, w, f, p)).unwrap().outcome;
                    let oracle = reference_http(&rig, k, *vip, wrap, path);
                    let (want_probe, want_oracle) = expected(case, f == 1, wrap);
                    // Where the connection stands, the status is the path's; otherwise the
                    // connection's failure, as in the TCP table.
                    let status = if p == 0 { "200" } else { "503" };
                    let want = |w: &str| if w == "open" { status.to_string() } else { w.to_string() };
                    table.push_str(&format!(
                        "  {:<24} {:<5} {:<13} {:<8} tunnel {:<18} reference {}\n",
                        format!("{case:?}"),
                        format!("{wrap:?}"),
                        if f == 0 { backend_v4(k) } else { backend_v6(k) }.to_string(),
                        path,
                        got.to_string(),
                        oracle,
                    ));
                    if (http_class(got), oracle.clone()) != (want(want_probe), want(want_oracle)) {
                        wrong.push(format!(
                            "{case:?} {wrap:?} family {f} {path}: tunnel {got}, reference {oracle}"
                        ));
                    }
                }
            }
        }
    }
    eprintln!("HTTP through the tunnel:\n{table}\nrx {:?}", snap.rx);
    assert!(wrong.is_empty(), "{wrong:#?}\n{table}");
    // Every request and RST went wrapped: the healthy backends answered (requests), and
    // nothing reached a VIP by the link.
    assert!(snap.rx.http_requests >= 12, "{:?}", snap.rx);
    assert!(snap.rx.tunnel_sent >= 2 * snap.rx.http_requests, "{:?}", snap.rx);
    assert_eq!(snap.rx.http_undecided, 0, "{:?}", snap.rx);
    assert_eq!(rig.unwrapped_to_vip(), 0, "a segment reached a VIP unwrapped");
}

/// The node forwards client flows into the same tunnel while it probes (the load balancer's
/// own job, done here by the reference client's encapsulating device): clients on the probe
/// source-port range, IPv4 and IPv6, connect to the VIP through backend 0, and the backend's
/// answers come back through the node. Every connection gets through with the engine probing
/// the fleet through its tunnels as it does without the engine, and the engine's verdicts stay
/// right: probe_rx leaves every packet that is not its probes' to the node.
#[test]
fn client_flows_the_node_forwards_into_the_tunnel_are_untouched_while_it_probes() {
    let rig = dsr_rig();
    let client = rig.topo.client();
    client.sysctl("net.ipv4.ip_local_port_range", "61000 65095");
    let b0 = &rig.backends[0];
    b0.ip(&["route", "add", "198.18.200.0/24", "via", "198.18.0.1"]);
    b0.ip(&["-6", "route", "add", "2001:2:200::/64", "via", "2001:2::1"]);
    // The node sends client flows for the VIPs into backend 0's IP-in-IP tunnel.
    rig.topo
        .prober
        .ip(&["route", "add", &format!("{VIP4}/32"), "dev", "rt0"]);
    rig.topo
        .prober
        .ip(&["-6", "route", "add", &format!("{VIP6}/128"), "dev", "rt0"]);
    let connects = |n: usize| {
        client.enter(|| {
            (0..n)
                .filter(|i| {
                    // Spread over a few probe rounds.
                    std::thread::sleep(Duration::from_millis(25));
                    let vip: IpAddr = if i % 2 == 0 {
                        VIP4.parse().unwrap()
                    } else {
                        VIP6.parse().unwrap()
                    };
                    std::net::TcpStream::connect_timeout(&SocketAddr::new(vip, PORT), Duration::from_secs(1)).is_ok()
                })
                .count()
        })
    };
    // Nothing accepts on the backends: both runs' connections stay in one accept queue, whose
    // default length (128) bounds them.
    const N: usize = 60;
    let without = connects(N);
    assert_eq!(
        without, N,
        "the clients' way through the tunnel works without the engine"
    );

    let pins = TestPins::new();
    let probes: Vec<L4Request> = (0..BACKENDS.len())
        .flat_map(|k| {
            [(VIP4, backend_v4(k)), (VIP6, backend_v6(k))].map(|(vip, backend)| L4Request {
                token: k as u64 * 2 + u64::from(backend.is_ipv6()),
                target: SocketAddr::new(vip.parse().unwrap(), PORT),
                proto: L4Proto::Tcp,
                timeout: TIMEOUT,
                tunnel: Some(Tunnel {
                    backend,
                    encap: Encap::Ipip,
                    mtu: 0,
                    source: None,
                }),
            })
        })
        .collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (with, rounds, snap) = std::thread::scope(|s| {
        let prober = s.spawn(|| {
            rig.topo.prober.enter(|| {
                let (engine, mut rx) = start_engine(&pins, TxChoice::Auto);
                let mut rounds = Vec::new();
                // Bounded: the clients take a few seconds at most.
                for _ in 0..40 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) && !rounds.is_empty() {
                        break;
                    }
                    engine.submit(probes.clone()).unwrap();
                    rounds.push(collect(&mut rx, probes.len(), Duration::from_secs(3)));
                }
                (rounds, engine.snapshot().unwrap())
            })
        });
        let with = connects(N);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (rounds, snap) = prober.join().unwrap();
        (with, rounds, snap)
    });
    assert_eq!(with, without, "client connections with the engine probing");
    assert!(!rounds.is_empty());
    for round in &rounds {
        assert_eq!(round.len(), probes.len(), "{round:?}");
        for r in round {
            let k = (r.token / 2) as usize;
            let want = expected(BACKENDS[k], r.token % 2 == 1, Wrap::Ipip).0;
            assert_eq!(class(r.outcome), want, "{:?} {}: {}", BACKENDS[k], r.target, r.outcome);
        }
    }
    assert_eq!(snap.rx.forged, 0, "{:?}", snap.rx);
    eprintln!(
        "{} probe rounds while {with} client connections went through; rx {:?}",
        rounds.len(),
        snap.rx
    );
}

/// Backends behind one VIP share its flows, so probes in flight to one VIP and port share the
/// source-port range: when every port a probe tries is taken, it says so as a local error (no
/// verdict on the backend), never as "no route". Two ports, six probes to backends that never
/// answer (the VIP missing): two go out and time out, four find no port.
#[test]
fn probes_that_find_no_free_source_port_give_no_verdict() {
    let rig = dsr_rig();
    let pins = TestPins::new();
    let vip: IpAddr = VIP4.parse().unwrap();
    let k = BACKENDS.iter().position(|b| *b == Backend::VipMissing).unwrap();
    let reqs: Vec<L4Request> = (0..6)
        .map(|token| L4Request {
            token,
            target: SocketAddr::new(vip, PORT),
            proto: L4Proto::Tcp,
            timeout: TIMEOUT,
            tunnel: Some(Tunnel {
                backend: backend_v4(k),
                encap: Encap::Ipip,
                mtu: 0,
                source: None,
            }),
        })
        .collect();
    let results = rig.topo.prober.enter(|| {
        let (engine, mut rx) = probed_tests::l4::start_engine_with(&pins, TxChoice::Auto, |c| {
            (c.sport_min, c.sport_max) = (61000, 61001);
        });
        engine.submit(reqs.clone()).unwrap();
        collect(&mut rx, reqs.len(), Duration::from_secs(3))
    });
    let count = |o: L4Outcome| results.iter().filter(|r| r.outcome == o).count();
    let no_port = L4Outcome::LocalError {
        errno: libc::EADDRNOTAVAIL,
    };
    assert_eq!((count(L4Outcome::Timeout), count(no_port)), (2, 4), "{results:?}");
}
