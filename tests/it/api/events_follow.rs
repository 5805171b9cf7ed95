//! `probed events` against a running daemon: the real binary follows `GET /v1/events` while a
//! backend goes dark and an operator disables it; each change is printed as it happens, as
//! text and as JSON lines (one profile's); without --follow the recent changes come at once;
//! a misspelt profile is an error; stopping the daemon ends the followers.
use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use probed::{daemon::events::Event, status::EndpointStatus as S};
use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    probed_bin,
    topo::*,
};

/// A `probed events` process whose output lines arrive on a channel; killed on drop.
struct Follower {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Follower {
    fn start(api: &str, args: &[&str]) -> Follower {
        let mut child = Command::new(probed_bin())
            .arg("events")
            .args(["--api", api])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start probed events");
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Follower { child, lines }
    }

    /// The next line that `ok` accepts, within `within`; panics with what came instead.
    fn wait_line(&self, what: &str, within: Duration, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if ok(&l) => return l,
                Ok(l) => seen.push(l),
                Err(_) => panic!("{what}: not within {within:?}; lines instead: {seen:#?}"),
            }
        }
    }

    /// Waits for the process to end by itself; its exit code and standard error.
    fn wait_exit(mut self, within: Duration) -> (Option<i32>, String) {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut err = String::new();
                use std::io::Read;
                let _ = self.child.stderr.take().unwrap().read_to_string(&mut err);
                return (status.code(), err);
            }
            assert!(Instant::now() < deadline, "probed events did not end within {within:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn events_once(api: &str, args: &[&str]) -> std::process::Output {
    Command::new(probed_bin())
        .arg("events")
        .args(["--api", api])
        .args(args)
        .output()
        .expect("run probed events")
}

#[test]
fn followers_see_each_change_as_it_happens_until_the_daemon_stops() {
    let topo = Topology::new();
    let _listeners: Vec<_> = [8080, 8081, 8082]
        .iter()
        .map(|p| topo.backend.tcp_listen(&format!("{BACKEND_V4}:{p}")))
        .collect();
    let files = DaemonFiles::new();
    // web has a second endpoint, so that web-1 alone failing leaves it out of rotation
    // (with none left, the profile would fail open).
    let text = files.tcp_profiles(PROBER_IF, BACKEND_V4, &[("web", &[8080, 8082]), ("db", &[8081])]);
    let cfg = files.write_config(&text);
    let daemon = RunningDaemon::start(&topo.prober, cfg, None).expect("start the daemon");
    daemon.wait_status("web", "web-1", S::Online, Duration::from_secs(5));
    daemon.wait_status("db", "db-1", S::Online, Duration::from_secs(5));
    let api = files.api();

    // The recent changes at once: both endpoints came Online since the start.
    let recent = events_once(&api, &["-n", "5"]);
    assert!(recent.status.success(), "{recent:?}");
    let recent = String::from_utf8_lossy(&recent.stdout);
    for who in ["web/web-1", "db/db-1"] {
        assert!(
            recent
                .lines()
                .any(|l| l.contains(who) && l.contains("-> Online, serving (health: open")),
            "{who} came Online:\n{recent}"
        );
    }

    // -n 0: only what happens from now on.
    let text = Follower::start(&api, &["--follow", "-n", "0"]);
    let json = Follower::start(&api, &["--follow", "--json", "-n", "0", "web"]);
    // Both are connected once a change reaches them: disable and enable db, which the
    // profile filter keeps from the JSON follower.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        assert_eq!(daemon.call("POST", "/v1/endpoints/db/db-1/disable").0, 200);
        assert_eq!(daemon.call("POST", "/v1/endpoints/db/db-1/enable").0, 200);
        if text.lines.recv_timeout(Duration::from_millis(300)).is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "the text follower printed nothing");
    }

    // web's backend goes dark: one line each, saying which results decided it.
    topo.backend.nft_drop("tcp", 8080);
    let line = text.wait_line("web Degraded", Duration::from_secs(3), |l| {
        l.contains("web/web-1") && l.contains("Online -> Degraded")
    });
    assert!(
        line.contains(&format!("{BACKEND_V4}:8080/tcp")) && line.contains(", not serving (health: "),
        "{line}"
    );
    let line = json.wait_line("web Degraded as JSON", Duration::from_secs(3), |l| {
        l.contains("Degraded")
    });
    let event: Event = serde_json::from_str(&line).expect("a JSON line is an event");
    assert_eq!(
        (
            event.profile.as_str(),
            event.endpoint.as_str(),
            event.from,
            event.to,
            event.eligible
        ),
        ("web", "web-1", Some(S::Online), Some(S::Degraded), false)
    );
    assert_eq!(event.results.len(), 2, "two failures decide it: {line}");
    assert!(event.results.iter().all(|r| !r.ok), "{line}");
    assert!(event.measured_window_ms > 0.0, "{line}");

    // An operator's change.
    assert_eq!(daemon.call("POST", "/v1/endpoints/web/web-1/disable").0, 200);
    text.wait_line("web Disabled", Duration::from_secs(3), |l| {
        l.contains("web/web-1") && l.contains("Degraded -> Disabled, not serving (set by an operator)")
    });
    let line = json.wait_line("web Disabled as JSON", Duration::from_secs(3), |_| true);
    assert!(line.contains("\"to\":\"Disabled\""), "the next web line: {line}");

    // A misspelt profile is an error, not silence.
    let wrong = events_once(&api, &["--follow", "wbe"]);
    assert!(!wrong.status.success());
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(err.contains("wbe"), "{err}");

    // The daemon stops: both followers end by themselves, saying so.
    daemon.stop();
    for f in [text, json] {
        let (code, err) = f.wait_exit(Duration::from_secs(5));
        assert_eq!(code, Some(0), "{err}");
        assert!(err.contains("the daemon stopped"), "{err}");
    }
}
