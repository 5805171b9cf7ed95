//! `cargo xtask bench l4`: the kernel engine against a plain tokio `TcpStream::connect`
//! prober, on the same AnyIP fleets, in one run. Each target is probed once per interval;
//! the fleet is spread evenly over the interval as the scheduler would.
//!
//! Each fleet is served twice: by the backend namespace's own TCP stack (which runs on this
//! machine's CPUs, inside the prober's system calls and softirqs, and so inflates every
//! prober's figures alike), and by `test_reflector`, an XDP responder that answers SYNs at
//! almost no cost, standing in for a remote fleet so the prober's own cost shows. Against the
//! reflector the engine also probes through tunnels (ipip and gue, to 256 VIPs with the
//! targets as backends), which the reflector unwraps and answers from the VIP: the tunnel
//! rows' "CPU vs plain XDP" is what the outer headers cost.
//!
//! Reported per prober and fleet: probes/s (results received over the time from the first send to the
//! last result), process CPU (user+system) per probe,
//! system-wide softirq time per probe (it includes the backend namespace's own TCP work,
//! which is the same for every prober), results missing a second past the last timeout
//! ("late": a prober that cannot keep up), and the resident-memory growth.
use probed_bench::cpu_time;
use std::{
    net::{Ipv4Addr, SocketAddr},
    sync::Arc,
    time::{Duration, Instant},
};

use probed::engine::{Encap, L4Outcome, L4Proto, L4Request, Tunnel, TxChoice, TxPath};
use probed_tests::{reflector::Reflector, topo::BACKEND_IF, TestPins, Topology};

const INTERVAL: Duration = Duration::from_secs(1);
const TIMEOUT: Duration = Duration::from_secs(1);
/// Slices the interval is cut into: the fleet is sent one slice at a time.
const SLICES: u32 = 100;
const PORTS: [u16; 2] = [80, 443];
/// The open-file limit here is 20,000: the connect prober keeps this many sockets at most.
const CONNECT_CONCURRENCY: usize = 12_000;

struct Row {
    fleet: usize,
    backend: &'static str,
    prober: &'static str,
    probes: u64,
    wall: Duration,
    cpu: Duration,
    softirq: Duration,
    lost: u64,
    unhealthy: u64,
    rss_growth_kb: i64,
}

fn target(i: usize) -> SocketAddr {
    let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 19, 0, 0)) + (i % 65536) as u32);
    SocketAddr::new(ip.into(), PORTS[i / 65536])
}

/// Target i probed through a tunnel: the SYN to one of 256 service addresses (VIPs, at the
/// target's port) inside an outer header to the target's address; the reflector answers from
/// the VIP. Spread over VIPs so that no VIP and port has more probes in flight than the source
/// port range (4,096) allows.
fn tunnelled(i: usize, encap: Encap) -> (SocketAddr, Tunnel) {
    let t = target(i);
    let vip = Ipv4Addr::new(198, 18, 128, (i % 256) as u8);
    (
        SocketAddr::new(vip.into(), t.port()),
        Tunnel {
            backend: t.ip(),
            encap,
            mtu: 0,
            source: None,
        },
    )
}

fn rss_kb() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

struct Meter {
    start: Instant,
    /// When the last result arrived: probes/s is measured up to here.
    last: Instant,
    cpu: Duration,
    softirq: Duration,
    rss: i64,
    peak: i64,
}

impl Meter {
    fn start() -> Self {
        let rss = rss_kb();
        let now = Instant::now();
        Self {
            start: now,
            last: now,
            cpu: cpu_time(),
            softirq: probed_tests::procs::softirq_cpu(),
            rss,
            peak: rss,
        }
    }
    fn result(&mut self) {
        self.last = Instant::now();
    }
    fn sample(&mut self) {
        self.peak = self.peak.max(rss_kb());
    }
    #[allow(clippy::too_many_arguments)]
    fn row(mut self, fleet: usize, prober: &'static str, probes: u64, lost: u64, unhealthy: u64) -> Row {
        self.sample();
        Row {
            fleet,
            backend: "",
            prober,
            probes,
            wall: self.last - self.start,
            cpu: cpu_time() - self.cpu,
            softirq: probed_tests::procs::softirq_cpu().saturating_sub(self.softirq),
            lost,
            unhealthy,
            rss_growth_kb: self.peak - self.rss,
        }
    }
}

