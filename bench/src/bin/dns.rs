//! `cargo xtask bench dns`: probed's authoritative DNS server against gdnsd 3 (Debian's), side
//! by side in one run: the same zone, the same core, the same load from dnsperf.
//!
//! - The servers, both in the server namespace (the topology's prober) on 198.18.200.1, the
//!   address facing the client: `probed run` (the release binary) on port 5353, its TCP checks
//!   running every second against real listeners in the backend namespace, and gdnsd on port
//!   5354 with its health from an extfile state file that says every address is UP. Both are
//!   pinned to CPU 0: gdnsd with one UDP and one TCP thread, probed as a whole process, so its
//!   `probed-dns` thread shares the core with its own checks as it would on a node.
//! - The zone `tm.example.`, the same answers from both. `web`: probed's priority routing over
//!   three endpoints; gdnsd's metafo over three one-address "datacenters", which answers with
//!   the first UP address as priority does (multifo would answer all three, rotated: three
//!   times the records and another behaviour). `multi`: probed's multivalue, at most two
//!   answers, over three IPv4 and two IPv6 endpoints; gdnsd's multifo over the two IPv4 and
//!   two IPv6 addresses probed answers with while all are up, so both send the same records.
//! - The load: dnsperf in the client namespace on CPU 1, one socket, a query file of A and AAAA
//!   queries for both names (one NODATA among them), at most `--outstanding` queries in flight
//!   and otherwise unthrottled; when more than 0.1% are lost, again at 90% of the last rate
//!   with `-Q`, at most `--steps` times. The first run within 0.1% is reported (the rate only
//!   goes down, so it is the fastest), else the last.
//! - Counted: queries per second completed and lost (dnsperf's own figures), the server
//!   process's CPU per query (utime + stime from /proc/PID/stat over the run), the same with
//!   the interrupt time of CPU 0 added (the packets' way through the kernel on the server's
//!   core), how much of each core other tasks took (someone else's build slows the run down),
//!   and how busy CPU 1 was. A server process well under 100% ran at dnsperf's pace: its rate
//!   is the client's limit, and only its CPU per query says what it could do.
//!
//! Before any timing, `dig` asks both servers the bench's questions and the run stops unless
//! both give the same answers.
//!
//! probed runs with response rate limiting on (`--rate-limit`, answers per second per source
//! prefix and answer; 0 turns it off), at a rate the one client never reaches by default: the
//! limiter's work is in every answer, and no answer is held back.
//!
//! `cargo xtask bench dns [--seconds 10] [--outstanding 100] [--steps 4] [--rounds 1] [--only probed|gdnsd]
//! [--rate-limit 1000000]`
use std::{
    fmt::Write as _,
    io::Write as _,
    net::TcpListener,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use probed_tests::{
    daemon::DaemonFiles,
    lb::add_backends,
    probed_bin,
    procs::{describe, proc_cpu, stat_cpu, ticks, Proc},
    topo::{BACKEND_V4, BACKEND_V6, LB_CLIENT_V4, PROBER_IF},
    Netns, Topology,
};

const ZONE: &str = "tm.example.";
/// Where both servers listen: the server namespace's address on the client's link.
const SERVER: &str = LB_CLIENT_V4;
const PROBED_PORT: u16 = 5353;
const GDNSD_PORT: u16 = 5354;
/// The three IPv4 endpoints in priority order, and the two IPv6 ones (`multi` only).
const V4: [&str; 3] = [BACKEND_V4, "198.18.0.3", "198.18.0.4"];
const V6: [&str; 2] = [BACKEND_V6, "2001:2::3"];
const TTL: u32 = 30;
const NEGATIVE_TTL: u32 = 7;
/// The most either server may take to answer its first question, and probed its endpoints
/// to come Online.
const START_LIMIT: Duration = Duration::from_secs(20);
/// Lost queries allowed for a rate to count as sustained.
const MAX_LOSS_PCT: f64 = 0.1;
/// dnsperf's time-out per query: a reply later than this counts as lost.
const QUERY_TIMEOUT_S: u32 = 1;
/// The server's core and the client's.
const SERVER_CPU: usize = 0;
const CLIENT_CPU: usize = 1;

/// A query mix with more A than AAAA, both names, and one question answered NODATA (`web` has
/// no IPv6 endpoint), as a resolver in front of a dual-stack client would ask.
const QUERIES: &str = "web.tm.example. A\nmulti.tm.example. A\nweb.tm.example. A\nmulti.tm.example. AAAA\n\
                       web.tm.example. A\nmulti.tm.example. A\nweb.tm.example. A\nmulti.tm.example. AAAA\n\
                       web.tm.example. AAAA\nmulti.tm.example. A\n";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Server {
    Probed,
    Gdnsd,
}

impl Server {
    fn name(self) -> &'static str {
        match self {
            Server::Probed => "probed",
            Server::Gdnsd => "gdnsd",
        }
    }

    fn port(self) -> u16 {
        match self {
            Server::Probed => PROBED_PORT,
            Server::Gdnsd => GDNSD_PORT,
        }
    }

    /// What answers `web` and `multi`, for the table.
    fn answered_by(self) -> &'static str {
        match self {
            Server::Probed => "priority; multivalue max 2",
            Server::Gdnsd => "metafo; multifo",
        }
    }
}

