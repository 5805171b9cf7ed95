//! The agent check against its oracle: HAProxy 2.6's own agent-check and probed ask the same
//! agents (one per backend address, in the backend's namespace, answering whatever line the
//! test sets), beside the same TCP health check; after each round of answers, every server's
//! state (up, down, drain, maint) and weight are equal in both. The rounds go through every
//! kind of word, the words that hold until the agent says otherwise, answers that change
//! nothing (no line, no agent at all), IPv4 and IPv6. And `probed check agent://` reads the
//! same lines.
use std::{
    collections::BTreeMap,
    io::{Read, Write},
    net::TcpListener,
    os::unix::net::UnixStream,
    path::Path,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use probed::status::AdminState;
use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    lb::{add_backends, bracket, Backend},
    procs::Proc,
    topo::*,
    unique_name, Netns, Topology,
};

const AGENT_PORT: u16 = 9999;

/// One backend of the oracle table: its address, whether its health check passes, and what
/// its agent answers in each round (None: it closes without a line; no agent at all when the
/// address is in `NO_AGENT`).
struct Case {
    addr: &'static str,
    healthy: bool,
    rounds: [Option<&'static str>; 2],
}

const fn case(addr: &'static str, healthy: bool, first: Option<&'static str>, second: Option<&'static str>) -> Case {
    Case {
        addr,
        healthy,
        rounds: [first, second],
    }
}

const CASES: [Case; 16] = [
    case("198.18.0.2", true, Some("up\n"), Some("up\n")),
    case("198.18.0.3", true, Some("down\n"), Some("up\n")),
    // up does not hide a failing check.
    case("198.18.0.4", false, Some("up\n"), Some("up\n")),
    // drain holds through a reply with no admin word; ready ends maint.
    case("198.18.0.5", true, Some("drain\n"), Some("up\n")),
    case("198.18.0.6", true, Some("maint\n"), Some("ready\n")),
    // A weight holds through replies without one.
    case("198.18.0.7", true, Some("50%\n"), Some("up\n")),
    case("198.18.0.8", true, Some("drain 30%\n"), Some("ready\n")),
    case("198.18.0.9", true, Some("ready\n"), Some("maint\n")),
    // No line changes nothing; fail is down, with a description.
    case("198.18.0.10", true, None, Some("fail # disk full\n")),
    // A line cut short (no end) changes nothing; 0% is a weight of 0, still up.
    case("198.18.0.11", true, Some("up"), Some("0%\n")),
    case("198.18.0.12", true, Some("150%\n"), Some("stopped 80%\n")),
    // Case and commas; an unknown word is read past.
    case("198.18.0.13", true, Some("hello\n"), Some("UP,70%\n")),
    // down holds through a reply without a health word.
    case("198.18.0.14", true, Some("50%,down\n"), Some("ready\n")),
    // No agent at all: refused, which changes nothing.
    case("198.18.0.15", true, Some("up\n"), Some("up\n")),
    case("2001:2::2", true, Some("drain 40%\n"), Some("ready\n")),
    // Above HAProxy's largest weight: it caps at 256, probed at its own (1000).
    case("198.18.0.16", true, Some("300%\n"), Some("300%\n")),
];

/// The address with no agent listening.
const NO_AGENT: &str = "198.18.0.15";
/// The address whose weight HAProxy caps and probed does not.
const CAPPED: &str = "198.18.0.16";

/// Agents on `AGENT_PORT` of each address, answering the line the test sets for it now.
struct Agents {
    lines: Arc<Mutex<BTreeMap<String, Option<String>>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Agents {
    fn start(ns: &Netns, addrs: &[&str]) -> Agents {
        let lines: Arc<Mutex<BTreeMap<String, Option<String>>>> = Arc::new(Mutex::new(BTreeMap::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = addrs
            .iter()
            .map(|addr| {
                let listener: TcpListener = ns.tcp_listen(&format!("{}:{AGENT_PORT}", bracket(addr)));
                listener.set_nonblocking(true).unwrap();
                let (lines, stop, addr) = (lines.clone(), stop.clone(), addr.to_string());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match listener.accept() {
                            Ok((mut s, _)) => {
                                let line: Option<String> = lines.lock().unwrap().get(&addr).cloned().flatten();
                                if let Some(line) = line {
                                    let _ = s.write_all(line.as_bytes());
                                }
                            }
                            Err(_) => std::thread::sleep(Duration::from_millis(2)),
                        }
                    }
                })
            })
            .collect();
        Agents { lines, stop, threads }
    }

