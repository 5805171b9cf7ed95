//! `cargo xtask bench passive [--seconds N] [--rounds N]`: what the passive observers cost
//! per packet the node forwards, against the same node without them, side by side in one run.
//!
//! The rig is the tests' (`probed_tests::passive`): a client namespace, the node, a backend
//! listening on port 80. From the client's link a sender (AF_PACKET, sendmmsg, no qdisc) fires
//! TCP segments at the backend through the node as fast as it can, in two mixes:
//! - `syn`: every segment a new client's SYN (a random source port): the observers' worst
//!   case, each one a handshake entered in the LRU and answered by the backend's SYN+ACK,
//!   which the observers match on the way back;
//! - `established`: ACKs of 4,096 flows the node already forwards: what nearly all of a real
//!   node's traffic is, which the observers read and leave (the backend answers each with a
//!   RST, which they read too).
//!
//! Rounds alternate the observers off and on (attached to the node's link toward the backend,
//! watching the backend) and report, per mix, the packets forwarded per second and the whole
//! machine's CPU time per packet forwarded (sender, node and backend: the same work in both
//! but for the observers), then the difference and the ratio. The medians of the rounds are
//! given; the machine is shared, so read the ratio. Beside it, the observers' own run time
//! per run, from the kernel's per-program statistics (BPF_ENABLE_STATS, on only while this
//! process holds it: the machine's sysctl is left alone).
use std::{
    net::IpAddr,
    time::{Duration, Instant},
};

use probe_common::{
    packet::{TCP_ACK, TCP_SYN},
    passive::{BackendKey, BackendRule, DEFAULT_PASSIVE_FLOWS},
};
use probed::kernel::passive::PassiveKernel;
use probed_tests::{
    flood::{parse_mac, segment, Flooder, BATCH, FRAME_MAX},
    passive::{PassiveRig, PORT},
    procs::machine_cpu,
    topo::{Node, CLIENT_IF, CLIENT_V4, LB_IF},
};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mix {
    Syn,
    Established,
}

struct Round {
    pps: f64,
    ns_per_packet: f64,
}

/// Each observer's (run time, runs) at tcx on `link` of the node, by program name.
fn program_stats(rig: &PassiveRig, link: &str) -> Vec<(String, Duration, u64)> {
    use aya::programs::{SchedClassifier, TcAttachType};
    rig.node.enter(|| {
        [TcAttachType::Egress, TcAttachType::Ingress]
            .into_iter()
            .flat_map(|hook| SchedClassifier::query_tcx(link, hook).expect("query tcx").1)
            .map(|p| {
                (
                    p.name_as_str().unwrap_or_default().to_string(),
                    p.run_time(),
                    p.run_count(),
                )
            })
            .collect()
    })
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| {
            v.parse().unwrap_or_else(|_| panic!("{name} takes a number"))
        })
}

/// Packets the node sent toward the backend so far.
fn forwarded(rig: &PassiveRig) -> u64 {
    let link = &rig.backends[0].link;
    rig.node
        .exec("cat", &[&format!("/sys/class/net/{link}/statistics/tx_packets")])
        .trim()
        .parse()
        .expect("tx_packets")
}