struct Args {
    seconds: u64,
    outstanding: u32,
    steps: u32,
    servers: Vec<Server>,
    /// Each server measured this many times, taking turns, so that a burst of someone else's
    /// work on the machine spoils one round rather than one server's figures.
    rounds: u32,
    /// probed's `[dns.rate_limit] responses_per_second`: by default on, at a rate the bench's
    /// one client never reaches, so every answer goes through the limiter's table (what a node
    /// with rate limiting on pays) and none is held back; 0 turns it off.
    rate_limit: u32,
}

fn args() -> Args {
    let mut a = Args {
        seconds: 10,
        outstanding: 100,
        steps: 4,
        servers: vec![Server::Probed, Server::Gdnsd],
        rounds: 1,
        rate_limit: 1_000_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--seconds" => {
                a.seconds = value.parse().expect("--seconds: a number");
                assert!((1..=300).contains(&a.seconds), "--seconds: 1 to 300");
            }
            "--outstanding" => {
                a.outstanding = value.parse().expect("--outstanding: a number");
                assert!((1..=65_535).contains(&a.outstanding), "--outstanding: 1 to 65535");
            }
            "--steps" => {
                a.steps = value.parse().expect("--steps: a number");
                assert!(a.steps <= 10, "--steps: 0 to 10");
            }
            "--only" => {
                a.servers = match value.as_str() {
                    "probed" => vec![Server::Probed],
                    "gdnsd" => vec![Server::Gdnsd],
                    other => panic!("--only: {other:?} is not probed or gdnsd"),
                }
            }
            "--rounds" => {
                a.rounds = value.parse().expect("--rounds: a number");
                assert!((1..=9).contains(&a.rounds), "--rounds: 1 to 9");
            }
            "--rate-limit" => {
                a.rate_limit = value.parse().expect("--rate-limit: a number");
                assert!(a.rate_limit <= 1_000_000, "--rate-limit: 0 (off) to 1000000");
            }
            other => panic!("unknown flag {other}: --seconds, --outstanding, --steps, --rounds, --only, --rate-limit"),
        }
    }
    a
}

/// Set by SIGINT and SIGTERM: the bench stops at its next check and its guards clean up, which
/// the default action (dying at once) would skip.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t) };
    }
}

fn interrupted() -> Result<(), String> {
    if INTERRUPTED.load(Ordering::Relaxed) {
        Err("interrupted".into())
    } else {
        Ok(())
    }
}

/// Sleeps `d` in short naps, returning early with an error if the bench was interrupted.
fn nap(d: Duration) -> Result<(), String> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        interrupted()?;
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(100)));
    }
    Ok(())
}

/// A directory for the bench's files (gdnsd's config, zone and state, the query file, logs),
/// removed on drop.
struct BenchDir(PathBuf);

