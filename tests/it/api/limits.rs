//! The API cannot be exhausted (issue 13, point 2): a flood of idle connections to the unix
//! socket leaves the API answering and the probes running; a half-sent head is closed.
use std::{
    io::{ErrorKind, Read, Write},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use probed::status::EndpointStatus as S;
use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    http_server::Route,
    topo::*,
    Topology,
};

/// Idle connections the flood holds open.
const FLOOD: usize = 2_000;
/// The soft open-file limit of this test process (the daemon runs in it) during the flood: the
/// 1024 of a unit without `LimitNOFILE`, plus room for the flood's own client ends. Without a
/// connection cap the daemon's accepted ends run into it (EMFILE).
const FLOOD_NOFILE: libc::rlim_t = 3_000;

fn socket_path(api: &str) -> PathBuf {
    PathBuf::from(api.strip_prefix("unix:").expect("DaemonFiles gives a unix socket"))
}

fn now_unix_ms() -> u64 {
    u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// Lowers the soft RLIMIT_NOFILE of this process; restores it on drop.
struct NofileLimit(libc::rlimit);

impl NofileLimit {
    fn set_soft(soft: libc::rlim_t) -> Self {
        let mut old = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `old` is a valid rlimit the call writes into.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut old) }, 0);
        let new = libc::rlimit {
            rlim_cur: soft.min(old.rlim_max),
            rlim_max: old.rlim_max,
        };
        // SAFETY: `new` is a valid rlimit the call only reads.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const new) }, 0);
        NofileLimit(old)
    }
}

impl Drop for NofileLimit {
    fn drop(&mut self) {
        // SAFETY: the rlimit read at construction, only read by the call.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const self.0) };
    }
}

/// Opens `n` connections that never send a byte. Connecting is non-blocking (a full backlog is
/// EAGAIN, retried) and bounded by `within`, so a dead accept loop fails the test, not hangs it.
fn open_idle(path: &Path, n: usize, within: Duration) -> Vec<UnixStream> {
    let deadline = Instant::now() + within;
    let mut held = Vec::with_capacity(n);
    let mut last_err = None;
    while held.len() < n && Instant::now() < deadline {
        match connect_nonblocking(path) {
            Ok(s) => held.push(s),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                last_err = Some(e);
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("idle connection {} of {n}: {e}", held.len() + 1),
        }
    }
    assert_eq!(
        held.len(),
        n,
        "only {} of {n} connections were accepted within {within:?} (last error {last_err:?}): \
         the API stopped accepting",
        held.len()
    );
    held
}

fn connect_nonblocking(path: &Path) -> std::io::Result<UnixStream> {
    use std::os::{fd::FromRawFd, unix::ffi::OsStrExt};
    // SAFETY: plain socket(2); the result is checked before use.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh socket owned by nobody else; the stream closes it on drop.
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    assert!(bytes.len() < addr.sun_path.len(), "socket path too long");
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::sockaddr_un>()).unwrap();
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes for the call's duration.
    let r = unsafe { libc::connect(fd, (&raw const addr).cast(), len) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(stream)
}

/// One HTTP endpoint on the backend, `web/web-1` on 198.18.0.2:8080.
fn web_profile(files: &DaemonFiles) -> String {
    files.header(PROBER_IF)
        + &format!(
            "[[profile]]\nname = \"web\"\ndialect = \"lb\"\nrouting = \"priority\"\n\n[profile.health]\n\
             protocol = \"http\"\npath = \"/health\"\ninterval = \"2s\"\ntimeout = \"5s\"\n\
             healthy_threshold = 3\nunhealthy_threshold = 3\n\n\
             [[profile.endpoint]]\nname = \"web-1\"\naddress = \"{BACKEND_V4}\"\nport = 8080\npriority = 1\n"
        )
}

