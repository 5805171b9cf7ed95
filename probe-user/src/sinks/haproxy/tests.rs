//! The haproxy sink's pure parts (reading `show servers state`, planning commands, cutting
//! lines, splitting answers) on answers captured from HAProxy 2.6, a whole sync against a
//! scripted stand-in for the admin socket, and peers that trickle, flood or never accept.
use std::{
    os::unix::net::UnixListener,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use super::*;
use crate::changes::EndpointState;

const HEADER: &str = "# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight \
     srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state \
     srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port \
     srv_check_addr srv_agent_addr srv_agent_port";

/// As HAProxy 2.6 answered for b0 in maint, b1 at weight 3, b2 (`disabled` in the config) in
/// drain.
fn captured() -> String {
    format!(
        "1\n{HEADER}\n\
         2 web 1 b0 198.18.0.2 0 1 1 1 1 1 0 0 0 0 0 0 - 80 - 0 0 - - 0\n\
         2 web 2 b1 198.18.0.3 2 0 3 7 3 1 0 2 0 0 0 0 - 80 - 0 0 - - 0\n\
         2 web 3 b2 198.18.0.4 2 12 1 1 1 1 0 0 8 0 0 0 - 80 - 0 0 - - 0\n\n"
    )
}

fn server(state: ServerState, weight: u32) -> Server {
    Server { state, weight }
}

#[test]
fn reads_show_servers_state() {
    let held = parse_servers_state(&captured(), "web").unwrap();
    assert_eq!(
        held.into_iter().collect::<Vec<_>>(),
        [
            ("b0".to_string(), server(ServerState::Maint, 1)),
            ("b1".to_string(), server(ServerState::Ready, 3)),
            ("b2".to_string(), server(ServerState::Drain, 1)),
        ]
    );
    // Another backend's lines (a state of every backend) are not this one's servers.
    assert!(parse_servers_state(&captured(), "api").unwrap().is_empty());
    // A backend without servers.
    assert!(parse_servers_state(&format!("1\n{HEADER}\n\n"), "web")
        .unwrap()
        .is_empty());
}

#[test]
fn columns_are_found_by_name() {
    let text = "1\n# be_name srv_name srv_uweight srv_admin_state extra\nweb s1 9 8 x\n";
    assert_eq!(
        parse_servers_state(text, "web").unwrap()["s1"],
        server(ServerState::Drain, 9)
    );
}

#[test]
fn refuses_what_is_not_a_state_dump() {
    assert_eq!(
        parse_servers_state("Can't find backend.\n\n", "nope"),
        Err(StateError::UnknownBackend)
    );
    assert!(matches!(
        parse_servers_state("Permission denied\n\n", "web"),
        Err(StateError::Unexpected(s)) if s == "Permission denied"
    ));
    assert!(matches!(
        parse_servers_state("1\n# be_name srv_name\nweb s1\n", "web"),
        Err(StateError::Unexpected(s)) if s.contains("srv_admin_state")
    ));
    assert!(matches!(
        parse_servers_state(&format!("1\n{HEADER}\n2 web 1 b0\n"), "web"),
        Err(StateError::Unexpected(_))
    ));
}

fn state(eligible: bool, weight: u32) -> EndpointState {
    EndpointState {
        weight,
        ..EndpointState::tcp("198.18.0.2".parse().unwrap(), 80, eligible)
    }
}

fn model(endpoints: &[(&str, bool, u32)]) -> ProfileModel {
    ProfileModel {
        profile: "web".into(),
        endpoints: endpoints
            .iter()
            .map(|(n, e, w)| (Arc::from(*n), state(*e, *w)))
            .collect(),
        seq: 1,
    }
}

fn cfg(socket: PathBuf, down: HaproxyDown, servers: &[(&str, &str)]) -> Config {
    Config {
        socket,
        backend: "web".into(),
        down,
        servers: servers.iter().map(|(e, s)| (e.to_string(), s.to_string())).collect(),
    }
}

#[test]
fn plans_only_what_differs_leaving_first_and_joining_last() {
    let held = parse_servers_state(&captured(), "web").unwrap();
    let c = cfg(
        "/run/haproxy/admin.sock".into(),
        HaproxyDown::Maint,
        &[("a", "b0"), ("b", "b1"), ("c", "b2")],
    );
    // b0 comes back at weight 2, b1 leaves, b2 leaves drain for maint.
    let p = plan(&c, &model(&[("a", true, 2), ("b", false, 3), ("c", false, 1)]), &held);
    assert_eq!(
        p.commands,
        [
            "set server web/b1 state maint",
            "set server web/b2 state maint",
            "set server web/b0 weight 2",
            "set server web/b0 state ready",
        ]
    );
    assert_eq!((p.changed, p.ready), (3, 1));
    // Held as wanted: nothing to write.
    let p = plan(&c, &model(&[("a", false, 1), ("b", true, 3)]), &held);
    assert_eq!(
        p,
        Plan {
            ready: 1,
            ..Plan::default()
        }
    );
    // down = "drain" leaves a drained server alone.
    let c = cfg("/s".into(), HaproxyDown::Drain, &[("c", "b2")]);
    assert!(plan(&c, &model(&[("c", false, 1)]), &held).commands.is_empty());
    // An endpoint the operator drains: drain while its health holds (b1, ready now, keeps
    // its sessions), down = maint once it fails (HAProxy would not send it sessions either way).
    let c = cfg("/s".into(), HaproxyDown::Maint, &[("a", "b1")]);
    let mut draining = model(&[("a", false, 3)]);
    let a = draining.endpoints.get_mut("a").expect("a");
    a.admin = crate::status::AdminState::Drain;
    a.status = crate::status::EndpointStatus::Online;
    assert_eq!(plan(&c, &draining, &held).commands, ["set server web/b1 state drain"]);
    let a = draining.endpoints.get_mut("a").expect("a");
    a.status = crate::status::EndpointStatus::Degraded;
    assert_eq!(plan(&c, &draining, &held).commands, ["set server web/b1 state maint"]);
}

#[test]
fn servers_the_backend_lacks_are_named_and_the_rest_still_planned() {
    let held = parse_servers_state(&captured(), "web").unwrap();
    let c = cfg("/s".into(), HaproxyDown::Maint, &[("a", "b0"), ("typo", "b9")]);
    let p = plan(
        &c,
        &model(&[("a", true, 1), ("typo", true, 1), ("new", true, 1)]),
        &held,
    );
    assert_eq!(p.commands, ["set server web/b0 state ready"]);
    assert_eq!(p.unknown, [("typo".to_string(), "b9".to_string())]);
    assert_eq!(p.unmapped, ["new"]);
}

#[test]
fn long_syncs_are_cut_into_lines_haproxy_can_read() {
    let commands: Vec<String> = (0..1000)
        .map(|i| format!("set server web/server-{i:04} state maint"))
        .collect();
    let cut = lines(&commands);
    assert!(cut.len() > 1);
    assert!(cut.iter().all(|l| l.len() <= MAX_LINE));
    assert_eq!(cut.join(";").split(';').collect::<Vec<_>>(), commands);
}

#[test]
fn answers_split_one_per_command() {
    // `set server` x4, the third of an unknown server, as HAProxy 2.6 answered.
    assert_eq!(answers("\n\nNo such server.\n\n\n"), ["", "", "No such server.", ""]);
    assert_eq!(answers("\n"), [""]);
}

/// A stand-in admin socket: answers `show servers state` from `held`, applies `set server`
/// commands to it and records every line it got. Serves `connections` connections.
fn fake_haproxy(
    dir: &std::path::Path,
    held: Arc<Mutex<BTreeMap<String, Server>>>,
    connections: usize,
) -> (PathBuf, Arc<Mutex<Vec<String>>>, std::thread::JoinHandle<()>) {
    let path = dir.join("admin.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let thread = std::thread::spawn(move || {
        for _ in 0..connections {
            let (mut s, _) = listener.accept().unwrap();
            let mut line = Vec::new();
            let mut byte = [0u8; 1];
            while s.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
                line.push(byte[0]);
            }
            let line = String::from_utf8(line).unwrap();
            log.lock().unwrap().push(line.clone());
            let mut answer = String::new();
            for command in line.split(';') {
                let words: Vec<&str> = command.split_whitespace().collect();
                let mut held = held.lock().unwrap();
                match words.as_slice() {
                    ["show", "servers", "state", "web"] => {
                        answer += &format!("1\n{HEADER}\n");
                        for (i, (name, s)) in held.iter().enumerate() {
                            let flags = match s.state {
                                ServerState::Ready => 0,
                                ServerState::Maint => 1,
                                ServerState::Drain => 8,
                            };
                            answer += &format!(
                                "2 web {i} {name} 198.18.0.2 2 {flags} {} 1 0 1 0 0 0 0 0 0 - 80 - 0 0 - - 0\n",
                                s.weight
                            );
                        }
                        answer += "\n";
                    }
                    ["show", "servers", "state", _] => answer += "Can't find backend.\n\n",
                    ["show", "backend"] => answer += "# name\nweb\n\n",
                    ["set", "server", target, what, value] => {
                        let name = target.strip_prefix("web/").unwrap();
                        match held.get_mut(name) {
                            None => answer += "No such server.\n\n",
                            Some(s) => {
                                match (*what, *value) {
                                    ("state", "ready") => s.state = ServerState::Ready,
                                    ("state", "maint") => s.state = ServerState::Maint,
                                    ("state", "drain") => s.state = ServerState::Drain,
                                    ("weight", w) => s.weight = w.parse().unwrap(),
                                    other => panic!("unexpected {other:?}"),
                                }
                                answer += "\n";
                            }
                        }
                    }
                    other => panic!("unexpected command {other:?}"),
                }
            }
            s.write_all(answer.as_bytes()).unwrap();
        }
    });
    (path, seen, thread)
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("probed-haproxy-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn syncs_through_the_socket_and_reads_back() {
    let dir = temp_dir("sync");
    let held = Arc::new(Mutex::new(BTreeMap::from([
        ("b0".to_string(), server(ServerState::Ready, 1)),
        ("b1".to_string(), server(ServerState::Ready, 1)),
        ("other".to_string(), server(ServerState::Maint, 1)),
    ])));
    // open (check: 1), sync (read + write: 2), verify (1), sync with nothing to write (1).
    let (socket, seen, thread) = fake_haproxy(&dir, held.clone(), 5);
    let c = cfg(socket, HaproxyDown::Maint, &[("a", "b0"), ("b", "b1")]);
    let mut sink = HaproxySink::open(&c).unwrap();
    let m = model(&[("a", true, 5), ("b", false, 1)]);
    assert_eq!(
        sink.sync(&m).unwrap(),
        SyncReport {
            written: 2,
            entries: 1,
            ..SyncReport::default()
        }
    );
    assert!(sink.verify(&m).unwrap());
    assert_eq!(
        sink.sync(&m).unwrap(),
        SyncReport {
            written: 0,
            entries: 1,
            ..SyncReport::default()
        }
    );
    thread.join().unwrap();
    assert_eq!(
        seen.lock().unwrap()[2],
        "set server web/b1 state maint;set server web/b0 weight 5"
    );
    let held = held.lock().unwrap();
    assert_eq!(held["b0"], server(ServerState::Ready, 5));
    assert_eq!(held["b1"], server(ServerState::Maint, 1));
    assert_eq!(
        held["other"],
        server(ServerState::Maint, 1),
        "not followed, not touched"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_names_a_missing_socket_backend_or_server() {
    let dir = temp_dir("check");
    let c = cfg(dir.join("none.sock"), HaproxyDown::Maint, &[]);
    let e = crate::errors::chain(&HaproxySink::open(&c).err().unwrap());
    assert!(e.contains("none.sock") && e.contains("level admin"), "{e}");

    let held = Arc::new(Mutex::new(BTreeMap::from([(
        "b0".to_string(),
        server(ServerState::Ready, 1),
    )])));
    let (socket, _, thread) = fake_haproxy(&dir, held, 3);
    let mut c = cfg(socket, HaproxyDown::Maint, &[("a", "b0"), ("b", "b7")]);
    let e = crate::errors::chain(&HaproxySink::open(&c).err().unwrap());
    assert!(
        e.contains("no server b7 (endpoint b)") && e.contains("servers: b0"),
        "{e}"
    );
    c.backend = "api".into();
    let e = crate::errors::chain(&HaproxySink::open(&c).err().unwrap());
    assert!(e.contains("no backend api") && e.contains("backends: web"), "{e}");
    thread.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A peer on the admin socket that reads the command line, then calls `answer` with the stream
/// until it returns false (it then closes) or fails (a write after the sink hung up). Serves
/// one connection; the thread says whether the sink hung up first.
fn peer(
    path: &std::path::Path,
    mut answer: impl FnMut(&mut UnixStream) -> std::io::Result<bool> + Send + 'static,
) -> std::thread::JoinHandle<bool> {
    let listener = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut byte = [0u8; 1];
        while s.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {}
        loop {
            match answer(&mut s) {
                Ok(true) => {}
                Ok(false) => return false,
                Err(_) => return true,
            }
        }
    })
}

/// The error `show servers state web` ends in (an answer is only counted: it may be 17 MiB).
fn refused(sink: &HaproxySink) -> String {
    match sink.ask("show servers state web") {
        Ok(answer) => panic!("answered, {} bytes", answer.len()),
        Err(e) => crate::errors::chain(&e),
    }
}

fn bounded_sink(socket: PathBuf, timeout: Duration) -> HaproxySink {
    HaproxySink {
        cfg: cfg(socket, HaproxyDown::Maint, &[("a", "b0")]),
        timeout,
    }
}

#[test]
fn a_peer_that_trickles_floods_or_never_accepts_fails_the_request_in_time() {
    let dir = temp_dir("bounds");

    // One byte every 20 ms, for ever: each read gets something, the answer never ends.
    let trickle = dir.join("trickle.sock");
    let served = peer(&trickle, |s| {
        std::thread::sleep(Duration::from_millis(20));
        s.write_all(b"1")?;
        Ok(true)
    });
    let sink = bounded_sink(trickle.clone(), Duration::from_millis(300));
    let started = Instant::now();
    let e = refused(&sink);
    let took = started.elapsed();
    assert!(
        e.contains("no whole answer to `show servers state web` within 300ms") && e.contains("trickle.sock"),
        "{e}"
    );
    assert!(
        took < Duration::from_millis(800),
        "the request ends at its deadline: {took:?}"
    );
    assert!(served.join().unwrap(), "the sink hung up on the trickle");

    // A well-formed dump of backend web, then other backends' lines past the cap, fast.
    let flood = dir.join("flood.sock");
    let mut sent = 0usize;
    let served = peer(&flood, move |s| {
        let text = if sent == 0 {
            format!("1\n{HEADER}\n2 web 1 b0 198.18.0.2 2 0 1 1 0 1 0 0 0 0 0 0 - 80 - 0 0 - - 0\n")
        } else {
            "3 other 1 x 198.18.0.9 2 0 1 1 0 1 0 0 0 0 0 0 - 80 - 0 0 - - 0\n".repeat(1000)
        };
        s.write_all(text.as_bytes())?;
        sent += text.len();
        // Closes a little past the cap: read whole, the answer would parse.
        Ok(sent <= MAX_ANSWER + (1 << 20))
    });
    let sink = bounded_sink(flood.clone(), Duration::from_secs(5));
    let started = Instant::now();
    let e = refused(&sink);
    assert!(e.contains("longer than 16 MiB") && e.contains("flood.sock"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert!(served.join().unwrap(), "the sink hung up on the flood");

    // A listener that never accepts: once its backlog is full a plain connect would wait for
    // ever.
    let deaf = dir.join("deaf.sock");
    let _listener = UnixListener::bind(&deaf).unwrap();
    let mut queued = Vec::new();
    while let Ok(s) = crate::kernel::sys::unix_connect_within(&deaf, Duration::from_millis(20)) {
        queued.push(s);
        assert!(queued.len() < 100_000, "the backlog fills");
    }
    let sink = bounded_sink(deaf, Duration::from_millis(300));
    let started = Instant::now();
    let e = refused(&sink);
    assert!(e.contains("accepts no connection"), "{e}");
    assert!(
        started.elapsed() < Duration::from_millis(800),
        "{:?}",
        started.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_slow_start_sets_the_ramped_weight_rounded_up() {
    let held = parse_servers_state(&captured(), "web").unwrap();
    let c = cfg("/s".into(), HaproxyDown::Maint, &[("a", "b0")]);
    let ramped = |weight, ramp| {
        let mut m = model(&[("a", true, weight)]);
        m.endpoints.get_mut("a").expect("a").ramp = ramp;
        plan(&c, &m, &held).commands
    };
    // b0 is held at weight 1: 1% of 100 is that already.
    assert_eq!(ramped(100, 10), ["set server web/b0 state ready"]);
    assert_eq!(
        ramped(100, 20),
        ["set server web/b0 weight 2", "set server web/b0 state ready"]
    );
    assert_eq!(ramped(100, 550)[0], "set server web/b0 weight 55");
    assert_eq!(ramped(3, 500)[0], "set server web/b0 weight 2");
    assert_eq!(
        ramped(100, crate::status::ramp::FULL)[0],
        "set server web/b0 weight 100"
    );
}