impl BenchDir {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(probed_tests::unique_name("probed-bench-dns-"));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for BenchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The endpoints' listeners on port 80 in the backend namespace. One thread accepts and
/// closes whatever connects, so that a check that completes a handshake never finds a full
/// backlog however long the bench runs; poll(2) wakes it only for a connection, or every
/// 200 ms to look at its stop flag, so it costs nothing measurable.
struct Backends {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Backends {
    fn start(ns: &Netns, addrs: &[&str]) -> Self {
        let listeners: Vec<TcpListener> = addrs
            .iter()
            .map(|a| {
                let l = ns.tcp_listen(&format!("{}:80", probed_tests::lb::bracket(a)));
                l.set_nonblocking(true).unwrap();
                l
            })
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut fds: Vec<libc::pollfd> = listeners
                .iter()
                .map(|l| libc::pollfd {
                    fd: l.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            while !flag.load(Ordering::Relaxed) {
                // SAFETY: `fds` is a live array of `fds.len()` pollfds whose descriptors the
                // listeners keep open for the whole loop.
                let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 200) };
                if n <= 0 {
                    continue;
                }
                for l in &listeners {
                    while let Ok((s, _)) = l.accept() {
                        drop(s);
                    }
                }
                for f in &mut fds {
                    f.revents = 0;
                }
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Backends {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn probed_config(files: &DaemonFiles, rate_limit: u32) -> PathBuf {
    let health = "[profile.health]\nprotocol = \"tcp\"\nport = 80\ninterval = \"1s\"\ntimeout = \"1s\"\n";
    let mut c = files.header(PROBER_IF);
    c += &format!(
        "[dns]\nlisten = [\"{SERVER}:{PROBED_PORT}\"]\nzone = \"{ZONE}\"\nttl = \"{TTL}s\"\n\
         negative_ttl = \"{NEGATIVE_TTL}s\"\n[dns.rate_limit]\nresponses_per_second = {rate_limit}\n\n"
    );
    c += &format!("[[profile]]\nname = \"web\"\ndialect = \"lb\"\nrouting = \"priority\"\n\n{health}");
    for (i, a) in V4.iter().enumerate() {
        let _ = write!(
            c,
            "\n[[profile.endpoint]]\nname = \"w{i}\"\naddress = \"{a}\"\npriority = {}\n",
            i + 1
        );
    }
    c += &format!(
        "\n[[profile]]\nname = \"multi\"\ndialect = \"lb\"\nrouting = \"multivalue\"\nmax_answers = 2\n\n{health}"
    );
    for (i, a) in V4.iter().chain(V6.iter()).enumerate() {
        let _ = write!(c, "\n[[profile.endpoint]]\nname = \"m{i}\"\naddress = \"{a}\"\n");
    }
    let path = files.config_path();
    std::fs::write(&path, c).unwrap();
    path
}

/// gdnsd's configuration directory (`config`, `zones/`, and the state file its extfile
/// plugin reads), with its run and state directories inside the bench's directory.
fn gdnsd_config(dir: &Path) -> PathBuf {
    let conf = dir.join("gdnsd");
    let d = conf.display();
    std::fs::create_dir_all(conf.join("zones")).unwrap();
    std::fs::create_dir_all(conf.join("state")).unwrap();
    let config = format!(
        "options => {{\n  listen => [ {SERVER}:{GDNSD_PORT} ]\n  udp_threads => 1\n  tcp_threads => 1\n\
         \x20 run_dir => {d}/run\n  state_dir => {d}/state\n  zones_default_ttl => {TTL}\n}}\n\
         service_types => {{\n  tmhealth => {{ plugin => extfile, file => {d}/state/health, direct => true, def_down => false }}\n}}\n\
         plugins => {{\n  metafo => {{\n    service_types => tmhealth\n    resources => {{\n      web => {{\n\
         \x20       datacenters => [ a, b, c ]\n        dcmap => {{ a => {}, b => {}, c => {} }}\n      }}\n    }}\n  }}\n\
         \x20 multifo => {{\n    multi => {{\n      service_types => tmhealth\n      up_thresh => 0.01\n\
         \x20     addrs_v4 => [ {}, {} ]\n      addrs_v6 => [ {}, {} ]\n    }}\n  }}\n}}\n",
        V4[0], V4[1], V4[2], V4[0], V4[1], V6[0], V6[1]
    );
    std::fs::write(conf.join("config"), config).unwrap();
    std::fs::write(
        conf.join("zones/tm.example"),
        format!(
            "$TTL {TTL}\n@ SOA ns1 hostmaster 1 3600 600 86400 {NEGATIVE_TTL}\n@ NS ns1\nns1 A {SERVER}\n\
             web {TTL} DYNA metafo!web\nmulti {TTL} DYNA multifo!multi\n"
        ),
    )
    .unwrap();
    let mut health = String::new();
    for a in V4.iter().chain(V6.iter()) {
        let _ = writeln!(health, "\"{a}\" => UP");
    }
    std::fs::write(conf.join("state/health"), health).unwrap();
    conf
}

/// One `dig` answer: its status, the answer section's (type, data), and the message's size.
struct Dig {
    status: String,
    answers: Vec<(String, String)>,
    size: usize,
    raw: String,
}

impl Dig {
    fn addresses(&self) -> Vec<&str> {
        let mut a: Vec<&str> = self
            .answers
            .iter()
            .filter(|(t, _)| t == "A" || t == "AAAA")
            .map(|(_, d)| d.as_str())
            .collect();
        a.sort_unstable();
        a
    }
}

/// `dig` from `client`, without EDNS as dnsperf asks, so that the sizes match its packets.
fn dig(client: &Netns, port: u16, name: &str, qtype: &str) -> Result<Dig, String> {
    let out = Command::new("ip")
        .args(["netns", "exec", &client.name, "dig", &format!("@{SERVER}"), "-p"])
        .arg(port.to_string())
        .args([name, qtype, "+noedns", "+nocookie", "+tries=1", "+time=1"])
        .output()
        .map_err(|e| format!("spawn dig: {e}"))?;
    let raw = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "dig {name} {qtype} on port {port} failed ({}): {raw}",
            out.status
        ));
    }
    let mut d = Dig {
        status: String::new(),
        answers: Vec::new(),
        size: 0,
        raw: String::new(),
    };
    let mut in_answer = false;
    for line in raw.lines() {
        if let Some((_, rest)) = line.split_once("status: ") {
            d.status = rest.split(',').next().unwrap_or("").to_string();
        }
        if let Some(rest) = line.strip_prefix(";; MSG SIZE  rcvd: ") {
            d.size = rest.trim().parse().unwrap_or(0);
        }
        if line.starts_with(";; ") && line.ends_with("SECTION:") {
            in_answer = line.contains("ANSWER");
            continue;
        }
        if line.trim().is_empty() {
            in_answer = false;
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if in_answer && f.len() >= 5 && !line.starts_with(';') {
            d.answers.push((f[3].to_string(), f[4..].join(" ")));
        }
    }
    d.raw = raw;
    Ok(d)
}

/// The questions both servers must answer alike before anything is timed: (name, type, the
/// addresses expected, sorted). `web` A must be the first endpoint alone.
fn expectations() -> Vec<(&'static str, &'static str, Vec<&'static str>)> {
    let mut multi4 = vec![V4[0], V4[1]];
    multi4.sort_unstable();
    let mut multi6 = vec![V6[0], V6[1]];
    multi6.sort_unstable();
    vec![
        ("web.tm.example.", "A", vec![V4[0]]),
        ("web.tm.example.", "AAAA", vec![]),
        ("multi.tm.example.", "A", multi4),
        ("multi.tm.example.", "AAAA", multi6),
    ]
}

/// Asks `server` each expected question; the answers' sizes, or what was wrong.
fn verify(client: &Netns, server: Server) -> Result<Vec<usize>, String> {
    let mut sizes = Vec::new();
    for (name, qtype, want) in expectations() {
        let d = dig(client, server.port(), name, qtype)?;
        if d.status != "NOERROR" || d.addresses() != want {
            return Err(format!(
                "{} answers {name} {qtype} with {} {:?}, expected NOERROR {want:?}; not timing \
                 servers that disagree:\n{}",
                server.name(),
                d.status,
                d.addresses(),
                d.raw
            ));
        }
        sizes.push(d.size);
    }
    Ok(sizes)
}

/// Waits until `server` answers `web` A at all (the correctness check comes after).
fn wait_answering(client: &Netns, server: Server, proc: &mut Proc) -> Result<(), String> {
    let deadline = Instant::now() + START_LIMIT;
    loop {
        proc.check_alive("while starting")?;
        if dig(client, server.port(), "web.tm.example.", "A").is_ok_and(|d| d.status == "NOERROR") {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} did not answer within {START_LIMIT:?}:\n{}",
                server.name(),
                proc.output()
            ));
        }
        nap(Duration::from_millis(100))?;
    }
}

/// Waits until probed has every endpoint of both profiles Online: until then priority answers
/// from endpoints it has not yet checked, which is not the state being measured.
fn wait_online(files: &DaemonFiles, proc: &mut Proc) -> Result<(), String> {
    let endpoints: Vec<(&str, String)> = (0..V4.len())
        .map(|i| ("web", format!("w{i}")))
        .chain((0..V4.len() + V6.len()).map(|i| ("multi", format!("m{i}"))))
        .collect();
    let deadline = Instant::now() + START_LIMIT;
    for (profile, endpoint) in &endpoints {
        loop {
            proc.check_alive("while its endpoints came up")?;
            let status = probed::api::client::request(&files.api(), "GET", &format!("/v1/status/{profile}/{endpoint}"))
                .ok()
                .and_then(|r| serde_json::from_str::<serde_json::Value>(&r.body).ok())
                .and_then(|v| v["status"].as_str().map(str::to_string));
            if status.as_deref() == Some("Online") {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "probed's {profile}/{endpoint} is {status:?}, not Online, after {START_LIMIT:?}:\n{}",
                    proc.output()
                ));
            }
            nap(Duration::from_millis(50))?;
        }
    }
    Ok(())
}

