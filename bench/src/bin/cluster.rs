//! `cargo xtask bench cluster [--nodes 3,5] [--targets 10000,30000] [--seconds 10]`: N probed
//! nodes around one backend (tests/src/star.rs), the backend played by the XDP reflector on each
//! node's link, which counts the SYNs that reach it per link. For each size, the same fleet
//! unshared (every node probes everything, k = 0) and sharded (k = 2), side by side:
//!
//! - probes/s at the backend (the reflectors' counts), and the sharded/unshared ratio against
//!   the goal k/N;
//! - the bench process's CPU per probe (every daemon runs in this process);
//! - gossip bytes/s per node (the daemons' own counts, datagrams whole) and their share of the
//!   bytes on the node's link (the backend's veth counters: probes, gossip and all);
//! - propagation (sharded runs): 50 targets go dark at once; for each, the time from the node
//!   whose vote decided it (its own health event) to each other node's event, p50/p99/max.
use std::{
    collections::BTreeMap,
    net::Ipv4Addr,
    time::{Duration, Instant},
};

use probed::daemon::{events::Event, views::ChangeKind};
use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    procs::{machine_cpu, proc_cpu},
    reflector::Reflector,
    star::{cluster_section, key_file, Star, NODE_IF},
};

const INTERVAL: &str = "2s";
const WARMUP: Duration = Duration::from_secs(4);
const DARK: usize = 50;

fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

fn list(name: &str, default: &[usize]) -> Vec<usize> {
    arg(name).map_or_else(
        || default.to_vec(),
        |s| s.split(',').filter_map(|v| v.parse().ok()).collect(),
    )
}

fn target(j: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 19, 0, 0)) + 1 + j as u32)
}

fn config(files: &DaemonFiles, i: usize, targets: usize, k: usize, key: &std::path::Path) -> String {
    let mut text = files.header(NODE_IF);
    // Gossip at the default interval, as an operator would run it.
    text += &cluster_section(i, k, key, "200ms");
    text += &format!(
        "[[profile]]\nname = \"web\"\ndialect = \"lb\"\nrouting = \"weighted\"\n[profile.health]\nprotocol = \"tcp\"\n\
         port = 80\ninterval = \"{INTERVAL}\"\ntimeout = \"1s\"\nhealthy_threshold = 2\nunhealthy_threshold = 2\n"
    );
    for j in 0..targets {
        text += &format!("\n[[profile.endpoint]]\nname = \"t{j}\"\naddress = \"{}\"\n", target(j));
    }
    text
}