#[test]
fn two_thousand_idle_connections_leave_the_api_and_probes_working() {
    // The descriptor limit is the whole process's.
    if !probed_tests::serial::own_process() {
        return;
    }
    let topo = Topology::new();
    let server = topo.backend.http_server(&format!("{BACKEND_V4}:8080"));
    server.route("/health", Route::status(200));
    let files = DaemonFiles::new();
    let text = web_profile(&files);
    let mut config = files.write_config(&text);
    for p in &mut config.profiles {
        p.health.interval = Duration::from_millis(50);
        p.health.timeout = Duration::from_millis(500);
    }
    let daemon = RunningDaemon::start(&topo.prober, config, None).expect("start the daemon");
    daemon.wait_status("web", "web-1", S::Online, Duration::from_secs(5));

    let limit = NofileLimit::set_soft(FLOOD_NOFILE);
    let path = socket_path(&daemon.api);
    let started = Instant::now();
    let held = open_idle(&path, FLOOD, Duration::from_secs(10));
    eprintln!("{FLOOD} idle connections open after {:?}", started.elapsed());
    // Let the daemon accept (and evict) what is still in the backlog.
    std::thread::sleep(Duration::from_millis(500));

    let asked = Instant::now();
    let status = daemon.get("/v1/status");
    let took = asked.elapsed();
    eprintln!("/v1/status answered in {took:?} with {FLOOD} connections held");
    assert!(took < Duration::from_secs(1), "the API answered slowly: {took:?}");
    assert!(status.as_array().is_some_and(|a| !a.is_empty()), "{status}");

    // Probing goes on: fresh successful HTTP results (the probes need descriptors too).
    let flood_done = now_unix_ms();
    let deadline = Instant::now() + Duration::from_secs(5);
    let view = loop {
        let v = daemon.endpoint("web", "web-1");
        if v.last_result.as_ref().is_some_and(|r| r.at_unix_ms > flood_done + 200) {
            break v;
        }
        assert!(Instant::now() < deadline, "no probe result since the flood: {v:#?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let result = view.last_result.as_ref().unwrap();
    assert!(result.ok, "HTTP probes fail during the flood: {view:#?}");
    assert_eq!(view.status, S::Online, "{view:#?}");

    // And a health change still goes through: the backend fails, then comes back.
    server.route("/health", Route::status(503));
    let down = daemon.wait_event("web-1", S::Degraded, Duration::from_secs(5));
    assert!(down.results.iter().all(|r| *r.reason == *"status 503"), "{down:#?}");
    server.route("/health", Route::status(200));
    daemon.wait_event("web-1", S::Online, Duration::from_secs(5));

    drop(held);
    drop(limit);
}

#[test]
fn a_half_sent_head_is_closed_and_bodies_are_refused() {
    let topo = Topology::new();
    let files = DaemonFiles::new();
    let config = files.write_config(&web_profile(&files));
    let daemon = RunningDaemon::start(&topo.prober, config, None).expect("start the daemon");
    let path = socket_path(&daemon.api);

    // A body: 413, without the daemon waiting for it.
    let mut s = UnixStream::connect(&path).expect("connect to the API");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"POST /v1/reload HTTP/1.1\r\nHost: probed\r\nContent-Length: 1000000\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 413"), "a request body is refused: {text}");

    // Half a head: closed after the 10 s header-read timeout, not kept for ever.
    let mut s = UnixStream::connect(&path).expect("connect to the API");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let sent = Instant::now();
    s.write_all(b"GET /v1/status HTTP/1.1\r\nHost: probed\r\nX-Slow: ")
        .unwrap();
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
            panic!("a half-sent head is still open after {:?}", sent.elapsed())
        }
        // A reset also closes it.
        Err(e) => eprintln!("half-sent head: {e}"),
    }
    let took = sent.elapsed();
    eprintln!("half-sent head closed after {took:?}");
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(13),
        "closed after {took:?}, expected the 10 s header-read timeout"
    );
    // The API still answers.
    daemon.get("/v1/status");
}

/// Opens `n` connections to the unix socket as another user, sends each a request for the whole
/// status as a stream and never reads; reports how many the daemon closed soon after ("early")
/// and by the end of `hold` seconds ("late"), without reading a byte.
const STALLER: &str = r#"
import select, socket, sys, time
path, n, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
socks = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    try:
        s.sendall(b"GET /v1/status?stream=1 HTTP/1.1\r\nHost: probed\r\n\r\n")
    except OSError:
        pass
    socks.append(s)
def closed():
    p = select.poll()
    for s in socks:
        p.register(s, select.POLLHUP | 0x2000)
    return sum(1 for _, ev in p.poll(0) if ev & (select.POLLHUP | 0x2000))
