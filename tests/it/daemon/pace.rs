//! Falling behind is said, not hidden: 400 HTTP endpoints at a 100 ms interval whose backend
//! takes 400 ms to answer need about 1,600 probes in flight, while the daemon runs at most 256
//! at once. Probes then start late, and the metrics and the status API say so.
use std::time::{Duration, Instant};

use probed_tests::{
    daemon::{metric, DaemonFiles, RunningDaemon},
    http_server::Route,
    topo::*,
    Topology,
};

const FLEET: u32 = 400;

#[test]
fn probes_that_cannot_start_on_time_are_reported_behind_schedule() {
    let topo = Topology::new();
    topo.anyip("198.19.40.0/23");
    let server = topo.backend.http_server("0.0.0.0:8080");
    server.route("/health", Route::status(200).delayed(Duration::from_millis(400)));
    let files = DaemonFiles::new();
    // Sockets: their 256 lanes are the limit here (HTTP probes in the kernel wait for none).
    let mut text = files
        .header(PROBER_IF)
        .replacen("[daemon]\n", "[daemon]\nhttp_probes = \"sockets\"\n", 1)
        + "[[profile]]\nname = \"fleet\"\ndialect = \"lb\"\nrouting = \"priority\"\n\n[profile.health]\n\
           protocol = \"http\"\npath = \"/health\"\ninterval = \"100ms\"\ntimeout = \"1s\"\n\
           healthy_threshold = 2\nunhealthy_threshold = 2\n";
    for i in 0..FLEET {
        text += &format!(
            "\n[[profile.endpoint]]\nname = \"e{i}\"\naddress = \"198.19.{}.{}\"\nport = 8080\npriority = {}\n",
            40 + i / 256,
            i % 256,
            i + 1
        );
    }
    let config = files.write_config(&text);
    let daemon = RunningDaemon::start(&topo.prober, config, None).expect("start the daemon");

    let deadline = Instant::now() + Duration::from_secs(10);
    let (behind, lag) = loop {
        let (_, m) = daemon.call("GET", "/metrics");
        let m = m.as_str().expect("metrics are text").to_string();
        // The gauge appears with the first scan, a second after start.
        let behind = if m.contains("probed_schedule_behind_endpoints{") {
            metric(&m, "probed_schedule_behind_endpoints{profile=\"fleet\"}")
        } else {
            0.0
        };
        if behind >= 100.0 || Instant::now() > deadline {
            break (behind, metric(&m, "probed_schedule_lag_seconds"));
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!("behind schedule: {behind} endpoints, worst lateness {lag:.3} s");
    assert!(behind >= 100.0, "most of the fleet is behind schedule: {behind}");
    assert!(lag > 0.05, "worst lateness {lag} s");

    let status = daemon.get("/v1/status/fleet");
    let endpoints = status["endpoints"].as_array().expect("endpoints");
    let late: Vec<f64> = endpoints
        .iter()
        .filter(|e| e["windows"]["hold"] == false)
        .map(|e| e["windows"]["late_ms"].as_f64().expect("late_ms"))
        .collect();
    assert!(
        late.len() >= 100,
        "the status API marks them: {} of {FLEET}",
        late.len()
    );
    assert!(late.iter().all(|ms| *ms > 50.0), "{late:?}");
    daemon.stop();
}
