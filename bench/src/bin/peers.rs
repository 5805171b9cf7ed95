//! `cargo xtask bench peers`: probed against HAProxy (Debian's), side by side in one run, on
//! one nginx fleet: the same targets, interval and checks, TCP, HTTP and HTTPS.
//!
//! - The fleet: nginx in the backend namespace answers `GET /health` with 200 on port 80 and
//!   over TLS on 443, for every address of an AnyIP /16 (198.19.0.0/16).
//! - The checkers: HAProxy (`option httpchk GET /health`, `http-check expect status 200`,
//!   `check inter 1s`; `check-ssl verify none` for HTTPS; a plain `check` in `mode tcp` for TCP)
//!   and `probed run` with the same checks, each in the prober namespace, alone; for HTTP also
//!   `probed run` with `http_probes = "sockets"` (every check through a socket, as before the
//!   kernel path).
//! - Two placements: both checkers pinned to CPU 0 (nginx on CPU 1), then unpinned on both
//!   cores (HAProxy with `nbthread 2`, probed with its default workers).
//! - Counted: checks per second *at the backend* (an nft counter of SYNs to 80/443 in the
//!   backend namespace, not the checker's own claim), CPU per check of the checker's process
//!   and of the whole machine (/proc/stat, nginx and softirqs included, which is the same
//!   work for both), and the checker's peak RSS (VmHWM).
//!
//! - `--checkers ...,keepalive` adds probed with `keep_alive = true` (nginx then keeps
//!   connections for every checker of the run; that row counts checks by requests, packets
//!   with PSH, since a kept connection sends no SYN). `--interval MS` shortens every checker's
//!   interval: at a fleet the open-file limit allows, the rate at which each stops keeping up
//!   is its ceiling.
//!
//! `cargo xtask bench peers [--sizes 10000,30000,65000] [--kinds tcp,http,https] [--seconds 10] [--only pinned|unpinned] [--checkers haproxy,probed,sockets,keepalive] [--interval 1000]`
use std::{
    fmt::Write as _,
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use probed_tests::{
    daemon::DaemonFiles,
    probed_bin,
    procs::{machine_cpu, machine_stat, proc_cpu, Proc},
    servers::counted_packets,
    topo::PROBER_IF,
    Topology,
};

const BLOCK: &str = "198.19.0.0/16";
const HTTP_PORT: u16 = 80;
const HTTPS_PORT: u16 = 443;
/// How long a checker runs, once it has sent its first check, before the measured window: its
/// first round spreads over the interval.
const WARMUP: Duration = Duration::from_secs(6);
/// The most a checker may take from its start to its first check.
const START_LIMIT: Duration = Duration::from_secs(240);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Tcp,
    Http,
    Https,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Tcp => "tcp",
            Kind::Http => "http",
            Kind::Https => "https",
        }
    }

    fn port(self) -> u16 {
        match self {
            Kind::Https => HTTPS_PORT,
            _ => HTTP_PORT,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Checker {
    Haproxy,
    /// probed as configured by default: HTTP checks in probe_rx.
    Probed,
    /// probed with `http_probes = "sockets"`: each HTTP check through a socket of its own.
    ProbedSockets,
    /// probed with `keep_alive = true`: each target's connection kept between checks (only
    /// when asked for: nginx then keeps connections open for every checker of the run).
    ProbedKeepAlive,
}

impl Checker {
    fn name(self) -> &'static str {
        match self {
            Checker::Haproxy => "haproxy",
            Checker::Probed => "probed",
            Checker::ProbedSockets => "probed (sockets)",
            Checker::ProbedKeepAlive => "probed (keep-alive)",
        }
    }

    /// Who may check `kind` (`--checkers` picks among them): HAProxy, probed, for HTTP probed
    /// with sockets as well (the kernel path's before and after), and keep-alive for HTTP(S).
    fn all_for(kind: Kind) -> &'static [Checker] {
        match kind {
            Kind::Http => &[
                Checker::Haproxy,
                Checker::Probed,
                Checker::ProbedSockets,
                Checker::ProbedKeepAlive,
            ],
            // An HTTPS check always runs through a socket.
            Kind::Https => &[Checker::Haproxy, Checker::Probed, Checker::ProbedKeepAlive],
            Kind::Tcp => &[Checker::Haproxy, Checker::Probed],
        }
    }
}

