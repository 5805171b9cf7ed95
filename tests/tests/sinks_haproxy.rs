//! The haproxy sink with a real HAProxy (Debian's) in the load balancer's namespace, its
//! configuration and probed's taken verbatim from docs/operations.md (Sinks, HAProxy): a client's
//! connections through HAProxy reach all three backends; one backend dropped is put in maint
//! after its fail window and gets no new connection; HAProxy restarted (every server back to
//! `ready`) is set right by probed's next read-back; the backend restored comes back. And a
//! sink whose socket or backend is missing stops the start with a clear error.
use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use probed::status::EndpointStatus as S;
use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    lb::{add_backends, go_dark, restore, Backend},
    servers::counted_packets,
    topo::*,
    unique_name, Netns,
};

const HAPROXY_BIN: &str = "/usr/sbin/haproxy";
/// The socket path the document's examples use; the test puts its own in its place.
const DOC_SOCKET: &str = "/run/haproxy/admin.sock";
const VIP: &str = "198.18.100.100";
const BACKENDS: [&str; 3] = ["198.18.0.2", "198.18.0.3", "198.18.0.4"];
/// probed's probes leave from this second address of the LB namespace, so that the SYNs
/// counted at the backends from the LB's first address are HAProxy's alone.
const PROBE_SOURCE: &str = "198.18.0.50";

/// The documented blocks: HAProxy's configuration and probed's sink.
fn doc_block(which: &str) -> String {
    probed_tests::lb::doc_block(match which {
        "haproxy" => "haproxy-cfg",
        _ => "haproxy-sink",
    })
}

/// HAProxy in the foreground (`-db`) inside a namespace, on a config in a temporary directory;
/// killed (by its PID) and the directory removed on drop.
struct Haproxy {
    ns: String,
    dir: PathBuf,
    child: Option<Child>,
}

impl Haproxy {
    fn start(ns: &Netns) -> Haproxy {
        let dir = std::env::temp_dir().join(unique_name("probed-haproxy-"));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("admin.sock");
        let cfg = doc_block("haproxy").replace(DOC_SOCKET, socket.to_str().unwrap());
        std::fs::write(dir.join("haproxy.cfg"), cfg).unwrap();
        let mut h = Haproxy {
            ns: ns.name.clone(),
            dir,
            child: None,
        };
        h.spawn();
        h
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("admin.sock")
    }

