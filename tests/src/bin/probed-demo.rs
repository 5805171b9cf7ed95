//! The demo behind `cargo xtask demo`: a fleet in namespaces (healthy, dead, refusing and
//! flapping TCP, fast and slow HTTP, open and closed UDP), the daemon running against it in the
//! prober namespace, and its status table live every second until Ctrl-C or `--seconds N`.
//! The prober namespace is also a load balancer: a client's connections to a VIP go through an
//! nft slot map that the daemon's sink keeps, and the demo shows them leaving the flapping
//! backend while it is down and coming back when it is up.
use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use probed::daemon::{
    views::{render_watch, WatchSummary},
    ProfileView,
};
use probed_tests::{
    daemon::RunningDaemon,
    fleet::{Fleet, VIP},
    lb::connect_within,
};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// The flapping service changes every this often: long enough to show both transitions.
const FLAP_EVERY: Duration = Duration::from_secs(4);

fn main() {
    let seconds: Option<u64> = std::env::args()
        .skip_while(|a| a != "--seconds")
        .nth(1)
        .and_then(|s| s.parse().ok());
    if std::env::args().any(|a| a == "--help" || a == "-h") {
        println!("probed-demo [--seconds N]: run probed against a fleet in namespaces; Ctrl-C stops it");
        return;
    }
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let mut fleet = Fleet::new();
    let config = fleet.files.write_config(&fleet.config_text());
    println!(
        "demo: prober ns {} -> backend ns {}; config {}, events {}",
        fleet.topo.prober.name,
        fleet.topo.backend.name,
        fleet.files.config_path().display(),
        fleet.files.events().display()
    );
    let daemon = RunningDaemon::start(&fleet.topo.prober, config, Some(&fleet.files.config_path()))
        .unwrap_or_else(|e| panic!("start the daemon: {e}"));
    println!("demo: API at {} (try: probed status --api {})", daemon.api, daemon.api);
    // SAFETY: isatty only inspects the descriptor.
    let tty = unsafe { libc::isatty(1) } == 1;
    let started = Instant::now();
    let mut last_flap = Instant::now();
    let mut seen_events = 0;
    let mut syns_before = fleet.client_syns();
    while !STOP.load(Ordering::Relaxed) && seconds.is_none_or(|s| started.elapsed() < Duration::from_secs(s)) {
        if last_flap.elapsed() >= FLAP_EVERY {
            let down = !fleet.flapping_down();
            fleet.set_flapping_down(down);
            last_flap = Instant::now();
        }
        let views: Vec<ProfileView> = serde_json::from_value(daemon.get("/v1/status")).expect("status decodes");
        if tty {
            print!("\x1b[2J\x1b[H");
        }
        println!(
            "probed demo, {:>4.1} s  (flapping service is {}; Ctrl-C stops and cleans up)\n",
            started.elapsed().as_secs_f64(),
            if fleet.flapping_down() { "dropping" } else { "up" }
        );
        // The view of `probed status --watch`: problems first, transitions marked.
        print!("{}", render_watch(&views, &WatchSummary::default(), tty));
        // A client's short connections through the node's load balancer (nft dnat through the
        // slot map the nftables sink keeps): where did the last round go?
        let made = connect_within(&fleet.client, VIP, 40, Duration::from_millis(100));
        let syns = fleet.client_syns();
        println!(
            "\nclient -> {VIP}:80, 40 connections ({made} answered): healthy:8080 got {}, flapping:8083 got {}",
            syns.0 - syns_before.0,
            syns.1 - syns_before.1
        );
        syns_before = syns;
        println!(
            "dig @{} www.tm.example. A -> {} (priority: the flapping service, else the standby)",
            probed_tests::fleet::DNS_SERVER,
            fleet.dig_www()
        );
        let events = daemon.events();
        println!("\nlatest transitions:");
        for e in events.iter().skip(events.len().saturating_sub(6)) {
            println!(
                "  {}/{} {} -> {} after {:.0} ms (formula {:.0} ms), last result: {}",
                e.profile,
                e.endpoint,
                e.from.map_or("new", |s| s.as_str()),
                e.to.map_or("removed", |s| s.as_str()),
                e.measured_window_ms,
                e.formula_window_ms,
                e.results.last().map_or("-", |r| r.reason.as_str())
            );
        }
        seen_events = events.len().max(seen_events);
        std::thread::sleep(Duration::from_secs(1));
    }
    println!("demo: {seen_events} transitions; stopping the daemon, removing namespaces and pins");
    daemon.stop();
}
