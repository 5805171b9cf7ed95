//! IP-in-IP for tests, in userspace: this machine's kernel is built without the ipip,
//! ip6_tunnel, fou and GRE drivers, so neither a backend's decapsulating device nor a
//! reference client's encapsulating one can be the kernel's own. Each end here is a TUN
//! device and a raw socket of protocol 4 (IPv4 in IPv4) or 41 (IPv6 in IPv6), pumped by a
//! thread: what the kernel's tunnel devices do with the packets, done in the test process.
//!
//! What the kernel still does itself is everything around it: an unwrapped packet enters the
//! backend's stack through its own device (`dev`), so the service address must be local, the
//! device up and its reverse path valid (rp_filter) for it to be taken, exactly as with an ipip
//! device; the wrapped one leaves by the namespace's routes.
use std::{
    fs::File,
    io::{Read, Write},
    net::{IpAddr, SocketAddr},
    os::fd::AsRawFd,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread::JoinHandle,
    time::Duration,
};

use probed::kernel::tun::Tun;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::{
    topo::{BACKEND_IF, PROBER_IF, PROBER_V4, PROBER_V6},
    Netns, Topology,
};

/// Protocol numbers of the inner packet in the outer header.
const IPPROTO_IPIP: i32 = 4;
const IPPROTO_IPV6: i32 = 41;
/// How long a pump waits for a packet before it looks at its stop flag.
const TICK: Duration = Duration::from_millis(50);

/// One tunnel end: its device and the threads pumping it; both go on drop.
pub struct TunnelEnd {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    _tun: Tun,
}

impl Drop for TunnelEnd {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn raw_socket(v6: bool) -> Socket {
    let (domain, proto) = if v6 {
        (Domain::IPV6, IPPROTO_IPV6)
    } else {
        (Domain::IPV4, IPPROTO_IPIP)
    };
    let s = Socket::new(domain, Type::RAW, Some(Protocol::from(proto))).expect("raw tunnel socket");
    s.set_read_timeout(Some(TICK)).expect("read timeout");
    s
}

/// The backend's end: IPv4-in-IPv4 and IPv6-in-IPv6 packets addressed to `ns`, and UDP
/// datagrams to its port `GUE_PORT` (GUE variant 1: the inner packet right after the UDP
/// header), come out of its device `dev` (made here, up) as their inner packets. While a socket
/// of the protocol is open the kernel answers no such packet with "protocol unreachable"; it
/// drops those it cannot hand to `dev` (the device down) as a tunnel device's receive path does.
pub fn decap(ns: &Netns, dev: &str) -> TunnelEnd {
    let (tun, socks) = ns.enter(|| {
        let tun = Tun::create(dev).unwrap_or_else(|e| panic!("create {dev}: {e}"));
        let gue = Socket::new(Domain::IPV6, Type::DGRAM, None).expect("UDP socket");
        gue.set_only_v6(false).expect("dual-stack");
        gue.bind(&SockAddr::from(SocketAddr::new(
            std::net::Ipv6Addr::UNSPECIFIED.into(),
            GUE_PORT,
        )))
        .expect("bind the GUE port");
        gue.set_read_timeout(Some(TICK)).expect("read timeout");
        (tun, [raw_socket(false), raw_socket(true), gue])
    });
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (i, sock) in socks.into_iter().enumerate() {
        let mut out = device_file(&tun);
        let stop = stop.clone();
        threads.push(std::thread::spawn(move || {
            let mut sock = sock;
            let mut buf = vec![0u8; 65536];
            while !stop.load(Ordering::Relaxed) {
                let Ok(n) = sock.read(&mut buf) else { continue };
                // An IPv4 raw socket reads the outer header too; an IPv6 one, and a UDP one,
                // only what follows it.
                let start = if i == 0 { usize::from(buf[0] & 0x0f) * 4 } else { 0 };
                if n > start {
                    // A device that is down refuses the write: the packet is lost, as it is to a
                    // tunnel device that is down.
                    let _ = out.write(&buf[start..n]);
                }
            }
        }));
    }
    TunnelEnd {
        stop,
        threads,
        _tun: tun,
    }
}

/// The UDP port the backends' GUE decapsulation listens on (katran's).
pub const GUE_PORT: u16 = 6080;

/// How a client's tunnel wraps its packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wrap {
    /// IPv4 in IPv4, IPv6 in IPv6.
    Ipip,
    /// In UDP to the backend's `GUE_PORT`.
    Gue,
}