/// User and system time of the children reaped so far. During a run the only child that
/// exits is dnsperf (the servers run on, and dig runs before and after), so a difference of
/// two readings is dnsperf's own CPU.
fn children_cpu() -> Duration {
    // SAFETY: getrusage writes one rusage into the zeroed struct it is given.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &raw mut u);
        u
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Each thread's name and CPU time so far.
fn thread_cpu(pid: u32) -> Vec<(u32, String, Duration)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| {
            let tid: u32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            Some((
                tid,
                comm.trim().to_string(),
                stat_cpu(&format!("/proc/{pid}/task/{tid}/stat")),
            ))
        })
        .collect()
}

/// Per-CPU time from /proc/stat: in tasks (user, nice and system, whoever ran) and in
/// interrupts (hard and soft: the kernel's packet work lands here).
#[derive(Clone, Copy, Default)]
struct CpuTimes {
    task: [Duration; 2],
    irq: [Duration; 2],
}

fn cpu_times() -> CpuTimes {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let mut t = CpuTimes::default();
    for line in stat.lines() {
        let mut f = line.split_whitespace();
        let cpu = match f.next() {
            Some("cpu0") => 0,
            Some("cpu1") => 1,
            _ => continue,
        };
        // user nice system idle iowait irq softirq
        let v: Vec<u64> = f.filter_map(|x| x.parse().ok()).collect();
        let get = |i: usize| v.get(i).copied().unwrap_or(0);
        t.task[cpu] = ticks(get(0) + get(1) + get(2));
        t.irq[cpu] = ticks(get(5) + get(6));
    }
    t
}

