//! `probed status --watch` as an operator sees it: the real binary in a tmux pane against a
//! running daemon. The first screen has the summary line and every endpoint; a backend going
//! dark moves its profile to the top as Degraded; `q` quits and gives the shell its screen back
//! (the alternate screen is left), with exit status 0.
use std::{
    process::Command,
    time::{Duration, Instant},
};

use probed::status::EndpointStatus as S;
use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    probed_bin,
    topo::*,
    unique_name,
};

/// A tmux server of the test's own (`-L`), killed on drop.
struct Tmux(String);

impl Tmux {
    fn new() -> Tmux {
        let t = Tmux(unique_name("probed-watch-"));
        t.run(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "keep",
            "-x",
            "200",
            "-y",
            "50",
        ]);
        t.run(&["set-option", "-g", "remain-on-exit", "on"]);
        t
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.0)
            .args(args)
            .output()
            .expect("run tmux");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "keep:1"])
    }

    fn wait_screen(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "{what}; the screen:\n{s}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.0, "kill-server"]).status();
    }
}

#[test]
fn the_watch_redraws_problems_first_and_quits_on_q() {
    let topo = Topology::new();
    let _listeners: Vec<_> = [8080, 8081]
        .iter()
        .map(|p| topo.backend.tcp_listen(&format!("{BACKEND_V4}:{p}")))
        .collect();
    let files = DaemonFiles::new();
    let text = files.tcp_profiles(PROBER_IF, BACKEND_V4, &[("aaa", &[8080]), ("web", &[8081])]);
    let cfg = files.write_config(&text);
    let daemon = RunningDaemon::start(&topo.prober, cfg, None).expect("start the daemon");
    daemon.wait_status("web", "web-1", S::Online, Duration::from_secs(5));
    daemon.wait_status("aaa", "aaa-1", S::Online, Duration::from_secs(5));

    let tmux = Tmux::new();
    // The shell records the watch's exit status (tmux's own record of it is not reliable when
    // a pane's process ends as soon as its terminal is handed back).
    let status_file = files.dir.join("watch.status");
    let command = format!(
        "{} status --watch --every-ms 200 --api {}; echo $? > {}",
        probed_bin().display(),
        files.api(),
        status_file.display()
    );
    tmux.run(&["new-window", "-t", "keep:1", &command]);
    let first = tmux.wait_screen("the first frame", |s| s.contains("q quits") && s.contains("web-1"));
    assert!(
        first
            .lines()
            .next()
            .unwrap_or("")
            .starts_with("probed: 2 profiles, endpoints: 2 Online"),
        "the summary line comes first:\n{first}"
    );
    let aaa = first.find("aaa  [").unwrap();
    let web = first.find("web  [").unwrap();
    assert!(aaa < web, "both Online: by name:\n{first}");

    // web's backend goes dark: once Degraded, its profile is drawn first.
    topo.backend.nft_drop("tcp", 8081);
    daemon.wait_status("web", "web-1", S::Degraded, Duration::from_secs(3));
    let later = tmux.wait_screen("web first, Degraded", |s| {
        matches!((s.find("web  ["), s.find("aaa  [")), (Some(w), Some(a)) if w < a) && s.contains("Degraded")
    });
    assert!(
        later.lines().next().unwrap().contains("1 Degraded, 1 Online"),
        "{later}"
    );
    assert_eq!(
        later.matches("q quits").count(),
        1,
        "redrawn in place, not scrolled:\n{later}"
    );

    tmux.run(&["send-keys", "-t", "keep:1", "q"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(s) = std::fs::read_to_string(&status_file).ok().filter(|s| s.ends_with('\n')) {
            break s;
        }
        assert!(Instant::now() < deadline, "q did not end the watch:\n{}", tmux.screen());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.trim(), "0", "the watch's exit status");
    let after = tmux.screen();
    assert!(!after.contains("q quits"), "the watch's screen is gone:\n{after}");
    daemon.stop();
}