/// The client's end: what `ns` routes into its device `dev` (made here, up) leaves wrapped
/// (`wrap`) toward `backend_v4` or `backend_v6`, by the packet's own family.
pub fn encap(ns: &Netns, dev: &str, (backend_v4, backend_v6): (IpAddr, IpAddr), wrap: Wrap) -> TunnelEnd {
    let (tun, v4, v6) = ns.enter(|| {
        let tun = Tun::create(dev).unwrap_or_else(|e| panic!("create {dev}: {e}"));
        let socks = match wrap {
            Wrap::Ipip => (raw_socket(false), raw_socket(true)),
            Wrap::Gue => (
                Socket::new(Domain::IPV4, Type::DGRAM, None).expect("UDP socket"),
                Socket::new(Domain::IPV6, Type::DGRAM, None).expect("UDP socket"),
            ),
        };
        (tun, socks.0, socks.1)
    });
    let port = if wrap == Wrap::Gue { GUE_PORT } else { 0 };
    let stop = Arc::new(AtomicBool::new(false));
    let mut input = device_file(&tun);
    let stop2 = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        let (to4, to6) = (
            SockAddr::from(SocketAddr::new(backend_v4, port)),
            SockAddr::from(SocketAddr::new(backend_v6, port)),
        );
        while !stop2.load(Ordering::Relaxed) {
            if !readable(&input) {
                continue;
            }
            let Ok(n) = input.read(&mut buf) else { continue };
            let _ = match buf.first().map(|b| b >> 4) {
                Some(4) => v4.send_to(&buf[..n], &to4),
                Some(6) => v6.send_to(&buf[..n], &to6),
                _ => continue,
            };
        }
    });
    TunnelEnd {
        stop,
        threads: vec![thread],
        _tun: tun,
    }
}

/// The device's packets, read and written through a descriptor of its own.
fn device_file(tun: &Tun) -> File {
    File::from(tun.fd().try_clone_to_owned().expect("dup the TUN descriptor"))
}

/// Whether `f` has a packet within one tick.
fn readable(f: &File) -> bool {
    let mut p = libc::pollfd {
        fd: f.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, for the length given.
    let rc = unsafe { libc::poll(&raw mut p, 1, TICK.as_millis() as i32) };
    rc > 0 && p.revents & libc::POLLIN != 0
}

pub const VIP4: &str = "198.18.40.1";
pub const VIP6: &str = "2001:2:40::1";
pub const PORT: u16 = 8080;
/// The backends' HTTP service (hyper): `/health` answers 200, `/down` 503.
pub const WEB: u16 = 8090;
/// The backends' UDP service: answers every datagram with `pong ` and the datagram. Bound to
/// the VIP (a UDP service behind direct return must answer from it), or, on the backend that
/// serves its own address only or has no VIP, to its own addresses.
pub const UDP_PORT: u16 = 5300;
pub const TIMEOUT: Duration = Duration::from_millis(600);

/// How a direct-return backend is set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
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
    /// No decapsulation at all: the kernel answers the outer packet "protocol unreachable"
    /// (IPv4) or "unknown next header" (IPv6), quoting it.
    NoTunnel,
    /// Healthy, but its link's MTU is the clients' (1500) while the rest of the path carries
    /// more: a full-size client packet wrapped for the tunnel does not fit, and is dropped
    /// where it arrives. A handshake's small segments pass.
    MtuTooSmall,
}

pub const BACKENDS: [Backend; 7] = [
    Backend::Healthy,
    Backend::ServiceOnOwnAddressOnly,
    Backend::VipMissing,
    Backend::RpFilterStrict,
    Backend::TunnelDown,
    Backend::NoTunnel,
    Backend::MtuTooSmall,
];

/// The MTU of the prober's link and of every backend's but `MtuTooSmall`'s: room for a
/// full-size client packet (`CLIENT_MTU`) and the outer headers.
pub const LINK_MTU: u32 = 2000;
/// The clients' MTU: the reference client's tunnel devices have it, and a full-size probe
/// (`tunnel_mtu`) is made to carry as much.
pub const CLIENT_MTU: u16 = 1500;