impl CpuTimes {
    fn since(&self, before: &CpuTimes) -> CpuTimes {
        let d = |a: Duration, b: Duration| a.saturating_sub(b);
        CpuTimes {
            task: [d(self.task[0], before.task[0]), d(self.task[1], before.task[1])],
            irq: [d(self.irq[0], before.irq[0]), d(self.irq[1], before.irq[1])],
        }
    }
}

/// What dnsperf printed about one run.
#[derive(Default, Clone)]
struct Perf {
    sent: u64,
    completed: u64,
    lost: u64,
    qps: f64,
    noerror_pct: f64,
    response_bytes: f64,
    latency_ms: f64,
}

fn parse_dnsperf(out: &str) -> Result<Perf, String> {
    let mut p = Perf::default();
    let first = |rest: &str| rest.split_whitespace().next().unwrap_or("").to_string();
    for line in out.lines() {
        let line = line.trim();
        if let Some(r) = line.strip_prefix("Queries sent:") {
            p.sent = first(r).parse().unwrap_or(0);
        } else if let Some(r) = line.strip_prefix("Queries completed:") {
            p.completed = first(r).parse().unwrap_or(0);
        } else if let Some(r) = line.strip_prefix("Queries lost:") {
            p.lost = first(r).parse().unwrap_or(0);
        } else if let Some(r) = line.strip_prefix("Queries per second:") {
            p.qps = first(r).parse().unwrap_or(0.0);
        } else if let Some(r) = line.strip_prefix("Response codes:") {
            // "NOERROR 123 (100.00%), NXDOMAIN ..."
            p.noerror_pct = r
                .split(',')
                .find(|c| c.trim().starts_with("NOERROR "))
                .and_then(|c| c.split_once('(')?.1.split_once('%')?.0.parse().ok())
                .unwrap_or(0.0);
        } else if let Some(r) = line.strip_prefix("Average packet size:") {
            // "request 33, response 49"
            p.response_bytes = r
                .split_once("response ")
                .and_then(|(_, v)| v.trim().parse().ok())
                .unwrap_or(0.0);
        } else if let Some(r) = line.strip_prefix("Average Latency (s):") {
            p.latency_ms = first(r).parse::<f64>().unwrap_or(0.0) * 1e3;
        }
    }
    if p.sent == 0 {
        return Err(format!("dnsperf sent nothing:\n{out}"));
    }
    Ok(p)
}

impl Perf {
    fn lost_pct(&self) -> f64 {
        self.lost as f64 * 100.0 / self.sent.max(1) as f64
    }
}

/// One measured dnsperf run against one server.
#[derive(Clone)]
struct Run {
    /// `-Q` given to dnsperf, if any, and its whole command line.
    limit: Option<u64>,
    argv: String,
    perf: Perf,
    /// The server process's CPU, each CPU's, and dnsperf's, over the run.
    server_cpu: Duration,
    cpu: CpuTimes,
    client_cpu: Duration,
    wall: Duration,
    /// The server's busiest threads over the run: name and CPU.
    threads: Vec<(String, Duration)>,
}

impl Run {
    fn per_query_us(&self, d: Duration) -> f64 {
        d.as_secs_f64() * 1e6 / self.perf.completed.max(1) as f64
    }

    /// The server's process and the interrupt work on its core, per query: the packets' way
    /// through the kernel is part of what answering costs.
    fn with_softirq_us(&self) -> f64 {
        self.per_query_us(self.server_cpu + self.cpu.irq[0])
    }

