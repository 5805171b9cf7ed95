//! The demo behind `cargo xtask demo`: a prober and a backend namespace, probe_rx attached,
//! connections to an open, a closed and an ICMP-rejected port, and the counters live.
use std::{
    net::{SocketAddr, TcpStream},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use aya::programs::XdpMode;
use probed::kernel::{pin::PinDir, rx::RxProgram};
use probed_tests::{topo::*, TestPins, Topology};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn main() {
    let seconds: Option<u64> = std::env::args()
        .skip_while(|a| a != "--seconds")
        .nth(1)
        .and_then(|s| s.parse().ok());
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let topo = Topology::new();
    let _listener = topo.backend.tcp_listen(&format!("{BACKEND_V4}:80"));
    topo.backend
        .nft_reject_icmp("tcp", 8443, "admin-prohibited", "admin-prohibited");
    let pins = TestPins::new();
    println!(
        "demo: prober ns {} -> backend ns {} ({BACKEND_V4}: 80 open, 81 closed, 8443 rejected)",
        topo.prober.name, topo.backend.name
    );
    println!("demo: Ctrl-C stops it and removes everything");
    let started = Instant::now();
    topo.prober.enter(|| {
        let rx =
            RxProgram::attach(PROBER_IF, XdpMode::Skb, PinDir::create(&pins.path).unwrap()).expect("attach probe_rx");
        while !STOP.load(Ordering::Relaxed) && seconds.is_none_or(|s| started.elapsed() < Duration::from_secs(s)) {
            for port in [80u16, 81, 8443] {
                let addr: SocketAddr = format!("{BACKEND_V4}:{port}").parse().unwrap();
                let verdict = match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
                    Ok(_) => "open".to_string(),
                    Err(e) => e.kind().to_string(),
                };
                println!("  {addr:<18} {verdict}");
            }
            let c = rx.counters().expect("read counters");
            println!(
                "probe_rx: syn_ack={} rst={} icmp_unreach={} other={}",
                c.syn_ack, c.rst, c.icmp_unreach, c.other
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    println!("demo: removing namespaces and pins");
}