fn engine_run(
    fleet: usize,
    rounds: u32,
    pins: &TestPins,
    (tx, encap): (TxChoice, Option<Encap>),
    name: &'static str,
) -> Row {
    let (engine, mut rx) = probed_tests::l4::start_engine_with(pins, tx, |c| {
        if std::env::var_os("BENCH_SOURCE").is_some() {
            c.source_v4 = Some(std::net::Ipv4Addr::new(198, 18, 0, 1));
        }
    });
    if let TxChoice::Auto = tx {
        assert_eq!(engine.tx_path(), TxPath::Xdp, "{}", engine.tx_path_reason());
    }
    let per_slice = fleet.div_ceil(SLICES as usize);
    let mut meter = Meter::start();
    let (mut got, mut unhealthy) = (0u64, 0u64);
    let begin = Instant::now();
    let mut token = 0u64;
    for round in 0..rounds {
        for slice in 0..SLICES {
            let due = begin + INTERVAL * round + INTERVAL * slice / SLICES;
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            let lo = slice as usize * per_slice;
            let hi = ((slice as usize + 1) * per_slice).min(fleet);
            let reqs: Vec<_> = (lo..hi)
                .map(|i| {
                    token += 1;
                    let (target, tunnel) = match encap {
                        Some(e) => {
                            let (vip, t) = tunnelled(i, e);
                            (vip, Some(t))
                        }
                        None => (target(i), None),
                    };
                    L4Request {
                        token,
                        target,
                        proto: L4Proto::Tcp,
                        timeout: TIMEOUT,
                        tunnel,
                    }
                })
                .collect();
            engine.submit(reqs).unwrap();
            while let Ok(r) = rx.try_recv() {
                meter.result();
                got += 1;
                unhealthy += u64::from(r.outcome != L4Outcome::Open);
            }
            meter.sample();
        }
    }
    let sent = fleet as u64 * u64::from(rounds);
    let deadline = Instant::now() + TIMEOUT + Duration::from_secs(1);
    while got < sent && Instant::now() < deadline {
        match rx.try_recv() {
            Ok(r) => {
                meter.result();
                got += 1;
                unhealthy += u64::from(r.outcome != L4Outcome::Open);
            }
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    // Unloading (program detach, map teardown) is not per-probe work: measure before it.
    let row = meter.row(fleet, name, sent, sent - got, unhealthy);
    drop(engine);
    row
}

fn connect_run(fleet: usize, rounds: u32) -> Row {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let sem = Arc::new(tokio::sync::Semaphore::new(CONNECT_CONCURRENCY));
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<bool>();
        let per_slice = fleet.div_ceil(SLICES as usize);
        let mut meter = Meter::start();
        let begin = tokio::time::Instant::now();
        for round in 0..rounds {
            for slice in 0..SLICES {
                tokio::time::sleep_until(begin + INTERVAL * round + INTERVAL * slice / SLICES).await;
                let lo = slice as usize * per_slice;
                let hi = ((slice as usize + 1) * per_slice).min(fleet);
                for i in lo..hi {
                    let permit = sem.clone().acquire_owned().await.unwrap();
                    let done = done_tx.clone();
                    tokio::spawn(async move {
                        let ok = matches!(
                            tokio::time::timeout(TIMEOUT, tokio::net::TcpStream::connect(target(i))).await,
                            Ok(Ok(_))
                        );
                        drop(permit);
                        let _ = done.send(ok);
                    });
                }
                meter.sample();
            }
        }
        drop(done_tx);
        let sent = fleet as u64 * u64::from(rounds);
        let (mut got, mut unhealthy) = (0u64, 0u64);
        while let Ok(Some(ok)) = tokio::time::timeout(TIMEOUT * 2, done_rx.recv()).await {
            meter.result();
            got += 1;
            unhealthy += u64::from(!ok);
        }
        meter.row(fleet, "tokio connect()", sent, sent - got, unhealthy)
    })
}