/// The i-th target address of the fleet.
fn addr(i: usize) -> String {
    let n = u32::from(std::net::Ipv4Addr::new(198, 19, 0, 0)) + u32::try_from(i).expect("fleet fits a /16");
    std::net::Ipv4Addr::from(n).to_string()
}

struct Args {
    sizes: Vec<usize>,
    kinds: Vec<Kind>,
    seconds: u64,
    pinned: Vec<bool>,
    /// Record each probed run's measured window with `perf record -g` into this directory.
    perf: Option<PathBuf>,
    /// Which checkers run (all by default); a memory or profile run of probed alone skips
    /// HAProxy's minutes.
    checkers: Vec<Checker>,
    /// Every checker's interval, in milliseconds (1000 by default). Shorter intervals at a
    /// fixed fleet raise the rate asked of each checker without more descriptors: the way to
    /// find each one's ceiling on this machine, whose open-file limit caps the fleet.
    interval_ms: u64,
}

fn args() -> Args {
    let mut a = Args {
        sizes: vec![10_000, 30_000, 65_000],
        kinds: vec![Kind::Tcp, Kind::Http, Kind::Https],
        seconds: 10,
        pinned: vec![true, false],
        perf: None,
        checkers: vec![Checker::Haproxy, Checker::Probed, Checker::ProbedSockets],
        interval_ms: 1000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--sizes" => {
                a.sizes = probed_tests::procs::parse_sizes(&value);
                assert!(
                    a.sizes.iter().all(|&n| (1..=65_536).contains(&n)),
                    "--sizes: 1 to 65536"
                );
            }
            "--kinds" => {
                a.kinds = one_of_each(
                    "--kinds",
                    &value,
                    &[("tcp", Kind::Tcp), ("http", Kind::Http), ("https", Kind::Https)],
                );
            }
            "--seconds" => a.seconds = value.parse().expect("--seconds: a number"),
            "--perf" => a.perf = Some(PathBuf::from(value)),
            "--interval" => {
                a.interval_ms = value.parse().expect("--interval: milliseconds");
                assert!((100..=1000).contains(&a.interval_ms), "--interval: 100 to 1000 ms");
            }
            "--checkers" => {
                let names = [
                    ("haproxy", Checker::Haproxy),
                    ("probed", Checker::Probed),
                    ("sockets", Checker::ProbedSockets),
                    ("keepalive", Checker::ProbedKeepAlive),
                ];
                a.checkers = one_of_each("--checkers", &value, &names);
            }
            "--only" => {
                a.pinned = match value.as_str() {
                    "pinned" => vec![true],
                    "unpinned" => vec![false],
                    other => panic!("--only: {other:?} is not pinned or unpinned"),
                }
            }
            other => {
                panic!("unknown flag {other}: --sizes, --kinds, --seconds, --only, --perf, --checkers, --interval")
            }
        }
    }
    a
}

/// The values a comma-separated `list` names, each one of `names`; a clear panic otherwise.
fn one_of_each<T: Copy>(flag: &str, list: &str, names: &[(&str, T)]) -> Vec<T> {
    list.split(',')
        .map(|item| match names.iter().find(|(name, _)| *name == item) {
            Some(&(_, value)) => value,
            None => {
                let allowed: Vec<&str> = names.iter().map(|(name, _)| *name).collect();
                panic!("{flag}: {item:?} is not one of {}", allowed.join(", "))
            }
        })
        .collect()
}

/// The machine's busy time in the "nice" state: work of another niced process would skew
/// the whole-machine figures, so the report says how much there was.
fn nice_cpu() -> Duration {
    machine_stat(2)
}

/// The backend namespace with nginx serving the fleet.
struct Fleet {
    topo: Topology,
    dir: PathBuf,
}

