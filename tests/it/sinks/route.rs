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
//! before; a backend flapping faster than the hold-down demotes A, and its route changes at
//! most once per hold-down while it flaps; a disabled profile withdraws (demote or not); SIGTERM and SIGKILL each
//! withdraw A's route at once; a restart announces again from the saved health and does not
//! withdraw while it settles. Then the same node under a service manager with a file
//! descriptor store (emulated here as systemd does it): a restart keeps the route announced
//! the whole time, and a stop that is no restart withdraws it when the manager lets go of the
//! device. The times it measures are printed.
use std::{
    collections::BTreeMap,
    io::Read,
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use probed_tests::{daemon::DaemonFiles, lb::doc_block, manager::Manager, probed_bin, procs::Proc, unique_name, Netns};

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
    /// On the VIP, answering with the node's name: which node a client reached.
    _server: probed_tests::lb::Backend,
    /// The routing daemon's processes (BIRD, or FRR's zebra and bgpd).
    _routing: Vec<Proc>,
    routing: Routing,
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
        let sink = doc_block("route-sink");
        match self.routing {
            Routing::Bird => text + "\n" + &sink,
            // Demotion through FRR is not supported (docs/operations/sinks.md says why).
            Routing::Frr => text + "\n" + &sink.replace("demote_metric = 500\n", ""),
        }
    }

    /// `probed run` in the node's namespace; waits for its API.
    fn start_probed(&mut self) {
        self.start_probed_by(None);
    }

    /// As `start_probed`, started by `manager` when given, as systemd starts a service with a
    /// file descriptor store: `NOTIFY_SOCKET`, and what the store holds passed as
    /// `LISTEN_FDS` from descriptor 3 on.
    fn start_probed_by(&mut self, manager: Option<&Manager>) {
        let config = self.files.config_path();
        std::fs::write(&config, self.config()).unwrap();
        let log = self
            .log_dir
            .join(format!("probed-{}-{}.log", self.name, unique_name("")));
        let bin = probed_bin();
        // LISTEN_PID must be the service's own pid: the shell's, which probed takes over.
        let mut cmd = std::process::Command::new("sh");
        cmd.args([
            "-c",
            "LISTEN_PID=$$ WATCHDOG_PID=$$ exec \"$0\" \"$@\"",
            bin.to_str().unwrap(),
        ])
        .args(["run", "--config", config.to_str().unwrap()]);
        if let Some(m) = manager {
            m.prepare(&mut cmd);
        }
        self.probed = Some(Proc::spawn_command(&self.ns, None, cmd, &log, "probed"));
        let api = self.files.api();
        probed_tests::lb::wait_until("probed's API answers", Duration::from_secs(20), || {
            probed::api::client::request(&api, "GET", "/v1/status").is_ok()
        });
    }

    /// What the running probed logged.
    fn log(&self) -> String {
        self.probed.as_ref().map(Proc::output).unwrap_or_default()
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

/// Which routing daemon a node runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Routing {
    Bird,
    Frr,
}