    fn answer(&self, round: usize) {
        let mut lines = self.lines.lock().unwrap();
        for c in &CASES {
            lines.insert(c.addr.to_string(), c.rounds[round].map(str::to_string));
        }
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A server's state as both sides can say it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    state: &'static str,
    weight: u32,
}

/// HAProxy with one backend of every case, each checked on port 80 with its agent beside.
fn haproxy(ns: &Netns, dir: &Path) -> Proc {
    let mut conf = format!(
        "global\n  pidfile {d}/haproxy.pid\n  stats socket {d}/admin.sock level admin\ndefaults\n  mode tcp\n  \
         timeout client 5s\n  timeout connect 200ms\n  timeout server 5s\n  timeout check 200ms\n\
         backend b\n  default-server inter 200ms rise 2 fall 2 weight 100 agent-check agent-port {AGENT_PORT} agent-inter 200ms\n",
        d = dir.display()
    );
    for (i, c) in CASES.iter().enumerate() {
        conf += &format!("  server s{i} {}:80 check\n", bracket(c.addr));
    }
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, conf).unwrap();
    Proc::spawn(
        ns,
        None,
        &["/usr/sbin/haproxy", "-db", "-f", &path.display().to_string()],
        &dir.join("haproxy.log"),
        "haproxy agent checks",
    )
}

/// HAProxy's view of every server (`show servers state`): MAINT, DOWN, DRAIN or UP in that
/// order of precedence, and its current weight.
fn haproxy_seen(ns: &Netns, socket: &Path) -> Vec<Seen> {
    let text = ns.enter(|| {
        let mut s = UnixStream::connect(socket).expect("HAProxy's admin socket");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"show servers state\n").unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    });
    let mut by_name = BTreeMap::new();
    // Columns: be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight ...
    for line in text.lines().filter(|l| !l.starts_with('#') && l.split(' ').count() > 8) {
        let f: Vec<&str> = line.split(' ').collect();
        let (op, admin, weight): (u32, u32, u32) =
            (f[5].parse().unwrap(), f[6].parse().unwrap(), f[7].parse().unwrap());
        let state = if admin & 0x07 != 0 {
            "MAINT"
        } else if op != 2 {
            "DOWN"
        } else if admin & 0x18 != 0 {
            "DRAIN"
        } else {
            "UP"
        };
        by_name.insert(
            f[3].trim_start_matches('s').parse::<usize>().unwrap(),
            Seen { state, weight },
        );
    }
    assert_eq!(by_name.len(), CASES.len(), "every server in:\n{text}");
    by_name.into_values().collect()
}

/// probed's view of every endpoint, in the same words.
fn probed_seen(d: &RunningDaemon) -> Vec<Seen> {
    (0..CASES.len())
        .map(|i| {
            let v = d.endpoint("agents", &format!("s{i}"));
            let state = if v.admin == AdminState::Disabled {
                "MAINT"
            } else if v.status != probed::status::EndpointStatus::Online {
                "DOWN"
            } else if v.admin == AdminState::Drain {
                "DRAIN"
            } else {
                "UP"
            };
            Seen {
                state,
                weight: v.weight,
            }
        })
        .collect()
}

/// The table of one round, as the note and a failure show it.
fn table(round: usize, haproxy: &[Seen], probed: &[Seen]) -> String {
    let mut out = format!("round {round}:\n");
    for (i, c) in CASES.iter().enumerate() {
        out += &format!(
            "  {:<12} {:<6} {:<22} haproxy {:<5} {:>3}   probed {:<5} {:>3}\n",
            c.addr,
            if c.healthy { "check+" } else { "check-" },
            format!("{:?}", c.rounds[round].unwrap_or("(no line)")),
            haproxy[i].state,
            haproxy[i].weight,
            probed[i].state,
            probed[i].weight
        );
    }
    out
}

/// Equal but for the documented cap: HAProxy's largest weight is 256, probed's 1000.
fn agree(haproxy: &[Seen], probed: &[Seen]) -> bool {
    CASES.iter().enumerate().all(|(i, c)| {
        if c.addr == CAPPED {
            haproxy[i].state == probed[i].state && haproxy[i].weight == 256 && probed[i].weight == 300
        } else {
            haproxy[i] == probed[i]
        }
    })
}

