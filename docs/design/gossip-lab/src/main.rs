//! gossip-sim MODE N [--steady S] [--loss PPM] [--packet BYTES] [--fast] [--interval MS]
//! MODE: cc (chitchat 0.11.2), fb (foca, bucket broadcasts), fv (foca, verdict broadcasts).
//! N nodes on 127.0.0.1 in one process; each holds 16 buckets x 64 verdicts (1,024 verdicts,
//! 16 x 1,088-byte values) and changes one verdict per second once the steady phase starts.
mod cc;
mod common;
mod fc;

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use common::*;

fn free_port() -> SocketAddr {
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

enum Nodes {
    Cc(Vec<Option<cc::CcNode>>),
    Fc(Vec<Option<fc::FcNode>>),
}

fn counters() -> (u64, u64, f64, Instant) {
    (SENT_BYTES.load(Ordering::Relaxed), SENT_DGRAMS.load(Ordering::Relaxed), cpu_secs(), Instant::now())
}

fn rate(label: &str, a: (u64, u64, f64, Instant), b: (u64, u64, f64, Instant), nodes: usize) {
    let secs = (b.3 - a.3).as_secs_f64();
    let bps = (b.0 - a.0) as f64 / secs;
    println!(
        "{label}: {:.0} B/s per node ({:.1} KiB/s cluster), {:.1} datagrams/s per node, {:.0} B/datagram, cpu {:.1}% of a core per node ({secs:.1} s)",
        bps / nodes as f64,
        bps / 1024.0,
        (b.1 - a.1) as f64 / secs / nodes as f64,
        (b.0 - a.0) as f64 / (b.1 - a.1).max(1) as f64,
        (b.2 - a.2) / secs / nodes as f64 * 100.0
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).cloned().unwrap_or_else(|| "cc".into());
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
    let opt = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|s| s.parse::<u64>().ok());
    let steady = Duration::from_secs(opt("--steady").unwrap_or(15));
    LOSS_PPM.store(opt("--loss").unwrap_or(0), Ordering::Relaxed);
    let packet = opt("--packet").unwrap_or(32 * 1024) as usize;
    let interval = Duration::from_millis(opt("--interval").unwrap_or(200));
    let fast = args.iter().any(|a| a == "--fast");
    let params = fc::Params {
        mode: if mode == "fv" { fc::Mode::Verdict } else { fc::Mode::Bucket },
        packet,
        fast,
        cluster: (n + 1) as u32,
    };
    println!("== mode {mode} nodes {n} steady {steady:?} loss {} ppm packet {packet} fast {fast} interval {interval:?}", LOSS_PPM.load(Ordering::Relaxed));
    let tracker = Arc::new(Tracker::default());
    let changes = Arc::new(AtomicBool::new(false));
    let addrs: Vec<SocketAddr> = (0..=n).map(|_| free_port()).collect();
    let t_start = Instant::now();
    for i in 0..n {
        tracker.set_live(i, true);
    }
    let mut nodes = if mode == "cc" {
        let mut v = Vec::new();
        for i in 0..n {
            let seed = (i > 0).then(|| addrs[0]);
            v.push(Some(cc::start(i, addrs[i], seed, interval, tracker.clone(), Phase::Initial, changes.clone()).await));
        }
        Nodes::Cc(v)
    } else {
        let mut v: Vec<Option<fc::FcNode>> = Vec::new();
        for i in 0..n {
            let seed = v.first().and_then(|s| s.as_ref()).map(|s| s.id.clone());
            v.push(Some(fc::start(i, addrs[i], seed, &params, tracker.clone(), Phase::Initial, changes.clone()).await));
        }
        Nodes::Fc(v)
    };
    // Initial convergence: every node holds every other node's 16 buckets.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let a = counters();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let b = counters();
    rate("idle (no verdict changes)", a, b, n);
    changes.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let a = counters();
    tokio::time::sleep(steady).await;
    let b = counters();
    rate("steady (1 change/s/node)", a, b, n);
    // A late joiner: how long until it holds every bucket of every other node.
    tracker.start_late(n, n * BUCKETS as usize);
    let a = counters();
    match &mut nodes {
        Nodes::Cc(v) => v.push(Some(cc::start(n, addrs[n], Some(addrs[0]), interval, tracker.clone(), Phase::Late, changes.clone()).await)),
        Nodes::Fc(v) => {
            let seed = v[0].as_ref().map(|s| s.id.clone());
            v.push(Some(fc::start(n, addrs[n], seed, &params, tracker.clone(), Phase::Late, changes.clone()).await));
        }
    }
    tokio::time::sleep(Duration::from_secs(8)).await;
    let b = counters();
    rate("while a node joins (8 s)", a, b, n + 1);
    // Kill node n-1 (no goodbye) and time how long each other node takes to call it dead.
    let victim = n - 1;
    let name = format!("n{victim}");
    let t_kill = Instant::now();
    tracker.set_live(victim, false);
    match &mut nodes {
        Nodes::Cc(v) => v[victim].take().unwrap().kill().await,
        Nodes::Fc(v) => v[victim].as_ref().unwrap().kill(),
    }
    let mut detected: Vec<Option<Duration>> = vec![None; n + 1];
    detected[victim] = Some(Duration::ZERO);
    while t_kill.elapsed() < Duration::from_secs(20) && detected.iter().any(Option::is_none) {
        for i in 0..=n {
            if detected[i].is_some() {
                continue;
            }
            let gone = match &nodes {
                Nodes::Cc(v) => match &v[i] {
                    Some(node) => !node.sees_live(&name).await,
                    None => true,
                },
                Nodes::Fc(v) => v[i].as_ref().is_none_or(|node| !node.members.lock().unwrap().contains(&victim)),
            };
            if gone {
                detected[i] = Some(t_kill.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut d: Vec<f64> = detected.iter().enumerate().filter(|(i, _)| *i != victim).map(|(_, d)| d.map_or(f64::NAN, |d| d.as_secs_f64())).collect();
    d.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("dead node noticed after (s, per observer): {:?}", d.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>());
    changes.store(false, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (lines, late) = tracker.report(Duration::from_secs(4));
    for l in lines {
        println!("propagation {l}");
    }
    println!("late joiner holds all {} buckets after: {:?}", n * BUCKETS as usize, late);
    if let Nodes::Cc(v) = &nodes {
        if let Some(Some(x)) = v.first() {
            println!("node 0 sees {} live nodes at the end", x.live_count().await);
        }
    }
    println!("dropped datagrams (simulated loss): {}; total run {:.1} s", DROPPED.load(Ordering::Relaxed), t_start.elapsed().as_secs_f64());
    std::process::exit(0);
}
