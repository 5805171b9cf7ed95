//! `cargo xtask bench sinks`: how long a health change takes to reach the data path, and how
//! many slots move when a backend leaves.
//!
//! Latency: a sink runs as in the daemon (its own thread, following a change stream) in a
//! namespace of its own, over one profile of backends. The bench publishes K simultaneous
//! changes (K backends leave the eligible set) and measures from the publish to the sink
//! reporting that it holds them (its view's sequence number; the sink writes before it
//! reports). Beside it, the same transaction through `nft -f` as a script would run it:
//! the real alternative for nftables, measured in the same run.
//!
//! Churn: slots that change owner when one backend of n leaves a 65,536-slot table, against
//! the ideal (its own share, 1/n), for probed's rebalancing and for a Maglev table rebuilt
//! from scratch.
use std::{
    net::{IpAddr, Ipv4Addr},
    time::{Duration, Instant},
};

use probed::{
    changes::{Bus, Change, ChangeKind, EndpointChange, EndpointState, Snapshot},
    config::{BpfSink, NftFamily, NftSink, NftTarget, OnStop, Sink, SinkKind},
    sinks::{self, slots, Running},
};
use probed_tests::{Netns, TestPins};

fn backend(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 19, 0, 0)) + i as u32))
}

fn state(i: usize, eligible: bool) -> EndpointState {
    EndpointState::tcp(backend(i), 80, eligible)
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

/// Runs `rounds` rounds of K changes against one sink; each round flips K backends out of
/// (even rounds) or back into (odd rounds) the eligible set. Latencies, sorted.
fn latency(ns: &Netns, cfg: Sink, pins: &TestPins, backends: usize, k: usize, rounds: usize) -> Vec<Duration> {
    ns.enter(|| {
        let sink = sinks::open(&cfg, &pins.path).expect("open the sink");
        let mut bus = Bus::default();
        let snapshot = Snapshot {
            seq: 0,
            profiles: Vec::new(),
            endpoints: (0..backends)
                .map(|i| ("web".into(), format!("b{i}").into(), state(i, true)))
                .collect(),
        };
        let sub = bus.subscribe_to("bench", 1 << 20, Some("web"));
        let running = Running::start(cfg, sink, &snapshot, sub, None);
        let wait_seq = |seq: u64| {
            let deadline = Instant::now() + Duration::from_secs(30);
            while running.view().seq < seq {
                assert!(
                    Instant::now() < deadline,
                    "the sink never held seq {seq}: {:?}",
                    running.view()
                );
                std::hint::spin_loop();
            }
        };
        wait_seq(0);
        std::thread::sleep(Duration::from_millis(200));
        let mut out = Vec::with_capacity(rounds);
        for round in 0..rounds {
            let eligible = round % 2 == 1;
            let changes: Vec<Change> = (0..k)
                .map(|i| {
                    Change::Endpoint(EndpointChange {
                        seq: bus.next_seq(),
                        at_unix_ms: 0,
                        at_ns: 0,
                        kind: ChangeKind::Health,
                        profile: "web".into(),
                        endpoint: format!("b{i}").into(),
                        from: None,
                        state: state(i, eligible),
                        removed: false,
                        transition: None,
                    })
                })
                .collect();
            let last = bus.seq();
            let t0 = Instant::now();
            for c in changes {
                bus.publish(c, 0);
            }
            wait_seq(last);
            out.push(t0.elapsed());
            // The bpf sink flips at most every 10 ms: space rounds beyond that.
            std::thread::sleep(Duration::from_millis(15));
        }
        drop(bus);
        let mut running = running;
        running.join();
        out.sort();
        out
    })
}

/// The same K-element change as one `nft -f` transaction, as a script would apply it.
fn nft_script(ns: &Netns, k: usize, rounds: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(rounds);
    for round in 0..rounds {
        // Add, then take away: the set is empty again after an even number of rounds.
        let verb = if round % 2 == 0 { "add" } else { "delete" };
        let elems: Vec<String> = (0..k).map(|i| backend(i).to_string()).collect();
        let script = format!("{verb} element ip lb web_up {{ {} }}\n", elems.join(", "));
        let t0 = Instant::now();
        let mut child = std::process::Command::new("ip")
            .args(["netns", "exec", &ns.name, "nft", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("spawn nft");
        use std::io::Write;
        child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
        assert!(child.wait().unwrap().success());
        out.push(t0.elapsed());
    }
    out.sort();
    out
}

fn main() {
    let ns = Netns::new("pbs");
    ns.nft(
        "table ip lb {\n\
         \tmap web_slots64 { typeof numgen inc mod 64 : ip daddr; }\n\
         \tmap web_slots65536 { typeof numgen inc mod 65536 : ip daddr; }\n\
         \tset web_up { typeof ip daddr; }\n\
         }\n",
    );
    let pins = TestPins::new();
    let sink = |name: &str, kind: SinkKind| Sink {
        name: name.into(),
        profile: "web".into(),
        on_stop: OnStop::Keep,
        kind,
    };
    let nft = |target: NftTarget| {
        SinkKind::Nftables(NftSink {
            family: NftFamily::Ip,
            table: "lb".into(),
            target,
        })
    };
    println!("Latency from K simultaneous changes to the data path holding them (ms):\n");
    println!("| sink | backends | K | rounds | p50 | p99 | max | `nft -f` p50 | ratio p50 |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (backends, k, rounds) in [(1_000usize, 1usize, 200usize), (1_000, 100, 50), (20_000, 10_000, 10)] {
        let nft_map = |slots: u32| {
            sink(
                "map",
                nft(NftTarget::Map {
                    name: format!("web_slots{slots}"),
                    slots,
                }),
            )
        };
        let bpf = |slots: u32| {
            sink(
                "bpf",
                SinkKind::Bpf(BpfSink {
                    map: format!("bench{slots}"),
                    slots,
                }),
            )
        };
        let kinds = [
            ("nft set", sink("set", nft(NftTarget::Set { name: "web_up".into() }))),
            ("nft map, 64 slots", nft_map(64)),
            ("nft map, 65,536 slots", nft_map(65_536)),
            ("bpf table, 64 slots", bpf(64)),
            ("bpf table, 65,536 slots", bpf(65_536)),
        ];
        let script = nft_script(&ns, k, rounds.min(20) / 2 * 2);
        for (label, cfg) in kinds {
            let l = latency(&ns, cfg, &pins, backends, k, rounds);
            let alt = if label == "nft set" {
                (
                    ms(percentile(&script, 0.5)),
                    format!(
                        "{:.2}x",
                        l[l.len() / 2].as_secs_f64() / percentile(&script, 0.5).as_secs_f64()
                    ),
                )
            } else {
                ("-".into(), "-".into())
            };
            println!(
                "| {label} | {backends} | {k} | {rounds} | {} | {} | {} | {} | {} |",
                ms(percentile(&l, 0.5)),
                ms(percentile(&l, 0.99)),
                ms(*l.last().unwrap()),
                alt.0,
                alt.1
            );
        }
    }
    println!("\nSlots that move when one backend leaves a 65,536-slot table:\n");
    println!("| backends | ideal (its share) | probed rebalance | Maglev rebuilt |");
    println!("|---:|---:|---:|---:|");
    for n in [10usize, 100, 1000] {
        let names: Vec<String> = (0..n).map(|i| format!("b{i}")).collect();
        let cand = |w: &dyn Fn(usize) -> u32| -> Vec<slots::Candidate<'_>> {
            names
                .iter()
                .enumerate()
                .map(|(i, name)| slots::Candidate { name, weight: w(i) })
                .collect()
        };
        let all = cand(&|_| 1);
        let less = cand(&|i| u32::from(i != n / 2));
        let named = |t: Vec<Option<usize>>| -> Vec<Option<&str>> {
            t.into_iter().map(|s| s.map(|i| names[i].as_str())).collect()
        };
        let full = named(slots::rebalance(&[], &all, 65_536));
        let own = full.iter().filter(|s| **s == Some(names[n / 2].as_str())).count();
        let rebalanced = named(slots::rebalance(&full, &less, 65_536));
        let maglev_before = named(slots::build(&all, 65_536));
        let maglev_after = named(slots::build(&less, 65_536));
        println!(
            "| {n} | {own} ({:.2}%) | {} | {} |",
            100.0 * own as f64 / 65_536.0,
            slots::churn(&full, &rebalanced),
            slots::churn(&maglev_before, &maglev_after)
        );
    }
}