#[test]
fn agent_answers_give_the_states_and_weights_haproxy_gives() {
    let topo = Topology::new();
    let addrs: Vec<&str> = CASES.iter().map(|c| c.addr).collect();
    add_backends(
        &topo,
        &addrs
            .iter()
            .copied()
            .filter(|a| *a != BACKEND_V4 && *a != BACKEND_V6)
            .collect::<Vec<_>>(),
    );
    let _backends: Vec<Backend> = CASES
        .iter()
        .filter(|c| c.healthy)
        .map(|c| Backend::start(&topo.backend, c.addr))
        .collect();
    let agents = Agents::start(
        &topo.backend,
        &addrs.iter().copied().filter(|a| *a != NO_AGENT).collect::<Vec<_>>(),
    );
    agents.answer(0);

    let dir = std::env::temp_dir().join(unique_name("probed-agent-"));
    std::fs::create_dir_all(&dir).unwrap();
    let _haproxy = haproxy(&topo.prober, &dir);

    let files = DaemonFiles::new();
    let mut text = files.header(PROBER_IF);
    text += &format!(
        "[[profile]]\nname = \"agents\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\nport = 80\n\
         interval = \"200ms\"\ntimeout = \"200ms\"\nhealthy_threshold = 2\nunhealthy_threshold = 2\n\
         agent_port = {AGENT_PORT}\nagent_interval = \"200ms\"\n"
    );
    for (i, c) in CASES.iter().enumerate() {
        text += &format!(
            "[[profile.endpoint]]\nname = \"s{i}\"\naddress = \"{}\"\nweight = 100\n",
            c.addr
        );
    }
    let config = files.write_config(&text);
    let d = RunningDaemon::start(&topo.prober, config, Some(&files.config_path())).expect("daemon starts");

    let socket = dir.join("admin.sock");
    let mut tables = String::new();
    for round in 0..2 {
        agents.answer(round);
        // Both ask every 200 ms and decide on two checks: a few seconds is many rounds.
        std::thread::sleep(Duration::from_secs(2));
        let deadline = Instant::now() + Duration::from_secs(10);
        let (h, p) = loop {
            let (h, p) = (haproxy_seen(&topo.prober, &socket), probed_seen(&d));
            if agree(&h, &p) || Instant::now() > deadline {
                break (h, p);
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let shown = table(round, &h, &p);
        eprintln!("{shown}");
        assert!(agree(&h, &p), "HAProxy and probed differ:\n{shown}");
        tables += &shown;
    }
    // What the agent last said is in the status view, and the endpoint's change said why.
    let v = d.endpoint("agents", "s8");
    let agent = v.agent.expect("an agent view");
    assert_eq!(agent.said.as_deref(), Some("fail # disk full"), "{agent:?}");
    assert!(agent.down && agent.answered, "{agent:?}");
    let v = d.endpoint(
        "agents",
        &format!("s{}", CASES.iter().position(|c| c.addr == NO_AGENT).unwrap()),
    );
    let agent = v.agent.expect("an agent view");
    assert!(!agent.answered && agent.said.unwrap().starts_with("agent not reached"));
    assert!(
        d.events().iter().any(|e| e.kind == probed::changes::ChangeKind::Agent),
        "agent changes are on the event stream"
    );
    std::fs::write(dir.join("oracle-table.txt"), &tables).unwrap();
    d.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn probed_check_reads_an_agent_line() {
    let topo = Topology::new();
    let agents = Agents::start(&topo.backend, &[BACKEND_V4]);
    agents
        .lines
        .lock()
        .unwrap()
        .insert(BACKEND_V4.to_string(), Some("drain, 75% # deploy\n".to_string()));
    let out = probed_tests::probed_check(&topo.prober, &[&format!("agent://{BACKEND_V4}:{AGENT_PORT}"), "--json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let line: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).expect("JSON line");
    assert_eq!(line["outcome"], "drain 75% # deploy", "{line}");
    agents
        .lines
        .lock()
        .unwrap()
        .insert(BACKEND_V4.to_string(), Some("down\n".to_string()));
    let out = probed_tests::probed_check(&topo.prober, &[&format!("agent://{BACKEND_V4}:{AGENT_PORT}")]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "down fails: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = probed_tests::probed_check(&topo.prober, &[&format!("agent://{BACKEND_V4}:{}", AGENT_PORT + 1)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "no agent tells nothing, and fails: {text}");
    assert!(text.contains("agent not reached"), "{text}");
}
