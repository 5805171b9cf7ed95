//! `probed check tcp://...` as an operator runs it: the real binary, inside the prober
//! namespace, against the backend's kernel stack.
use probed_tests::{probed_bin, topo::*, Topology};

fn check(topo: &Topology, args: &[&str]) -> (i32, String) {
    let out = probed_tests::probed_check(&topo.prober, args);
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

/// Out-of-range flags stop `probed check` before anything is sent (issue 13, L8): a huge
/// timeout used to panic the engine thread and `--count 0` used to exit 0.
#[test]
fn out_of_range_flags_are_refused_with_the_allowed_range() {
    let cases: [(&[&str], &str); 7] = [
        (
            &["tcp://198.18.0.2:80", "--timeout", "18446744073709551615"],
            "100..=60000",
        ),
        (&["tcp://198.18.0.2:80", "--count", "0"], "1..=100000"),
        (&["udp://198.18.0.2:53", "--count", "0"], "1..=100000"),
        (&["udp://198.18.0.2:53", "--timeout", "0"], "100..=60000"),
        (&["http://198.18.0.2/", "--interval", "300001"], "0..=300000"),
        (
            &["udp://198.18.0.2:53", "--send", &"x".repeat(70_000)],
            "at most 500 bytes",
        ),
        (
            &["udp://198.18.0.2:53", "--expect", &"x".repeat(501)],
            "at most 500 bytes",
        ),
    ];
    for (args, allowed) in cases {
        let out = std::process::Command::new(probed_bin())
            .arg("check")
            .args(args)
            .output()
            .expect("run probed check");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        let flag = args[1];
        assert!(err.contains(flag) && err.contains(allowed), "{flag}: {err}");
    }
    let out = std::process::Command::new(probed_bin())
        .args(["attach", "--iface", "lo", "--duration-s", "18446744073709551615"])
        .output()
        .expect("run probed attach");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--duration-s") && err.contains("0..=31536000"), "{err}");
}