/// Accepts and closes connections on the backend so the connect prober's handshakes do not
/// pile up in the accept queue. It blocks in accept (waking at most 5 times a second to
/// notice the listener's namespace going away), so it adds next to nothing to the CPU the
/// benchmark measures, and it ends within 10 minutes whatever happens.
fn drain(listener: std::net::TcpListener) {
    use std::os::fd::AsRawFd;
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 200_000,
    };
    // SAFETY: sets SO_RCVTIMEO (which bounds accept) from a valid timeval on our socket.
    unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const tv).cast(),
            std::mem::size_of_val(&tv) as u32,
        )
    };
    std::thread::spawn(move || {
        let stop = Instant::now() + Duration::from_secs(600);
        while Instant::now() < stop {
            match listener.accept() {
                Ok(_) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => return,
            }
        }
    });
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let fleets: Vec<usize> = args.get(1).map_or_else(
        || vec![1_000, 10_000, 100_000],
        |s| s.split(',').filter_map(|v| v.parse().ok()).collect(),
    );
    let rounds: u32 = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(3);
    let mut rows = Vec::new();
    for &fleet in &fleets {
        assert!(fleet <= 65536 * PORTS.len(), "at most {} targets", 65536 * PORTS.len());
        for backend in ["kernel TCP stack", "XDP reflector"] {
            if std::env::var("BENCH_BACKEND").is_ok_and(|b| !backend.contains(b.as_str())) {
                continue;
            }
            let topo = Topology::new();
            topo.anyip("198.19.0.0/16");
            for (k, v) in [
                ("net.ipv4.tcp_syncookies", "1"),
                ("net.core.somaxconn", "65535"),
                ("net.ipv4.tcp_max_syn_backlog", "262144"),
            ] {
                topo.backend.sysctl(k, v);
                topo.prober.sysctl(k, v);
            }
            topo.prober.sysctl("net.ipv4.ip_local_port_range", "10000 60999");
            for port in PORTS {
                drain(topo.backend.tcp_listen(&format!("0.0.0.0:{port}")));
            }
            // The reflector answers in XDP before the backend's stack sees anything.
            let _reflector = (backend == "XDP reflector").then(|| Reflector::attach(&topo.backend, BACKEND_IF));
            let pins = TestPins::new();
            eprintln!(
                "fleet {fleet}, {backend}: {rounds} rounds of {} ms",
                INTERVAL.as_millis()
            );
            topo.prober.enter(|| {
                let mut run = |mut r: Row| {
                    r.backend = backend;
                    rows.push(r);
                };
                run(engine_run(
                    fleet,
                    rounds,
                    &pins,
                    (TxChoice::Auto, None),
                    "probed XDP engine",
                ));
                // Only the reflector unwraps tunnelled probes (the backend's stack here has
                // no tunnel device: this kernel has none).
                if backend == "XDP reflector" {
                    for (encap, name) in [
                        (Encap::Ipip, "probed XDP engine, ipip tunnel"),
                        (Encap::Gue { port: 6080 }, "probed XDP engine, gue tunnel"),
                    ] {
                        run(engine_run(fleet, rounds, &pins, (TxChoice::Auto, Some(encap)), name));
                    }
                }
                if std::env::var_os("BENCH_ONLY_XDP").is_none() {
                    run(engine_run(
                        fleet,
                        rounds,
                        &pins,
                        (TxChoice::Force(TxPath::Raw), None),
                        "probed raw-socket path",
                    ));
                    // On veth a native XDP_TX (the reflector's) is only taken by a peer that
                    // runs native XDP itself, so the connect prober runs with probe_rx
                    // attached and idle, as it would be on a node running probed.
                    let _rx = (backend == "XDP reflector").then(|| {
                        let dir = probed::kernel::pin::PinDir::create(&pins.path).expect("pin directory");
                        probed::kernel::rx::RxProgram::attach(
                            probed_tests::topo::PROBER_IF,
                            probed_tests::l4::xdp_mode(),
                            dir,
                        )
                        .expect("attach probe_rx")
                    });
                    run(connect_run(fleet, rounds));
                }
            });
        }
    }
    println!(
        "| targets | backend | prober | probes/s | CPU us/probe | softirq us/probe | late | not open | RSS growth MiB | CPU vs connect | CPU vs plain XDP |"
    );
    println!("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let cpu_of = |r: &Row| r.cpu.as_secs_f64() / r.probes.max(1) as f64;
    for chunk in rows.chunk_by(|a, b| (a.fleet, a.backend) == (b.fleet, b.backend)) {
        let base = |name: &str| chunk.iter().find(|r| r.prober == name).map_or(f64::NAN, cpu_of);
        let (connect_cpu, xdp_cpu) = (base("tokio connect()"), base("probed XDP engine"));
        for r in chunk {
            let per = |d: Duration| d.as_secs_f64() * 1e6 / r.probes.max(1) as f64;
            let cpu = cpu_of(r);
            println!(
                "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {} | {} | {:.1} | {:.2}x | {:.2}x |",
                r.fleet,
                r.backend,
                r.prober,
                (r.probes - r.lost) as f64 / r.wall.as_secs_f64(),
                per(r.cpu),
                per(r.softirq),
                r.lost,
                r.unhealthy,
                r.rss_growth_kb as f64 / 1024.0,
                cpu / connect_cpu,
                cpu / xdp_cpu
            );
        }
    }
}
