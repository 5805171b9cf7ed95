//! The passive-detection rig: a client namespace, a load-balancer node and backends, each on a
//! link of its own from the node (`pv0`, `pv1`, ...). The node forwards the client's connections
//! routed (to each backend's own address) and through a VIP it DNATs round robin over the
//! backends (nft `numgen`), as an nft load balancer does. Each backend serves TCP port 80 and
//! greets with its name; a fault (`Fault`) is an nft table in its namespace.
use std::{
    io::Write,
    net::TcpListener,
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread::JoinHandle,
    time::Duration,
};

use crate::{
    topo::{link, Node, CLIENT_IF, CLIENT_V4, CLIENT_V6, LB_CLIENT_V4, LB_CLIENT_V6, LB_IF},
    Netns,
};

pub const PORT: u16 = 80;
pub const VIP_V4: &str = "198.18.210.1";
pub const VIP_V6: &str = "2001:2:210::1";

/// What a backend does to the connections it is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Healthy,
    /// A RST to every SYN (`reject with tcp reset`).
    Refuse,
    /// Every SYN dropped: the clients' SYNs go unanswered until they give up.
    Drop,
    /// An ICMP destination unreachable, administratively prohibited, to every SYN (a code both
    /// stacks fail a connect on at once; IPv6's "address unreachable" fails it only at the
    /// client's second SYN).
    Unreachable,
    /// Two SYNs in three dropped: a backend too busy to take its connections at once. Its
    /// handshakes complete, but most only after the client sent its SYN again (a second or
    /// three later).
    Slow,
}

impl Fault {
    fn rule(self) -> Option<&'static str> {
        match self {
            Fault::Healthy => None,
            Fault::Refuse => Some("tcp dport 80 tcp flags syn reject with tcp reset"),
            Fault::Drop => Some("tcp dport 80 tcp flags syn drop"),
            Fault::Unreachable => Some("tcp dport 80 tcp flags syn reject with icmpx type admin-prohibited"),
            Fault::Slow => Some("tcp dport 80 tcp flags syn numgen inc mod 3 != 0 drop"),
        }
    }
}

pub struct Backend {
    pub ns: Netns,
    pub v4: String,
    pub v6: String,
    /// The node's end of its link.
    pub link: String,
}

pub struct PassiveRig {
    pub node: Netns,
    pub client: Netns,
    pub backends: Vec<Backend>,
    stop: Arc<AtomicBool>,
    servers: Vec<JoinHandle<()>>,
}

impl PassiveRig {
    /// `count` backends (at most 8), healthy, serving; the node forwarding to them.
    pub fn new(count: usize, node: Node) -> Self {
        assert!((1..=8).contains(&count));
        let lb = Netns::new("pvn");
        let client = Netns::new("pvc");
        link(
            node,
            &lb,
            (LB_IF, &[LB_CLIENT_V4, LB_CLIENT_V6]),
            &client,
            (CLIENT_IF, &[CLIENT_V4, CLIENT_V6]),
        );
        client.ip(&["route", "add", "default", "via", LB_CLIENT_V4, "dev", CLIENT_IF]);
        client.ip(&["-6", "route", "add", "default", "via", LB_CLIENT_V6, "dev", CLIENT_IF]);
        let stop = Arc::new(AtomicBool::new(false));
        let mut backends = Vec::new();
        let mut servers = Vec::new();
        for i in 0..count {
            let ns = Netns::new("pvb");
            let net = 20 + i;
            let (node_v4, v4) = (format!("198.18.{net}.1"), format!("198.18.{net}.2"));
            let (node_v6, v6) = (format!("2001:2:{net}::1"), format!("2001:2:{net}::2"));
            let dev = format!("pv{i}");
            link(
                node,
                &lb,
                (&dev, &[node_v4.as_str(), node_v6.as_str()]),
                &ns,
                ("eth0", &[v4.as_str(), v6.as_str()]),
            );
            ns.ip(&["route", "add", "default", "via", &node_v4, "dev", "eth0"]);
            ns.ip(&["-6", "route", "add", "default", "via", &node_v6, "dev", "eth0"]);
            for addr in [format!("{v4}:{PORT}"), format!("[{v6}]:{PORT}")] {
                servers.push(greeter(ns.tcp_listen(&addr), format!("b{i}"), stop.clone()));
            }
            backends.push(Backend { ns, v4, v6, link: dev });
        }
        // After every link is made: "all" reaches each interface there is.
        for family in ["ipv4", "ipv6"] {
            lb.sysctl(&format!("net.{family}.conf.all.forwarding"), "1");
        }
        let map = |f: fn(&Backend) -> &str| {
            backends
                .iter()
                .enumerate()
                .map(|(i, b)| format!("{i} : {}", f(b)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        lb.nft(&format!(
            "table inet probed_passive_lb {{
                chain pre {{
                    type nat hook prerouting priority dstnat; policy accept;
                    ip daddr {VIP_V4} tcp dport {PORT} dnat ip to numgen inc mod {count} map {{ {} }}
                    ip6 daddr {VIP_V6} tcp dport {PORT} dnat ip6 to numgen inc mod {count} map {{ {} }}
                }}
            }}",
            map(|b| &b.v4),
            map(|b| &b.v6),
        ));
        Self {
            node: lb,
            client,
            backends,
            stop,
            servers,
        }
    }

    /// The node's ends of the backends' links: where passive detection watches.
    pub fn links(&self) -> Vec<String> {
        self.backends.iter().map(|b| b.link.clone()).collect()
    }

    /// The names of the programs at tcx egress and ingress of `link` on the node (the kernel's
    /// own list; Debian's bpftool predates tcx).
    pub fn tcx_programs(&self, link: &str) -> Vec<String> {
        use aya::programs::{SchedClassifier, TcAttachType};
        self.node.enter(|| {
            [TcAttachType::Egress, TcAttachType::Ingress]
                .into_iter()
                .flat_map(|hook| {
                    let (_, progs) =
                        SchedClassifier::query_tcx(link, hook).unwrap_or_else(|e| panic!("query tcx on {link}: {e}"));
                    progs
                        .into_iter()
                        .map(|p| p.name_as_str().unwrap_or_default().to_string())
                        .collect::<Vec<_>>()
                })
                .collect()
        })
    }

    /// Makes backend `i` behave as `fault` from now on.
    pub fn fault(&self, i: usize, fault: Fault) {
        let ns = &self.backends[i].ns;
        let _ = ns.try_exec("nft", &["delete", "table", "inet", "probed_passive_fault"]);
        if let Some(rule) = fault.rule() {
            ns.nft(&format!(
                "table inet probed_passive_fault {{
                    chain input {{ type filter hook input priority filter; policy accept; {rule}; }}
                }}"
            ));
        }
    }

    /// Starts a client in the client namespace that opens `rate` connections a second for
    /// `secs` seconds, to `targets` in turn, each given `timeout` to connect (`Load::finish`).
    pub fn load(&self, targets: &[String], rate: u32, secs: f64, timeout: Duration) -> Load {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.client.name, "/usr/bin/python3", "-c", CLIENT])
            .arg(targets.join(","))
            .arg(rate.to_string())
            .arg(secs.to_string())
            .arg(timeout.as_secs_f64().to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the client");
        Load { child: Some(child) }
    }
}

