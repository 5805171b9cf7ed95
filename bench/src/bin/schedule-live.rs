//! The live half of `cargo xtask bench schedule`: the daemon's scheduler driving the kernel
//! engine for 10k and 100k TCP targets at a 1 s interval, and how late probes leave against
//! their due time (the daemon's `probed_schedule_lateness_seconds` histogram, so figures are
//! bucket bounds: "at most"). The fleet is answered by the XDP reflector, so the backend's
//! own TCP work does not compete with the scheduler for this machine's two cores.
//!
//! Two rows per fleet: the whole run from the daemon's start (the first round, every
//! endpoint's first transitions and their events included), and the steady state, the
//! difference between a scrape after WARMUP and one at the end.
use std::time::{Duration, Instant};

use probed_tests::{
    daemon::{histogram_quantile, histogram_quantile_between, metric, DaemonFiles, RunningDaemon},
    reflector::Reflector,
    topo::{BACKEND_IF, PROBER_IF},
    Topology,
};

const RUN: Duration = Duration::from_secs(10);
/// The steady-state row starts this long after the daemon.
const WARMUP: Duration = Duration::from_secs(5);
const LATENESS: &str = "probed_schedule_lateness_seconds";

/// Results other than "open" so far (timeouts, mostly: replies lost on the way).
fn not_open(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("probed_probe_results_total{") && !l.contains("outcome=\"open\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}

fn main() {
    let fleets: Vec<usize> = std::env::args().nth(1).map_or_else(
        || vec![10_000, 100_000],
        |s| s.split(',').filter_map(|v| v.parse().ok()).collect(),
    );
    println!("| targets | part | run s | probes sent | probes/s | not open | lateness p50 | p99 | max (bucket) |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for n in fleets {
        assert!(n <= 2 * 65_536, "two ports of one /16 of AnyIP targets at most");
        let topo = Topology::new();
        topo.anyip("198.19.0.0/16");
        let _reflector = Reflector::attach(&topo.backend, BACKEND_IF);
        let files = DaemonFiles::new();
        let mut text = files.header(PROBER_IF)
            + "[[profile]]\nname = \"fleet\"\ndialect = \"lb\"\nrouting = \"weighted\"\n\n[profile.health]\n\
               protocol = \"tcp\"\nport = 80\ninterval = \"1s\"\ntimeout = \"500ms\"\n\
               healthy_threshold = 2\nunhealthy_threshold = 2\n";
        for i in 0..n {
            let (ip, port) = (i % 65_536, [80, 443][i / 65_536]);
            text += &format!(
                "\n[[profile.endpoint]]\naddress = \"198.19.{}.{}\"\nport = {port}\n",
                ip / 256,
                ip % 256
            );
        }
        let config = files.write_config(&text);
        let daemon = RunningDaemon::start(&topo.prober, config, None).expect("start the daemon");
        let started = Instant::now();
        let scrape = || {
            let (_, metrics) = daemon.call("GET", "/metrics");
            (Instant::now(), metrics.as_str().unwrap().to_string())
        };
        std::thread::sleep(WARMUP);
        let (warm_at, warm) = scrape();
        std::thread::sleep(RUN.saturating_sub(WARMUP));
        let (end_at, end) = scrape();
        daemon.stop();
        let sent = |m: &str| metric(m, "probed_probes_sent_total{kind=\"tcp\",profile=\"fleet\"}");
        let whole = |p| histogram_quantile(&end, LATENESS, p) * 1e3;
        let steady = |p| histogram_quantile_between(&warm, &end, LATENESS, p) * 1e3;
        let row = |part: &str, secs: f64, n_sent: f64, failed: f64, q: &dyn Fn(f64) -> f64| {
            println!(
                "| {n} | {part} | {secs:.1} | {n_sent:.0} | {:.0} | {failed:.0} | <= {} ms | <= {} ms | <= {} ms |",
                n_sent / secs,
                q(0.5),
                q(0.99),
                q(1.0)
            );
        };
        row(
            "from start",
            (end_at - started).as_secs_f64(),
            sent(&end),
            not_open(&end),
            &whole,
        );
        row(
            "steady",
            (end_at - warm_at).as_secs_f64(),
            sent(&end) - sent(&warm),
            not_open(&end) - not_open(&warm),
            &steady,
        );
    }
}
