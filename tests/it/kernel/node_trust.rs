//! probed on a load balancer node is invisible to the traffic it does not own: client flows
//! the node forwards (routed, and through an nft DNAT VIP), TCP and UDP, IPv4 and IPv6, from
//! source ports across every ephemeral range (Linux's, the probe range, Windows' and macOS's),
//! complete and carry their data while the engine probes the same backend at rate, and
//! conntrack still tracks them; and no other local user can send from a probe port.
use std::{
    io::{Read, Write},
    net::{TcpListener, UdpSocket},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use probed::engine::{L4Outcome, L4Proto, L4Request, TxChoice};
use probed_tests::{
    l4::{collect, start_engine},
    topo::*,
    Netns, TestPins, Topology,
};

/// Where the backend echoes (TCP and UDP), and the VIPs the node DNATs to it.
const ECHO: u16 = 7;
const WEB: u16 = 8080;
const VIP_V4: &str = "198.18.201.1";
const VIP_V6: &str = "2001:2:201::1";
const VIP_PORT: u16 = 80;

/// Client source ports: Linux's ephemeral range, the probe range (61000-65095) and the range
/// Windows, macOS and the BSDs use (49152-65535), ends included, and a few below them all.
const CLIENT_PORTS: [u16; 20] = [
    1024, 20000, 32768, 40000, 49152, 49153, 55000, 60999, 61000, 61001, 61999, 62000, 63000, 64000, 65000, 65094,
    65095, 65096, 65200, 65535,
];

/// An echo service on TCP and UDP in the backend namespace, until dropped.
struct Echo {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Echo {
    fn start(tcp: Vec<TcpListener>, udp: Vec<UdpSocket>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for l in tcp {
            l.set_nonblocking(true).unwrap();
            let flag = stop.clone();
            threads.push(std::thread::spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    match l.accept() {
                        Ok((mut s, _)) => {
                            s.set_nonblocking(false).unwrap();
                            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                            let mut buf = [0u8; 256];
                            if let Ok(n) = s.read(&mut buf) {
                                let _ = s.write_all(&buf[..n]);
                            }
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
            }));
        }
        for u in udp {
            u.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            let flag = stop.clone();
            threads.push(std::thread::spawn(move || {
                let mut buf = [0u8; 256];
                while !flag.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = u.recv_from(&mut buf) {
                        let _ = u.send_to(&buf[..n], from);
                    }
                }
            }));
        }
        Self { stop, threads }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Opens one connection (or UDP exchange) per source port from the client namespace to
/// `dst:port` with a real client (Python's sockets), and returns the ports that failed, with
/// why. Each must carry its bytes there and back.
fn client_flows(client: &Netns, proto: &str, dst: &str, port: u16) -> Vec<String> {
    const SCRIPT: &str = r#"
import socket, sys
proto, dst, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
fam = socket.AF_INET6 if ':' in dst else socket.AF_INET
kind = socket.SOCK_STREAM if proto == 'tcp' else socket.SOCK_DGRAM
for sp in [int(p) for p in sys.argv[4].split(',')]:
    s = socket.socket(fam, kind)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.settimeout(2)
    msg = b'flow from %d' % sp
    try:
        s.bind(('', sp))
        s.connect((dst, port))
        s.send(msg)
        got = s.recv(256)
        if got != msg:
            print('%d: got %r' % (sp, got))
    except Exception as e:
        print('%d: %s' % (sp, e))
    finally:
        s.close()
"#;
    let ports: Vec<String> = CLIENT_PORTS.iter().map(ToString::to_string).collect();
    let out = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &client.name,
            "/usr/bin/python3",
            "-c",
            SCRIPT,
            proto,
            dst,
        ])
        .arg(port.to_string())
        .arg(ports.join(","))
        .output()
        .expect("run the client");
    assert!(out.status.success(), "client: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| format!("{proto} {dst}:{port} from {l}"))
        .collect()
}

/// The nft state of the node: a DNAT VIP per family onto the backend's echo port, and a
/// count of the new flows conntrack sees in the forward path.
fn lb_ruleset() -> String {
    format!(
        "table inet probed_trust_lb {{
            chain pre {{
                type nat hook prerouting priority dstnat; policy accept;
                ip daddr {VIP_V4} tcp dport {VIP_PORT} dnat ip to {BACKEND_V4}:{ECHO}
                ip daddr {VIP_V4} udp dport {VIP_PORT} dnat ip to {BACKEND_V4}:{ECHO}
                ip6 daddr {VIP_V6} tcp dport {VIP_PORT} dnat ip6 to [{BACKEND_V6}]:{ECHO}
                ip6 daddr {VIP_V6} udp dport {VIP_PORT} dnat ip6 to [{BACKEND_V6}]:{ECHO}
            }}
            chain counted {{
                type filter hook forward priority filter; policy accept;
                ct state new counter
                ct state established counter
            }}
        }}"
    )
}

