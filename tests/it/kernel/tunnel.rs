//! Probes through the data path's own tunnel (issue 49): the generator wraps a SYN to the
//! service address (the VIP) in an outer header to one backend, the backend unwraps it and
//! answers from the VIP straight to the prober (direct return), and probe_rx matches the
//! answer to the backend that was probed although every backend answers from the same
//! address (each probe's source port is its own: the in-flight table is keyed by the whole
//! flow). Backends share one link with the prober (a bridge), each in a namespace of its own,
//! healthy or broken in one of the ways DSR backends break; the verdict of each is compared
//! with a reference client's: a socket whose route to the VIP goes through an encapsulating
//! device toward that backend (policy routing by mark), on the same prober namespace.
use std::{
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use probed::engine::{L4Outcome, L4Proto, L4Request, Tunnel, TxChoice, TxPath};
use probed_tests::{
    l4::{collect, start_engine, xdp_or_refused},
    topo::*,
    tunnel::{decap, encap, TunnelEnd},
    Netns, TestPins, Topology,
};

const VIP4: &str = "198.18.40.1";
const VIP6: &str = "2001:2:40::1";
const PORT: u16 = 8080;
const TIMEOUT: Duration = Duration::from_millis(600);

/// How a backend is set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    /// The VIP on lo, the service listening on it, the tunnel device up.
    Healthy,
    /// Nothing listens on the VIP (the service only on the backend's own address).
    ServiceOnOwnAddressOnly,
    /// The VIP is not on lo: the unwrapped packet is for nobody here.
    VipMissing,
    /// Strict reverse-path filtering on the tunnel device: the prober is reached by the
    /// link, not by the tunnel, so IPv4 drops the unwrapped packet (IPv6 has no rp_filter).
    RpFilterStrict,
    /// The tunnel device is down.
    TunnelDown,
}

const BACKENDS: [Backend; 5] = [
    Backend::Healthy,
    Backend::ServiceOnOwnAddressOnly,
    Backend::VipMissing,
    Backend::RpFilterStrict,
    Backend::TunnelDown,
];

fn backend_v4(k: usize) -> IpAddr {
    format!("198.18.0.{}", 10 + k).parse().unwrap()
}

fn backend_v6(k: usize) -> IpAddr {
    format!("2001:2::{}", 10 + k).parse().unwrap()
}