    /// Share of the run that other tasks (not the server) ran on the server's core: work of
    /// someone else that slowed the server down.
    fn foreign_pct(&self) -> f64 {
        self.cpu.task[0].saturating_sub(self.server_cpu).as_secs_f64() * 100.0 / self.wall.as_secs_f64()
    }

    /// How busy the client's core was: near 100%, the rate is dnsperf's limit.
    fn client_pct(&self) -> f64 {
        (self.cpu.task[1] + self.cpu.irq[1]).as_secs_f64() * 100.0 / self.wall.as_secs_f64()
    }

    /// As `foreign_pct`, on the client's core: someone else's work there slows dnsperf, and
    /// with it a server that waits for dnsperf.
    fn client_foreign_pct(&self) -> f64 {
        self.cpu.task[1].saturating_sub(self.client_cpu).as_secs_f64() * 100.0 / self.wall.as_secs_f64()
    }

    fn load(&self, outstanding: u32) -> String {
        match self.limit {
            Some(q) => format!("-q {outstanding} -Q {q}"),
            None => format!("-q {outstanding}"),
        }
    }
}

fn dnsperf_argv(port: u16, file: &Path, seconds: u64, outstanding: u32, limit: Option<u64>) -> Vec<String> {
    let mut v: Vec<String> = [
        "dnsperf",
        "-s",
        SERVER,
        "-p",
        &port.to_string(),
        "-d",
        file.to_str().unwrap(),
        "-l",
        &seconds.to_string(),
        "-q",
        &outstanding.to_string(),
        "-t",
        &QUERY_TIMEOUT_S.to_string(),
        "-c",
        "1",
        "-T",
        "1",
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    if let Some(q) = limit {
        v.extend(["-Q".to_string(), q.to_string()]);
    }
    v
}

struct Bench<'a> {
    client: &'a Netns,
    dir: &'a Path,
    queries: PathBuf,
    a: &'a Args,
}

impl Bench<'_> {
    /// One dnsperf run of `seconds` against `server`, whose process is `pid`.
    fn dnsperf(&self, server: Server, pid: u32, seconds: u64, limit: Option<u64>) -> Result<Run, String> {
        interrupted()?;
        let argv = dnsperf_argv(server.port(), &self.queries, seconds, self.a.outstanding, limit);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let log = self.dir.join(format!("dnsperf-{}.log", server.name()));
        let (threads0, p0, c0, d0) = (thread_cpu(pid), proc_cpu(pid), cpu_times(), children_cpu());
        let t0 = Instant::now();
        let mut perf = Proc::spawn(self.client, Some(CLIENT_CPU), &argv, &log, "dnsperf");
        // dnsperf stops sending after `seconds` and then waits at most its time-out for the
        // last replies.
        let status = perf.wait(
            Duration::from_secs(seconds + u64::from(QUERY_TIMEOUT_S) + 10),
            interrupted,
        )?;
        let (threads1, p1, c1, d1) = (thread_cpu(pid), proc_cpu(pid), cpu_times(), children_cpu());
        let wall = t0.elapsed();
        if !status.success() {
            return Err(format!(
                "dnsperf failed ({}): {}\n{}",
                describe(status),
                argv.join(" "),
                perf.output()
            ));
        }
        let mut threads: Vec<(String, Duration)> = threads1
            .into_iter()
            .map(|(tid, name, t)| {
                let before = threads0
                    .iter()
                    .find(|(id, _, _)| *id == tid)
                    .map_or(Duration::ZERO, |x| x.2);
                (name, t.saturating_sub(before))
            })
            .collect();
        threads.sort_by_key(|t| std::cmp::Reverse(t.1));
        threads.truncate(3);
        Ok(Run {
            limit,
            argv: argv.join(" "),
            perf: parse_dnsperf(&perf.output())?,
            server_cpu: p1.saturating_sub(p0),
            cpu: c1.since(&c0),
            client_cpu: d1.saturating_sub(d0),
            wall,
            threads,
        })
    }

    /// Unthrottled with at most `outstanding` in flight; while more than 0.1% is lost, again at
    /// 90% of the last rate, at most `steps` times. Every run, the reported one last.
    fn measure(&self, server: Server, proc: &mut Proc) -> Result<Vec<Run>, String> {
        let pid = proc.pid();
        // A short unmeasured run first: the first packets of a run pay for cold caches.
        self.dnsperf(server, pid, 1, None)?;
        let mut runs: Vec<Run> = Vec::new();
        let mut limit = None;
        for _ in 0..=self.a.steps {
            let run = self.dnsperf(server, pid, self.a.seconds, limit)?;
            proc.check_alive("while measured")?;
            eprintln!(
                "  {:<6} {:<16} {:>9.0} q/s  lost {:>6.3}%  {:>6.2} us/query (process)  {:>6.2} us/query (+softirq)  \
                 others on CPU 0 {:>4.1}%  CPU 1 {:>5.1}% (others {:>4.1}%)  threads: {}",
                server.name(),
                run.load(self.a.outstanding),
                run.perf.qps,
                run.perf.lost_pct(),
                run.per_query_us(run.server_cpu),
                run.with_softirq_us(),
                run.foreign_pct(),
                run.client_pct(),
                run.client_foreign_pct(),
                run.threads
                    .iter()
                    .map(|(n, t)| format!("{n} {:.2} s", t.as_secs_f64()))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let ok = run.perf.lost_pct() <= MAX_LOSS_PCT;
            let next = (run.limit.map_or(run.perf.qps, |q| q as f64) * 0.9) as u64;
            runs.push(run);
            if ok || next == 0 {
                break;
            }
            limit = Some(next);
        }
        Ok(runs)
    }
}

