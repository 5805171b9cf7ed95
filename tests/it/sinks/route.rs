//! The route sink with a real routing daemon. A router namespace runs BIRD 2 and peers by eBGP
//! with BIRD on two LB nodes; each node runs `probed run` (the binary, so that it can be
//! killed) in front of two backends of its own, with a route sink for the VIP as
//! docs/operations/sinks.md configures it (demote on), and BIRD configured with the page's
//! block. A client behind the router connects to the VIP, which both nodes serve on `lo`; the
//! router spreads connections over the nodes it has paths to (ECMP).
//!
//! One scenario, in order: both nodes announce and both get clients; A's backends fail and A
//! demotes (the router keeps B's path only); B's fail too and both demote (the VIP stays
//! reachable through both); both recover after their success window and hold-down, not
//! before; a backend flapping faster than the hold-down demotes A once and never brings it
//! back while it flaps; a disabled profile withdraws (demote or not); SIGTERM and SIGKILL each
//! withdraw A's route at once; a restart announces again from the saved health and does not
//! withdraw while it settles. The times it measures are printed.
use std::{
    collections::BTreeMap,
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use probed_tests::{daemon::DaemonFiles, lb::doc_block, probed_bin, procs::Proc, unique_name, Netns};

const VIP: &str = "198.18.250.1";
const ROUTER_AS: u32 = 65000;
const CLIENT: &str = "198.18.30.2";
const CLIENT_GW: &str = "198.18.30.1";
const BACKEND_PORTS: [u16; 2] = [8080, 8081];
const HOLD_DOWN: Duration = Duration::from_secs(1);
/// The BGP session to both nodes, and ECMP over them into the router's main table.
const ROUTER_BIRD: &str = "\
protocol device { }
protocol kernel {
  ipv4 { import none; export all; };
  merge paths on;
}
";

/// A server on the VIP in a node's namespace that answers each connection with the node's
/// name: which node a client reached.
struct VipServer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl VipServer {
    fn start(ns: &Netns, name: &'static str) -> VipServer {
        let listener: TcpListener = ns.tcp_listen(&format!("{VIP}:80"));
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.write_all(name.as_bytes());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        VipServer {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for VipServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Backends that accept connections until dropped (then the checks are refused).
struct Backends(#[allow(dead_code, reason = "held: the listeners close when it drops")] Vec<probed_tests::lb::Backend>);

impl Backends {
    fn start(ns: &Netns, addr: &str) -> Backends {
        Backends(
            BACKEND_PORTS
                .iter()
                .map(|p| probed_tests::lb::Backend::on(ns, &format!("{addr}:{p}")))
                .collect(),
        )
    }
}

/// One LB node: its namespace, its backends' namespace, BIRD, probed and the VIP's server.
struct Node {
    name: &'static str,
    asn: u32,
    /// Its address on the link to the router.
    addr: String,
    backend_addr: String,
    files: DaemonFiles,
    log_dir: PathBuf,
    probed: Option<Proc>,
    backends: Option<Backends>,
    _server: VipServer,
    _bird: Proc,
    back: Netns,
    ns: Netns,
}

impl Node {
    fn config(&self) -> String {
        let health = "[profile.health]\nprotocol = \"tcp\"\ninterval = \"100ms\"\ntimeout = \"100ms\"\n\
                      healthy_threshold = 2\nunhealthy_threshold = 2\n";
        let mut text = self.files.header("tob") + &format!("[[profile]]\nname = \"web\"\ndialect = \"lb\"\n{health}");
        for (i, port) in BACKEND_PORTS.iter().enumerate() {
            text += &format!(
                "\n[[profile.endpoint]]\nname = \"b{i}\"\naddress = \"{}\"\nport = {port}\n",
                self.backend_addr
            );
        }
        text + "\n" + &doc_block("route-sink")
    }

    /// `probed run` in the node's namespace; waits for its API.
    fn start_probed(&mut self) {
        let config = self.files.config_path();
        std::fs::write(&config, self.config()).unwrap();
        let log = self
            .log_dir
            .join(format!("probed-{}-{}.log", self.name, unique_name("")));
        let bin = probed_bin();
        let argv = [bin.to_str().unwrap(), "run", "--config", config.to_str().unwrap()];
        self.probed = Some(Proc::spawn(&self.ns, None, &argv, &log, "probed"));
        let api = self.files.api();
        probed_tests::lb::wait_until("probed's API answers", Duration::from_secs(20), || {
            probed::api::client::request(&api, "GET", "/v1/status").is_ok()
        });
    }

    fn api(&self, method: &str, path: &str) -> u16 {
        probed::api::client::request(&self.files.api(), method, path)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
            .status
    }

    fn fail_backends(&mut self) {
        self.backends = None;
    }

    fn restore_backends(&mut self) {
        // The old ones (if any) let go of their ports first.
        self.backends = None;
        self.backends = Some(Backends::start(&self.back, &self.backend_addr));
    }

    fn signal(&mut self, sig: libc::c_int) {
        let p = self.probed.as_mut().expect("probed runs");
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped.
        unsafe { libc::kill(p.pid() as i32, sig) };
        p.wait(Duration::from_secs(10), || Ok(())).expect("probed ends");
        self.probed = None;
    }
}

/// The router's view of the VIP: which nodes have a route there (by their address) and the
/// AS path length of each, from BIRD; and which next hops its kernel forwards by.
struct Paths {
    bird: BTreeMap<String, usize>,
    kernel: Vec<String>,
    /// What birdc said, for a failure's message.
    said: String,
}

/// Fields drop in order: the processes go before the namespaces they run in.
struct Rig {
    _router_bird: Proc,
    a: Node,
    b: Node,
    router: Netns,
    client: Netns,
    dir: PathBuf,
}

fn bird_conf(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(format!("bird-{name}.conf"));
    std::fs::write(&path, text).unwrap();
    path
}

fn spawn_bird(ns: &Netns, dir: &Path, name: &str, conf: &Path) -> Proc {
    let ctl = dir.join(format!("bird-{name}.ctl"));
    let log = dir.join(format!("bird-{name}.log"));
    let argv = ["bird", "-f", "-c", conf.to_str().unwrap(), "-s", ctl.to_str().unwrap()];
    Proc::spawn(ns, None, &argv, &log, "bird")
}

impl Rig {
    fn new() -> Rig {
        let dir = std::env::temp_dir().join(unique_name("probed-route-"));
        std::fs::create_dir_all(&dir).unwrap();
        let router = Netns::new("rt-r");
        let client = Netns::new("rt-c");
        link(&client, "toc", CLIENT, &router, "frc", CLIENT_GW, 24);
        client.ip(&["route", "add", "default", "via", CLIENT_GW]);
        router.sysctl("net.ipv4.ip_forward", "1");
        router.sysctl("net.ipv4.fib_multipath_hash_policy", "1");
        let a = Self::node(&router, &dir, "a", 1);
        let b = Self::node(&router, &dir, "b", 2);
        let mut conf = format!("router id {CLIENT_GW};\n{ROUTER_BIRD}");
        for n in [&a, &b] {
            conf += &format!(
                "protocol bgp node{} {{\n  local as {ROUTER_AS};\n  neighbor {} as {};\n  connect delay time 1;\n  \
                 ipv4 {{ import all; export none; }};\n}}\n",
                n.name, n.addr, n.asn
            );
        }
        let router_bird = spawn_bird(&router, &dir, "router", &bird_conf(&dir, "router", &conf));
        Rig {
            _router_bird: router_bird,
            a,
            b,
            router,
            client,
            dir,
        }
    }

    /// Node `i`: a link to the router (198.18.3i.0/30), a link to its backends
    /// (198.18.4i.0/24), the VIP on lo, BIRD with the documented block, its backends.
    fn node(router: &Netns, dir: &Path, name: &'static str, i: u8) -> Node {
        let ns = Netns::new(&format!("rt-{name}"));
        let back = Netns::new(&format!("rt-{name}b"));
        let (addr, peer) = (format!("198.18.3{i}.2"), format!("198.18.3{i}.1"));
        link(&ns, "tor", &addr, router, &format!("to{name}"), &peer, 30);
        ns.ip(&["route", "add", "default", "via", &peer]);
        let (own, backend_addr) = (format!("198.18.4{i}.1"), format!("198.18.4{i}.2"));
        link(&ns, "tob", &own, &back, "frn", &backend_addr, 24);
        ns.ip(&["addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
        let asn = ROUTER_AS + u32::from(i);
        let conf = format!(
            "router id {addr};\ndefine NODE_AS = {asn};\nprotocol device {{ }}\n{}\n\
             protocol bgp uplink {{\n  local {addr} as NODE_AS;\n  neighbor {peer} as {ROUTER_AS};\n  \
             connect delay time 1;\n  ipv4 {{ table probed4; import none; export filter probed_export; next hop self; }};\n}}\n",
            doc_block("bird-node")
        );
        let bird = spawn_bird(&ns, dir, name, &bird_conf(dir, name, &conf));
        let backends = Backends::start(&back, &backend_addr);
        let server = VipServer::start(&ns, name);
        let mut node = Node {
            name,
            asn,
            addr,
            backend_addr,
            files: DaemonFiles::new(),
            log_dir: dir.to_path_buf(),
            probed: None,
            backends: Some(backends),
            _server: server,
            _bird: bird,
            back,
            ns,
        };
        node.start_probed();
        node
    }

    fn paths(&self) -> Paths {
        let ctl = self.dir.join("bird-router.ctl");
        let out = std::process::Command::new("birdc")
            .args(["-s", ctl.to_str().unwrap(), "show", "route", "for", VIP, "all"])
            .output()
            .expect("run birdc");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut bird = BTreeMap::new();
        let mut via = None;
        for line in text.lines() {
            if let Some(rest) = line.trim().strip_prefix("via ") {
                via = rest.split_whitespace().next().map(str::to_string);
            }
            if let Some(path) = line.trim().strip_prefix("BGP.as_path:") {
                if let Some(v) = via.take() {
                    bird.insert(v, path.split_whitespace().count());
                }
            }
        }
        let route = self.router.ip(&["route", "show", &format!("{VIP}/32")]);
        let kernel = route
            .split_whitespace()
            .collect::<Vec<_>>()
            .windows(2)
            .filter(|w| w[0] == "via")
            .map(|w| w[1].to_string())
            .collect();
        Paths {
            bird,
            kernel,
            said: text.into_owned(),
        }
    }

    /// Waits (at most `within`) until the router's paths satisfy `ok`; how long it took.
    fn wait_paths(&self, what: &str, within: Duration, ok: impl Fn(&Paths) -> bool) -> Duration {
        let start = Instant::now();
        loop {
            let p = self.paths();
            if ok(&p) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < within,
                "{what} within {within:?}: the router has {:?}, forwards by {:?}\nbirdc: {}\n{}",
                p.bird,
                p.kernel,
                p.said,
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Which node answered each of `n` connections to the VIP from the client.
    fn clients(&self, n: usize) -> BTreeMap<String, usize> {
        let vip: SocketAddr = format!("{VIP}:80").parse().unwrap();
        self.client.enter(move || {
            let mut seen = BTreeMap::new();
            for _ in 0..n {
                let Ok(mut s) = TcpStream::connect_timeout(&vip, Duration::from_secs(1)) else {
                    *seen.entry("(none)".to_string()).or_default() += 1;
                    continue;
                };
                let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                let mut who = String::new();
                let _ = s.read_to_string(&mut who);
                *seen.entry(who).or_default() += 1;
            }
            seen
        })
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "log") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                out += &format!("--- {}\n", path.display());
                out += &tail.into_iter().rev().collect::<Vec<_>>().join("\n");
                out += "\n";
            }
        }
        out
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A veth pair from `a` (named `a_if`, address `a_addr`) to `b`, with /`len` addresses.
fn link(a: &Netns, a_if: &str, a_addr: &str, b: &Netns, b_if: &str, b_addr: &str, len: u8) {
    let tmp = unique_name("rtv");
    let tmp = &tmp[tmp.len().saturating_sub(12)..];
    let (ta, tb) = (format!("a{tmp}"), format!("b{tmp}"));
    probed_tests::run("ip", &["link", "add", &ta, "type", "veth", "peer", "name", &tb]);
    probed_tests::run("ip", &["link", "set", &ta, "netns", &a.name, "name", a_if]);
    probed_tests::run("ip", &["link", "set", &tb, "netns", &b.name, "name", b_if]);
    a.ip(&["addr", "add", &format!("{a_addr}/{len}"), "dev", a_if]);
    b.ip(&["addr", "add", &format!("{b_addr}/{len}"), "dev", b_if]);
    a.ip(&["link", "set", a_if, "up"]);
    b.ip(&["link", "set", b_if, "up"]);
}

/// Demoted: the AS path as the node's export filter leaves it for a demoted route (the node's
/// AS three times: its own and the two it prepends).
fn demoted(p: &Paths, node: &str) -> bool {
    p.bird.get(node) == Some(&3)
}

fn announced(p: &Paths, node: &str) -> bool {
    p.bird.get(node) == Some(&1)
}

#[test]
fn a_vip_route_follows_health_through_bird_and_a_dead_probed_withdraws_it() {
    let mut rig = Rig::new();
    let (a_addr, b_addr) = (rig.a.addr.clone(), rig.b.addr.clone());
    let both = |p: &Paths| p.kernel.len() == 2 && announced(p, &a_addr) && announced(p, &b_addr);
    let t = rig.wait_paths(
        "both nodes announce, and the router forwards over both",
        Duration::from_secs(30),
        both,
    );
    eprintln!("route: both nodes announced {t:?} after the start");
    let seen = rig.clients(60);
    assert!(
        seen.get("a").is_some_and(|n| *n > 5) && seen.get("b").is_some_and(|n| *n > 5),
        "clients reach both nodes: {seen:?}"
    );

    // A's backends fail: A demotes within its fail window (200 ms) plus BGP, and the router
    // forwards to B alone.
    rig.a.fail_backends();
    let t = rig.wait_paths(
        "A demoted, the router forwards to B only",
        Duration::from_secs(5),
        |p| demoted(p, &a_addr) && p.kernel == [b_addr.clone()],
    );
    eprintln!("route: A's backends failed -> the router forwards to B only after {t:?}");
    let seen = rig.clients(40);
    assert_eq!(seen.get("b"), Some(&40), "every new connection goes to B: {seen:?}");

    // B's fail too: both demoted, equal again, and the VIP stays reachable through both.
    rig.b.fail_backends();
    rig.wait_paths("both demoted, forwarded over both", Duration::from_secs(5), |p| {
        demoted(p, &a_addr) && demoted(p, &b_addr) && p.kernel.len() == 2
    });
    let seen = rig.clients(60);
    assert!(
        seen.get("a").is_some_and(|n| *n > 5) && seen.get("b").is_some_and(|n| *n > 5),
        "demoted, the VIP is still served by both: {seen:?}"
    );

    // Both recover: announced again after the success window (200 ms) and the hold-down,
    // not before.
    let restored = Instant::now();
    rig.a.restore_backends();
    rig.b.restore_backends();
    let t = rig.wait_paths("both announced again", Duration::from_secs(10), both);
    eprintln!("route: backends back -> both announced after {t:?} (hold-down {HOLD_DOWN:?})");
    assert!(
        restored.elapsed() >= HOLD_DOWN,
        "a better state must hold for the hold-down first: back after {t:?}"
    );

    // A's backends flap faster than the hold-down: A demotes once and stays demoted until
    // they settle.
    std::thread::sleep(HOLD_DOWN + Duration::from_millis(200));
    let mut changes = 0;
    let mut last = true;
    let flap_until = Instant::now() + Duration::from_secs(5);
    let mut up = true;
    let mut next_flip = Instant::now();
    while Instant::now() < flap_until {
        if Instant::now() >= next_flip {
            if up {
                rig.a.fail_backends();
            } else {
                rig.a.restore_backends();
            }
            up = !up;
            next_flip = Instant::now() + Duration::from_millis(400);
        }
        let now_announced = announced(&rig.paths(), &a_addr);
        if now_announced != last {
            changes += 1;
            last = now_announced;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(changes, 1, "one demotion, and no return while the backends flap");
    rig.a.restore_backends();
    rig.wait_paths("A announced once its backends settle", Duration::from_secs(10), both);

    // A disabled profile withdraws, demote or not.
    assert_eq!(rig.a.api("POST", "/v1/profiles/web/disable"), 200);
    rig.wait_paths("a disabled profile withdraws", Duration::from_secs(5), |p| {
        !p.bird.contains_key(&a_addr) && p.kernel == [b_addr.clone()]
    });
    assert_eq!(rig.a.api("POST", "/v1/profiles/web/enable"), 200);
    rig.wait_paths("enabled again, announced again", Duration::from_secs(10), both);

    // SIGTERM: the routes are withdrawn as probed stops.
    std::thread::sleep(HOLD_DOWN);
    let stopped = Instant::now();
    rig.a.signal(libc::SIGTERM);
    rig.wait_paths("a stopped probed's route is withdrawn", Duration::from_secs(5), |p| {
        !p.bird.contains_key(&a_addr)
    });
    eprintln!(
        "route: SIGTERM -> withdrawn at the router {:?} after the signal",
        stopped.elapsed()
    );
    // Restarted with the same health: announced again from the saved state, at once.
    let restarted = Instant::now();
    rig.a.start_probed();
    rig.wait_paths("the restarted node announces again", Duration::from_secs(10), both);
    eprintln!("route: restart -> announced {:?} after the spawn", restarted.elapsed());

    // SIGKILL: nothing of probed runs, and the kernel takes the routes with the device.
    std::thread::sleep(HOLD_DOWN);
    let killed = Instant::now();
    rig.a.signal(libc::SIGKILL);
    rig.wait_paths("a killed probed's route is withdrawn", Duration::from_secs(5), |p| {
        !p.bird.contains_key(&a_addr) && p.kernel == [b_addr.clone()]
    });
    eprintln!(
        "route: SIGKILL -> withdrawn at the router {:?} after the kill",
        killed.elapsed()
    );
    assert!(
        rig.a
            .ns
            .ip(&["link", "show"])
            .lines()
            .all(|l| !l.contains("probed-vip")),
        "the device went with the process"
    );

    // Restarted with unchanged health: announced, and never withdrawn while it settles.
    rig.a.start_probed();
    rig.wait_paths("the restarted node announces again", Duration::from_secs(10), both);
    let watch_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < watch_until {
        let p = rig.paths();
        assert!(announced(&p, &a_addr), "no withdraw after the restart: {:?}", p.bird);
        std::thread::sleep(Duration::from_millis(50));
    }
}
