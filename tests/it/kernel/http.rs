//! HTTP probes in the kernel: probe_rx answers the target's SYN+ACK with the request and reads
//! the response's status line, against real servers in the backend namespace (hyper, and raw
//! listeners that close, talk nonsense or say nothing), for IPv4 and IPv6.
use std::{
    io::{Read, Write},
    net::TcpListener,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use probed::engine::{L4Outcome, L4Proto, L4Request, TxChoice, TxPath};
use probed_tests::{
    http_server::Route,
    l4::{collect, start_engine},
    topo::*,
    TestPins, Topology,
};

const WEB: u16 = 8080;
const CLOSES: u16 = 8081;
const NONSENSE: u16 = 8082;
const SILENT: u16 = 8083;
const CLOSED: u16 = 8084;
const DROPPED: u16 = 8085;

fn get(token: u64, target: &str, path: &str, timeout_ms: u64) -> L4Request {
    let host = target.rsplit_once(':').map_or(target, |(h, _)| h);
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: probed-test\r\nConnection: close\r\n\r\n");
    L4Request {
        token,
        target: target.parse().unwrap(),
        proto: L4Proto::Http {
            request: Arc::from(request.as_bytes()),
        },
        timeout: Duration::from_millis(timeout_ms),
        tunnel: None,
    }
}

/// A listener that does `what` with every connection it accepts, until dropped.
struct Raw {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Raw {
    fn start(l: TcpListener, what: fn(std::net::TcpStream)) -> Self {
        l.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, _)) => {
                        s.set_nonblocking(false).unwrap();
                        let keep = s.try_clone().unwrap();
                        what(s);
                        held.push(keep);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn close_at_once(s: std::net::TcpStream) {
    let _ = s.shutdown(std::net::Shutdown::Write);
}

fn talk_nonsense(mut s: std::net::TcpStream) {
    let mut buf = [0u8; 512];
    s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let _ = s.read(&mut buf);
    let _ = s.write_all(b"SSH-2.0-OpenSSH_9.2\r\n");
}

fn say_nothing(_s: std::net::TcpStream) {}

#[test]
fn status_lines_and_failures_read_in_the_kernel() {
    let topo = Topology::new();
    topo.backend.nft_drop("tcp", DROPPED);
    // RSTs reaching the backend: one per probe that got an answer, from probe_rx.
    topo.backend.nft_input_rule("tcp flags & rst == rst counter");
    let mut servers = Vec::new();
    let mut raws = Vec::new();
    for ip in [BACKEND_V4.to_string(), format!("[{BACKEND_V6}]")] {
        let web = topo.backend.http_server(&format!("{ip}:{WEB}"));
        web.route("/health", Route::status(200));
        web.route("/down", Route::status(503));
        web.route("/moved", Route::status(301));
        web.route("/teapot", Route::status(418));
        servers.push(web);
        raws.push(Raw::start(
            topo.backend.tcp_listen(&format!("{ip}:{CLOSES}")),
            close_at_once,
        ));
        raws.push(Raw::start(
            topo.backend.tcp_listen(&format!("{ip}:{NONSENSE}")),
            talk_nonsense,
        ));
        raws.push(Raw::start(
            topo.backend.tcp_listen(&format!("{ip}:{SILENT}")),
            say_nothing,
        ));
    }
    let cases: Vec<(u16, &str, L4Outcome)> = vec![
        (WEB, "/health", L4Outcome::HttpStatus { status: 200 }),
        (WEB, "/down", L4Outcome::HttpStatus { status: 503 }),
        (WEB, "/moved", L4Outcome::HttpStatus { status: 301 }),
        (WEB, "/teapot", L4Outcome::HttpStatus { status: 418 }),
        (CLOSES, "/", L4Outcome::HttpClosed),
        // No status line: the kernel does not judge it, the daemon's socket does.
        (
            NONSENSE,
            "/",
            L4Outcome::HttpUndecided {
                why: probe_common::l4::Undecided::NotStatus,
            },
        ),
        (SILENT, "/", L4Outcome::HttpResponseTimeout),
        (CLOSED, "/", L4Outcome::Refused),
        (DROPPED, "/", L4Outcome::Timeout),
    ];
    let mut reqs = Vec::new();
    for (i, (port, path, _)) in cases.iter().enumerate() {
        reqs.push(get(i as u64, &format!("{BACKEND_V4}:{port}"), path, 600));
        reqs.push(get(100 + i as u64, &format!("[{BACKEND_V6}]:{port}"), path, 600));
    }
    let pins = TestPins::new();
    let started = Instant::now();
    let (results, snap, path) = topo.prober.enter(|| {
        let (engine, mut rx) = start_engine(&pins, TxChoice::Auto);
        let path = probed_tests::l4::xdp_or_refused(&engine);
        engine.submit(reqs.clone()).unwrap();
        let results = collect(&mut rx, reqs.len(), Duration::from_secs(5));
        // RSTs leave by XDP_TX, which veth leaves in the backend's ring until another frame
        // wakes it (on a busy node, the next probe): one more probe does that here.
        engine
            .submit(vec![get(999, &format!("{BACKEND_V4}:{CLOSED}"), "/", 600)])
            .unwrap();
        assert_eq!(collect(&mut rx, 1, Duration::from_secs(2)).len(), 1);
        std::thread::sleep(Duration::from_millis(100));
        (results, engine.snapshot().unwrap(), path)
    });
    assert_eq!(results.len(), reqs.len(), "one result per probe: {results:?}");
    for r in &results {
        let (_, path, want) = &cases[(r.token % 100) as usize];
        assert_eq!(r.outcome, *want, "{} {path}: {r:?}", r.target);
        if matches!(want, L4Outcome::HttpStatus { .. }) {
            assert!(r.elapsed < Duration::from_millis(300), "answered at once: {r:?}");
        }
    }
    assert!(started.elapsed() < Duration::from_secs(4));
    assert_eq!(snap.inflight, 0, "{snap:?}");
    assert_eq!(
        snap.rx.http_no_room, 0,
        "the frames had room for the requests: {:?}",
        snap.rx
    );
    // Answered: 4 statuses, close, nonsense per family.
    assert_eq!(snap.rx.matched_http, 12, "{:?}", snap.rx);
    assert_eq!(
        snap.rx.http_requests, 14,
        "a request per connection that came up: {:?}",
        snap.rx
    );
    assert_eq!((snap.rx.forged, snap.rx.stale), (0, 0), "{:?}", snap.rx);
    assert_eq!(snap.rx.matched_refused, 3, "the closed port twice, and the last probe");
    // The servers saw exactly the requests sent, one per connection.
    for web in &servers {
        let seen = web.seen();
        let mut paths: Vec<_> = seen.iter().map(|s| s.target.clone()).collect();
        paths.sort();
        assert_eq!(paths, ["/down", "/health", "/moved", "/teapot"], "{seen:?}");
        assert!(
            seen.iter().all(|s| s.header("user-agent") == ["probed-test"]),
            "{seen:?}"
        );
    }
    // One RST per answered probe, and one per segment that arrived after it (a server's FIN
    // crossing it), all from probe_rx: none from the prober's stack, which would reset the
    // connections at the first segment it saw.
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut rsts = topo.backend.nft_rule_packets("tcp flags & rst == rst");
    while rsts < snap.rx.rst_sent && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        rsts = topo.backend.nft_rule_packets("tcp flags & rst == rst");
    }
    let ss = topo.backend.exec("ss", &["-Htan"]);
    if path == TxPath::Raw {
        // Without the generator's frames going out behind them, the RSTs probe_rx writes for
        // segments that come late (a server's FIN, a retransmission) were seen to stay in
        // veth's XDP queue on this kernel; the one per answered probe arrives.
        eprintln!(
            "note: raw path: {rsts} of {} RSTs reached the backend ({} for late segments)",
            snap.rx.rst_sent, snap.rx.late_reset
        );
        assert!(rsts >= 12, "one RST per answered probe at least: {:?}\n{ss}", snap.rx);
        assert_eq!(snap.rx.rst_sent, 12 + snap.rx.late_reset, "{:?}", snap.rx);
        return;
    }
    assert_eq!(
        (rsts, snap.rx.rst_sent),
        (12 + snap.rx.late_reset, 12 + snap.rx.late_reset),
        "probe_rx ends every answered connection: {:?}\n{ss}",
        snap.rx
    );
}

#[test]
fn the_same_request_shares_one_template() {
    let topo = Topology::new();
    let web = topo.backend.http_server(&format!("{BACKEND_V4}:{WEB}"));
    web.route("/health", Route::status(204));
    let pins = TestPins::new();
    let reqs: Vec<_> = (0..50)
        .map(|i| get(i, &format!("{BACKEND_V4}:{WEB}"), "/health", 1000))
        .collect();
    let (results, snap) = topo.prober.enter(|| {
        let (engine, mut rx) = start_engine(&pins, TxChoice::Auto);
        // Fifty probes of one target at once need fifty source ports and one template.
        engine.submit(reqs.clone()).unwrap();
        let results = collect(&mut rx, reqs.len(), Duration::from_secs(5));
        (results, engine.snapshot().unwrap())
    });
    assert_eq!(results.len(), 50);
    assert!(
        results
            .iter()
            .all(|r| r.outcome == L4Outcome::HttpStatus { status: 204 }),
        "{results:?}"
    );
    assert_eq!(snap.engine.http_templates, 1, "{:?}", snap.engine);
    assert_eq!(web.seen().len(), 50);
}

/// The daemon's HTTP checks: plain status checks run in the kernel, a body match through a
/// socket, and `http_probes = "sockets"` sends them all through sockets; the verdicts and
/// their reasons are the same either way.
#[test]
fn the_daemon_runs_status_checks_in_the_kernel() {
    use probed::status::EndpointStatus as S;
    use probed_tests::daemon::{metric, DaemonFiles, RunningDaemon};

    let topo = Topology::new();
    let web = topo.backend.http_server(&format!("{BACKEND_V4}:{WEB}"));
    web.route("/health", Route::status(200).body("all good\n"));
    web.route("/sick", Route::status(503));
    for mode in ["kernel", "sockets"] {
        web.clear();
        let files = DaemonFiles::new();
        let health = |path: &str, extra: &str| {
            format!(
                "[profile.health]\nprotocol = \"http\"\npath = \"{path}\"\ninterval = \"100ms\"\ntimeout = \"200ms\"\n\
                 healthy_threshold = 2\nunhealthy_threshold = 2\n{extra}"
            )
        };
        let endpoint = |name: &str| {
            format!("\n[[profile.endpoint]]\nname = \"{name}\"\naddress = \"{BACKEND_V4}\"\nport = {WEB}\n")
        };
        let mut text = files
            .header(PROBER_IF)
            .replace("[source]", &format!("http_probes = \"{mode}\"\n\n[source]"));
        for (profile, path, extra) in [
            ("ok", "/health", ""),
            ("sick", "/sick", ""),
            ("body", "/health", "method = \"GET\"\nbody_match = \"all good\"\n"),
            ("silent", "/health", ""),
        ] {
            text += &format!(
                "\n[[profile]]\nname = \"{profile}\"\ndialect = \"lb\"\n{}",
                health(path, extra)
            );
            if profile == "silent" {
                text += &format!(
                    "\n[[profile.endpoint]]\nname = \"silent-1\"\naddress = \"{BACKEND_V4}\"\nport = {SILENT}\n"
                );
            } else {
                text += &endpoint(&format!("{profile}-1"));
            }
        }
        let _silent = Raw::start(topo.backend.tcp_listen(&format!("{BACKEND_V4}:{SILENT}")), say_nothing);
        let config = files.write_config(&text);
        let daemon = RunningDaemon::start(&topo.prober, config, None).expect("start the daemon");
        daemon.wait_status("ok", "ok-1", S::Online, Duration::from_secs(3));
        daemon.wait_status("body", "body-1", S::Online, Duration::from_secs(3));
        let sick = daemon.wait_status("sick", "sick-1", S::Degraded, Duration::from_secs(3));
        assert_eq!(&*sick.last_result.unwrap().reason, "status 503", "{mode}");
        let silent = daemon.wait_status("silent", "silent-1", S::Degraded, Duration::from_secs(3));
        assert_eq!(&*silent.last_result.unwrap().reason, "timeout response", "{mode}");
        let (_, metrics) = daemon.call("GET", "/metrics");
        let metrics = metrics.as_str().unwrap().to_string();
        let seen = web.seen();
        let body_probes = seen.iter().filter(|s| s.target == "/health").count();
        if mode == "kernel" {
            let in_kernel = metric(&metrics, "probed_kernel_rx_total{event=\"matched_http\"}");
            let requests = metric(&metrics, "probed_kernel_rx_total{event=\"http_requests\"}");
            // ok and sick in the kernel; body through its socket; silent's requests unanswered.
            assert!(in_kernel >= 4.0, "{metrics}");
            assert!(
                requests > in_kernel,
                "the silent target's requests went out too: {metrics}"
            );
            assert_eq!(metric(&metrics, "probed_engine_http_templates"), 3.0, "{metrics}");
            assert!(body_probes >= 4, "{seen:?}");
        } else {
            // No TCP or UDP checks, and HTTP through sockets: the engine does not even start.
            assert!(!metrics.contains("probed_kernel_rx_total"), "{metrics}");
            assert!(body_probes >= 6, "every probe reached the server by socket: {seen:?}");
        }
        daemon.stop();
    }
}

/// The kernel HTTP path's run-time guard. The node starts with XDP transmit (GRO on at the
/// peer) and forwarding off (SYNs through the raw socket, requests by XDP); then the peer's GRO
/// goes off and probe_rx's requests stop arriving. Each kernel response timeout is settled by
/// a socket, which gets the answer, so the endpoint never leaves Online; after three in a row
/// every HTTP check goes through sockets, and the metric says so.
#[test]
fn requests_that_stop_arriving_turn_the_kernel_path_off_without_a_false_verdict() {
    use probed::status::EndpointStatus as S;
    use probed_tests::daemon::{metric, DaemonFiles, RunningDaemon};

    let topo = Topology::with(Node {
        gro: true,
        forwarding: false,
    });
    let web = topo.backend.http_server(&format!("{BACKEND_V4}:{WEB}"));
    web.route("/health", Route::status(200));
    let files = DaemonFiles::new();
    let text = files
        .header(PROBER_IF)
        .replace("[source]", "http_probes = \"kernel\"\n\n[source]")
        + &format!(
            "\n[[profile]]\nname = \"web\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"http\"\nport = {WEB}\n\
             path = \"/health\"\ninterval = \"100ms\"\ntimeout = \"300ms\"\nhealthy_threshold = 2\n\
             unhealthy_threshold = 2\n[[profile.endpoint]]\nname = \"web-1\"\naddress = \"{BACKEND_V4}\"\n"
        );
    let daemon = RunningDaemon::start(&topo.prober, files.write_config(&text), None).expect("start the daemon");
    daemon.wait_status("web", "web-1", S::Online, Duration::from_secs(5));
    let scrape = || {
        let (_, m) = daemon.call("GET", "/metrics");
        m.as_str().unwrap_or_default().to_string()
    };
    let before = scrape();
    assert_eq!(metric(&before, "probed_kernel_http_enabled"), 1.0, "{before}");
    assert!(
        metric(&before, "probed_kernel_rx_total{event=\"matched_http\"}") >= 2.0,
        "{before}"
    );
    topo.backend.exec("ethtool", &["-K", BACKEND_IF, "gro", "off"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let after = loop {
        let m = scrape();
        if metric(&m, "probed_kernel_http_enabled") == 0.0 {
            break m;
        }
        assert!(Instant::now() < deadline, "the kernel path stayed on:\n{m}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        metric(
            &after,
            "probed_kernel_http_settled_by_socket_total{reason=\"response_timeout\"}"
        ) >= 3.0,
        "{after}"
    );
    // Sockets from now on: the endpoint stays Online, and never left it.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(daemon.endpoint("web", "web-1").status, S::Online);
    let left: Vec<_> = daemon
        .events()
        .into_iter()
        .filter(|e| e.endpoint == "web-1" && e.to != Some(S::Online))
        .collect();
    assert!(left.is_empty(), "no false verdict: {left:?}");
    daemon.stop();
}