print("sent", flush=True)
time.sleep(2)
print("early", closed(), flush=True)
end = time.time() + hold
while time.time() < end and closed() < n:
    time.sleep(0.2)
print("late", closed(), flush=True)
"#;

/// Clients that ask for big answers and never read them hold their connections only so long:
/// each user gets at most its share (32), a place stays for the operator while eight users
/// hold every other, and connections whose answers stall are closed after WRITE_STALL (10 s),
/// requests in flight or not.
#[test]
fn clients_that_never_read_keep_to_their_share_and_are_closed_when_they_stall() {
    use std::os::unix::fs::PermissionsExt;
    const USERS: u32 = 8;
    const EACH: usize = 33;
    // The daemon's sockets are counted among the whole process's.
    if !probed_tests::serial::own_process() {
        return;
    }
    let topo = Topology::new();
    let files = DaemonFiles::new();
    std::fs::set_permissions(&files.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    // 3,000 endpoints: the status stream is far larger than a socket's buffers.
    let mut text = files
        .header(PROBER_IF)
        .replace("[daemon]\n", "[daemon]\napi_socket_mode = 0o666\n")
        + "[[profile]]\nname = \"big\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\n\
           interval = \"30s\"\ntimeout = \"1s\"\n";
    for i in 0..3_000 {
        text += &format!(
            "[[profile.endpoint]]\nname = \"endpoint-number-{i:05}\"\naddress = \"{BACKEND_V4}\"\nport = {}\n",
            10_000 + i
        );
    }
    let config = files.write_config(&text);
    let daemon = RunningDaemon::start(&topo.prober, config, None).expect("start the daemon");
    let path = socket_path(&daemon.api);
    // The daemon runs in this process: its sockets are this process's.
    let sockets = || {
        std::fs::read_dir("/proc/self/fd").map_or(0, |d| {
            d.filter_map(Result::ok)
                .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:")))
                .count()
        })
    };
    let before = sockets();
    let script = files.dir.join("staller.py");
    std::fs::write(&script, STALLER).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut users = Vec::new();
    for u in 0..USERS {
        let uid = (65_534 - u).to_string();
        let log = files.dir.join(format!("staller-{u}.log"));
        let p = probed_tests::procs::Proc::spawn(
            &topo.prober,
            None,
            &[
                "setpriv",
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                "--clear-groups",
                // Debian's (setup installs it), not one from root's own paths, which another
                // user cannot reach.
                "/usr/bin/python3",
                script.to_str().unwrap(),
                path.to_str().unwrap(),
                &EACH.to_string(),
                "24",
            ],
            &log,
            "a client that never reads",
        );
        users.push(p);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !users.iter().all(|p| p.output().contains("early")) {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            users.iter().map(probed_tests::procs::Proc::output).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Every place but the operator's is held by requests in flight: root still gets in.
    // The streams' first pages (256 of them, asked for at once) keep the runner busy a few
    // seconds; the operator's question is about a place, not that queue.
    std::thread::sleep(Duration::from_secs(3));
    let asked = Instant::now();
    let status = daemon.get("/v1/status/big?limit=1");
    assert!(status["endpoints"].as_array().is_some_and(|a| a.len() == 1), "{status}");
    eprintln!("the operator was answered in {:?}", asked.elapsed());
    let held = sockets().saturating_sub(before);
    eprintln!("{held} more sockets than before the clients came");
    assert!(
        held <= 256 + USERS as usize + 1,
        "at most the places, and the few evicted while they sent a request: {held}"
    );
    for p in &mut users {
        p.wait(Duration::from_secs(40), || Ok(())).expect("the client ends");
    }
    let outputs: Vec<String> = users.iter().map(probed_tests::procs::Proc::output).collect();
    eprintln!("{outputs:#?}");
    let count = |out: &str, what: &str| -> usize {
        out.lines()
            .find_map(|l| l.strip_prefix(what)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{what}: {out}"))
    };
    // Each user's 33rd is refused at once, or replaces one of its own that had not yet sent
    // its request (which then goes at once, or at its stall if the request came meanwhile).
    let early: usize = outputs.iter().map(|o| count(o, "early")).sum();
    assert!(early <= USERS as usize + 1, "closed at once: {early}: {outputs:#?}");
    for o in &outputs {
        assert_eq!(count(o, "late"), EACH, "all closed once stalled: {o}");
    }
}