fn counter(ns: &Netns, needle: &str) -> u64 {
    let listing = ns.exec("nft", &["list", "chain", "inet", "probed_trust_lb", "counted"]);
    probed_tests::servers::counted_packets(&listing, needle)
}

/// Probes the backend at rate (TCP to the echo port, kernel HTTP to the web server) from the
/// engine until `stop`, and returns every result.
fn probe_at_rate(pins: &TestPins, stop: &AtomicBool) -> Vec<probed::engine::L4Result> {
    let (engine, mut rx) = start_engine(pins, TxChoice::Auto);
    let mut all = Vec::new();
    let mut token = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        let mut batch = Vec::new();
        for ip in [BACKEND_V4.to_string(), format!("[{BACKEND_V6}]")] {
            for _ in 0..20 {
                token += 1;
                batch.push(L4Request {
                    token,
                    target: format!("{ip}:{ECHO}").parse().unwrap(),
                    proto: L4Proto::Tcp,
                    timeout: Duration::from_millis(500),
                    tunnel: None,
                });
                token += 1;
                let host = ip.trim_matches(['[', ']']);
                batch.push(L4Request {
                    token,
                    target: format!("{ip}:{WEB}").parse().unwrap(),
                    proto: L4Proto::Http {
                        request: Arc::from(
                            format!("GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
                        ),
                    },
                    timeout: Duration::from_millis(500),
                    tunnel: None,
                });
            }
        }
        let n = batch.len();
        engine.submit(batch).unwrap();
        all.extend(collect(&mut rx, n, Duration::from_secs(3)));
        std::thread::sleep(Duration::from_millis(20));
    }
    all
}

