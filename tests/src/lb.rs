//! Pieces of the load-balancer tests (`sinks_*.rs`): backends that accept and close, a client
//! that makes many short connections through a VIP, SYN counters at the backends.
use std::{
    net::{SocketAddr, TcpListener, TcpStream},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use crate::{
    servers::counted_packets,
    topo::{CLIENT_V4, CLIENT_V6},
    Netns,
};

/// Counts the client's SYNs at each backend (before anything there can drop them).
pub fn count_ruleset(backends: &[&str]) -> String {
    let mut rules = String::new();
    for b in backends {
        let (fam, client) = if b.contains(':') {
            ("ip6", CLIENT_V6)
        } else {
            ("ip", CLIENT_V4)
        };
        rules += &format!("\t\t{fam} saddr {client} {fam} daddr {b} tcp dport 80 tcp flags syn counter\n");
    }
    format!(
        "table inet count {{\n\tchain input {{\n\t\ttype filter hook input priority -10; policy accept;\n{rules}\t}}\n}}\n"
    )
}

pub fn syns(backend_ns: &Netns, backend: &str) -> u64 {
    let listing = backend_ns.exec("nft", &["list", "table", "inet", "count"]);
    counted_packets(&listing, &format!("daddr {backend} tcp"))
}

/// Accepts and closes connections on the backend's port 80 until dropped.
pub struct Backend {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Backend {
    /// On port 80 of `addr`.
    pub fn start(ns: &Netns, addr: &str) -> Backend {
        Self::on(ns, &format!("{}:80", bracket(addr)))
    }

    /// On `addr:port`.
    pub fn on(ns: &Netns, socket: &str) -> Backend {
        Self::answering(ns, socket, "")
    }

    /// On `addr:port`, writing `reply` to each connection before closing it (which server a
    /// client reached).
    pub fn answering(ns: &Netns, socket: &str, reply: &'static str) -> Backend {
        use std::io::Write;
        let listener: TcpListener = ns.tcp_listen(socket);
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.write_all(reply.as_bytes());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Backend {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub fn bracket(a: &str) -> String {
    if a.contains(':') {
        format!("[{a}]")
    } else {
        a.to_string()
    }
}

/// `n` short connections from the client to the VIP; how many succeeded.
pub fn connect_many(client: &Netns, vip: &str, n: usize) -> usize {
    connect_within(client, vip, n, Duration::from_secs(2))
}

/// As `connect_many`, each attempt given up after `timeout`.
pub fn connect_within(client: &Netns, vip: &str, n: usize, timeout: Duration) -> usize {
    let vip: SocketAddr = format!("{}:80", bracket(vip)).parse().unwrap();
    client.enter(move || {
        (0..n)
            .filter(|_| TcpStream::connect_timeout(&vip, timeout).is_ok())
            .count()
    })
}

pub fn wait_until(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `n` connection attempts to the VIP that only need their SYN to leave: for load balancers
/// that do not translate replies back (the XDP fixture), where no handshake completes.
pub fn send_syns(client: &Netns, vip: &str, n: usize) {
    let vip: SocketAddr = format!("{}:80", bracket(vip)).parse().unwrap();
    client.enter(move || {
        for _ in 0..n {
            let _ = TcpStream::connect_timeout(&vip, Duration::from_millis(5));
        }
    });
}

/// `test_slot_lb` (probe-ebpf/src/fixtures/slot_lb.rs), an XDP load balancer that reads a bpf
/// sink's pinned slot table, attached to `iface` for `vip`:80; detached when dropped.
pub struct SlotLb {
    _ebpf: aya::Ebpf,
}

impl SlotLb {
    pub fn attach(ns: &Netns, iface: &str, vip: [u8; 4], table: &std::path::Path, ctl: &std::path::Path) -> SlotLb {
        let (table, ctl) = (table.to_path_buf(), ctl.to_path_buf());
        let iface = iface.to_string();
        ns.enter(move || {
            let port_be = u16::from_ne_bytes(80u16.to_be_bytes());
            let mut ebpf = aya::EbpfLoader::new()
                .map_pin_path("LB_SLOTS", table.as_path())
                .map_pin_path("LB_SLOTS_CTL", ctl.as_path())
                .override_global("LB_VIP", &vip, true)
                .override_global("LB_PORT_BE", &port_be, true)
                .load(probed::kernel::FIXTURE_OBJECT)
                .expect("load the fixtures' object with the sink's pins");
            let prog: &mut aya::programs::Xdp = ebpf
                .program_mut("test_slot_lb")
                .expect("test_slot_lb")
                .try_into()
                .unwrap();
            prog.load().expect("load test_slot_lb");
            probed::kernel::attach_xdp(prog, "test_slot_lb", &iface, probed::kernel::AttachMode::Skb)
                .expect("attach test_slot_lb");
            SlotLb { _ebpf: ebpf }
        })
    }
}

/// HAProxy's CSV statistics (`show stat`, or the stats page's `;csv`): one map per row, from
/// column name to value.
pub fn haproxy_stat_rows(csv: &str) -> Vec<std::collections::HashMap<String, String>> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .trim_start_matches("# ")
        .split(',')
        .collect();
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            header
                .iter()
                .zip(l.split(','))
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// Reloads that change only a health check's timing and thresholds, which must keep every
/// endpoint's health and move nothing in a sink (docs/operations/configuration.md, "What a
/// reload keeps"): each a name and `config` (whose check runs every 100 ms, times out after
/// 100 ms, thresholds 2 and 2) so edited. Panics if an edit finds nothing to change.
pub fn timing_edits(config: &str) -> Vec<(&'static str, String)> {
    let edits: [(&str, &[(&str, &str)]); 2] = [
        (
            "timeout and interval",
            &[
                ("timeout = \"100ms\"", "timeout = \"150ms\""),
                ("interval = \"100ms\"", "interval = \"200ms\""),
            ],
        ),
        (
            "thresholds",
            &[
                ("unhealthy_threshold = 2", "unhealthy_threshold = 3"),
                ("\nhealthy_threshold = 2\n", "\nhealthy_threshold = 3\n"),
            ],
        ),
    ];
    edits
        .iter()
        .map(|(what, pairs)| {
            let mut text = config.to_string();
            for (from, to) in *pairs {
                assert!(text.contains(from), "{what}: no {from:?} in the configuration");
                text = text.replace(from, to);
            }
            (*what, text)
        })
        .collect()
}

/// The code block of docs/operations/sinks.md marked `<!-- test: NAME -->`: the tests load the
/// documented rulesets and configs as they are written there.
pub fn doc_block(name: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operations/sinks.md");
    let text = std::fs::read_to_string(path).expect("read docs/operations/sinks.md");
    let marker = format!("<!-- test: {name} -->");
    let after = text
        .split_once(&marker)
        .unwrap_or_else(|| panic!("docs/operations/sinks.md has no block {marker}"))
        .1;
    let body = after
        .split_once("```")
        .and_then(|(_, b)| b.split_once('\n'))
        .expect("a fenced block")
        .1;
    body.split_once("```").expect("a closed block").0.to_string()
}

/// More backend addresses on the backend's veth (IPv4 /24 or IPv6 /64), each with a static
/// neighbour entry on the prober's side, so the LB node reaches them without ARP or ND.
pub fn add_backends(topo: &crate::Topology, addrs: &[&str]) {
    let mac = topo.backend.mac(crate::topo::BACKEND_IF);
    for a in addrs {
        if a.contains(':') {
            topo.backend.ip(&[
                "-6",
                "addr",
                "add",
                &format!("{a}/64"),
                "dev",
                crate::topo::BACKEND_IF,
                "nodad",
            ]);
        } else {
            topo.backend
                .ip(&["addr", "add", &format!("{a}/24"), "dev", crate::topo::BACKEND_IF]);
        }
        topo.prober.static_neighbour(a, &mac, crate::topo::PROBER_IF);
    }
}

/// Drops everything sent to port 80 of `backend` in the backend's namespace (its health
/// checks time out) until `restore`.
pub fn go_dark(ns: &Netns, backend: &str) {
    let family = if backend.contains(':') { "ip6" } else { "ip" };
    ns.nft(&format!(
        "table inet dark {{\n chain input {{\n type filter hook input priority 0;\n {family} daddr {backend} tcp dport 80 drop\n }}\n}}\n"
    ));
}

/// Undoes `go_dark`.
pub fn restore(ns: &Netns) {
    ns.exec("nft", &["delete", "table", "inet", "dark"]);
}
