//! The node running out of file descriptors is not the backends failing: with the process's
//! descriptor limit pulled under its open count, every HTTP probe fails to get a socket
//! (EMFILE) for several fail windows, and no endpoint changes; the results are counted as
//! `local-error`. In a process of its own, because the limit is the whole process's.
use std::time::Duration;

use probed::status::EndpointStatus as S;
use probed_tests::{
    daemon::{metric, DaemonFiles, RunningDaemon},
    http_server::Route,
    topo::*,
    Topology,
};

const ENDPOINTS: u16 = 4;

/// Sets the soft descriptor limit, returning the old one.
fn set_nofile(soft: libc::rlim_t) -> libc::rlim_t {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim), 0);
        let old = lim.rlim_cur;
        lim.rlim_cur = soft;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &raw const lim), 0);
        old
    }
}

#[test]
fn running_out_of_descriptors_changes_no_endpoint() {
    if !probed_tests::serial::own_process() {
        return;
    }
    let topo = Topology::new();
    let files = DaemonFiles::new();
    // Sockets: the kernel path opens no descriptor per probe, so only it can run out.
    let mut text = files
        .header(PROBER_IF)
        .replacen("[daemon]\n", "[daemon]\nhttp_probes = \"sockets\"\n", 1)
        + "[[profile]]\nname = \"web\"\ndialect = \"lb\"\nrouting = \"priority\"\n\n[profile.health]\n\
           protocol = \"http\"\npath = \"/health\"\ninterval = \"100ms\"\ntimeout = \"100ms\"\n\
           healthy_threshold = 2\nunhealthy_threshold = 2\n";
    let mut servers = Vec::new();
    for i in 0..ENDPOINTS {
        let port = 8080 + i;
        let server = topo.backend.http_server(&format!("{BACKEND_V4}:{port}"));
        server.route("/health", Route::status(200));
        servers.push(server);
        text += &format!(
            "\n[[profile.endpoint]]\nname = \"e{i}\"\naddress = \"{BACKEND_V4}\"\nport = {port}\npriority = {}\n",
            i + 1
        );
    }
    let config = files.write_config(&text);
    let daemon = RunningDaemon::start(&topo.prober, config, None).expect("start the daemon");
    for i in 0..ENDPOINTS {
        daemon.wait_status("web", &format!("e{i}"), S::Online, Duration::from_secs(5));
    }
    // The events file is written behind the status the API shows: the start's changes are in
    // it before they are counted (and before the writer, too, runs out of descriptors).
    for i in 0..ENDPOINTS {
        daemon.wait_event(&format!("e{i}"), S::Online, Duration::from_secs(5));
    }
    let changes_before = daemon.events().len();

    // 3 s is 15 fail windows of 200 ms. Nothing in this process may open a descriptor
    // meanwhile: the test only sleeps.
    let old = set_nofile(3);
    std::thread::sleep(Duration::from_secs(3));
    set_nofile(old);

    let (_, metrics) = daemon.call("GET", "/metrics");
    let metrics = metrics.as_str().expect("metrics are text").to_string();
    let local = metric(
        &metrics,
        "probed_probe_results_total{kind=\"http\",profile=\"web\",outcome=\"local-error\"}",
    );
    assert!(local >= 10.0, "the probes did run out of descriptors: {local}");
    for i in 0..ENDPOINTS {
        let view = daemon.endpoint("web", &format!("e{i}"));
        assert_eq!(view.status, S::Online, "{view:#?}");
    }
    let events = daemon.events();
    assert_eq!(
        events.len(),
        changes_before,
        "no change while out of descriptors: {events:#?}"
    );
    // And probing goes on: the last results are successes again.
    std::thread::sleep(Duration::from_millis(500));
    for i in 0..ENDPOINTS {
        let view = daemon.endpoint("web", &format!("e{i}"));
        assert!(view.last_result.as_ref().is_some_and(|r| r.ok), "{view:#?}");
    }
    daemon.stop();
}