pub fn backend_v4(k: usize) -> IpAddr {
    format!("198.18.0.{}", 10 + k).parse().unwrap()
}

pub fn backend_v6(k: usize) -> IpAddr {
    format!("2001:2::{}", 10 + k).parse().unwrap()
}

/// Backends behind one VIP on the prober's link, one namespace per `BACKENDS` case, and the
/// reference client's way to each.
pub struct DsrRig {
    pub topo: Topology,
    pub backends: Vec<Netns>,
    _ends: Vec<TunnelEnd>,
    _listeners: Vec<std::net::TcpListener>,
    _web: Vec<crate::http_server::HttpServer>,
    _udp: Vec<crate::servers::Responder>,
}

/// The prober's link becomes a switch (a bridge in the old backend namespace) with one backend
/// namespace per case on it; each backend unwraps IP-in-IP and GUE into its device `tun0`. The
/// prober gets two encapsulating devices per backend, `rt<k>` (IP-in-IP) and `rg<k>` (GUE),
/// and a routing table per mark that sends the VIPs into each.
pub fn dsr_rig() -> DsrRig {
    let topo = Topology::new();
    let switch = &topo.backend;
    let link_mtu = LINK_MTU.to_string();
    topo.prober.ip(&["link", "set", PROBER_IF, "mtu", &link_mtu]);
    switch.ip(&["link", "set", BACKEND_IF, "mtu", &link_mtu]);
    switch.ip(&["link", "add", "br0", "mtu", &link_mtu, "type", "bridge"]);
    switch.ip(&["link", "set", BACKEND_IF, "master", "br0"]);
    switch.ip(&["link", "set", "br0", "up"]);
    for key in ["all", "default", PROBER_IF] {
        topo.prober.sysctl(&format!("net.ipv4.conf.{key}.rp_filter"), "0");
    }
    let mut backends = Vec::new();
    let mut ends = Vec::new();
    let mut listeners = Vec::new();
    let mut web = Vec::new();
    let mut udp = Vec::new();
    for (k, case) in BACKENDS.into_iter().enumerate() {
        let b = Netns::new("pdt");
        let port = format!("sw{k}");
        crate::run(
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
        switch.ip(&["link", "set", &port, "mtu", &link_mtu]);
        switch.ip(&["link", "set", &port, "master", "br0"]);
        switch.ip(&["link", "set", &port, "up"]);
        let mtu = if case == Backend::MtuTooSmall {
            CLIENT_MTU.to_string()
        } else {
            link_mtu.clone()
        };
        b.ip(&["link", "set", "eth0", "mtu", &mtu]);
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
        if case != Backend::NoTunnel {
            ends.push(decap(&b, "tun0"));
            let strict = if case == Backend::RpFilterStrict { "1" } else { "0" };
            for key in ["all", "tun0"] {
                b.sysctl(&format!("net.ipv4.conf.{key}.rp_filter"), strict);
            }
        }
        if case == Backend::TunnelDown {
            b.ip(&["link", "set", "tun0", "down"]);
        }
        if case != Backend::VipMissing {
            b.ip(&["addr", "add", &format!("{VIP4}/32"), "dev", "lo"]);
            b.ip(&["-6", "addr", "add", &format!("{VIP6}/128"), "dev", "lo", "nodad"]);
            // The VIP is reached through the tunnel only, as behind a real load balancer
            // (the network routes the VIP to the load balancers, not to the backends): what
            // reaches it by the link is dropped and counted, so a segment sent to the VIP
            // unwrapped cannot pass for one that took the tunnel.
            b.nft_input_rule(&format!("iifname \"eth0\" ip daddr {VIP4} counter drop"));
            b.nft_input_rule(&format!("iifname \"eth0\" ip6 daddr {VIP6} counter drop"));
        }
        b.nft_input_rule(&format!("iifname \"{TUN}\" tcp flags & rst == rst counter"));
        let binds = if case == Backend::ServiceOnOwnAddressOnly {
            vec![format!("{}", backend_v4(k)), format!("[{}]", backend_v6(k))]
        } else {
            // Both families, any local address.
            vec!["[::]".to_string()]
        };
        for at in binds {
            listeners.push(b.tcp_listen(&format!("{at}:{PORT}")));
            let server = b.http_server(&format!("{at}:{WEB}"));
            server.route("/health", crate::http_server::Route::status(200));
            server.route("/down", crate::http_server::Route::status(503));
            web.push(server);
        }
        let udp_at = match case {
            Backend::ServiceOnOwnAddressOnly | Backend::VipMissing => {
                [backend_v4(k).to_string(), format!("[{}]", backend_v6(k))]
            }
            _ => [VIP4.to_string(), format!("[{VIP6}]")],
        };
        for at in udp_at {
            udp.push(crate::servers::Responder::start(
                &b,
                &format!("{at}:{UDP_PORT}"),
                b"pong ",
            ));
        }
        // The reference client's ways to this backend: a device per wrapping, chosen by mark.
        for wrap in [Wrap::Ipip, Wrap::Gue] {
            let (dev, mark) = (device(k, wrap), mark(k, wrap));
            ends.push(encap(&topo.prober, &dev, (backend_v4(k), backend_v6(k)), wrap));
            let (mark, table) = (mark.to_string(), (100 + mark).to_string());
            for fam in ["-4", "-6"] {
                topo.prober.ip(&[fam, "rule", "add", "fwmark", &mark, "table", &table]);
            }
            let v4 = [&format!("{VIP4}/32"), "dev", &dev, "src", PROBER_V4, "table", &table];
            topo.prober.ip(&[&["route", "add"][..], &v4[..]].concat());
            let v6 = [&format!("{VIP6}/128"), "dev", &dev, "src", PROBER_V6, "table", &table];
            topo.prober.ip(&[&["-6", "route", "add"][..], &v6[..]].concat());
        }
        // Neighbours both ways before the first probe (the generator would hand a probe to an
        // unresolved neighbour to the stack).
        topo.prober.exec("ping", &["-c1", "-W1", &backend_v4(k).to_string()]);
        topo.prober
            .exec("ping", &["-6", "-c1", "-W1", &backend_v6(k).to_string()]);
        backends.push(b);
    }
    DsrRig {
        topo,
        backends,
        _ends: ends,
        _listeners: listeners,
        _web: web,
        _udp: udp,
    }
}

/// The backends' decapsulating device.
const TUN: &str = "tun0";

impl DsrRig {
    /// Packets that reached a backend's VIP by the link rather than through its tunnel.
    pub fn unwrapped_to_vip(&self) -> u64 {
        self.backends
            .iter()
            .map(|b| b.nft_rule_packets(&format!("daddr {VIP4} ")) + b.nft_rule_packets(&format!("daddr {VIP6} ")))
            .sum()
    }

    /// RSTs that reached backend k through its tunnel.
    pub fn wrapped_rsts(&self, k: usize) -> u64 {
        self.backends[k].nft_rule_packets(&format!("iifname \"{TUN}\" tcp flags"))
    }
}

/// The reference client's device toward backend k, and the mark that routes into it.
fn device(k: usize, wrap: Wrap) -> String {
    match wrap {
        Wrap::Ipip => format!("rt{k}"),
        Wrap::Gue => format!("rg{k}"),
    }
}

fn mark(k: usize, wrap: Wrap) -> u32 {
    k as u32 + if wrap == Wrap::Ipip { 1 } else { 51 }
}

/// The reference client's verdict: a TCP connect to the VIP through backend k's tunnel, as
/// "open", "refused", "timeout" or "unreachable" (its errno).
pub fn reference(rig: &DsrRig, k: usize, vip: IpAddr, wrap: Wrap) -> &'static str {
    match connect(rig, k, SocketAddr::new(vip, PORT), wrap) {
        Ok(_) => "open",
        Err(e) => e,
    }
}

