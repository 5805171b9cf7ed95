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
    daemon.stop();
}