/// What a client sending through the tunnel meets (a socket tells an ICMP error by its errno
/// only), and what the probe says: (probe, reference), each open, refused, timeout or
/// unreachable. The verdicts are always equal; the one difference in kind is SPEC's: ICMPv6
/// "no route" (1/0) fails a socket at once, while a probe ends only on the codes that say the
/// target refuses (1/1, 1/4-6) and otherwise waits for its timeout.
fn expected(b: Backend, v6: bool) -> (&'static str, &'static str) {
    match b {
        Backend::Healthy => ("open", "open"),
        Backend::ServiceOnOwnAddressOnly => ("refused", "refused"),
        Backend::RpFilterStrict if v6 => ("open", "open"),
        // IPv4 drops a packet for another host when it does not forward; IPv6 answers "no
        // route" (ICMPv6 1/0).
        Backend::VipMissing if v6 => ("timeout", "unreachable"),
        Backend::VipMissing | Backend::RpFilterStrict | Backend::TunnelDown => ("timeout", "timeout"),
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

struct Rig {
    topo: Topology,
    _backends: Vec<Netns>,
    _ends: Vec<TunnelEnd>,
    _listeners: Vec<std::net::TcpListener>,
}

/// The prober's link becomes a switch (a bridge in the old backend namespace) with one backend
/// namespace per case on it; each backend unwraps IP-in-IP into its device `tun0`. The prober
/// gets an encapsulating device `rt<k>` per backend and a routing table per mark k+1 that
/// sends the VIPs into it.
fn rig() -> Rig {
    let topo = Topology::new();
    let switch = &topo.backend;
    switch.ip(&["link", "add", "br0", "type", "bridge"]);
    switch.ip(&["link", "set", BACKEND_IF, "master", "br0"]);
    switch.ip(&["link", "set", "br0", "up"]);
    for key in ["all", "default", PROBER_IF] {
        topo.prober.sysctl(&format!("net.ipv4.conf.{key}.rp_filter"), "0");
    }
    let mut backends = Vec::new();
    let mut ends = Vec::new();
    let mut listeners = Vec::new();
    for (k, case) in BACKENDS.into_iter().enumerate() {
        let b = Netns::new("pdt");
        let port = format!("sw{k}");
        probed_tests::run(
            "ip",
            &[
                "link",
                "add",
                &port,
                "netns",
                &switch.name,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                &b.name,
            ],
        );
        switch.ip(&["link", "set", &port, "master", "br0"]);
        switch.ip(&["link", "set", &port, "up"]);
        b.ip(&["addr", "add", &format!("{}/24", backend_v4(k)), "dev", "eth0"]);
        b.ip(&[
            "-6",
            "addr",
            "add",
            &format!("{}/64", backend_v6(k)),
            "dev",
            "eth0",
            "nodad",
        ]);
        b.ip(&["link", "set", "eth0", "up"]);
        ends.push(decap(&b, "tun0"));
        let strict = if case == Backend::RpFilterStrict { "1" } else { "0" };
        for key in ["all", "tun0"] {
            b.sysctl(&format!("net.ipv4.conf.{key}.rp_filter"), strict);
        }
        if case == Backend::TunnelDown {
            b.ip(&["link", "set", "tun0", "down"]);
        }
        if case != Backend::VipMissing {
            b.ip(&["addr", "add", &format!("{VIP4}/32"), "dev", "lo"]);
            b.ip(&["-6", "addr", "add", &format!("{VIP6}/128"), "dev", "lo", "nodad"]);
        }
        if case == Backend::ServiceOnOwnAddressOnly {
            listeners.push(b.tcp_listen(&format!("{}:{PORT}", backend_v4(k))));
            listeners.push(b.tcp_listen(&format!("[{}]:{PORT}", backend_v6(k))));
        } else {
            // Both families, any local address.
            listeners.push(b.tcp_listen(&format!("[::]:{PORT}")));
        }
        // The reference client's way to this backend.
        let dev = format!("rt{k}");
        ends.push(encap(&topo.prober, &dev, backend_v4(k), backend_v6(k)));
        let (mark, table) = ((k + 1).to_string(), (100 + k).to_string());
        for fam in ["-4", "-6"] {
            topo.prober.ip(&[fam, "rule", "add", "fwmark", &mark, "table", &table]);
        }
        topo.prober.ip(&[
            "route",
            "add",
            &format!("{VIP4}/32"),
            "dev",
            &dev,
            "src",
            PROBER_V4,
            "table",
            &table,
        ]);
        topo.prober.ip(&[
            "-6",
            "route",
            "add",
            &format!("{VIP6}/128"),
            "dev",
            &dev,
            "src",
            PROBER_V6,
            "table",
            &table,
        ]);
        // Neighbours both ways before the first probe (the generator would hand a probe to an
        // unresolved neighbour to the stack).
        topo.prober.exec("ping", &["-c1", "-W1", &backend_v4(k).to_string()]);
        topo.prober
            .exec("ping", &["-6", "-c1", "-W1", &backend_v6(k).to_string()]);
        backends.push(b);
    }
    Rig {
        topo,
        _backends: backends,
        _ends: ends,
        _listeners: listeners,
    }
}

/// The reference client's verdict: a TCP connect to the VIP through backend k's tunnel.
fn reference(rig: &Rig, k: usize, vip: IpAddr) -> &'static str {
    rig.topo.prober.enter(|| {
        let target = SocketAddr::new(vip, PORT);
        let s = socket2::Socket::new(socket2::Domain::for_address(target), socket2::Type::STREAM, None).unwrap();
        s.set_mark(k as u32 + 1).unwrap();
        match s.connect_timeout(&target.into(), TIMEOUT) {
            Ok(()) => "open",
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => "refused",
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut || e.kind() == std::io::ErrorKind::WouldBlock => {
                "timeout"
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENETUNREACH | libc::EHOSTUNREACH | libc::EACCES)
                ) =>
            {
                "unreachable"
            }
            Err(e) => panic!("reference connect to {target} through rt{k}: {e}"),
        }
    })
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

/// Probes every backend through the tunnel and plainly, on transmit path `tx`, and compares
/// each verdict with the reference client's.
fn verdicts(tx: TxChoice) {
    let rig = rig();
    let pins = TestPins::new();
    let vips: [IpAddr; 2] = [VIP4.parse().unwrap(), VIP6.parse().unwrap()];
    let mut reqs = Vec::new();
    for k in 0..BACKENDS.len() {
        for (f, vip) in vips.iter().enumerate() {
            let backend = if f == 0 { backend_v4(k) } else { backend_v6(k) };
            // Through the tunnel to the VIP, and, beside it, the plain check of the backend's own
            // address that today's checkers make.
            reqs.push(L4Request {
                token: (k * 4 + f) as u64,
                target: SocketAddr::new(*vip, PORT),
                proto: L4Proto::Tcp,
                timeout: TIMEOUT,
                tunnel: Some(Tunnel { backend }),
            });
            reqs.push(L4Request {
                token: (k * 4 + 2 + f) as u64,
                target: SocketAddr::new(backend, PORT),
                proto: L4Proto::Tcp,
                timeout: TIMEOUT,
                tunnel: None,
            });
        }
    }
    let (results, snap) = rig.topo.prober.enter(|| {
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
        (results, snap)
    });
    assert_eq!(results.len(), reqs.len(), "one result per probe: {results:?}");
    assert_eq!((snap.rx.forged, snap.rx.stale), (0, 0), "{:?}", snap.rx);
    assert_eq!(snap.inflight, 0, "nothing left in flight");
    let mut table = String::new();
    let mut wrong = Vec::new();
    for (k, case) in BACKENDS.into_iter().enumerate() {
        for (f, vip) in vips.iter().enumerate() {
            let got = |token: usize| results.iter().find(|r| r.token == token as u64).unwrap().outcome;
            let (tunnelled, plain) = (got(k * 4 + f), got(k * 4 + 2 + f));
            let oracle = reference(&rig, k, *vip);
            let want = expected(case, f == 1);
            table.push_str(&format!(
                "  {:<24} {:<13} tunnel {:<9} reference {:<12} plain check {plain}\n",
                format!("{case:?}"),
                if f == 0 { backend_v4(k) } else { backend_v6(k) }.to_string(),
                tunnelled.to_string(),
                oracle,
            ));
            if (class(tunnelled), oracle) != want || tunnelled.healthy() != (oracle == "open") {
                wrong.push(format!(
                    "{case:?} family {f}: tunnel {tunnelled}, reference {oracle}, expected {want:?}"
                ));
            }
            // The plain check sees none of it: the service answers on the backend's own address.
            if plain != L4Outcome::Open {
                wrong.push(format!("{case:?} family {f}: the plain check said {plain}"));
            }
        }
    }
    eprintln!("verdicts through the tunnel:\n{table}");
    assert!(wrong.is_empty(), "{wrong:#?}\n{table}");
}