/// The reference HTTP client's verdict: GET `path` from the VIP's web service through backend
/// k's tunnel, as the response's status code, or how the connection failed (as `reference`),
/// or "response timeout" when the connection stood and no status line came.
pub fn reference_http(rig: &DsrRig, k: usize, vip: IpAddr, wrap: Wrap, path: &str) -> String {
    let mut s = match connect(rig, k, SocketAddr::new(vip, WEB), wrap) {
        Ok(s) => s,
        Err(e) => return e.to_string(),
    };
    let host = SocketAddr::new(vip, WEB);
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    if s.write_all(request.as_bytes()).is_err() {
        return "reset".into();
    }
    let mut head = [0u8; 12];
    match s.read_exact(&mut head) {
        Ok(()) => String::from_utf8_lossy(&head[9..12]).into_owned(),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            "response timeout".into()
        }
        Err(e) => panic!("reference GET {path} from {host} through {}: {e}", device(k, wrap)),
    }
}

/// The reference client's verdict on the path for full-size packets: a connection to the VIP
/// through backend k's tunnel (as `reference`) that then sends one full-size segment (the
/// tunnel device's MTU, the clients'): "open" when the backend acknowledges it within the
/// timeout, "timeout" when it does not.
pub fn reference_full(rig: &DsrRig, k: usize, vip: IpAddr, wrap: Wrap) -> &'static str {
    let mut s = match connect(rig, k, SocketAddr::new(vip, PORT), wrap) {
        Ok(s) => s,
        Err(e) => return e,
    };
    // The segment's payload: the tunnel device's MTU less the IP and TCP headers.
    let header = if vip.is_ipv4() { 40 } else { 60 };
    let segment = vec![0x61u8; usize::from(CLIENT_MTU) - header];
    s.write_all(&segment).expect("one segment fits the send buffer");
    let deadline = std::time::Instant::now() + TIMEOUT;
    while std::time::Instant::now() < deadline {
        if unacknowledged(&s) == 0 {
            return "open";
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    "timeout"
}

/// Bytes `s` has sent that its peer has not acknowledged (SIOCOUTQ).
fn unacknowledged(s: &Socket) -> i32 {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int through the pointer, which is valid.
    let rc = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &raw mut n) };
    assert_eq!(rc, 0, "SIOCOUTQ: {}", std::io::Error::last_os_error());
    n
}

