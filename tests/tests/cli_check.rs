//! `probed check tcp://...` as an operator runs it: the real binary, inside the prober
//! namespace, against the backend's kernel stack.
use probed_tests::{probed_bin, topo::*, Topology};

fn check(topo: &Topology, args: &[&str]) -> (i32, String) {
    let bin = probed_bin();
    let mut all = vec!["netns", "exec", &topo.prober.name, bin.to_str().unwrap(), "check"];
    all.extend_from_slice(args);
    let out = std::process::Command::new("ip")
        .args(&all)
        .output()
        .expect("run probed check");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn tcp_check_reports_open_and_refused_with_exit_status() {
    let topo = Topology::new();
    let _listener = topo.backend.tcp_listen(&format!("{BACKEND_V4}:8080"));
    let _listener6 = topo.backend.tcp_listen(&format!("[{BACKEND_V6}]:8080"));

    let (code, out) = check(
        &topo,
        &[&format!("tcp://{BACKEND_V4}:8080"), "--count", "2", "--interval", "10"],
    );
    assert_eq!(code, 0, "all probes healthy: {out}");
    assert_eq!(out.lines().filter(|l| l.contains(" healthy open ")).count(), 2, "{out}");

    let (code, out) = check(
        &topo,
        &[&format!("tcp://[{BACKEND_V6}]:8081"), "--json", "--timeout", "500"],
    );
    assert_eq!(code, 1, "a refused probe fails the command: {out}");
    let line: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).expect("JSON line");
    assert_eq!(line["verdict"], "unhealthy");
    assert_eq!(line["outcome"], "refused");
    assert_eq!(line["address"], format!("[{BACKEND_V6}]:8081"));

    let (code, out) = check(&topo, &[&format!("tcp://{BACKEND_V4}"), "--timeout", "100"]);
    assert_ne!(code, 0, "a URL without a port is an error: {out}");
}