fn forwarded_flows_pass_untouched(node: Node) {
    let topo = Topology::with(node);
    let client = topo.client();
    let web = topo.backend.http_server(&format!("{BACKEND_V4}:{WEB}"));
    web.route("/health", probed_tests::http_server::Route::status(200));
    let web6 = topo.backend.http_server(&format!("[{BACKEND_V6}]:{WEB}"));
    web6.route("/health", probed_tests::http_server::Route::status(200));
    let _echo = Echo::start(
        vec![
            topo.backend.tcp_listen(&format!("{BACKEND_V4}:{ECHO}")),
            topo.backend.tcp_listen(&format!("[{BACKEND_V6}]:{ECHO}")),
        ],
        vec![
            topo.backend.udp_bind(&format!("{BACKEND_V4}:{ECHO}")),
            topo.backend.udp_bind(&format!("[{BACKEND_V6}]:{ECHO}")),
        ],
    );
    topo.prober.nft(&lb_ruleset());
    let pins = TestPins::new();
    let stop = AtomicBool::new(false);
    let (results, failures) = std::thread::scope(|s| {
        let prober = s.spawn(|| topo.prober.enter(|| probe_at_rate(&pins, &stop)));
        // Let the engine start (its guard table and probe_rx in place) and probe a while.
        std::thread::sleep(Duration::from_millis(1500));
        let mut failures = Vec::new();
        for proto in ["tcp", "udp"] {
            for (dst, port) in [
                (BACKEND_V4, ECHO),
                (BACKEND_V6, ECHO),
                (VIP_V4, VIP_PORT),
                (VIP_V6, VIP_PORT),
            ] {
                failures.extend(client_flows(&client, proto, dst, port));
            }
        }
        stop.store(true, Ordering::Relaxed);
        (prober.join().expect("the prober thread"), failures)
    });
    assert!(
        failures.is_empty(),
        "{node:?}: forwarded flows that failed while probed probed:\n{}",
        failures.join("\n")
    );
    let flows = (CLIENT_PORTS.len() * 8) as u64;
    let new = counter(&topo.prober, "ct state new");
    assert!(
        new >= flows,
        "{node:?}: conntrack saw {new} new forwarded flows of {flows}"
    );
    assert!(counter(&topo.prober, "ct state established") >= flows);
    // No probe's SYN met a connection the target still held for an earlier probe on the
    // same 4-tuple (it would answer with a challenge ACK, and the probe time out): the engine
    // lets a flow rest after its probe (engine::run::cooling).
    let nstat = topo.backend.exec("nstat", &["-asz", "TcpExtTCPSYNChallenge"]);
    let challenges: u64 = nstat
        .lines()
        .find_map(|l| l.strip_prefix("TcpExtTCPSYNChallenge"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no TcpExtTCPSYNChallenge in nstat's output: {nstat}"));
    assert_eq!(
        challenges, 0,
        "{node:?}: probe SYNs that met a live connection on the target"
    );
    // The probes themselves were right all along.
    assert!(results.len() >= 80, "{node:?}: {} probe results", results.len());
    for r in &results {
        let want = if r.target.port() == ECHO {
            L4Outcome::Open
        } else {
            L4Outcome::HttpStatus { status: 200 }
        };
        // Where XDP cannot send the request (a plain veth), the kernel HTTP probe times out;
        // the daemon then does not run HTTP in the kernel (see probes::http_conformance).
        let http_without_xdp_tx = !node.gro && r.target.port() == WEB;
        if !http_without_xdp_tx {
            assert_eq!(r.outcome, want, "{node:?}: {r:?}");
        }
    }
}

#[test]
fn forwarded_flows_from_every_port_range_pass_untouched_on_the_rig() {
    forwarded_flows_pass_untouched(Node::RIG);
}

#[test]
fn forwarded_flows_from_every_port_range_pass_untouched_on_a_plain_veth() {
    forwarded_flows_pass_untouched(Node {
        gro: false,
        forwarding: true,
    });
}

/// TCP probes to the backend's echo port, IPv4 and IPv6 in turn, one per token.
fn echo_probes(tokens: std::ops::Range<u64>) -> Vec<L4Request> {
    tokens
        .map(|token| L4Request {
            token,
            target: if token % 2 == 0 {
                format!("{BACKEND_V4}:{ECHO}")
            } else {
                format!("[{BACKEND_V6}]:{ECHO}")
            }
            .parse()
            .unwrap(),
            proto: L4Proto::Tcp,
            timeout: Duration::from_millis(500),
            tunnel: None,
        })
        .collect()
}

/// Runs `script` with Python as an unprivileged user (nobody) in `ns`; its output.
fn as_nobody(ns: &Netns, script: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.name,
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
        .args(["/usr/bin/python3", "-c", script])
        .args(args)
        .output()
        .expect("run setpriv");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// An unprivileged local process binds a probe port explicitly and connects to a backend:
/// with the engine's guard in place the kernel refuses its packets (EPERM), so it cannot hold
/// connections on the probes' 4-tuples; outside the probe range, and before the engine runs,
/// it may (which is what the guard changes).
#[test]
fn a_local_user_cannot_send_from_a_probe_port() {
    const SCRIPT: &str = r#"
import socket, sys
dst, sp = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET6 if ':' in dst else socket.AF_INET)
s.settimeout(2)
try:
    s.bind(('', sp))
    s.connect((dst, 7))
    print('connected')
except Exception as e:
    print(type(e).__name__, getattr(e, 'errno', ''))
"#;
    let topo = Topology::new();
    let _echo = Echo::start(
        vec![
            topo.backend.tcp_listen(&format!("{BACKEND_V4}:{ECHO}")),
            topo.backend.tcp_listen(&format!("[{BACKEND_V6}]:{ECHO}")),
        ],
        vec![],
    );
    let pins = TestPins::new();
    // Without the engine nothing stops it: what the attack needs.
    assert_eq!(as_nobody(&topo.prober, SCRIPT, &[BACKEND_V4, "61500"]), "connected");
    topo.prober.enter(|| {
        let (engine, mut rx) = start_engine(&pins, TxChoice::Auto);
        // Its SYNs are dropped on the way out: connect fails (EPERM, or a timeout as TCP
        // retries them), and the guard's drop rule counts them.
        for (dst, port, connects) in [
            (BACKEND_V4, "61501", false),
            (BACKEND_V6, "65095", false),
            (BACKEND_V4, "61000", false),
            (BACKEND_V4, "60999", true),
            (BACKEND_V6, "65096", true),
        ] {
            let got = as_nobody(&topo.prober, SCRIPT, &[dst, port]);
            assert_eq!(got == "connected", connects, "{dst} from {port}: {got}");
        }
        let table = probed::kernel::notrack::table_name(&pins.path);
        let listing = topo.prober.exec("nft", &["list", "table", "inet", &table]);
        let dropped = probed_tests::servers::counted_packets(&listing, "skuid");
        assert!(dropped >= 3, "the guard dropped the SYNs:\n{listing}");
        // probed's own probes still go out and come back.
        engine.submit(echo_probes(0..20)).unwrap();
        let results = collect(&mut rx, 20, Duration::from_secs(3));
        assert!(results.iter().all(|r| r.outcome == L4Outcome::Open), "{results:?}");
    });
}

/// A local service of an ordinary user that listens inside the probe range (ActiveMQ's 61616)
/// keeps answering its clients over the probe interface while the engine's guard is in place
/// (issue 46, L2): the guard matches TCP connection attempts only, and a server's answers are
/// none. Before, its SYN+ACK passed (no full socket yet) and every byte it sent was dropped.
#[test]
fn a_local_server_inside_the_probe_range_keeps_answering() {
    const SERVER: &str = r#"
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(4)
s.settimeout(20)
c, _ = s.accept()
c.settimeout(5)
c.sendall(b"pong:" + c.recv(16))
"#;
    const CLIENT: &str = r#"
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
c.sendall(b"ping")
try:
    print(c.recv(16).decode())
except Exception as e:
    print(type(e).__name__)
"#;
    let topo = Topology::new();
    let pins = TestPins::new();
    topo.prober.enter(|| {
        let (_engine, _rx) = start_engine(&pins, TxChoice::Auto);
        let server = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &topo.prober.name,
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
            ])
            .args(["--clear-groups", "/usr/bin/python3", "-c", SERVER, PROBER_V4, "61616"])
            .spawn()
            .expect("run the server");
        struct Killed(std::process::Child);
        impl Drop for Killed {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let _server = Killed(server);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let got = loop {
            let got = topo
                .backend
                .try_exec("/usr/bin/python3", &["-c", CLIENT, PROBER_V4, "61616"])
                .unwrap_or_default();
            if got.trim() == "pong:ping" || std::time::Instant::now() > deadline {
                break got;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(got.trim(), "pong:ping", "the server's answer came back");
    });
}

/// On a plain veth (no GRO at the peer) native XDP cannot send frames back out: a RST that
/// probe_rx wrote over the SYN+ACK would be dropped, the backend would keep the half-open
/// connection, and the next probe from the same source port would meet it and time out. There
/// the stack sends the RSTs; with only 16 source ports every port is reused within a round,
/// and every probe must still find the port open.
#[test]
fn reused_probe_ports_find_no_half_open_connection_on_a_plain_veth() {
    let topo = Topology::with(Node::PLAIN);
    let _echo = Echo::start(
        vec![
            topo.backend.tcp_listen(&format!("{BACKEND_V4}:{ECHO}")),
            topo.backend.tcp_listen(&format!("[{BACKEND_V6}]:{ECHO}")),
        ],
        vec![],
    );
    let pins = TestPins::new();
    topo.prober.enter(|| {
        let (engine, mut rx) = probed_tests::l4::start_engine_with(&pins, TxChoice::Auto, |c| {
            c.sport_min = 61000;
            c.sport_max = 61015;
        });
        for round in 0..10 {
            let reqs = echo_probes(round * 16..(round + 1) * 16);
            engine.submit(reqs).unwrap();
            let results = collect(&mut rx, 16, Duration::from_secs(3));
            assert_eq!(results.len(), 16, "round {round}");
            assert!(
                results.iter().all(|r| r.outcome == L4Outcome::Open),
                "round {round}: {results:?}"
            );
        }
    });
}

/// A device loses XDP transmit under a running daemon (the peer's GRO turned off): the engine
/// sees it within 100 ms, moves its probes to the raw socket and its RSTs to the stack, and no
/// backend is failed for it: TCP, UDP and HTTP checks stay Online throughout. Run in native
/// XDP, generic XDP and tcx (PROBED_XDP_MODE, PROBED_HOOK), where the generator's probes alone
/// depend on it.
#[test]
fn a_device_that_loses_xdp_transmit_under_the_daemon_fails_no_backend() {
    use probed::status::EndpointStatus as S;
    use probed_tests::daemon::{metric, DaemonFiles, RunningDaemon};

    let topo = Topology::new();
    let _echo = Echo::start(
        vec![topo.backend.tcp_listen(&format!("{BACKEND_V4}:{ECHO}"))],
        vec![topo.backend.udp_bind(&format!("{BACKEND_V4}:{ECHO}"))],
    );
    let web = topo.backend.http_server(&format!("{BACKEND_V4}:{WEB}"));
    web.route("/health", probed_tests::http_server::Route::status(200));
    let files = DaemonFiles::new();
    let mode = std::env::var("PROBED_XDP_MODE").unwrap_or_else(|_| "auto".into());
    let hook = std::env::var("PROBED_HOOK").unwrap_or_else(|_| "xdp".into());
    let mut text = files.header(PROBER_IF).replace(
        "[source]\n",
        &format!("[source]\nxdp_mode = \"{mode}\"\nhook = \"{hook}\"\n"),
    );
    for (name, proto, port, extra) in [
        ("tcp", "tcp", ECHO, ""),
        ("udp", "udp", ECHO, ""),
        ("web", "http", WEB, "path = \"/health\"\n"),
    ] {
        text += &format!(
            "\n[[profile]]\nname = \"{name}\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"{proto}\"\n\
             port = {port}\n{extra}interval = \"100ms\"\ntimeout = \"300ms\"\nhealthy_threshold = 2\n\
             unhealthy_threshold = 2\n[[profile.endpoint]]\nname = \"{name}-1\"\naddress = \"{BACKEND_V4}\"\n"
        );
    }
    let daemon = RunningDaemon::start(&topo.prober, files.write_config(&text), None).expect("start the daemon");
    for name in ["tcp", "udp", "web"] {
        daemon.wait_status(name, &format!("{name}-1"), S::Online, Duration::from_secs(5));
    }
    let scrape = || {
        let (_, m) = daemon.call("GET", "/metrics");
        m.as_str().unwrap_or_default().to_string()
    };
    if metric(&scrape(), "probed_tx_path{path=\"xdp\"}") == 1.0 {
        eprintln!("probes leave by the XDP generator until the device loses XDP transmit");
    } else {
        // A kernel that refuses the generator's live-frame runs starts on the raw socket
        // (the engine says why); what is left to see is the RSTs moving to the stack.
        assert_eq!(metric(&scrape(), "probed_tx_path{path=\"raw\"}"), 1.0, "{}", scrape());
        eprintln!("note: the kernel refuses XDP live frames: the raw path from the start");
    }
    topo.backend.exec("ethtool", &["-K", BACKEND_IF, "gro", "off"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(&scrape(), "probed_tx_path{path=\"raw\"}") != 1.0 {
        assert!(
            Instant::now() < deadline,
            "the engine stayed on the XDP path:\n{}",
            scrape()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // A few rounds on the new path: every check still answered, none ever left Online.
    std::thread::sleep(Duration::from_secs(2));
    for name in ["tcp", "udp", "web"] {
        let view = daemon.endpoint(name, &format!("{name}-1"));
        assert_eq!(view.status, S::Online, "{name}: {view:?}");
        assert!(view.last_result.as_ref().is_some_and(|r| r.ok), "{name}: {view:?}");
    }
    let left: Vec<_> = daemon
        .events()
        .into_iter()
        .filter(|e| e.to.is_some_and(|to| to != S::Online))
        .collect();
    assert!(left.is_empty(), "no false verdict: {left:?}");
    daemon.stop();
}
