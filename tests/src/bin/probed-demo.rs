//! The demo behind `cargo xtask demo`: a fleet in namespaces (healthy, dead, refusing and
//! flapping TCP, fast and slow HTTP, open and closed UDP), the daemon running against it in the
//! prober namespace, and its status table live every second until Ctrl-C or `--seconds N`.
//! The prober namespace is also a load balancer: a client's connections to a VIP go through an
//! nft slot map that the daemon's sink keeps, and the demo shows them leaving the flapping
//! backend while it is down and coming back when it is up. The www profile's route sink
//! announces a VIP (a route in kernel table 201, as BIRD would pick it up) while both of its
//! endpoints serve, and withdraws it while the flapping one is down.
use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use probed::{
    daemon::ProfileView,
    render::{render_watch, WatchSummary},
};
use probed_tests::{
    daemon::RunningDaemon,
    fleet::{Fleet, VIP},
    lb::connect_within,
};

static STOP: AtomicBool = AtomicBool::new(false);

/// A descriptor on /dev/null, opened before the handlers are installed.
static DEV_NULL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    if sig == libc::SIGHUP {
        // The terminal is gone: writing to it would fail (and a failed print panics), so the
        // rest of the output goes nowhere while the demo cleans up.
        let null = DEV_NULL.load(Ordering::Relaxed);
        if null >= 0 {
            // SAFETY: dup2 is async-signal-safe; both descriptors are open.
            unsafe {
                libc::dup2(null, 1);
                libc::dup2(null, 2);
            }
        }
    }
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
        println!(
            "probed-demo [--cluster] [--seconds N]: run probed against a fleet in namespaces (--cluster: \
             three nodes sharing verdicts); Ctrl-C stops it"
        );
        return;
    }
    // SAFETY: open on a NUL-terminated literal.
    DEV_NULL.store(
        unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY) },
        Ordering::Relaxed,
    );
    // SAFETY: the handler only stores to atomics and calls dup2, both async-signal-safe.
    // SIGINT is Ctrl-C, SIGTERM a stop, SIGHUP a closed terminal: each ends the loop, and the
    // namespaces, pins and daemon go as the demo returns.
    unsafe {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
    if std::env::args().any(|a| a == "--cluster") {
        cluster(seconds);
        return;
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
        // The www profile's VIP route, which a routing daemon (BIRD) would announce by BGP.
        let sinks = daemon.get("/v1/sinks");
        let route = sinks
            .as_array()
            .and_then(|all| all.iter().find(|s| s["name"] == "www-vip"))
            .map(|s| &s["routes"][0]);
        let routes = fleet.vip_routes();
        println!(
            "route sink www-vip: {} is {} ({}); ip route show table 201: {}",
            route.map_or("-", |r| r["prefix"].as_str().unwrap_or("-")),
            route.map_or("-", |r| r["state"].as_str().unwrap_or("-")),
            route.map_or("-", |r| r["cause"].as_str().unwrap_or("-")),
            if routes.is_empty() {
                "(none: withdrawn)"
            } else {
                routes.as_str()
            }
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
                e.results.last().map_or("-", |r| r.reason.as_ref())
            );
        }
        seen_events = events.len().max(seen_events);
        std::thread::sleep(Duration::from_secs(1));
    }
    println!("demo: {seen_events} transitions; stopping the daemon, removing namespaces and pins");
    daemon.stop();
}

/// `--cluster`: three nodes around one backend share verdicts, each target probed by two of
/// them. Every six seconds the next step: one target cut off from one of its probers (its
/// votes split, it stays Online under the 50% rule), then from both (Degraded on every node),
/// then restored.
fn cluster(seconds: Option<u64>) {
    use probed_tests::star::{Rig, Star};
    const TARGETS: usize = 8;
    const STEP: Duration = Duration::from_secs(6);
    let rig = Rig::new(3);
    let star = &rig.star;
    let daemons: Vec<RunningDaemon> = (0..3).map(|i| rig.start(i, TARGETS, 2)).collect();
    for (i, d) in daemons.iter().enumerate() {
        println!(
            "demo: n{i} in ns {} at {}, API {}",
            star.nodes[i].name,
            Star::addr(i),
            d.api
        );
    }
    // SAFETY: isatty only inspects the descriptor.
    let tty = unsafe { libc::isatty(1) } == 1;
    let started = Instant::now();
    while !STOP.load(Ordering::Relaxed) && seconds.is_none_or(|s| started.elapsed() < Duration::from_secs(s)) {
        let step = (started.elapsed().as_secs() / STEP.as_secs()) % 4;
        // t0's probers, as n0 sees them.
        let t0 = daemons[0].endpoint("web", "t0");
        let probers: Vec<usize> = t0
            .cluster
            .as_ref()
            .map(|c| c.locations.iter().filter_map(|l| l.node[1..].parse().ok()).collect())
            .unwrap_or_default();
        star.restore();
        let what = match step {
            1 if !probers.is_empty() => {
                star.cut(probers[0], 0);
                format!(
                    "t0 cut off from n{} (one of its two probers): 1 of 2 up keeps it in",
                    probers[0]
                )
            }
            2 => {
                for &i in &probers {
                    star.cut(i, 0);
                }
                "t0 cut off from both its probers: out on every node".to_string()
            }
            _ => "every target reachable".to_string(),
        };
        if tty {
            print!("\x1b[2J\x1b[H");
        }
        println!(
            "probed cluster demo, {:>4.1} s: {what}  (Ctrl-C stops and cleans up)\n",
            started.elapsed().as_secs_f64()
        );
        print!("{:<6}", "");
        for i in 0..3 {
            print!("{:<34}", format!("on n{i}"));
        }
        println!();
        for j in 0..TARGETS {
            print!("{:<6}", format!("t{j}"));
            for d in &daemons {
                let e = d.endpoint("web", &format!("t{j}"));
                let votes: Vec<String> = e
                    .cluster
                    .map(|c| {
                        c.locations
                            .iter()
                            .map(|l| format!("{}:{:?}", l.node, l.verdict))
                            .collect()
                    })
                    .unwrap_or_default();
                print!("{:<34}", format!("{} [{}]", e.status.as_str(), votes.join(" ")));
            }
            println!();
        }
        let view = daemons[0].get("/v1/cluster");
        println!(
            "\nn0: members {}, probes {} of {} endpoints; gossip {} B sent",
            view["members"], view["probed_here"], view["endpoints"], view["datagrams"]["bytes_sent"]
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    star.restore();
    println!("demo: stopping the three daemons, removing namespaces and pins");
    for d in daemons {
        d.stop();
    }
}
