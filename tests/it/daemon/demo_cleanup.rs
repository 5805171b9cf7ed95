//! The demo cleans up however it is stopped: Ctrl-C (SIGINT), a stop (SIGTERM) and a closed
//! terminal (SIGHUP) each leave no namespace and no pin directory behind.
use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use probed_tests::Netns;

/// Starts the demo, waits for its first status frame, sends `sig` and checks what is left.
fn stopped_by(sig: libc::c_int) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_probed-demo"))
        .args(["--seconds", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the demo");
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut namespaces = Vec::new();
    let started = Instant::now();
    for line in lines.by_ref() {
        let line = line.expect("read the demo's output");
        // "demo: prober ns NAME -> backend ns NAME; ..."
        if let Some(rest) = line.strip_prefix("demo: prober ns ") {
            let words: Vec<&str> = rest.split_whitespace().collect();
            namespaces = vec![words[0].to_string(), words[4].trim_end_matches(';').to_string()];
        }
        if line.starts_with("probed demo, ") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no frame from the demo");
    }
    assert_eq!(namespaces.len(), 2, "the demo named its namespaces");
    assert!(
        namespaces.iter().all(|n| Netns::exists(n)),
        "{namespaces:?} exist while it runs"
    );
    // The rest of the output is read on, as a terminal would (a closed one reads nothing).
    let reader = std::thread::spawn(move || lines.count());
    // SAFETY: kill on the child's own pid, which it keeps until it is reaped below.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    let until = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < until,
            "the demo did not stop within 30 s of signal {sig}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = reader.join();
    assert!(status.success(), "signal {sig}: {status:?}");
    for n in &namespaces {
        assert!(!Netns::exists(n), "signal {sig} left namespace {n}");
    }
    let pins: Vec<_> = std::fs::read_dir("/sys/fs/bpf")
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("probed-test-{pid}-")))
        .collect();
    assert!(pins.is_empty(), "signal {sig} left pins {pins:?}");
}

#[test]
fn the_demo_cleans_up_after_ctrl_c_a_stop_and_a_closed_terminal() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        stopped_by(sig);
    }
}