/// FRR's zebra and bgpd on a node, as docs/operations/sinks.md configures them: zebra imports
/// kernel table 201, bgpd announces it. They run as FRR's user, so their directory is open.
fn spawn_frr(ns: &Netns, dir: &Path, name: &str, addr: &str, asn: u32, peer: &str) -> Vec<Proc> {
    use std::os::unix::fs::PermissionsExt;
    let home = dir.join(format!("frr-{name}"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o777)).unwrap();
    let zebra_conf = home.join("zebra.conf");
    std::fs::write(&zebra_conf, format!("hostname {name}\n{}", doc_block("frr-zebra"))).unwrap();
    let bgpd_conf = home.join("bgpd.conf");
    let bgp = doc_block("frr-bgpd")
        .replace("NODE_AS", &asn.to_string())
        .replace("ROUTER_AS", &ROUTER_AS.to_string())
        .replace("ROUTER", peer)
        .replace("router bgp", &format!("hostname {name}\nrouter bgp"))
        .replace(
            " no bgp ebgp-requires-policy",
            &format!(" bgp router-id {addr}\n no bgp ebgp-requires-policy"),
        );
    std::fs::write(&bgpd_conf, bgp).unwrap();
    for f in [&zebra_conf, &bgpd_conf] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let zserv = home.join("zserv.api");
    let common = |conf: &Path, pid: &str| -> Vec<String> {
        [
            "-f",
            conf.to_str().unwrap(),
            "-i",
            home.join(pid).to_str().unwrap(),
            "-z",
            zserv.to_str().unwrap(),
            "--vty_socket",
            home.to_str().unwrap(),
            "-u",
            "frr",
            "-g",
            "frr",
        ]
        .iter()
        .map(ToString::to_string)
        .collect()
    };
    let mut zebra = vec!["/usr/lib/frr/zebra".to_string()];
    zebra.extend(common(&zebra_conf, "zebra.pid"));
    let zebra = Proc::spawn(
        ns,
        None,
        &zebra.iter().map(String::as_str).collect::<Vec<_>>(),
        &dir.join(format!("zebra-{name}.log")),
        "zebra",
    );
    // bgpd talks to zebra through its socket: wait for it.
    probed_tests::lb::wait_until("zebra's socket", Duration::from_secs(10), || zserv.exists());
    let mut bgpd = vec!["/usr/lib/frr/bgpd".to_string()];
    bgpd.extend(common(&bgpd_conf, "bgpd.pid"));
    bgpd.extend(["-p".to_string(), "179".to_string()]);
    let bgpd = Proc::spawn(
        ns,
        None,
        &bgpd.iter().map(String::as_str).collect::<Vec<_>>(),
        &dir.join(format!("bgpd-{name}.log")),
        "bgpd",
    );
    // bgpd before zebra when they go (the Vec drops in order).
    vec![bgpd, zebra]
}

impl Rig {
    fn new() -> Rig {
        Self::with(Routing::Bird, Routing::Bird)
    }