/// Bytes both ways on the backend's end of node i's link.
fn link_bytes(star: &Star, i: usize) -> u64 {
    let out = star.backend.ip(&["-s", "-j", "link", "show", &format!("n{i}")]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("ip -j");
    let s = &v[0]["stats64"];
    s["rx"]["bytes"].as_u64().unwrap_or(0) + s["tx"]["bytes"].as_u64().unwrap_or(0)
}

fn gossip_bytes(d: &RunningDaemon) -> u64 {
    let v = d.get("/v1/cluster");
    v["datagrams"]["bytes_sent"].as_u64().unwrap_or(0) + v["datagrams"]["bytes_received"].as_u64().unwrap_or(0)
}

struct Run {
    probes_per_s: f64,
    cpu_us_per_probe: f64,
    machine_cpu_us_per_probe: f64,
    gossip_per_node: f64,
    gossip_share: f64,
    join_s: f64,
    propagation_ms: Option<(f64, f64, f64, usize)>,
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn run(n: usize, targets: usize, k: usize, seconds: u64) -> Run {
    let star = Star::new(n);
    star.anyip("198.19.0.0/16");
    let mut reflectors: Vec<Reflector> = (0..n)
        .map(|i| Reflector::attach(&star.backend, &format!("n{i}")))
        .collect();
    let files: Vec<DaemonFiles> = (0..n).map(|_| DaemonFiles::new()).collect();
    let key = key_file(&files[0].dir, "cluster.key", 'k');
    let started = Instant::now();
    let daemons: Vec<RunningDaemon> = (0..n)
        .map(|i| {
            let cfg = files[i].write_config(&config(&files[i], i, targets, k, &key));
            RunningDaemon::start(&star.nodes[i], cfg, None).unwrap_or_else(|e| panic!("start n{i}: {e}"))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !daemons
        .iter()
        .all(|d| d.get("/v1/cluster")["members"].as_array().map_or(0, Vec::len) == n)
    {
        assert!(Instant::now() < deadline, "the cluster did not form within 120 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let join_s = started.elapsed().as_secs_f64();
    std::thread::sleep(WARMUP);
    let pid = std::process::id();
    let snap = |reflectors: &[Reflector]| {
        (
            Instant::now(),
            reflectors.iter().map(Reflector::syns).sum::<u64>(),
            proc_cpu(pid),
            machine_cpu(),
            daemons.iter().map(gossip_bytes).collect::<Vec<_>>(),
            (0..n).map(|i| link_bytes(&star, i)).collect::<Vec<_>>(),
        )
    };
    let a = snap(&reflectors);
    std::thread::sleep(Duration::from_secs(seconds));
    let b = snap(&reflectors);
    let secs = (b.0 - a.0).as_secs_f64();
    let probes = (b.1 - a.1) as f64;
    let gossip: Vec<f64> = (0..n).map(|i| (b.4[i] - a.4[i]) as f64 / secs).collect();
    let link: Vec<f64> = (0..n).map(|i| (b.5[i] - a.5[i]) as f64 / secs).collect();
    let mut propagation_ms = None;
    if k > 0 {
        let before: Vec<usize> = daemons.iter().map(|d| d.events().len()).collect();
        for r in &mut reflectors {
            for j in 0..DARK {
                r.set_dark(target(j), true);
            }
        }
        // Two failures at 2 s plus the 1 s timeout, then gossip: well within 10 s.
        std::thread::sleep(Duration::from_secs(10));
        let events: Vec<Vec<Event>> = daemons
            .iter()
            .zip(&before)
            .map(|(d, &skip)| d.events().into_iter().skip(skip).collect())
            .collect();
        let mut delays = Vec::new();
        let mut missing = 0;
        for j in 0..DARK {
            let name = format!("t{j}");
            let at: BTreeMap<usize, (ChangeKind, u64)> = events
                .iter()
                .enumerate()
                .filter_map(|(i, ev)| {
                    ev.iter()
                        .find(|e| e.endpoint == name && e.to == Some(probed::status::EndpointStatus::Degraded))
                        .map(|e| (i, (e.kind, e.at_unix_ms)))
                })
                .collect();
            missing += n - at.len();
            // The deciding vote: the earliest node whose own health change it was.
            let Some(decided) = at
                .values()
                .filter(|(kind, _)| *kind == ChangeKind::Health)
                .map(|(_, t)| *t)
                .min()
            else {
                continue;
            };
            delays.extend(
                at.values()
                    .filter(|(kind, _)| *kind == ChangeKind::Cluster)
                    .map(|(_, t)| t.saturating_sub(decided) as f64),
            );
        }
        delays.sort_by(f64::total_cmp);
        propagation_ms = Some((
            quantile(&delays, 0.5),
            quantile(&delays, 0.99),
            delays.last().copied().unwrap_or(f64::NAN),
            missing,
        ));
    }
    for d in daemons {
        d.stop();
    }
    let cpu = (b.2 - a.2).as_secs_f64();
    let machine = (b.3 - a.3).as_secs_f64();
    Run {
        probes_per_s: probes / secs,
        cpu_us_per_probe: cpu * 1e6 / probes.max(1.0),
        machine_cpu_us_per_probe: machine * 1e6 / probes.max(1.0),
        gossip_per_node: gossip.iter().sum::<f64>() / n as f64,
        gossip_share: gossip.iter().sum::<f64>() / link.iter().sum::<f64>().max(1.0),
        join_s,
        propagation_ms,
    }
}

fn main() {
    let nodes = list("--nodes", &[3, 5]);
    let fleets = list("--targets", &[10_000, 30_000]);
    let seconds: u64 = arg("--seconds").and_then(|s| s.parse().ok()).unwrap_or(10);
    println!(
        "targets at {INTERVAL} (TCP, answered by the XDP reflector on each node's link); {seconds} s measured after the \
         cluster formed and {WARMUP:?} more\n"
    );
    println!(
        "| nodes | targets | k | probes/s at the backend | ratio to unshared (goal k/N) | CPU µs/probe (process) | (machine) | \
         gossip B/s per node | gossip share of link bytes | formed in | propagation p50 / p99 / max (missing) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for &n in &nodes {
        for &t in &fleets {
            assert!(t + 1 < 65_536, "one /16 of targets at most");
            let unshared = run(n, t, 0, seconds);
            let sharded = run(n, t, 2, seconds);
            for (k, r) in [(0usize, &unshared), (2, &sharded)] {
                let ratio = r.probes_per_s / unshared.probes_per_s;
                let goal = if k == 0 { 1.0 } else { k as f64 / n as f64 };
                let prop = r.propagation_ms.map_or("-".to_string(), |(p50, p99, max, missing)| {
                    format!("{p50:.0} / {p99:.0} / {max:.0} ms ({missing})")
                });
                println!(
                    "| {n} | {t} | {k} | {:.0} | {ratio:.2} ({goal:.2}) | {:.2} | {:.2} | {:.0} | {:.2}% | {:.1} s | {prop} |",
                    r.probes_per_s,
                    r.cpu_us_per_probe,
                    r.machine_cpu_us_per_probe,
                    r.gossip_per_node,
                    r.gossip_share * 100.0,
                    r.join_s
                );
            }
        }
    }
}
