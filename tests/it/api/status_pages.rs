//! The status of a large fleet without one giant document: `GET /v1/status/PROFILE?offset=&limit=`
//! gives a page of a profile's endpoints (with the profile's total), and `GET
//! /v1/status?stream=1` gives every profile and endpoint as JSON lines, fetched a page at a time;
//! both agree with the whole document. Bad paging parameters are refused naming the parameter.
use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    topo::*,
    Topology,
};
use serde_json::Value;

const ENDPOINTS: usize = 2_500;

fn names(endpoints: &Value) -> Vec<String> {
    endpoints
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn pages_and_the_stream_agree_with_the_whole_status() {
    let topo = Topology::new();
    topo.anyip("198.19.0.0/20");
    let files = DaemonFiles::new();
    // Slow checks: the fleet's health does not matter here, its size does.
    let mut text = files.header(PROBER_IF);
    for (profile, n) in [("web", ENDPOINTS), ("small", 3)] {
        text += &format!(
            "\n[[profile]]\nname = \"{profile}\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\nport = 80\n\
             interval = \"5s\"\ntimeout = \"1s\"\n"
        );
        for j in 0..n {
            let ip = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(198, 19, 0, 1)) + j as u32);
            text += &format!("\n[[profile.endpoint]]\nname = \"{profile}-{j}\"\naddress = \"{ip}\"\n");
        }
    }
    let daemon = RunningDaemon::start(&topo.prober, files.write_config(&text), None).expect("start");
    let whole = daemon.get("/v1/status/web");
    let all = names(&whole["endpoints"]);
    assert_eq!(all.len(), ENDPOINTS);
    assert!(whole.get("page").is_none(), "the whole profile is not a page");

    // Pages of 1000 put back together are the whole, in order.
    let mut paged = Vec::new();
    for offset in (0..ENDPOINTS + 1000).step_by(1000) {
        let p = daemon.get(&format!("/v1/status/web?offset={offset}&limit=1000"));
        assert_eq!(p["page"]["total"], ENDPOINTS, "{}", p["page"]);
        assert_eq!(p["page"]["offset"], offset);
        assert_eq!(p["status"], whole["status"]);
        paged.extend(names(&p["endpoints"]));
    }
    assert_eq!(paged, all);
    let first = daemon.get("/v1/status/web?limit=2");
    assert_eq!(names(&first["endpoints"]), ["web-0", "web-1"]);

    // The stream: each profile, then its endpoints, one JSON object per line.
    let (code, body) = daemon.call("GET", "/v1/status?stream=1");
    assert_eq!(code, 200);
    let text = body.as_str().expect("JSON lines are not one JSON document");
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2 + ENDPOINTS + 3);
    assert_eq!(lines[0]["profile"]["name"], "web");
    assert_eq!(lines[0]["profile"]["page"]["total"], ENDPOINTS);
    assert_eq!(lines[0]["profile"]["endpoints"], serde_json::json!([]));
    let streamed: Vec<String> = lines[1..=ENDPOINTS]
        .iter()
        .map(|l| l["endpoint"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(streamed, all);
    assert_eq!(lines[ENDPOINTS + 1]["profile"]["name"], "small");
    assert_eq!(lines[ENDPOINTS + 4]["endpoint"]["name"], "small-2");

    // Refusals name the parameter and what it takes.
    for (path, want) in [
        (
            "/v1/status/web?limit=10001",
            "limit=\"10001\": expected a whole number from 0 to 10000",
        ),
        ("/v1/status/web?offset=-1", "offset=\"-1\""),
        ("/v1/status?stream=yes", "stream=\"yes\""),
    ] {
        let (code, v) = daemon.call("GET", path);
        assert_eq!(code, 400, "{path}: {v}");
        assert!(v["error"].as_str().unwrap().contains(want), "{path}: {v}");
    }
    assert_eq!(daemon.call("GET", "/v1/status/nope?limit=5").0, 404);
    assert_eq!(
        daemon.call("GET", "/v1/status/nope").0,
        404,
        "before any byte of a document"
    );

    // The whole document (written a page at a time) holds the same as the profiles' own.
    let fleet = daemon.get("/v1/status");
    let profiles = fleet.as_array().unwrap();
    assert_eq!(profiles.len(), 2);
    assert_eq!(names(&profiles[0]["endpoints"]), all);
    // Taken a moment apart: a probe's result may land between the two (its last result,
    // what is pending, its lateness); everything else is the same.
    assert_eq!(settled(&profiles[1]), settled(&daemon.get("/v1/status/small")));
    assert!(profiles[0].get("page").is_none());
    daemon.stop();
}

/// A profile's view without what a probe's result changes from one moment to the next.
fn settled(profile: &Value) -> Value {
    let mut p = profile.clone();
    for e in p["endpoints"].as_array_mut().into_iter().flatten() {
        if let Some(o) = e.as_object_mut() {
            o.remove("last_result");
            o.remove("pending");
        }
        if let Some(w) = e["windows"].as_object_mut() {
            w.remove("late_ms");
        }
    }
    p
}

fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// What one status request may cost: twenty clients ask for the whole status of 20,000
/// endpoints and read only its first bytes. Each request holds a page and its queue, not the
/// fleet's document (about 30 MB each when it was built whole and pretty-printed), and the
/// documents come out whole once read.
#[test]
fn slow_readers_of_the_whole_status_hold_a_page_each_not_the_fleet() {
    use std::io::{Read, Write};
    const BIG: usize = 20_000;
    const READERS: usize = 20;
    // What the requests hold is measured as the whole process's memory.
    if !probed_tests::serial::own_process() {
        return;
    }
    let topo = Topology::new();
    topo.anyip("198.19.0.0/17");
    let files = DaemonFiles::new();
    let mut text = files.header(PROBER_IF)
        + "\n[[profile]]\nname = \"big\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\nport = 80\n\
           interval = \"30s\"\ntimeout = \"1s\"\n";
    for j in 0..BIG {
        let ip = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(198, 19, 0, 1)) + j as u32);
        text += &format!("\n[[profile.endpoint]]\nname = \"big-{j}\"\naddress = \"{ip}\"\n");
    }
    let daemon = RunningDaemon::start(&topo.prober, files.write_config(&text), None).expect("start");
    let path = daemon.api.strip_prefix("unix:").unwrap().to_string();
    let before = vm_rss_kib();
    let mut readers = Vec::new();
    for _ in 0..READERS {
        let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
        s.write_all(b"GET /v1/status HTTP/1.1\r\nHost: probed\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut first = [0u8; 1024];
        s.read_exact(&mut first).unwrap();
        readers.push(s);
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    let grown_mib = vm_rss_kib().saturating_sub(before) / 1024;
    eprintln!("{READERS} slow readers of a {BIG}-endpoint status: RSS grew by {grown_mib} MiB");
    assert!(
        grown_mib < 100,
        "each request held far more than a page: {grown_mib} MiB"
    );
    // Read on, all at once (a reader stalled for 10 s is closed): each request goes on to
    // its end (the document itself is checked below).
    let sizes: Vec<usize> = std::thread::scope(|scope| {
        let handles: Vec<_> = readers
            .into_iter()
            .map(|mut s| {
                scope.spawn(move || {
                    let mut rest = Vec::new();
                    s.read_to_end(&mut rest).unwrap();
                    rest.len()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(sizes.iter().all(|n| *n > BIG * 100), "{sizes:?}");
    let whole = daemon.get("/v1/status");
    assert_eq!(whole[0]["endpoints"].as_array().unwrap().len(), BIG);
    daemon.stop();
}