impl Drop for PassiveRig {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.servers.drain(..) {
            let _ = t.join();
        }
    }
}

/// Accepts connections on `l` and greets each with `name` until `stop`.
fn greeter(l: TcpListener, name: String, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    l.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((mut s, _)) => {
                    let _ = s.write_all(format!("{name}\n").as_bytes());
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    })
}

/// One client connection, as the client saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct Conn {
    /// CLOCK_MONOTONIC seconds when it started (the daemon's and the kernel's clock).
    pub start: f64,
    /// The address it connected to (a backend's or a VIP).
    pub dst: String,
    /// "ok", "refused", "unreachable" (EHOSTUNREACH, ENETUNREACH or EACCES) or "timeout".
    pub result: String,
    /// How long the connect took (or until it failed).
    pub secs: f64,
    /// The backend that greeted it ("b0"...), when it connected.
    pub who: Option<String>,
}

impl Conn {
    /// What the handshake was, as passive detection should count it with `timeout`: one
    /// that took longer than that to end timed out, whatever ended it (a SYN+ACK, or a RST
    /// or ICMP error to the client's second SYN: a backend's ICMP errors are rate-limited).
    pub fn class(&self, timeout: Duration) -> &str {
        if self.secs > timeout.as_secs_f64() {
            "timeout"
        } else {
            &self.result
        }
    }
}

/// A running client (`PassiveRig::load`).
pub struct Load {
    child: Option<Child>,
}

impl Load {
    /// Waits for the client to end and returns every connection it made.
    pub fn finish(mut self) -> Vec<Conn> {
        let out = self.child.take().unwrap().wait_with_output().expect("the client");
        assert!(out.status.success(), "client: {out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                assert_eq!(f.len(), 5, "client line {l:?}");
                Conn {
                    start: f[0].parse().unwrap(),
                    dst: f[1].to_string(),
                    result: f[2].to_string(),
                    secs: f[3].parse().unwrap(),
                    who: (f[4] != "-").then(|| f[4].to_string()),
                }
            })
            .collect()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The client: connections at a steady rate, each on its own, one line each when it ends:
/// `START DST RESULT SECS WHO`.
const CLIENT: &str = r#"
import asyncio, errno, sys, time
targets = sys.argv[1].split(',')
rate, secs, timeout = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])

async def one(dst):
    start = time.monotonic()
    who, result = '-', 'ok'
    w = None
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(dst, 80), timeout)
        took = time.monotonic() - start
        try:
            who = (await asyncio.wait_for(r.readline(), 2)).decode().strip() or '-'
        except Exception:
            pass
    except asyncio.TimeoutError:
        took, result = time.monotonic() - start, 'timeout'
    except ConnectionRefusedError:
        took, result = time.monotonic() - start, 'refused'
    except OSError as e:
        took = time.monotonic() - start
        result = 'unreachable' if e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EACCES) else 'error-%s' % e.errno
    finally:
        if w is not None:
            w.close()
    print('%.6f %s %s %.6f %s' % (start, dst, result, took, who), flush=True)

async def main():
    t0 = time.monotonic()
    tasks = []
    n = int(rate * secs)
    for k in range(n):
        delay = t0 + k / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(targets[k % len(targets)])))
    await asyncio.gather(*tasks)

asyncio.run(main())
"#;