    /// A router, a client, and node A running `a` and node B running `b`.
    fn with(a: Routing, b: Routing) -> Rig {
        let dir = std::env::temp_dir().join(unique_name("probed-route-"));
        std::fs::create_dir_all(&dir).unwrap();
        let router = Netns::new("rt-r");
        let client = Netns::new("rt-c");
        link(&client, "toc", CLIENT, &router, "frc", CLIENT_GW, 24);
        client.ip(&["route", "add", "default", "via", CLIENT_GW]);
        router.sysctl("net.ipv4.ip_forward", "1");
        router.sysctl("net.ipv4.fib_multipath_hash_policy", "1");
        let a = Self::node(&router, &dir, "a", 1, a);
        let b = Self::node(&router, &dir, "b", 2, b);
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
    /// (198.18.4i.0/24), the VIP on lo, BIRD with the documented block (or FRR), its backends.
    fn node(router: &Netns, dir: &Path, name: &'static str, i: u8, routing: Routing) -> Node {
        let ns = Netns::new(&format!("rt-{name}"));
        let back = Netns::new(&format!("rt-{name}b"));
        let (addr, peer) = (format!("198.18.3{i}.2"), format!("198.18.3{i}.1"));
        link(&ns, "tor", &addr, router, &format!("to{name}"), &peer, 30);
        ns.ip(&["route", "add", "default", "via", &peer]);
        let (own, backend_addr) = (format!("198.18.4{i}.1"), format!("198.18.4{i}.2"));
        link(&ns, "tob", &own, &back, "frn", &backend_addr, 24);
        match routing {
            Routing::Bird => {
                ns.ip(&["addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
            }
            // zebra would take an address on lo for a connected route, which wins over the
            // imported one: FRR nodes hold the VIP as a local route instead (as the docs say).
            Routing::Frr => {
                ns.ip(&["route", "add", "local", &format!("{VIP}/32"), "dev", "lo"]);
            }
        }
        let asn = ROUTER_AS + u32::from(i);
        let conf = format!(
            "router id {addr};\ndefine NODE_AS = {asn};\nprotocol device {{ }}\n{}\n\
             protocol bgp uplink {{\n  local {addr} as NODE_AS;\n  neighbor {peer} as {ROUTER_AS};\n  \
             connect delay time 1;\n  ipv4 {{ table probed4; import none; export filter probed_export; next hop self; }};\n}}\n",
            doc_block("bird-node")
        );
        let processes = match routing {
            Routing::Bird => vec![spawn_bird(&ns, dir, name, &bird_conf(dir, name, &conf))],
            Routing::Frr => spawn_frr(&ns, dir, name, &addr, asn, &peer),
        };
        let backends = Backends::start(&back, &backend_addr);
        let server = probed_tests::lb::Backend::answering(&ns, &format!("{VIP}:80"), name);
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
            _routing: processes,
            routing,
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
    // Both prefixes of the sink, IPv4 and IPv6, are in the node's table, through its device.
    let v6 = rig.a.ns.ip(&["-6", "route", "show", "table", "201"]);
    assert!(
        v6.contains("2001:2:250::1 dev probed-vip proto 201 metric 100"),
        "the IPv6 prefix's route: {v6}"
    );
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

    // A's backends flap faster than the hold-down: A demotes, and its route changes at most
    // once per hold-down until they settle.
    std::thread::sleep(HOLD_DOWN + Duration::from_millis(200));
    let mut changes = 0;
    let mut last = true;
    let mut seen = Vec::new();
    let flap_start = Instant::now();
    let flap_until = flap_start + Duration::from_secs(5);
    // The flips keep their own clock on a thread of their own: a slow birdc under load must
    // not stretch an up phase past the hold-down, which would rightly announce again.
    let (back, addr) = (&rig.a.back, rig.a.backend_addr.clone());
    let mut held = rig.a.backends.take();
    let mut longest_up = Duration::ZERO;
    std::thread::scope(|s| {
        let flipper = s.spawn(|| {
            let mut up = true;
            let mut since = Instant::now();
            while Instant::now() < flap_until {
                if up {
                    longest_up = longest_up.max(since.elapsed());
                    held = None;
                } else {
                    held = Some(Backends::start(back, &addr));
                    since = Instant::now();
                }
                up = !up;
                std::thread::sleep(Duration::from_millis(400));
            }
            if up {
                longest_up = longest_up.max(since.elapsed());
            }
        });
        while Instant::now() < flap_until {
            let p = rig.paths();
            let now_announced = announced(&p, &a_addr);
            if now_announced != last {
                changes += 1;
                last = now_announced;
                seen.push(format!("{:?}: {:?} {:?}", flap_start.elapsed(), p.bird, p.kernel));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        flipper.join().expect("the flipping thread");
    });
    rig.a.backends = held;
    assert!(
        longest_up < HOLD_DOWN,
        "an up phase lasted {longest_up:?}: the flips fell behind"
    );
    // Nine flips in five seconds, and the route changed at most once per hold-down: a demotion,
    // and at most one return and demotion more. Exactly one is not asserted: on this 2-core
    // machine the two endpoints' checks were now and then seen out of phase (the sink said
    // "1 of 2 endpoints serve" for a whole hold-down, which rightly announces), with or
    // without this stop's changes.
    eprintln!("route: flapping backends -> the router saw {seen:?}");
    assert!(
        (1..=3).contains(&changes) && seen.first().is_some_and(|s| s.contains(&format!("\"{a_addr}\": 3"))),
        "demoted first, and at most one change per hold-down while the backends flap: the router saw \
         {seen:?}\n{}\nevents:\n{}",
        rig.a.log(),
        std::fs::read_to_string(rig.a.files.events()).unwrap_or_default()
    );
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

    // Under a service manager with a descriptor store: a restart keeps the route the whole
    // time, down to the router's kernel.
    rig.a.signal(libc::SIGTERM);
    let mut manager = Manager::new(&rig.dir);
    rig.a.start_probed_by(Some(&manager));
    rig.wait_paths("started by the manager, announced", Duration::from_secs(10), both);
    manager.collect();
    assert!(
        manager.store.contains_key("route-probed-vip.201.201"),
        "probed handed its device to the store: {:?}",
        manager.store.keys().collect::<Vec<_>>()
    );
    let restart = Instant::now();
    rig.a.signal(libc::SIGTERM);
    manager.collect();
    let mut down = Vec::new();
    let watch = |rig: &Rig, down: &mut Vec<Duration>| {
        let p = rig.paths();
        if !(announced(&p, &a_addr) && p.kernel.len() == 2) {
            down.push(restart.elapsed());
        }
    };
    // Down between the two processes for a while, as a slow restart is.
    let until = Instant::now() + Duration::from_millis(700);
    while Instant::now() < until {
        watch(&rig, &mut down);
        std::thread::sleep(Duration::from_millis(20));
    }
    rig.a.start_probed_by(Some(&manager));
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        watch(&rig, &mut down);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        down.is_empty(),
        "a restart through the store never withdraws: down at {down:?}\n{}",
        rig.logs()
    );
    // The new probed took the device over (rather than the manager's copy merely keeping
    // it), and its sink holds what it should.
    let sinks = probed::api::client::request(&rig.a.files.api(), "GET", "/v1/sinks").expect("GET /v1/sinks");
    let sinks: serde_json::Value = serde_json::from_str(&sinks.body).unwrap();
    assert_eq!(sinks[0]["in_sync"], true, "{sinks}");
    assert_eq!(sinks[0]["routes"][0]["state"], "announced", "{sinks}");
    assert!(
        rig.a.log().contains("took over probed-vip from the service manager"),
        "{}",
        rig.a.log()
    );
    eprintln!(
        "route: restart through the descriptor store -> announced throughout ({:?} watched)",
        restart.elapsed()
    );

    // A stop that is no restart: the manager lets go of the device once the process is gone,
    // and the kernel takes the routes with it.
    rig.a.signal(libc::SIGTERM);
    manager.collect();
    std::thread::sleep(Duration::from_millis(300));
    assert!(announced(&rig.paths(), &a_addr), "held by the manager while it decides");
    let released = Instant::now();
    manager.store.clear();
    rig.wait_paths("released by the manager, withdrawn", Duration::from_secs(5), |p| {
        !p.bird.contains_key(&a_addr) && p.kernel == [b_addr.clone()]
    });
    eprintln!(
        "route: the manager let go of the device -> withdrawn after {:?}",
        released.elapsed()
    );
}

/// The same node behaviour with FRR as node B's routing daemon (zebra importing kernel table
/// 201, bgpd announcing it, as the docs configure them): B announces beside A (BIRD) and the
/// router spreads clients over both, B withdraws when its backends fail, announces again when
/// they are back, and withdraws when probed stops.
#[test]
fn frr_announces_and_withdraws_a_vip_route_as_bird_does() {
    let mut rig = Rig::with(Routing::Bird, Routing::Frr);
    let (a_addr, b_addr) = (rig.a.addr.clone(), rig.b.addr.clone());
    let both = |p: &Paths| p.kernel.len() == 2 && announced(p, &a_addr) && announced(p, &b_addr);
    let t = rig.wait_paths("A (BIRD) and B (FRR) announce", Duration::from_secs(30), both);
    eprintln!("route (FRR): both nodes announced {t:?} after the start");
    let seen = rig.clients(60);
    assert!(
        seen.get("a").is_some_and(|n| *n > 5) && seen.get("b").is_some_and(|n| *n > 5),
        "clients reach both nodes: {seen:?}"
    );
    rig.b.fail_backends();
    let t = rig.wait_paths("B withdrawn through FRR", Duration::from_secs(5), |p| {
        !p.bird.contains_key(&b_addr) && p.kernel == [a_addr.clone()]
    });
    eprintln!("route (FRR): B's backends failed -> the router forwards to A only after {t:?}");
    rig.b.restore_backends();
    rig.wait_paths("B announced again through FRR", Duration::from_secs(10), both);
    // A stop deletes the routes, and zebra hears it. (A crash does not reach FRR 8.4: the
    // kernel removes a device's routes without a message, and zebra keeps them; the docs say
    // so. BIRD notices the device go.)
    std::thread::sleep(HOLD_DOWN);
    let stopped = Instant::now();
    rig.b.signal(libc::SIGTERM);
    rig.wait_paths(
        "a stopped probed's route withdrawn through FRR",
        Duration::from_secs(5),
        |p| !p.bird.contains_key(&b_addr) && p.kernel == [a_addr.clone()],
    );
    eprintln!(
        "route (FRR): SIGTERM -> withdrawn at the router {:?} after the signal",
        stopped.elapsed()
    );
}

/// A reload moves only what it changes (issue 45): while node A's backends are healthy,
/// reloads of A that change its health check's timing and thresholds and each key of its
/// route sink never cost A its path at the router (sampled every few milliseconds), and the
/// sink counts no announcement change. An added prefix is announced beside the VIP.
#[test]
fn reloads_of_health_and_route_sink_keys_never_withdraw_the_vip() {
    let rig = Rig::new();
    let (a_addr, b_addr) = (rig.a.addr.clone(), rig.b.addr.clone());
    let both = |p: &Paths| p.kernel.len() == 2 && announced(p, &a_addr) && announced(p, &b_addr);
    rig.wait_paths("both nodes announce", Duration::from_secs(30), both);
    // Past the hold-down, so that nothing is pending when the reloads come.
    std::thread::sleep(HOLD_DOWN + Duration::from_millis(200));
    let sink_changes = |rig: &Rig| {
        let sinks = probed::api::client::request(&rig.a.files.api(), "GET", "/v1/sinks").expect("GET /v1/sinks");
        let sinks: serde_json::Value = serde_json::from_str(&sinks.body).unwrap();
        (
            sinks[0]["routes"][0]["changes"].clone(),
            sinks[0]["routes"][0]["state"].clone(),
        )
    };
    let before = sink_changes(&rig);
    let first = rig.a.config();
    let sink_key = |line: &str| first.replace("hold_down = \"1s\"\n", &format!("hold_down = \"1s\"\n{line}\n"));
    let mut steps = probed_tests::lb::timing_edits(&first);
    steps.extend([
        ("hold_down", first.replace("hold_down = \"1s\"", "hold_down = \"2s\"")),
        ("min_eligible", sink_key("min_eligible = 2")),
        (
            "demote_metric",
            first.replace("demote_metric = 500", "demote_metric = 600"),
        ),
        (
            "prefixes",
            first.replace(
                "prefixes = [\"198.18.250.1/32\",",
                "prefixes = [\"198.18.250.1/32\", \"198.18.251.1/32\",",
            ),
        ),
        ("metric", sink_key("metric = 110")),
        ("the first file again", first.clone()),
    ]);
    for (what, text) in &steps {
        assert!(
            text != &first || *what == "the first file again",
            "{what}: the edit applies"
        );
        // The node's own table, as netlink tells it: a deletion of the VIP's route shows a
        // gap the router may be too slow to see.
        let monitor_log = rig.dir.join(format!("monitor-{}.txt", unique_name("")));
        let monitor = Proc::spawn(
            &rig.a.ns,
            None,
            &["ip", "-o", "monitor", "route"],
            &monitor_log,
            "ip monitor",
        );
        std::thread::sleep(Duration::from_millis(200));
        std::fs::write(rig.a.files.config_path(), text).unwrap();
        let reloaded = Instant::now();
        let r = probed::api::client::request(&rig.a.files.api(), "POST", "/v1/reload").expect("POST /v1/reload");
        assert_eq!(r.status, 200, "reload ({what}): {}", r.body);
        while reloaded.elapsed() < Duration::from_millis(1200) {
            let p = rig.paths();
            assert!(
                both(&p),
                "after a reload of {what} ({:?} in), the router has {:?} and forwards by {:?}\n{}",
                reloaded.elapsed(),
                p.bird,
                p.kernel,
                rig.logs()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(monitor);
        let seen = std::fs::read_to_string(&monitor_log).unwrap_or_default();
        // Only a new metric touches the VIP's route (the new one added before the old one
        // goes). Anything else written there means the route was made again: the kernel took
        // the first with its device, silently (no deletion is told for IPv4).
        let metric_change = *what == "metric" || *what == "the first file again";
        let touched: Vec<&str> = (seen.lines())
            .filter(|l| l.contains(&format!("{VIP} ")) && l.contains("table 201") && !metric_change)
            .collect();
        assert!(
            touched.is_empty(),
            "a reload of {what} wrote the VIP's route again: {touched:?}"
        );
        if *what == "prefixes" {
            let table = rig.a.ns.ip(&["route", "show", "table", "201"]);
            assert!(
                table.contains("198.18.250.1 dev probed-vip") && table.contains("198.18.251.1 dev probed-vip"),
                "both prefixes through the device: {table}"
            );
        }
        if *what == "metric" {
            let table = rig.a.ns.ip(&["route", "show", "table", "201"]);
            assert!(table.contains("metric 110") && !table.contains("metric 100"), "{table}");
        }
        eprintln!("route: a reload of {what} kept A announced throughout");
    }
    assert_eq!(sink_changes(&rig), before, "the sink never changed its announcement");
    assert!(
        rig.a.log().contains("taking over the same structure"),
        "{}",
        rig.a.log()
    );
}