impl Fleet {
    fn new() -> Self {
        let topo = Topology::new();
        topo.anyip(BLOCK);
        // SYNs to the fleet's ports, counted where they arrive.
        topo.backend.nft(
            "table inet bench {\n chain input {\n  type filter hook input priority -10; policy accept;\n  \
             tcp dport 80 tcp flags & (syn | ack) == syn counter\n  \
             tcp dport 443 tcp flags & (syn | ack) == syn counter\n  \
             tcp dport {80, 443} counter comment \"all\"\n  \
             tcp dport {80, 443} tcp flags & psh == psh counter comment \"requests\"\n }\n \
             chain output {\n  type filter hook output priority -10; policy accept;\n  \
             tcp sport {80, 443} counter comment \"back\"\n }\n}\n",
        );
        // Many short connections a second: let both ends reuse what they can.
        for ns in [&topo.backend, &topo.prober] {
            ns.sysctl("net.ipv4.tcp_tw_reuse", "1");
            ns.sysctl("net.core.somaxconn", "65535");
            ns.sysctl("net.ipv4.tcp_max_syn_backlog", "65535");
        }
        let dir = std::env::temp_dir().join(probed_tests::unique_name("probed-bench-peers-"));
        std::fs::create_dir_all(&dir).unwrap();
        let cert = rcgen::generate_simple_self_signed(vec!["fleet.bench".to_string()]).expect("a certificate");
        std::fs::write(dir.join("cert.pem"), cert.cert.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), cert.key_pair.serialize_pem()).unwrap();
        Self { topo, dir }
    }

    /// nginx with `workers` processes, on `cpus` when given.
    fn nginx(&self, workers: usize, cpus: Option<usize>, keep_alive: bool) -> Proc {
        let d = self.dir.display();
        let keep = if keep_alive {
            "keepalive_timeout 60s;\n keepalive_requests 1000000;"
        } else {
            "keepalive_timeout 0;"
        };
        let conf = format!(
            "worker_processes {workers};\ndaemon off;\nmaster_process on;\npid {d}/nginx.pid;\n\
             error_log {d}/nginx-error.log warn;\nworker_rlimit_nofile 20000;\n\
             events {{ worker_connections 16000; multi_accept on; }}\n\
             http {{\n access_log off;\n {keep}\n client_body_temp_path {d}/body;\n\
             proxy_temp_path {d}/proxy;\n fastcgi_temp_path {d}/fastcgi;\n uwsgi_temp_path {d}/uwsgi;\n\
             scgi_temp_path {d}/scgi;\n ssl_certificate {d}/cert.pem;\n ssl_certificate_key {d}/key.pem;\n\
             ssl_session_cache shared:bench:10m;\n\
             server {{\n  listen {HTTP_PORT} reuseport backlog=65535;\n  listen {HTTPS_PORT} ssl reuseport backlog=65535;\n\
             location = /health {{ return 200 \"ok\\n\"; }}\n  location / {{ return 404; }}\n }}\n}}\n"
        );
        let path = self.dir.join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let p = Proc::spawn(
            &self.topo.backend,
            cpus,
            &[
                "nginx",
                "-e",
                "stderr",
                "-c",
                path.to_str().unwrap(),
                "-p",
                self.dir.to_str().unwrap(),
            ],
            &self.dir.join("nginx.log"),
            "nginx",
        );
        // Up when it answers on both ports.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = self
                .topo
                .backend
                .exec("sh", &["-c", "ss -ltn | grep -c -E ':(80|443) ' || true"]);
            if out.trim().parse::<u32>().unwrap_or(0) >= 2 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "nginx did not listen: {}",
                std::fs::read_to_string(self.dir.join("nginx.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        p
    }

    /// (SYNs, all packets) the checkers sent to the fleet so far, and the packets it answered with.
    fn counts(&self) -> ((u64, u64), u64) {
        let ((syns, all, _), back) = self.counts_with_requests();
        ((syns, all), back)
    }

    /// (SYNs, all packets, requests: packets with PSH) sent to the fleet, and the packets back.
    /// A kept connection sends no SYN for a check, so its checks are counted by requests.
    fn counts_with_requests(&self) -> ((u64, u64, u64), u64) {
        let listing = self.topo.backend.exec("nft", &["list", "table", "inet", "bench"]);
        let all = counted_packets(&listing, "\"all\"");
        let requests = counted_packets(&listing, "\"requests\"");
        (
            (counted_packets(&listing, "dport ") - all - requests, all, requests),
            counted_packets(&listing, "\"back\""),
        )
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn haproxy_config(dir: &Path, kind: Kind, n: usize, threads: usize, interval_ms: u64) -> PathBuf {
    let mut c = String::new();
    c += &format!(
        "global\n  nbthread {threads}\n  maxconn 9000\n  ulimit-n 20000\n  no strict-limits\n  log stderr format raw local0 err\n\
         defaults\n  timeout connect 1s\n  timeout check 1s\n  timeout client 1s\n  timeout server 1s\n"
    );
    let (mode, check) = match kind {
        Kind::Tcp => ("tcp", format!("check inter {interval_ms}ms fall 3 rise 3")),
        Kind::Http => ("http", format!("check inter {interval_ms}ms fall 3 rise 3")),
        Kind::Https => (
            "http",
            format!("check inter {interval_ms}ms fall 3 rise 3 check-ssl verify none"),
        ),
    };
    // HAProxy runs only with a listener: one on the namespace's loopback, never used.
    c += &format!("frontend unused\n  mode {mode}\n  bind 127.0.0.1:18080\n  default_backend fleet\n");
    c += &format!("backend fleet\n  mode {mode}\n  balance roundrobin\n");
    if kind != Kind::Tcp {
        c += "  option httpchk GET /health\n  http-check expect status 200\n";
    }
    c += &format!("  default-server {check}\n");
    let port = kind.port();
    for i in 0..n {
        let _ = writeln!(c, "  server s{i} {}:{port}", addr(i));
    }
    let path = dir.join(format!("haproxy-{}-{n}.cfg", kind.name()));
    std::fs::write(&path, c).unwrap();
    path
}

fn probed_config(files: &DaemonFiles, kind: Kind, n: usize, checker: Checker, interval_ms: u64) -> PathBuf {
    let sockets = checker == Checker::ProbedSockets;
    let mut c = files.header(PROBER_IF);
    if sockets {
        c = c.replacen("[daemon]\n", "[daemon]\nhttp_probes = \"sockets\"\n", 1);
    }
    let check = match kind {
        Kind::Tcp => "protocol = \"tcp\"\n".to_string(),
        Kind::Http => format!("protocol = \"http\"\nport = {HTTP_PORT}\nmethod = \"GET\"\npath = \"/health\"\n"),
        Kind::Https => format!("protocol = \"https\"\nport = {HTTPS_PORT}\nmethod = \"GET\"\npath = \"/health\"\n"),
    } + if checker == Checker::ProbedKeepAlive {
        "keep_alive = true\n"
    } else {
        ""
    };
    c += &format!(
        "[[profile]]\nname = \"fleet\"\ndialect = \"lb\"\nrouting = \"weighted\"\n\n[profile.health]\n{check}\
         interval = \"{interval_ms}ms\"\ntimeout = \"1s\"\nhealthy_threshold = 3\nunhealthy_threshold = 3\n"
    );
    let port = kind.port();
    for i in 0..n {
        let _ = writeln!(
            c,
            "\n[[profile.endpoint]]\nname = \"e{i}\"\naddress = \"{}\"\nport = {port}",
            addr(i)
        );
    }
    let path = files.dir.join(format!("probed-{}-{n}.toml", kind.name()));
    std::fs::write(&path, c).unwrap();
    path
}

struct Row {
    kind: Kind,
    n: usize,
    pinned: bool,
    checker: Checker,
    checks_per_s: f64,
    proc_us: f64,
    machine_us: f64,
    rss_kb: u64,
    niced_s: f64,
    /// Packets the checker sent to the fleet, and the fleet sent back, per check.
    packets: (f64, f64),
    /// Targets the checker declared down while it ran.
    down: usize,
    /// Seconds from the checker's start to its first check at the fleet.
    start_s: f64,
}

fn measure(fleet: &Fleet, checker: Checker, kind: Kind, n: usize, pinned: bool, a: &Args) -> Row {
    let seconds = a.seconds;
    let cpus = pinned.then_some(0);
    let files = DaemonFiles::new();
    let log = fleet.dir.join(format!("{}-{}-{n}.log", checker.name(), kind.name()));
    let mut proc = match checker {
        Checker::Haproxy => {
            let cfg = haproxy_config(&fleet.dir, kind, n, if pinned { 1 } else { 2 }, a.interval_ms);
            Proc::spawn(
                &fleet.topo.prober,
                cpus,
                &["haproxy", "-db", "-f", cfg.to_str().unwrap()],
                &log,
                "haproxy",
            )
        }
        Checker::Probed | Checker::ProbedSockets | Checker::ProbedKeepAlive => {
            let cfg = probed_config(&files, kind, n, checker, a.interval_ms);
            // PROBED_BIN: another build of probed to measure (before/after a change).
            let bin = std::env::var_os("PROBED_BIN").map_or_else(probed_bin, PathBuf::from);
            Proc::spawn(
                &fleet.topo.prober,
                cpus,
                &[bin.to_str().unwrap(), "run", "--config", cfg.to_str().unwrap()],
                &log,
                "probed",
            )
        }
    };
    // Started once its first checks reach the fleet (HAProxy parses 65k servers for over 30 s),
    // then WARMUP for the first round to spread over the interval.
    let spawned = Instant::now();
    let ((before, _), _) = fleet.counts();
    loop {
        assert!(
            proc.alive(),
            "{} exited while starting: {}",
            checker.name(),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        if fleet.counts().0 .0 > before {
            break;
        }
        assert!(
            spawned.elapsed() < START_LIMIT,
            "{} sent no check within {START_LIMIT:?}",
            checker.name()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let start_s = spawned.elapsed().as_secs_f64();
    std::thread::sleep(WARMUP);
    assert!(
        proc.alive(),
        "{} exited during warm-up: {}",
        checker.name(),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let (((s0, a0, r0), b0), p0, m0, n0) = (
        fleet.counts_with_requests(),
        proc_cpu(proc.pid()),
        machine_cpu(),
        nice_cpu(),
    );
    let t0 = Instant::now();
    let perf = a.perf.as_ref().filter(|_| checker != Checker::Haproxy).map(|dir| {
        std::fs::create_dir_all(dir).unwrap();
        let out = dir.join(format!(
            "{}-{}-{n}-{}.data",
            match checker {
                Checker::ProbedSockets => "probed-sockets",
                Checker::ProbedKeepAlive => "probed-keepalive",
                _ => "probed",
            },
            kind.name(),
            if pinned { "pinned" } else { "unpinned" }
        ));
        Command::new("perf")
            .args(["record", "-g", "-q", "-o"])
            .arg(&out)
            .args(["-p", &proc.pid().to_string(), "--", "sleep", &seconds.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn perf record")
    });
    std::thread::sleep(Duration::from_secs(seconds));
    if let Some(mut p) = perf {
        let _ = p.wait();
    }
    let (((s1, a1, r1), b1), p1, m1, n1) = (
        fleet.counts_with_requests(),
        proc_cpu(proc.pid()),
        machine_cpu(),
        nice_cpu(),
    );
    let wall = t0.elapsed().as_secs_f64();
    let rss_kb = probed_tests::procs::status_kb(proc.pid(), "VmHWM:");
    assert!(proc.alive(), "{} exited while measured", checker.name());
    drop(proc);
    // Targets the checker declared down: its checks failed, so its cost per check is not that
    // of a passing check. HAProxy logs each; probed writes an event for each.
    let (said, mark) = match checker {
        Checker::Haproxy => (std::fs::read_to_string(&log).unwrap_or_default(), "is DOWN"),
        Checker::Probed | Checker::ProbedSockets | Checker::ProbedKeepAlive => (
            std::fs::read_to_string(files.events()).unwrap_or_default(),
            "\"to\":\"Degraded\"",
        ),
    };
    let down = said.lines().filter(|l| l.contains(mark)).count();
    if let Some(first) = said.lines().find(|l| l.contains(mark)) {
        eprintln!("  {}: {down} targets declared down, e.g. {first}", checker.name());
    }
    // A kept connection sends a request, not a SYN, per check.
    let checks = if checker == Checker::ProbedKeepAlive {
        (r1 - r0).max(1) as f64
    } else {
        (s1 - s0).max(1) as f64
    };
    Row {
        kind,
        n,
        pinned,
        checker,
        checks_per_s: checks / wall,
        proc_us: (p1 - p0).as_secs_f64() * 1e6 / checks,
        machine_us: (m1 - m0).as_secs_f64() * 1e6 / checks,
        rss_kb,
        niced_s: (n1 - n0).as_secs_f64(),
        packets: ((a1 - a0) as f64 / checks, (b1 - b0) as f64 / checks),
        down,
        start_s,
    }
}

fn main() {
    let a = args();
    let fleet = Fleet::new();
    let keep_alive = a.checkers.contains(&Checker::ProbedKeepAlive);
    let mut rows = Vec::new();
    for &pinned in &a.pinned {
        // Pinned: the checker on CPU 0 and the fleet on CPU 1; unpinned: all on both.
        let nginx = if pinned {
            fleet.nginx(1, Some(1), keep_alive)
        } else {
            fleet.nginx(2, None, keep_alive)
        };
        for &kind in &a.kinds {
            for &n in &a.sizes {
                for &checker in Checker::all_for(kind).iter().filter(|c| a.checkers.contains(c)) {
                    let row = measure(&fleet, checker, kind, n, pinned, &a);
                    eprintln!(
                        "{:<6} {:>6} {:<8} {:<16} {:>9.0} checks/s  {:>6.1} us/check (process)  {:>6.1} us/check (machine)  {:>8} KiB peak",
                        kind.name(),
                        n,
                        if pinned { "1 core" } else { "2 cores" },
                        checker.name(),
                        row.checks_per_s,
                        row.proc_us,
                        row.machine_us,
                        row.rss_kb
                    );
                    rows.push(row);
                }
            }
        }
        drop(nginx);
    }
    report(&rows);
}

fn report(rows: &[Row]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(
        format_args!(
            "\n| check | targets | cores | checker | checks/s at the backend | CPU/check, process | CPU/check, machine | peak RSS | RSS/target | packets/check out, back | declared down | first check after |\n\
             |---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        ),
    );
    for r in rows {
        let _ = out.write_fmt(format_args!(
            "| {} | {} | {} | {} | {:.0} | {:.1} µs | {:.1} µs | {:.0} MiB | {:.2} KiB | {:.1}, {:.1} | {} | {:.1} s |\n",
            r.kind.name(),
            r.n,
            if r.pinned { "1 (pinned)" } else { "2" },
            r.checker.name(),
            r.checks_per_s,
            r.proc_us,
            r.machine_us,
            r.rss_kb as f64 / 1024.0,
            r.rss_kb as f64 / r.n as f64,
            r.packets.0,
            r.packets.1,
            r.down,
            r.start_s
        ));
    }
    let _ = out.write_fmt(format_args!(
        "\n| check | targets | cores | checker | checks/s against HAProxy | process CPU/check | machine CPU/check |\n|---|---:|---|---|---:|---:|---:|\n"
    ));
    // Each group (kind, size, placement) starts with HAProxy's row; the others compare to it.
    let mut haproxy: Option<&Row> = None;
    for r in rows {
        if r.checker == Checker::Haproxy {
            haproxy = Some(r);
            continue;
        }
        let cores = if r.pinned { "1 (pinned)" } else { "2" };
        let group = haproxy.filter(|h| (h.kind, h.n, h.pinned) == (r.kind, r.n, r.pinned));
        let Some(h) = group.filter(|h| h.checks_per_s >= 1.0) else {
            let why = if group.is_some() {
                "HAProxy sent no checks"
            } else {
                "HAProxy not run"
            };
            let _ = out.write_fmt(format_args!(
                "| {} | {} | {cores} | {} | {why} | | |\n",
                r.kind.name(),
                r.n,
                r.checker.name()
            ));
            continue;
        };
        let _ = out.write_fmt(format_args!(
            "| {} | {} | {cores} | {} | {:.2}x | {:.2}x | {:.2}x |\n",
            r.kind.name(),
            r.n,
            r.checker.name(),
            r.checks_per_s / h.checks_per_s,
            r.proc_us / h.proc_us,
            r.machine_us / h.machine_us
        ));
    }
    let niced: f64 = rows.iter().map(|r| r.niced_s).sum();
    if niced > 1.0 {
        let _ = out.write_fmt(format_args!(
            "\nwarning: {niced:.0} s of niced work ran meanwhile; the machine figures include it\n"
        ));
    }
}