    /// Starts the process (`ip netns exec` execs HAProxy in place: the child's PID is
    /// HAProxy's) and waits up to 5 s for its admin socket to answer.
    fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.join("haproxy.log")).unwrap();
        let cfg = self.dir.join("haproxy.cfg");
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns, HAPROXY_BIN, "-db", "-f"])
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {HAPROXY_BIN} (cargo xtask setup installs it): {e}"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.ask("show info").contains("Name: HAProxy") {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "haproxy exited ({status}):\n{}",
                    std::fs::read_to_string(self.dir.join("haproxy.log")).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "haproxy's admin socket answers within 5 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kills HAProxy and starts it again: every server comes back as haproxy.cfg has it.
    fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// One admin command; empty when the socket does not answer.
    fn ask(&self, command: &str) -> String {
        let Ok(mut s) = UnixStream::connect(self.socket()) else {
            return String::new();
        };
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        if s.write_all(format!("{command}\n").as_bytes()).is_err() {
            return String::new();
        }
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    /// `ready`, `maint` or `drain` for one server of backend web, from `show servers state`.
    fn state(&self, server: &str) -> &'static str {
        let dump = self.ask("show servers state web");
        let line = dump
            .lines()
            .find(|l| l.split_whitespace().nth(3) == Some(server))
            .unwrap_or_else(|| panic!("no server {server} in:\n{dump}"));
        // srv_admin_state: 0x01 forced maint, 0x08 forced drain.
        let admin: u32 = line.split_whitespace().nth(6).unwrap().parse().unwrap();
        if admin & 1 != 0 {
            "maint"
        } else if admin & 8 != 0 {
            "drain"
        } else {
            "ready"
        }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Counts the SYNs HAProxy sends each backend (before anything there can drop them).
fn count_ruleset() -> String {
    let rules: String = BACKENDS
        .iter()
        .map(|b| format!("\t\tip saddr {PROBER_V4} ip daddr {b} tcp dport 80 tcp flags syn counter\n"))
        .collect();
    format!("table inet count {{\n\tchain input {{\n\t\ttype filter hook input priority -10; policy accept;\n{rules}\t}}\n}}\n")
}

fn syns(backend_ns: &Netns, backend: &str) -> u64 {
    let listing = backend_ns.exec("nft", &["list", "table", "inet", "count"]);
    counted_packets(&listing, &format!("daddr {backend} tcp"))
}

/// `n` short connections from the client through HAProxy; how many were relayed to a
/// backend (the backend closes at once, so the client reads end-of-stream).
fn connect_many(client: &Netns, n: usize) -> usize {
    let vip: SocketAddr = format!("{VIP}:80").parse().unwrap();
    client.enter(move || {
        (0..n)
            .filter(|_| {
                let Ok(mut s) = TcpStream::connect_timeout(&vip, Duration::from_millis(500)) else {
                    return false;
                };
                s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
                let mut buf = [0u8; 16];
                matches!(s.read(&mut buf), Ok(0))
            })
            .count()
    })
}

fn wait_until(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// probed's configuration: the test's `[daemon]`, probes from `PROBE_SOURCE`, and the
/// document's profile and sink with `socket` in place of its path.
fn config(files: &DaemonFiles, socket: &Path) -> String {
    files.header(PROBER_IF).replace(
        &format!("interfaces = [\"{PROBER_IF}\"]\n"),
        &format!("interfaces = [\"{PROBER_IF}\"]\naddresses = [\"{PROBE_SOURCE}\"]\n"),
    ) + &doc_block("toml").replace(DOC_SOCKET, socket.to_str().unwrap())
}

/// The LB namespace as the load balancer: the VIP local, the probe source beside the LB's
/// address, the backends' extra addresses; three backends with SYN counters.
fn lb_topology() -> (Topology, Netns) {
    let topo = Topology::new();
    let client = topo.client();
    topo.prober.ip(&["addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
    topo.prober
        .ip(&["addr", "add", &format!("{PROBE_SOURCE}/24"), "dev", PROBER_IF]);
    let prober_mac = topo.prober.mac(PROBER_IF);
    topo.backend.ip(&[
        "neigh",
        "replace",
        PROBE_SOURCE,
        "lladdr",
        &prober_mac,
        "dev",
        BACKEND_IF,
        "nud",
        "permanent",
    ]);
    add_backends(&topo, &BACKENDS[1..]);
    topo.backend.nft(&count_ruleset());
    (topo, client)
}

#[test]
fn haproxy_puts_a_failed_server_in_maint_reconciles_after_a_restart_and_brings_it_back() {
    let (topo, client) = lb_topology();
    let _servers: Vec<Backend> = BACKENDS.iter().map(|b| Backend::start(&topo.backend, b)).collect();
    let mut haproxy = Haproxy::start(&topo.prober);
    let files = DaemonFiles::new();
    let cfg = files.write_config(&config(&files, &haproxy.socket()));
    let daemon = RunningDaemon::start(&topo.prober, cfg, None).expect("start the daemon");
    for e in ["b0", "b1", "web-3"] {
        daemon.wait_status("web", e, S::Online, Duration::from_secs(5));
    }
    assert_eq!(connect_many(&client, 300), 300, "every connection is relayed");
    for b in BACKENDS {
        assert!(
            syns(&topo.backend, b) >= 90,
            "{b} gets its share: {}",
            syns(&topo.backend, b)
        );
    }

    // b1 goes dark: after its fail window probed puts it in maint.
    go_dark(&topo.backend, BACKENDS[1]);
    daemon.wait_status("web", "b1", S::Degraded, Duration::from_secs(3));
    wait_until("b1 is in maint", Duration::from_secs(1), || {
        haproxy.state("b1") == "maint"
    });
    assert_eq!(haproxy.state("b2"), "ready", "web-3 writes server b2, still ready");
    let dark_before = syns(&topo.backend, BACKENDS[1]);
    assert_eq!(connect_many(&client, 300), 300, "the other two take every connection");
    assert_eq!(
        syns(&topo.backend, BACKENDS[1]),
        dark_before,
        "no new connection reaches the failed backend"
    );

    // HAProxy restarts: b1 is ready again from haproxy.cfg, until probed's read-back (5 s)
    // finds the difference and puts it back in maint.
    haproxy.restart();
    assert_eq!(haproxy.state("b1"), "ready", "a fresh HAProxy has every server ready");
    let restarted = Instant::now();
    wait_until("probed puts b1 back in maint", Duration::from_secs(7), || {
        haproxy.state("b1") == "maint"
    });
    eprintln!("reconciled {:?} after the restart", restarted.elapsed());
    assert_eq!((haproxy.state("b0"), haproxy.state("b2")), ("ready", "ready"));
    let dark_before = syns(&topo.backend, BACKENDS[1]);
    assert_eq!(connect_many(&client, 150), 150);
    assert_eq!(
        syns(&topo.backend, BACKENDS[1]),
        dark_before,
        "still none after the restart"
    );
    let sinks = daemon.get("/v1/sinks");
    assert!(sinks[0]["drift_total"].as_u64() >= Some(1), "{sinks}");

    // b1 answers again: after its success window it is ready and gets traffic.
    restore(&topo.backend);
    daemon.wait_status("web", "b1", S::Online, Duration::from_secs(3));
    wait_until("b1 is ready", Duration::from_secs(1), || haproxy.state("b1") == "ready");
    let back_before = syns(&topo.backend, BACKENDS[1]);
    assert_eq!(connect_many(&client, 300), 300);
    assert!(
        syns(&topo.backend, BACKENDS[1]) >= back_before + 90,
        "b1 gets its share again"
    );
    let sinks = daemon.get("/v1/sinks");
    assert_eq!(
        (&sinks[0]["name"], &sinks[0]["in_sync"], &sinks[0]["entries"]),
        (
            &serde_json::json!("web"),
            &serde_json::json!(true),
            &serde_json::json!(3)
        ),
        "{sinks}"
    );
    daemon.stop();
    // Fail-static: stopping probed leaves HAProxy as it is.
    assert_eq!(haproxy.state("b1"), "ready");
}

#[test]
fn a_missing_socket_or_backend_stops_the_start() {
    let (topo, _client) = lb_topology();
    let _a = topo.backend.tcp_listen(&format!("{BACKEND_V4}:80"));
    let files = DaemonFiles::new();
    let nowhere = files.dir.join("no-haproxy.sock");
    let cfg = files.write_config(&config(&files, &nowhere));
    let err = RunningDaemon::start(&topo.prober, cfg, None).err().expect("refused");
    assert!(
        err.contains("sink web") && err.contains(nowhere.to_str().unwrap()) && err.contains("level admin"),
        "{err}"
    );

    // HAProxy runs, but has no backend of that name.
    let haproxy = Haproxy::start(&topo.prober);
    let text = config(&files, &haproxy.socket()).replace("backend = \"web\"", "backend = \"api\"");
    let cfg = files.write_config(&text);
    let err = RunningDaemon::start(&topo.prober, cfg, None).err().expect("refused");
    assert!(err.contains("no backend api") && err.contains("backends: web"), "{err}");

    // A server HAProxy does not have.
    let text = config(&files, &haproxy.socket()).replace("haproxy_server = \"b2\"", "haproxy_server = \"b9\"");
    let cfg = files.write_config(&text);
    let err = RunningDaemon::start(&topo.prober, cfg, None).err().expect("refused");
    assert!(err.contains("no server b9 (endpoint web-3)"), "{err}");
}
