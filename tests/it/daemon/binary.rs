//! `probed run` as an operator runs it: the real binary in the prober namespace, driven by
//! signals. SIGHUP applies a good file and refuses a bad one (the old config keeps running,
//! endpoints that stay keep their state); SIGTERM stops cleanly, removing pins and socket.
use std::{
    os::{fd::AsRawFd, unix::process::CommandExt},
    process::{Child, Command},
    time::{Duration, Instant},
};

use probed::api::client;
use probed_tests::{daemon::DaemonFiles, probed_bin, topo::*, Netns, Topology};
use serde_json::Value;

const HEALTH: &str = "protocol = \"tcp\"\ninterval = \"100ms\"\ntimeout = \"100ms\"\n\
                      healthy_threshold = 2\nunhealthy_threshold = 2\n";

fn config(files: &DaemonFiles, endpoints: &[(&str, u16)]) -> String {
    let mut text = files.header(PROBER_IF)
        + &format!(
            "[[profile]]\nname = \"web\"\ndialect = \"lb\"\nrouting = \"priority\"\n\n[profile.health]\n{HEALTH}\n"
        );
    for (i, (name, port)) in endpoints.iter().enumerate() {
        text += &format!(
            "\n[[profile.endpoint]]\nname = \"{name}\"\naddress = \"{BACKEND_V4}\"\nport = {port}\npriority = {}\n",
            i + 1
        );
    }
    text
}

/// The daemon process; killed if a test fails before it stops it.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// As `spawn`, as systemd starts it: `NOTIFY_SOCKET` pointing at `notify` (the readiness
/// protocol) and `JOURNAL_STREAM` set, standard error going to `log`.
fn spawn_notified(ns: &Netns, config: &std::path::Path, notify: &std::path::Path, log: &std::path::Path) -> Proc {
    let netns = std::fs::File::open(ns.path()).expect("open the namespace");
    let mut cmd = Command::new(probed_bin());
    cmd.arg("run")
        .arg("--config")
        .arg(config)
        .env("NOTIFY_SOCKET", notify)
        .env("JOURNAL_STREAM", "8:4242")
        .stderr(std::fs::File::create(log).expect("create the log file"));
    // SAFETY: as in `spawn`.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Proc(cmd.spawn().expect("spawn probed run"))
}

/// Starts `probed run` inside `ns`'s network namespace (and nothing else: it shares our
/// mount namespace, so its pins are visible to the test).
fn spawn(ns: &Netns, config: &std::path::Path) -> Proc {
    let netns = std::fs::File::open(ns.path()).expect("open the namespace");
    let mut cmd = Command::new(probed_bin());
    cmd.arg("run").arg("--config").arg(config);
    // SAFETY: the closure only calls setns(2), which is async-signal-safe, on an fd that stays
    // open in the child until exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Proc(cmd.spawn().expect("spawn probed run"))
}

