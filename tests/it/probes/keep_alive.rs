//! `keep_alive = true` in the daemon: each endpoint's connection is kept between checks (one
//! TCP connection, one TLS handshake, for many checks), and the verdicts stay curl's on the same
//! servers: healthy while they answer 200, failing on a bad status, healthy again through new
//! connections when the server closes each one.
use std::{collections::HashSet, process::Command, time::Duration};

use probed::status::EndpointStatus;
use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    http_server::{Route, Seen, SelfSigned},
    topo::*,
    Netns, Topology,
};

/// Distinct client connections among `seen` requests.
fn connections(seen: &[Seen]) -> usize {
    seen.iter().map(|s| s.peer).collect::<HashSet<_>>().len()
}

/// curl's verdict on `url` from `ns`: healthy on 200-399 (the checks' default statuses), and the
/// status it got.
fn curl(ns: &Netns, url: &str) -> (bool, u16) {
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.name, "curl", "-s", "-k", "-I", "-o", "/dev/null"])
        .args(["-w", "%{http_code}", "--max-time", "2", url])
        .output()
        .expect("run curl");
    let code: u16 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0);
    ((200..400).contains(&code), code)
}

fn healthy(status: EndpointStatus) -> bool {
    status == EndpointStatus::Online
}

#[test]
fn kept_connections_carry_many_checks_and_the_verdicts_stay_curls() {
    let topo = Topology::new();
    let plain = topo.backend.http_server(&format!("{BACKEND_V4}:8080"));
    let tls = topo.backend.https_server(
        &format!("{BACKEND_V4}:8443"),
        &SelfSigned::new(&["backend.test"]),
        Duration::ZERO,
    );
    let files = DaemonFiles::new();
    let mut text = files.header(PROBER_IF);
    for (name, protocol, port) in [("kept", "http", 8080), ("kepts", "https", 8443)] {
        text += &format!(
            "[[profile]]\nname = \"{name}\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"{protocol}\"\n\
             port = {port}\ninterval = \"200ms\"\ntimeout = \"500ms\"\nhealthy_threshold = 2\n\
             unhealthy_threshold = 2\nkeep_alive = true\n[[profile.endpoint]]\nname = \"b\"\naddress = \"{BACKEND_V4}\"\n"
        );
    }
    let config = files.write_config(&text);
    let d = RunningDaemon::start(&topo.prober, config, Some(&files.config_path())).expect("daemon starts");
    let urls = [
        ("kept", format!("http://{BACKEND_V4}:8080/"), &plain),
        ("kepts", format!("https://{BACKEND_V4}:8443/"), &tls),
    ];

    // Healthy, as curl finds them, and every check after the first on the first connection.
    for (profile, url, server) in &urls {
        let v = d.wait_status(profile, "b", EndpointStatus::Online, Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(1200));
        let seen = server.seen();
        assert!(seen.len() >= 6, "{profile}: {} checks", seen.len());
        assert_eq!(
            connections(&seen),
            1,
            "{profile}: {} checks on one connection",
            seen.len()
        );
        assert_eq!(
            curl(&topo.prober, url).0,
            healthy(v.status),
            "{profile}: curl and probed"
        );
    }
    assert_eq!(tls.tls_failures(), 0);

    // A bad status fails the check on the kept connection, as curl fails it.
    for (profile, url, server) in &urls {
        server.route("/", Route::status(503));
        let v = d.wait_status(profile, "b", EndpointStatus::Degraded, Duration::from_secs(3));
        let (curl_healthy, code) = curl(&topo.prober, url);
        assert_eq!(code, 503);
        assert_eq!(curl_healthy, healthy(v.status), "{profile}: curl and probed");
    }

    // A server that closes every connection: each check takes a new one and passes.
    for (profile, url, server) in &urls {
        server.clear();
        server.route("/", Route::status(200).header("connection", "close"));
        let v = d.wait_status(profile, "b", EndpointStatus::Online, Duration::from_secs(3));
        std::thread::sleep(Duration::from_millis(600));
        let seen = server.seen();
        assert_eq!(
            connections(&seen),
            seen.len(),
            "{profile}: a connection per check when the server closes them"
        );
        assert_eq!(
            curl(&topo.prober, url).0,
            healthy(v.status),
            "{profile}: curl and probed"
        );
    }
    d.stop();
}