/// One round of `mix` for `secs`: segments sent as fast as the sender goes.
fn round(rig: &PassiveRig, sender: &Flooder, mix: Mix, secs: u64, seed: &mut u64) -> Round {
    let client: IpAddr = CLIENT_V4.parse().unwrap();
    let backend: IpAddr = rig.backends[0].v4.parse().unwrap();
    let mut frames = vec![[0u8; FRAME_MAX]; BATCH];
    let mut lens = [0usize; BATCH];
    let (pk0, cpu0, t0) = (forwarded(rig), machine_cpu(), Instant::now());
    let limit = Duration::from_secs(secs);
    while t0.elapsed() < limit {
        for (f, len) in frames.iter_mut().zip(lens.iter_mut()) {
            *seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let r = *seed >> 16;
            let (sport, flags) = match mix {
                Mix::Syn => (1024 + (r % 60_000) as u16, TCP_SYN),
                Mix::Established => (20_000 + (r % 4_096) as u16, TCP_ACK),
            };
            *len = segment(
                f,
                sender.macs(),
                (client, sport),
                (backend, PORT),
                flags,
                (r >> 16) as u32,
            );
        }
        if sender.send(&mut frames, &lens) < BATCH {
            // The veth's ring is full: let the receiving side catch up.
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    let elapsed = t0.elapsed();
    let (pk1, cpu1) = (forwarded(rig), machine_cpu());
    let packets = pk1.saturating_sub(pk0).max(1);
    Round {
        pps: packets as f64 / elapsed.as_secs_f64(),
        ns_per_packet: (cpu1 - cpu0).as_nanos() as f64 / packets as f64,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let secs = arg("--seconds", 2);
    let rounds = arg("--rounds", 5) as usize;
    let rig = PassiveRig::new(1, Node::RIG);
    // The client's own stack stays out: the segments are not its connections, and the
    // backend's answers to them would otherwise draw RSTs that the observers count as well.
    rig.client.nft(
        "table inet probed_bench_quiet {
            chain input {
                type filter hook input priority filter; policy accept;
                tcp sport 80 drop
            }
        }",
    );
    let sender = Flooder::new(&rig.client, CLIENT_IF, parse_mac(&rig.node.mac(LB_IF)));
    let key = BackendKey::of(std::net::SocketAddr::new(rig.backends[0].v4.parse().unwrap(), PORT));
    let mut seed = 0x5eed_u64;
    // The kernel times every BPF program run while this fd is held.
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime).expect("BPF_ENABLE_STATS");
    let mut own: Vec<String> = Vec::new();
    println!(
        "passive observers, cost per forwarded packet: {rounds} rounds of {secs} s per mix, alternating off and on"
    );
    println!();
    println!(
        "| mix | observers | packets/s forwarded | machine CPU ns per packet | extra ns per packet | CPU vs off |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    for mix in [Mix::Syn, Mix::Established] {
        let (mut off, mut on): (Vec<Round>, Vec<Round>) = (Vec::new(), Vec::new());
        let mut handshakes = 0;
        let mut runs_of: std::collections::BTreeMap<String, (Duration, u64)> = std::collections::BTreeMap::default();
        for r in 0..rounds {
            // Alternate which goes first, so that a drift of the machine's load falls on both.
            for observed in if r % 2 == 0 { [false, true] } else { [true, false] } {
                let observers = observed.then(|| {
                    let mut k = rig
                        .node
                        .enter(|| PassiveKernel::load(&rig.links(), DEFAULT_PASSIVE_FLOWS))
                        .expect("load the observers");
                    k.zero(0);
                    k.watch(
                        &key,
                        BackendRule {
                            id: 0,
                            timeout_ms: 1000,
                        },
                    )
                    .expect("watch the backend");
                    k
                });
                let result = round(&rig, &sender, mix, secs, &mut seed);
                if let Some(k) = observers {
                    handshakes += k.read(0).started;
                    for (name, time, runs) in program_stats(&rig, &rig.backends[0].link) {
                        let e = runs_of.entry(name).or_insert((Duration::ZERO, 0));
                        e.0 += time;
                        e.1 += runs;
                    }
                    on.push(result);
                } else {
                    off.push(result);
                }
            }
        }
        let name = format!("{mix:?}").to_lowercase();
        let off_ns = median(off.iter().map(|r| r.ns_per_packet).collect());
        let on_ns = median(on.iter().map(|r| r.ns_per_packet).collect());
        let off_pps = median(off.iter().map(|r| r.pps).collect());
        let on_pps = median(on.iter().map(|r| r.pps).collect());
        println!("| {name} | off | {off_pps:.0} | {off_ns:.0} | | 1.00x |");
        println!(
            "| {name} | on | {on_pps:.0} | {on_ns:.0} | {:.0} | {:.2}x |",
            on_ns - off_ns,
            on_ns / off_ns
        );
        eprintln!("{name}: the observers counted {handshakes} handshakes started over their rounds");
        for (prog, (time, runs)) in &runs_of {
            own.push(format!(
                "| {name} | {prog} | {runs} | {:.0} |",
                time.as_nanos() as f64 / (*runs).max(1) as f64
            ));
        }
    }
    println!();
    println!("the observers' own run time (kernel statistics, summed over the rounds with them):");
    println!();
    println!("| mix | program | runs | ns per run |");
    println!("|---|---|---:|---:|");
    for line in own {
        println!("{line}");
    }
}