/// The daemon's exit status, once it has exited; panics with `why` after 10 s.
fn wait_exit(p: &mut Proc, why: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(s) = p.0.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "{why}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (at most 5 s) until `sig` is blocked or caught by `p`, as /proc says.
fn wait_until_served(p: &Proc, sig: libc::c_int) {
    let bit = 1u64 << (sig - 1);
    let has = |status: &str, field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .is_some_and(|mask| mask & bit != 0)
    };
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", p.0.id())).unwrap_or_default();
        if has(&status, "SigBlk:") || has(&status, "SigCgt:") {
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    panic!("probed neither blocked nor caught signal {sig} within 5 s");
}

fn signal(p: &Proc, sig: libc::c_int) {
    // SAFETY: kill(2) on the pid of a child we own and have not reaped.
    assert_eq!(unsafe { libc::kill(p.0.id() as i32, sig) }, 0);
}

fn endpoint(files: &DaemonFiles, name: &str) -> Option<Value> {
    let r = client::request(&files.api(), "GET", &format!("/v1/status/web/{name}")).ok()?;
    serde_json::from_str(&r.body)
        .ok()
        .filter(|v: &Value| v.get("status").is_some())
}

fn wait_online(files: &DaemonFiles, name: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = endpoint(files, name).filter(|v| v["status"] == "Online") {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{name} never came Online: {:?}",
            endpoint(files, name)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sighup_applies_good_files_refuses_bad_ones_and_sigterm_cleans_up() {
    let topo = Topology::new();
    let _a = topo.backend.tcp_listen(&format!("{BACKEND_V4}:8080"));
    let _b = topo.backend.tcp_listen(&format!("{BACKEND_V4}:8090"));
    let files = DaemonFiles::new();
    std::fs::write(files.config_path(), config(&files, &[("a", 8080)])).unwrap();
    let mut daemon = spawn(&topo.prober, &files.config_path());
    let a_before = wait_online(&files, "a");
    assert!(
        a_before["last_change"].is_object(),
        "a has a last change to keep: {a_before}"
    );

    // A bad file: refused whole, the running configuration stays.
    std::fs::write(
        files.config_path(),
        config(&files, &[("a", 8080)]) + "interval = \"soon\"\n[[oops",
    )
    .unwrap();
    signal(&daemon, libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        daemon.0.try_wait().unwrap().is_none(),
        "a bad reload must not stop the daemon"
    );
    assert_eq!(endpoint(&files, "a").expect("a still served")["status"], "Online");

    // A good file: b is added, a keeps its state (same last change, no return to Checking).
    std::fs::write(files.config_path(), config(&files, &[("a", 8080), ("b", 8090)])).unwrap();
    signal(&daemon, libc::SIGHUP);
    wait_online(&files, "b");
    let a_after = endpoint(&files, "a").expect("a still served");
    assert_eq!(a_after["status"], "Online");
    assert_eq!(
        a_after["last_change"], a_before["last_change"],
        "a kept its state across the reload"
    );

    // logrotate's way: move the events file away, SIGUSR1, and the next events (b's appearance
    // with the next reload) land in a new file at the configured path.
    let rotated = files.events().with_extension("jsonl.1");
    std::fs::rename(files.events(), &rotated).unwrap();
    signal(&daemon, libc::SIGUSR1);
    std::thread::sleep(Duration::from_millis(200));
    std::fs::write(
        files.config_path(),
        config(&files, &[("a", 8080), ("b", 8090), ("c", 8090)]),
    )
    .unwrap();
    signal(&daemon, libc::SIGHUP);
    wait_online(&files, "c");
    let fresh = std::fs::read_to_string(files.events()).expect("a new events file after SIGUSR1");
    assert!(
        fresh.contains(r#""endpoint":"c""#),
        "c's events go to the new file: {fresh}"
    );
    assert!(
        !std::fs::read_to_string(&rotated).unwrap().contains(r#""endpoint":"c""#),
        "the rotated file is left alone"
    );

    // `probed status` as an operator types it: every profile, then one.
    for args in [&["status"][..], &["status", "web"][..]] {
        let out = Command::new(probed_bin())
            .args(args)
            .arg("--api")
            .arg(files.api())
            .output()
            .expect("run probed status");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "probed {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.lines().filter(|l| l.contains("Online")).count() >= 3,
            "the profile and a and b are Online:\n{text}"
        );
    }

    // SIGTERM: a clean exit that leaves no pins and no socket behind, and saves the state.
    signal(&daemon, libc::SIGTERM);
    let status = wait_exit(&mut daemon, "probed did not stop on SIGTERM");
    assert!(status.success(), "clean exit: {status:?}");
    let pins_left = std::fs::read_dir(&files.pins.path).map_or(0, std::iter::Iterator::count);
    assert_eq!(pins_left, 0, "no pins left in {}", files.pins.path.display());
    assert!(!files.dir.join("api.sock").exists(), "API socket removed");
    assert!(files.state().exists(), "last known health saved");
    daemon.0.wait().ok();
}

#[test]
fn a_sighup_during_start_is_not_fatal_and_readiness_is_notified() {
    let topo = Topology::new();
    let _a = topo.backend.tcp_listen(&format!("{BACKEND_V4}:8080"));
    let files = DaemonFiles::new();
    std::fs::write(files.config_path(), config(&files, &[("a", 8080)])).unwrap();
    let notify_path = files.dir.join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).expect("bind the notify socket");
    notify.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let log = files.dir.join("stderr.log");
    let mut daemon = spawn_notified(&topo.prober, &files.config_path(), &notify_path, &log);
    // A reload asked for while the daemon is still starting (systemd's ExecReload, say): once
    // `main` holds SIGHUP blocked, or has its handler. (Before `main` runs, nothing can serve
    // a signal; a fixed 10 ms wait sometimes landed there on a busy machine.)
    wait_until_served(&daemon, libc::SIGHUP);
    signal(&daemon, libc::SIGHUP);
    let mut buf = [0u8; 64];
    let n = notify.recv(&mut buf).unwrap_or_else(|e| {
        panic!(
            "READY=1 within 10 s: {e}; probed {:?}; its log:\n{}",
            daemon.0.try_wait(),
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    assert_eq!(&buf[..n], b"READY=1");
    assert!(
        daemon.0.try_wait().unwrap().is_none(),
        "the early SIGHUP did not kill probed"
    );
    wait_online(&files, "a");
    signal(&daemon, libc::SIGTERM);
    // The early SIGHUP is served once the daemon runs (RELOADING=1, READY=1), then STOPPING=1.
    let mut seen = Vec::new();
    while let Ok(n) = notify.recv(&mut buf) {
        seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        if seen.last().is_some_and(|s| s == "STOPPING=1") {
            break;
        }
    }
    assert_eq!(seen.last().map(String::as_str), Some("STOPPING=1"), "{seen:?}");
    let status = daemon.0.wait().unwrap();
    assert!(status.success(), "clean exit: {status:?}");
    // Under journald, each line carries its priority and no timestamp of its own.
    let lines = std::fs::read_to_string(&log).unwrap();
    assert!(lines.lines().any(|l| l.starts_with("<6>probed running")), "{lines}");
    for l in lines.lines().filter(|l| !l.starts_with("  ")) {
        let ok = l.len() > 3 && l.starts_with('<') && l.as_bytes()[1].is_ascii_digit() && &l[2..3] == ">";
        assert!(ok, "a line without its priority: {l:?}\n{lines}");
        let year = l[3..].get(..2).is_some_and(|y| y.bytes().all(|b| b.is_ascii_digit()));
        assert!(!year, "journald adds the time itself: {l:?}");
    }
}

/// The value of an unlabelled metric in a scrape.
fn metric(files: &DaemonFiles, name: &str) -> f64 {
    let r = client::request(&files.api(), "GET", "/metrics").expect("scrape /metrics");
    r.body
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{}", r.body))
}

#[test]
fn an_engine_that_loses_its_interface_stops_the_daemon_with_an_error() {
    let topo = Topology::new();
    let _a = topo.backend.tcp_listen(&format!("{BACKEND_V4}:8080"));
    let files = DaemonFiles::new();
    std::fs::write(files.config_path(), config(&files, &[("a", 8080)])).unwrap();
    let mut daemon = spawn(&topo.prober, &files.config_path());
    wait_online(&files, "a");
    // Results keep coming at the 100 ms interval: the age stays well under a second.
    std::thread::sleep(Duration::from_millis(300));
    let age = metric(&files, "probed_last_result_age_seconds");
    assert!((0.0..1.0).contains(&age), "last result {age} s ago while probing");

    // The interface probe_rx sits on goes away under the running daemon (a veth recreated, a
    // NIC renamed): no reply can be matched any more, so the engine stops and the daemon
    // exits with an error for the service manager to restart it, instead of failing `a`.
    topo.prober.ip(&["link", "del", PROBER_IF]);
    let status = wait_exit(
        &mut daemon,
        "probed still runs 10 s after its probe interface was deleted",
    );
    assert!(!status.success(), "a dead engine is an error exit: {status:?}");
    let events = std::fs::read_to_string(files.events()).unwrap_or_default();
    assert!(
        !events.lines().any(|l| l.contains(r#""to":"Degraded""#)),
        "no backend was failed for the lost interface:\n{events}"
    );
}

/// The binary sets its allocator up before Rust's runtime allocates: mimalloc (verbose)
/// reports its arenas committed on demand, and an operator's environment still overrides it.
#[test]
fn the_allocator_commits_its_arenas_on_demand_unless_the_environment_says_otherwise() {
    let option = |env: &[(&str, &str)]| {
        let out = Command::new(probed_bin())
            .arg("--version")
            .env("MIMALLOC_VERBOSE", "1")
            .envs(env.iter().copied())
            .output()
            .expect("run probed --version");
        assert!(out.status.success(), "probed --version: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        err.lines()
            .find_map(|l| l.strip_prefix("mimalloc: option 'arena_eager_commit': "))
            .map_or_else(
                || panic!("no arena_eager_commit line in mimalloc's report:\n{err}"),
                |v| v.trim().to_string(),
            )
    };
    assert_eq!(option(&[]), "0", "committed on demand by default");
    assert_eq!(
        option(&[("MIMALLOC_ARENA_EAGER_COMMIT", "1")]),
        "1",
        "the environment wins"
    );
}

/// `ip netns exec NS probed run`, as operators start daemons in namespaces: the command gets a
/// fresh sysfs without bpffs, which probed mounts before it makes its pin directory. It probes
/// (TCP, and plain HTTP in the kernel) and a SIGTERM stops it cleanly.
#[test]
fn ip_netns_exec_starts_the_daemon() {
    let topo = Topology::new();
    let _listener = topo.backend.tcp_listen(&format!("{BACKEND_V4}:8080"));
    let web = topo.backend.http_server(&format!("{BACKEND_V4}:8081"));
    web.route("/health", probed_tests::http_server::Route::status(200));
    let files = DaemonFiles::new();
    let text = config(&files, &[("web-1", 8080)])
        + &format!(
            "\n[[profile]]\nname = \"http\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"http\"\nport = 8081\n\
             path = \"/health\"\ninterval = \"100ms\"\ntimeout = \"300ms\"\nhealthy_threshold = 2\nunhealthy_threshold = 2\n\
             [[profile.endpoint]]\nname = \"h-1\"\naddress = \"{BACKEND_V4}\"\n"
        );
    files.write_config(&text);
    let log = files.dir.join("probed.log");
    let mut p = Proc(
        Command::new("ip")
            .args(["netns", "exec", &topo.prober.name])
            .arg(probed_bin())
            .arg("run")
            .arg("--config")
            .arg(files.config_path())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn ip netns exec"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while endpoint(&files, "web-1").is_none() {
        if let Some(s) = p.0.try_wait().unwrap() {
            panic!(
                "probed under ip netns exec exited ({s}):\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "no API within 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_online(&files, "web-1");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = client::request(&files.api(), "GET", "/v1/status/http/h-1").unwrap();
        let v: Value = serde_json::from_str(&r.body).unwrap();
        if v["status"] == "Online" {
            break;
        }
        assert!(Instant::now() < deadline, "the HTTP check never came Online: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!web.seen().is_empty(), "the HTTP check reached the server");
    wait_until_served(&p, libc::SIGTERM);
    signal(&p, libc::SIGTERM);
    let status = wait_exit(&mut p, "probed did not stop within 10 s of SIGTERM");
    assert!(
        status.success(),
        "{status}: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// A pin directory that cannot be on bpffs stops the start with an error that says so.
#[test]
fn a_pin_directory_off_bpffs_is_a_clear_error() {
    let topo = Topology::new();
    let _listener = topo.backend.tcp_listen(&format!("{BACKEND_V4}:8080"));
    let files = DaemonFiles::new();
    let off = files.dir.join("pins");
    let text = config(&files, &[("web-1", 8080)]).replace(
        &format!("pin_dir = \"{}\"", files.pins.path.display()),
        &format!("pin_dir = \"{}\"", off.display()),
    );
    let cfg = files.write_config(&text);
    let err = probed_tests::daemon::RunningDaemon::start(&topo.prober, cfg, None)
        .err()
        .expect("a start with pins off bpffs");
    assert!(
        err.contains("not on bpffs") && err.contains(&off.display().to_string()),
        "{err}"
    );
}

/// `probed endpoints` as an operator types it against `probed run`: add, set, list, remove,
/// a batch from standard input, a refused stale generation and a bad key, each answered in
/// words; the endpoints it adds are probed and come Online.
#[test]
fn probed_endpoints_changes_an_api_profile_of_a_running_daemon() {
    let topo = Topology::new();
    let _l1 = topo.backend.tcp_listen(&format!("{BACKEND_V4}:8080"));
    let _l2 = topo.backend.tcp_listen(&format!("{BACKEND_V4}:8081"));
    let files = DaemonFiles::new();
    let text = config(&files, &[]).replace(
        "routing = \"priority\"\n",
        "routing = \"weighted\"\nendpoints_from = \"api\"\n",
    );
    std::fs::write(files.config_path(), text).unwrap();
    let _daemon = spawn(&topo.prober, &files.config_path());
    let api = files.api();
    let deadline = Instant::now() + Duration::from_secs(10);
    while client::request(&api, "GET", "/v1/status").is_err() {
        assert!(Instant::now() < deadline, "the API never answered");
        std::thread::sleep(Duration::from_millis(20));
    }
    let cli = |args: &[&str], stdin: Option<&str>| {
        let mut cmd = Command::new(probed_bin());
        cmd.arg("endpoints").args(args).arg("--api").arg(&api);
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("run probed endpoints");
        let mut input = child.stdin.take().unwrap();
        std::io::Write::write_all(&mut input, stdin.unwrap_or("").as_bytes()).unwrap();
        drop(input);
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let addr = format!("address={BACKEND_V4}");
    let (ok, out) = cli(&["add", "web", "name=a", &addr, "port=8080"], None);
    assert!(ok, "{out}");
    assert!(
        out.contains("web: 1 added, 0 changed, 0 removed, 0 unchanged; 1 endpoints, generation 1"),
        "{out}"
    );
    let (ok, out) = cli(
        &["batch", "web", "-"],
        Some(&format!(
            r#"{{"put": [{{"name": "b", "address": "{BACKEND_V4}", "port": 8081}}]}}"#
        )),
    );
    assert!(ok, "{out}");
    wait_online(&files, "a");
    wait_online(&files, "b");
    let (ok, out) = cli(&["set", "web", "a", "weight=5", "--generation", "2"], None);
    assert!(ok, "{out}");
    let (ok, out) = cli(&["list", "web"], None);
    assert!(ok, "{out}");
    assert!(out.contains("web: 2 endpoints from api, generation 3"), "{out}");
    assert!(
        out.lines().any(|l| l.contains(" a ") && l.contains("weight 5")),
        "{out}"
    );
    let (ok, out) = cli(&["list", "web", "--json"], None);
    assert!(ok, "{out}");
    let view: Value = serde_json::from_str(&out).expect("the API's JSON");
    assert_eq!(view["endpoints"][0]["weight"], 5, "{view}");
    wait_online(&files, "a");
    let (ok, out) = cli(&["remove", "web", "b", "--generation", "2"], None);
    assert!(!ok && out.contains("is at generation 3, not 2"), "{out}");
    let (ok, out) = cli(&["add", "web", "name=c", &addr, "port=8082", "colour=red"], None);
    assert!(!ok && out.contains("put[0].colour = \"red\": unknown key"), "{out}");
    let (ok, out) = cli(&["remove", "web", "b"], None);
    assert!(ok && out.contains("1 removed"), "{out}");
    assert!(endpoint(&files, "b").is_none(), "b is gone");
}