fn main() {
    let a = args();
    catch_signals();
    if let Err(e) = run(&a) {
        // Every guard of `run` has been dropped by now: processes stopped, namespaces and
        // files removed.
        eprintln!("bench dns: {e}");
        std::process::exit(1);
    }
}

fn run(a: &Args) -> Result<(), String> {
    // SAFETY: sysconf has no preconditions.
    if unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) } < 2 {
        return Err("needs two CPUs: the servers on CPU 0, dnsperf on CPU 1".into());
    }
    for tool in ["dnsperf", "gdnsd", "dig"] {
        if !Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            return Err(format!("{tool} is missing: `cargo xtask setup` installs it"));
        }
    }
    // Guards, dropped in reverse: the processes first, then files, listeners and namespaces.
    let topo = Topology::new();
    let client = topo.client();
    add_backends(&topo, &V4[1..]);
    add_backends(&topo, &V6[1..]);
    let _backends = Backends::start(&topo.backend, &[V4[0], V4[1], V4[2], V6[0], V6[1]]);
    let dir = BenchDir::new();
    let files = DaemonFiles::new();
    let queries = dir.0.join("queries.txt");
    std::fs::write(&queries, QUERIES).unwrap();

    let probed_cfg = probed_config(&files, a.rate_limit);
    // PROBED_BIN: another build of probed to measure (before/after a change).
    let bin = std::env::var_os("PROBED_BIN").map_or_else(probed_bin, PathBuf::from);
    let mut probed = Proc::spawn(
        &topo.prober,
        Some(SERVER_CPU),
        &[bin.to_str().unwrap(), "run", "--config", probed_cfg.to_str().unwrap()],
        &dir.0.join("probed.log"),
        "probed",
    );
    let gdnsd_dir = gdnsd_config(&dir.0);
    let mut gdnsd = Proc::spawn(
        &topo.prober,
        Some(SERVER_CPU),
        &["gdnsd", "-c", gdnsd_dir.to_str().unwrap(), "start"],
        &dir.0.join("gdnsd.log"),
        "gdnsd",
    );
    wait_answering(&client, Server::Probed, &mut probed)?;
    wait_online(&files, &mut probed)?;
    wait_answering(&client, Server::Gdnsd, &mut gdnsd)?;
    let sizes = [verify(&client, Server::Probed)?, verify(&client, Server::Gdnsd)?];
    for (server, p) in [(Server::Probed, &probed), (Server::Gdnsd, &gdnsd)] {
        let threads = thread_cpu(p.pid());
        eprintln!(
            "{} pid {}: CPUs {}, threads {}",
            server.name(),
            p.pid(),
            allowed_cpus(p.pid()),
            threads.iter().map(|t| t.1.as_str()).collect::<Vec<_>>().join(" ")
        );
        if server == Server::Probed && !threads.iter().any(|t| t.1 == "probed-dns") {
            return Err("probed runs no probed-dns thread".into());
        }
    }

    let bench = Bench {
        client: &client,
        dir: &dir.0,
        queries: queries.clone(),
        a,
    };
    let mut results = Vec::new();
    for _ in 0..a.rounds {
        for &server in &a.servers {
            let proc = match server {
                Server::Probed => &mut probed,
                Server::Gdnsd => &mut gdnsd,
            };
            let runs = bench.measure(server, proc)?;
            results.push((server, runs));
        }
    }
    // Both still answer as they did before the load.
    verify(&client, Server::Probed)?;
    verify(&client, Server::Gdnsd)?;
    report(a, &bin, &sizes, &results);
    Ok(())
}

fn allowed_cpus(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or("?")
        .trim()
        .to_string()
}

