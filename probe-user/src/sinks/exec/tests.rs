//! The exec sink's line format, and a real program (`sh -c 'cat >> FILE'`) fed, killed,
//! restarted and fed the whole profile again.
use std::path::PathBuf;

use super::*;

fn state(last: u8, eligible: bool) -> EndpointState {
    EndpointState::tcp(format!("198.18.0.{last}").parse().unwrap(), 80, eligible)
}

fn model(seq: u64, endpoints: &[(&str, u8, bool)]) -> ProfileModel {
    ProfileModel {
        profile: "web".into(),
        endpoints: endpoints
            .iter()
            .map(|(n, last, e)| (Arc::from(*n), state(*last, *e)))
            .collect(),
        seq,
    }
}

#[test]
fn a_fresh_program_gets_one_full_line_then_changes_and_removals() {
    let first = model(7, &[("b0", 2, true), ("b1", 3, false)]);
    let full = lines(&first, None);
    assert_eq!(
        full,
        ["{\"type\":\"full\",\"profile\":\"web\",\"seq\":7,\"endpoints\":[\
             {\"name\":\"b0\",\"address\":\"198.18.0.2\",\"port\":80,\"protocol\":\"tcp\",\"weight\":1,\"priority\":1,\
             \"admin\":\"enabled\",\"health\":\"Healthy\",\"status\":\"Online\",\"eligible\":true},\
             {\"name\":\"b1\",\"address\":\"198.18.0.3\",\"port\":80,\"protocol\":\"tcp\",\"weight\":1,\"priority\":1,\
             \"admin\":\"enabled\",\"health\":\"Unhealthy\",\"status\":\"Degraded\",\"eligible\":false}]}"]
    );
    let next = model(9, &[("b0", 2, false), ("b2", 4, true)]);
    let diff = lines(&next, Some(&first.endpoints));
    let kinds: Vec<(String, String)> = diff
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["seq"], 9);
            let name = v["endpoint"]["name"].as_str().or(v["name"].as_str()).unwrap();
            (v["type"].as_str().unwrap().to_string(), name.to_string())
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("change".to_string(), "b0".to_string()),
            ("change".to_string(), "b2".to_string()),
            ("removed".to_string(), "b1".to_string()),
        ]
    );
    assert!(lines(&next, Some(&next.endpoints)).is_empty());
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("probed-exec-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The JSON lines in `file`, once there are `n` of them (within 5 s).
fn wait_lines(file: &Path, n: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let got: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        if got.len() >= n {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{n} lines in {}; got:\n{text}",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn sink(file: &Path) -> ExecSink {
    ExecSink::open(&Config {
        command: vec!["/bin/sh".into(), "-c".into(), format!("cat >> {}", file.display())],
    })
    .unwrap()
}

#[test]
fn a_killed_program_is_restarted_and_told_everything_again() {
    let dir = temp_dir("restart");
    let file = dir.join("lines");
    let mut s = sink(&file);
    let m = model(3, &[("b0", 2, true), ("b1", 3, true)]);
    assert_eq!(s.sync(&m).unwrap(), SyncReport { written: 1, entries: 2 });
    let m2 = model(4, &[("b0", 2, true), ("b1", 3, false)]);
    assert_eq!(s.sync(&m2).unwrap(), SyncReport { written: 1, entries: 1 });
    let got = wait_lines(&file, 2);
    assert_eq!(got[0]["type"], "full");
    assert_eq!(got[0]["endpoints"].as_array().unwrap().len(), 2);
    assert_eq!(
        (got[1]["type"].as_str(), got[1]["endpoint"]["name"].as_str()),
        (Some("change"), Some("b1"))
    );
    assert!(s.verify(&m2).unwrap());

    // Killed: the read-back notices, the next sync waits out the restart delay (it died
    // young), then starts it again with the whole profile.
    let pid = s.running.as_ref().unwrap().child.id();
    // SAFETY: `pid` is the child this test's sink started and has not reaped.
    unsafe { libc::kill(libc::pid_t::try_from(pid).unwrap(), libc::SIGKILL) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.verify(&m2).unwrap() {
        assert!(Instant::now() < deadline, "the kill is noticed");
        std::thread::sleep(Duration::from_millis(10));
    }
    let e = s.sync(&m2).unwrap_err().to_string();
    assert!(
        e.contains("killed by signal 9") && e.contains("starting it again in"),
        "{e}"
    );
    std::thread::sleep(RESTART_FIRST + Duration::from_millis(50));
    assert_eq!(s.sync(&m2).unwrap(), SyncReport { written: 1, entries: 1 });
    let got = wait_lines(&file, 3);
    assert_eq!(
        (got[2]["type"].as_str(), got[2]["seq"].as_u64()),
        (Some("full"), Some(4))
    );
    assert_eq!(got[2]["endpoints"][1]["eligible"], false);
    assert_ne!(s.running.as_ref().unwrap().child.id(), pid);

    // Dropped: stdin closes, cat exits, and the process is gone.
    let pid = s.running.as_ref().unwrap().child.id();
    drop(s);
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "the program was reaped");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_wants_an_executable_file() {
    let open = |p: &str| {
        ExecSink::open(&Config {
            command: vec![p.into()],
        })
        .err()
        .map(|e| e.to_string())
    };
    let e = open("/nonexistent/probed-sink").unwrap();
    assert!(
        e.contains("/nonexistent/probed-sink") && e.contains("No such file"),
        "{e}"
    );
    let dir = temp_dir("check");
    let plain = dir.join("plain");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    let e = open(plain.to_str().unwrap()).unwrap();
    assert!(e.contains("not an executable file"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
    let e = open("/tmp").unwrap();
    assert!(e.contains("not an executable file"), "{e}");
    assert_eq!(open("/bin/cat"), None);
}