/// The reference UDP client's verdict: `ping` to the VIP's UDP service through backend k's
/// tunnel, from a socket connected to it: "reply" (an answer holding `pong`), "refused" (port
/// unreachable), "unreachable" (another ICMP error) or "timeout".
pub fn reference_udp(rig: &DsrRig, k: usize, vip: IpAddr, wrap: Wrap) -> &'static str {
    rig.topo.prober.enter(|| {
        let target = SocketAddr::new(vip, UDP_PORT);
        let s = Socket::new(Domain::for_address(target), Type::DGRAM, None).unwrap();
        s.set_mark(mark(k, wrap)).unwrap();
        s.connect(&target.into()).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        let s = std::net::UdpSocket::from(s);
        if let Err(e) = s.send(b"ping") {
            panic!("reference send to {target}: {e}");
        }
        let mut buf = [0u8; 512];
        match s.recv(&mut buf) {
            Ok(n) if buf[..n].starts_with(b"pong ") => "reply",
            Ok(_) => "mismatch",
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => "refused",
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => "timeout",
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENETUNREACH | libc::EHOSTUNREACH)) => "unreachable",
            Err(e) => panic!("reference receive from {target}: {e}"),
        }
    })
}

/// A TCP connection to `target` through backend k's tunnel (the socket's mark picks the
/// route), or how it failed.
fn connect(rig: &DsrRig, k: usize, target: SocketAddr, wrap: Wrap) -> Result<Socket, &'static str> {
    rig.topo.prober.enter(|| {
        let s = Socket::new(Domain::for_address(target), Type::STREAM, None).unwrap();
        s.set_mark(mark(k, wrap)).unwrap();
        match s.connect_timeout(&target.into(), TIMEOUT) {
            Ok(()) => Ok(s),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Err("refused"),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut || e.kind() == std::io::ErrorKind::WouldBlock => {
                Err("timeout")
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENETUNREACH | libc::EHOSTUNREACH | libc::EACCES)
                ) =>
            {
                Err("unreachable")
            }
            Err(e) => panic!("reference connect to {target} through {}: {e}", device(k, wrap)),
        }
    })
}