fn report(a: &Args, bin: &Path, sizes: &[Vec<usize>; 2], results: &[(Server, Vec<Run>)]) {
    let mut out = std::io::stdout().lock();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\ncommand: {}\nprobed: {}\nquery file (looped): {}",
        std::env::args().collect::<Vec<_>>().join(" "),
        bin.canonicalize().unwrap_or_else(|_| bin.to_path_buf()).display(),
        QUERIES.lines().collect::<Vec<_>>().join(", ")
    );
    for &server in &a.servers {
        if let Some((_, runs)) = results.iter().find(|(s, _)| *s == server) {
            let r = runs.last().expect("at least one run");
            let _ = writeln!(s, "dnsperf against {} (first round): {}", server.name(), r.argv);
        }
    }
    s.push('\n');
    let _ = writeln!(
        s,
        "| server | web; multi | load (dnsperf) | queries/s completed | lost | NOERROR | CPU/query, server process | \
         CPU/query, with CPU 0's softirq | server process CPU | others on CPU 0, 1 | CPU 1 (dnsperf) busy | avg response | \
         avg latency |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut foreign = 0.0f64;
    for (i, (server, runs)) in results.iter().enumerate() {
        let r = runs.last().expect("at least one run");
        let name = if a.rounds > 1 {
            format!("{} (round {})", server.name(), i / a.servers.len() + 1)
        } else {
            server.name().to_string()
        };
        foreign = runs
            .iter()
            .flat_map(|r| [r.foreign_pct(), r.client_foreign_pct()])
            .fold(foreign, f64::max);
        let within = if r.perf.lost_pct() <= MAX_LOSS_PCT {
            ""
        } else {
            " (no step within 0.1%)"
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.0} | {:.3}%{within} | {:.2}% | {:.2} µs | {:.2} µs | {:.0}% | {:.1}%, {:.1}% | {:.0}% | {:.0} B | {:.3} ms |",
            name,
            server.answered_by(),
            r.load(a.outstanding),
            r.perf.qps,
            r.perf.lost_pct(),
            r.perf.noerror_pct,
            r.per_query_us(r.server_cpu),
            r.with_softirq_us(),
            r.server_cpu.as_secs_f64() * 100.0 / r.wall.as_secs_f64(),
            r.foreign_pct(),
            r.client_foreign_pct(),
            r.client_pct(),
            r.perf.response_bytes,
            r.perf.latency_ms
        );
    }
    // Over several rounds, each figure's median across them.
    let median = |which: Server, f: &dyn Fn(&Run) -> f64| {
        let mut v: Vec<f64> = results
            .iter()
            .filter(|(s, _)| *s == which)
            .filter_map(|(_, runs)| runs.last().map(f))
            .collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        (n > 0).then(|| (v[(n - 1) / 2] + v[n / 2]) / 2.0)
    };
    let qps = |r: &Run| r.perf.qps;
    let process = |r: &Run| r.per_query_us(r.server_cpu);
    let softirq = |r: &Run| r.with_softirq_us();
    let figures = |which| Some((median(which, &qps)?, median(which, &process)?, median(which, &softirq)?));
    if let (Some(p), Some(g)) = (figures(Server::Probed), figures(Server::Gdnsd)) {
        let _ = writeln!(
            s,
            "\n| probed/gdnsd{} | queries/s | CPU/query, server process | CPU/query, with CPU 0's softirq |\n\
             |---|---:|---:|---:|\n| ratio | {:.2}x | {:.2}x | {:.2}x |",
            if a.rounds > 1 { " (medians of the rounds)" } else { "" },
            p.0 / g.0.max(1.0),
            p.1 / g.1.max(1e-9),
            p.2 / g.2.max(1e-9)
        );
        // A server whose core was not full ran at the client's pace: what its core could answer
        // is then an estimate from its cost per query, not a measurement.
        let _ = writeln!(
            s,
            "\nqueries/s one core could answer, estimated as 1 s / (CPU/query with softirq): probed {:.0}, gdnsd {:.0}",
            1e6 / p.2.max(1e-9),
            1e6 / g.2.max(1e-9)
        );
    }
    let _ = writeln!(
        s,
        "\nanswer sizes without EDNS (dig), probed / gdnsd: {}",
        expectations()
            .iter()
            .enumerate()
            .map(|(i, (name, qtype, _))| format!("{name} {qtype} {} / {} B", sizes[0][i], sizes[1][i]))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if foreign > 5.0 {
        let _ = writeln!(
            s,
            "\nwarning: other tasks took up to {foreign:.0}% of a core during a run (another build?): \
             the rates of those runs are low by about that much; CPU per query is less affected"
        );
    }
    let _ = out.write_all(s.as_bytes());
}
