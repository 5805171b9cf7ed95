//! The haproxy sink with a real HAProxy (Debian's) in the load balancer's namespace, its
//! configuration and probed's taken verbatim from docs/operations/sinks.md (HAProxy): a client's
//! connections through HAProxy reach all three backends; one backend dropped is put in maint
//! after its fail window and gets no new connection; HAProxy restarted (every server back to
//! `ready`) is set right by probed's next read-back; the backend restored comes back. And a
//! sink whose socket or backend is missing stops the start with a clear error; a socket that
//! trickles or floods its answers fails each request within its bound, and the sink goes on.
use std::{
    collections::BTreeMap,
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    os::unix::net::{UnixListener, UnixStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    thread::JoinHandle,
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
    /// Seconds since `server`'s last change of state, as `show stat` counts them (`lastchg`):
    /// a server set to maint and back, however briefly, starts again from 0.
    fn since_change(&self, server: &str) -> u64 {
        let stat = self.ask("show stat");
        probed_tests::lb::haproxy_stat_rows(&stat)
            .into_iter()
            .find(|r| r.get("pxname").is_some_and(|p| p == "web") && r.get("svname").is_some_and(|s| s == server))
            .and_then(|r| r.get("lastchg")?.parse().ok())
            .unwrap_or_else(|| panic!("no lastchg for {server}:\n{stat}"))
    }

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
    topo.backend.static_neighbour(PROBE_SOURCE, &prober_mac, BACKEND_IF);
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

/// How the stand-in admin socket answers.
const SERVE: u8 = 0;
/// One byte every 100 ms, for as long as the connection lasts.
const TRICKLE: u8 = 1;
/// A dump of backend web, then other backends' lines, 17 MiB in all (more than the sink reads).
const FLOOD: u8 = 2;

/// `show servers state` columns, as HAProxy 2.6 names them.
const STATE_HEADER: &str = "# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight \
     srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state \
     srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port \
     srv_check_addr srv_agent_addr srv_agent_port";

/// A stand-in for HAProxy's admin socket, served by the test: backend web with servers b0 and
/// b1 (`srv_admin_state` flags in `held`), answered as the mode says. Every connection ends
/// when it is dropped.
struct FakeAdmin {
    path: PathBuf,
    mode: Arc<AtomicU8>,
    held: Arc<Mutex<BTreeMap<String, u32>>>,
    /// Connections the sink closed while being trickled or flooded.
    hung_up: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl FakeAdmin {
    fn start(path: PathBuf) -> FakeAdmin {
        let listener = UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let mut fake = FakeAdmin {
            path,
            mode: Arc::new(AtomicU8::new(SERVE)),
            held: Arc::new(Mutex::new(BTreeMap::from([("b0".into(), 0), ("b1".into(), 0)]))),
            hung_up: Arc::new(AtomicUsize::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
            accept: None,
        };
        let (mode, held, hung_up, stop) = (
            fake.mode.clone(),
            fake.held.clone(),
            fake.hung_up.clone(),
            fake.stop.clone(),
        );
        fake.accept = Some(std::thread::spawn(move || {
            let mut served = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        let (mode, held, hung_up, stop) = (mode.clone(), held.clone(), hung_up.clone(), stop.clone());
                        served.push(std::thread::spawn(move || {
                            serve(s, mode.load(Ordering::Relaxed), &held, &hung_up, &stop);
                        }));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
            for t in served {
                let _ = t.join();
            }
        }));
        fake
    }

    fn set_mode(&self, mode: u8) {
        self.mode.store(mode, Ordering::Relaxed);
    }

    fn admin_state(&self, server: &str) -> u32 {
        self.held.lock().unwrap()[server]
    }
}

impl Drop for FakeAdmin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Ends a `FakeAdmin`'s connections when dropped: declared after the daemon, it goes first, so
/// a sink stuck in a read (without the bound) gets its end and the daemon can stop.
struct EndsConnections(Arc<AtomicBool>);

impl Drop for EndsConnections {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// One connection: reads the command line, answers it as `mode` says.
fn serve(mut s: UnixStream, mode: u8, held: &Mutex<BTreeMap<String, u32>>, hung_up: &AtomicUsize, stop: &AtomicBool) {
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while matches!(s.read(&mut byte), Ok(1)) && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&line).into_owned();
    let dump = |held: &BTreeMap<String, u32>| {
        let mut text = format!("1\n{STATE_HEADER}\n");
        for (i, (name, flags)) in held.iter().enumerate() {
            text += &format!("2 web {i} {name} 198.18.0.2 2 {flags} 1 1 0 1 0 0 0 0 0 0 - 80 - 0 0 - - 0\n");
        }
        text
    };
    match mode {
        TRICKLE => {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                if s.write_all(b"1").is_err() {
                    hung_up.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }
        FLOOD => {
            let mut sent = dump(&held.lock().unwrap());
            let other = "3 other 1 x 198.18.0.9 2 0 1 1 0 1 0 0 0 0 0 0 - 80 - 0 0 - - 0\n".repeat(1000);
            let mut total = 0;
            while total < 17 << 20 && !stop.load(Ordering::Relaxed) {
                if s.write_all(sent.as_bytes()).is_err() {
                    hung_up.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                total += sent.len();
                sent.clone_from(&other);
            }
        }
        _ => {
            let mut held = held.lock().unwrap();
            let mut answer = String::new();
            for command in line.split(';') {
                let words: Vec<&str> = command.split_whitespace().collect();
                match words.as_slice() {
                    ["show", "servers", "state", "web"] => answer += &(dump(&held) + "\n"),
                    ["set", "server", target, "state", state] => {
                        let flags = if *state == "ready" { 0 } else { 1 };
                        let name = target.trim_start_matches("web/");
                        match held.get_mut(name) {
                            Some(f) => {
                                *f = flags;
                                answer += "\n";
                            }
                            None => answer += "No such server.\n\n",
                        }
                    }
                    ["set", "server", _, "weight", _] => answer += "\n",
                    _ => answer += "Unknown command.\n\n",
                }
            }
            let _ = s.write_all(answer.as_bytes());
        }
    }
}

/// The one sink's view in `/v1/sinks`.
fn sink_view(daemon: &RunningDaemon) -> serde_json::Value {
    daemon.get("/v1/sinks")[0].clone()
}

/// A socket that trickles its answer (one byte every 100 ms, never ending) or floods it (17 MiB)
/// fails the request within its bound (5 s in all, 16 MiB), as an error the sink shows and
/// retries; the change that came meanwhile is written once the socket answers again.
/// Without the bounds the first trickled request held the sink's thread for ever.
#[test]
fn a_trickling_or_flooding_socket_fails_each_request_in_time_and_the_sink_goes_on() {
    let topo = Topology::new();
    let _b0 = topo.backend.tcp_listen(&format!("{BACKEND_V4}:80"));
    let files = DaemonFiles::new();
    let fake = FakeAdmin::start(files.dir.join("admin.sock"));
    let health = "[profile.health]\nprotocol = \"tcp\"\ninterval = \"100ms\"\ntimeout = \"100ms\"\n\
                  healthy_threshold = 2\nunhealthy_threshold = 2\n";
    let text = files.header(PROBER_IF)
        + &format!(
            "[[profile]]\nname = \"web\"\ndialect = \"lb\"\n{health}\n\
             [[profile.endpoint]]\nname = \"b0\"\naddress = \"{BACKEND_V4}\"\nport = 80\n\n\
             [[profile.endpoint]]\nname = \"b1\"\naddress = \"{BACKEND_V4}\"\nport = 81\n\n\
             [[sink]]\nname = \"lb\"\nprofile = \"web\"\nkind = \"haproxy\"\nsocket = \"{}\"\n\
             backend = \"web\"\ndown = \"maint\"\n",
            fake.path.display()
        );
    let daemon = RunningDaemon::start(&topo.prober, files.write_config(&text), None).expect("start");
    let _ends = EndsConnections(fake.stop.clone());
    daemon.wait_status("web", "b0", S::Online, Duration::from_secs(5));
    daemon.wait_status("web", "b1", S::Degraded, Duration::from_secs(5));
    wait_until("b1 is in maint", Duration::from_secs(3), || fake.admin_state("b1") == 1);

    // Trickled: b1 comes back meanwhile; the sync that would set it ready fails at 5 s.
    fake.set_mode(TRICKLE);
    let errors = sink_view(&daemon)["errors_total"].as_u64().unwrap();
    let since = Instant::now();
    let _b1 = topo.backend.tcp_listen(&format!("{BACKEND_V4}:81"));
    daemon.wait_status("web", "b1", S::Online, Duration::from_secs(3));
    wait_until("a trickled request fails", Duration::from_secs(11), || {
        let v = sink_view(&daemon);
        v["errors_total"].as_u64() > Some(errors)
            && v["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("no whole answer to `show servers state web` within 5s"))
    });
    eprintln!(
        "a trickled request failed {:?} after the trickle began",
        since.elapsed()
    );
    assert_eq!(fake.admin_state("b1"), 1, "nothing was written");
    wait_until("the sink hangs up on the trickle", Duration::from_secs(1), || {
        fake.hung_up.load(Ordering::Relaxed) >= 1
    });

    // Flooded: the request fails at 16 MiB, the sink hangs up.
    fake.set_mode(FLOOD);
    let hung_up = fake.hung_up.load(Ordering::Relaxed);
    wait_until("a flooded request fails", Duration::from_secs(12), || {
        sink_view(&daemon)["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("the answer to `show servers state web` is longer than 16 MiB"))
    });
    wait_until("the sink hangs up on the flood", Duration::from_secs(1), || {
        fake.hung_up.load(Ordering::Relaxed) > hung_up
    });

    // Answered again: the retry writes the change that came during the trouble.
    fake.set_mode(SERVE);
    wait_until("b1 is set ready", Duration::from_secs(8), || {
        fake.admin_state("b1") == 0
    });
    wait_until("the sink is in sync", Duration::from_secs(2), || {
        sink_view(&daemon)["in_sync"] == true
    });
    daemon.stop();
}

/// A reload moves only what it changes (issue 45): with b1 failed (maint) and the others
/// ready, reloads that change the health check's timing and thresholds and the sink's own
/// `on_stop` (from `clear`, which a sink replaced rather than handed over would carry out)
/// change no server's state in HAProxy, not even for a moment (HAProxy's own clock of each
/// server's last change says so).
#[test]
fn reloads_of_health_and_sink_keys_change_no_server_state() {
    let (topo, client) = lb_topology();
    let _servers: Vec<Backend> = BACKENDS.iter().map(|b| Backend::start(&topo.backend, b)).collect();
    let haproxy = Haproxy::start(&topo.prober);
    let files = DaemonFiles::new();
    let first =
        config(&files, &haproxy.socket()).replace("kind = \"haproxy\"\n", "kind = \"haproxy\"\non_stop = \"clear\"\n");
    assert!(first.contains("on_stop = \"clear\""), "{first}");
    let cfg = files.write_config(&first);
    let daemon = RunningDaemon::start(&topo.prober, cfg, Some(&files.config_path())).expect("start the daemon");
    go_dark(&topo.backend, BACKENDS[1]);
    daemon.wait_status("web", "b1", S::Degraded, Duration::from_secs(5));
    for e in ["b0", "web-3"] {
        daemon.wait_status("web", e, S::Online, Duration::from_secs(5));
    }
    wait_until("b1 is in maint", Duration::from_secs(1), || {
        haproxy.state("b1") == "maint"
    });
    let states = |h: &Haproxy| [h.state("b0"), h.state("b1"), h.state("b2")];
    let before = states(&haproxy);
    assert_eq!(before, ["ready", "maint", "ready"]);
    // Long enough for a reset of HAProxy's change clock to show.
    std::thread::sleep(Duration::from_secs(2));
    let settled = (haproxy.since_change("b0"), haproxy.since_change("b2"));
    assert!(settled.0 >= 2 && settled.1 >= 2, "{settled:?}");
    let mut steps = probed_tests::lb::timing_edits(&first);
    steps.push((
        "the sink's on_stop",
        first.replace("on_stop = \"clear\"\n", "on_stop = \"keep\"\n"),
    ));
    for (what, text) in steps {
        assert_ne!(text, first, "{what}: the edit applies");
        std::fs::write(files.config_path(), &text).unwrap();
        let (code, v) = daemon.call("POST", "/v1/reload");
        assert_eq!(code, 200, "reload ({what}): {v}");
        let watch_until = Instant::now() + Duration::from_millis(800);
        while Instant::now() < watch_until {
            assert_eq!(states(&haproxy), before, "a reload of {what} changed a server's state");
            std::thread::sleep(Duration::from_millis(20));
        }
        // A sink replaced rather than handed over would have cleared (every server to
        // maint) and set them back: too fast for the sampling above, not for HAProxy's clock.
        let since = (haproxy.since_change("b0"), haproxy.since_change("b2"));
        assert!(
            since.0 >= settled.0 && since.1 >= settled.1,
            "a reload of {what} changed a ready server's state and back: {since:?} after {settled:?}"
        );
        assert_eq!(daemon.endpoint("web", "b1").status, S::Degraded, "after {what}");
    }
    let dark_before = syns(&topo.backend, BACKENDS[1]);
    assert_eq!(connect_many(&client, 150), 150, "the other two take every connection");
    assert_eq!(syns(&topo.backend, BACKENDS[1]), dark_before, "none reaches b1");
    daemon.stop();
}

/// Issue 45, slow start: with `slow_start = "4s"` and weights of 100, a server back from
/// maint is set ready at weight 1 (1%) and its weight, as HAProxy itself reports it
/// (`show servers state`, srv_uweight), climbs in steps to 100; HAProxy's own balancing sends
/// it few of the first connections and its share at the end.
#[test]
fn a_returning_server_climbs_to_its_weight_over_the_slow_start() {
    let (topo, client) = lb_topology();
    let _servers: Vec<Backend> = BACKENDS.iter().map(|b| Backend::start(&topo.backend, b)).collect();
    let haproxy = Haproxy::start(&topo.prober);
    let files = DaemonFiles::new();
    let text = config(&files, &haproxy.socket())
        .replace(
            "routing = \"weighted\"\n",
            "routing = \"weighted\"\nslow_start = \"4s\"\n",
        )
        .replace("\"\n\n[[profile.endpoint]]", "\"\nweight = 100\n\n[[profile.endpoint]]")
        .replace("haproxy_server = \"b2\"\n", "haproxy_server = \"b2\"\nweight = 100\n");
    assert_eq!(text.matches("weight = 100").count(), 3, "{text}");
    let daemon = RunningDaemon::start(&topo.prober, files.write_config(&text), None).expect("start the daemon");
    for e in ["b0", "b1", "web-3"] {
        daemon.wait_status("web", e, S::Online, Duration::from_secs(5));
    }
    let weight = |server: &str| -> u32 {
        let dump = haproxy.ask("show servers state web");
        let line = dump
            .lines()
            .find(|l| l.split_whitespace().nth(3) == Some(server))
            .unwrap_or_else(|| panic!("no server {server} in:\n{dump}"));
        line.split_whitespace().nth(7).unwrap().parse().unwrap()
    };
    // The first verdicts after the start take no ramp: every server at its weight at once.
    wait_until("every server at weight 100", Duration::from_secs(2), || {
        ["b0", "b1", "b2"].iter().all(|s| weight(s) == 100)
    });

    go_dark(&topo.backend, BACKENDS[1]);
    daemon.wait_status("web", "b1", S::Degraded, Duration::from_secs(3));
    wait_until("b1 is in maint", Duration::from_secs(1), || {
        haproxy.state("b1") == "maint"
    });
    restore(&topo.backend);
    daemon.wait_status("web", "b1", S::Online, Duration::from_secs(3));
    let back = Instant::now();
    wait_until("b1 is ready", Duration::from_secs(1), || haproxy.state("b1") == "ready");
    let before = syns(&topo.backend, BACKENDS[1]);
    assert_eq!(connect_many(&client, 100), 100);
    let early = syns(&topo.backend, BACKENDS[1]) - before;
    assert!(
        early <= 15,
        "{early} of 100 connections reached b1 at the start of its ramp"
    );
    let mut weights = vec![(back.elapsed().as_millis(), weight("b1"))];
    while weights.last().unwrap().1 < 100 && back.elapsed() < Duration::from_secs(8) {
        std::thread::sleep(Duration::from_millis(50));
        weights.push((back.elapsed().as_millis(), weight("b1")));
    }
    eprintln!("b1's weight in HAProxy over its ramp (ms since Online, weight): {weights:?}");
    assert!(weights[0].1 <= 15, "{weights:?}");
    assert_eq!(weights.last().unwrap().1, 100, "{weights:?}");
    assert!(weights.windows(2).all(|w| w[0].1 <= w[1].1), "never down: {weights:?}");
    let mut distinct: Vec<u32> = weights.iter().map(|w| w.1).collect();
    distinct.dedup();
    assert!(distinct.len() >= 10, "in steps: {weights:?}");
    let took = weights.last().unwrap().0;
    assert!((3_500..=6_000).contains(&took), "took {took} ms for 4 s: {weights:?}");
    assert_eq!((weight("b0"), weight("b2")), (100, 100), "the others are left alone");
    let before = syns(&topo.backend, BACKENDS[1]);
    assert_eq!(connect_many(&client, 300), 300);
    assert!(
        syns(&topo.backend, BACKENDS[1]) >= before + 90,
        "b1 gets its share again"
    );
    daemon.stop();
}
