//! What the internet can do to the DNS server, with real clients and real floods:
//! - a reflection attack: queries forged with a victim's source address, at ten times the rate
//!   limit; the victim gets at most the limit back in answers (plus the truncated slips), while
//!   a real resolver elsewhere asking the same name is answered every time;
//! - 10,000 TCP connections held open by one host, a client trickling a query a byte at a
//!   time, and one asking a query every second for ever: the server keeps its descriptors
//!   within `[dns.tcp] max_clients`, closes the trickles on time, and UDP and TCP answers and
//!   the HTTPS checks (which need descriptors too) go on working, a backend that dies during
//!   the flood included.
use std::{
    net::{Ipv4Addr, UdpSocket},
    path::PathBuf,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use probed::status::EndpointStatus as S;
use probed_tests::{
    daemon::{metric, DaemonFiles, RunningDaemon},
    dig::dig,
    forge::send_raw_v4,
    http_server::{Route, SelfSigned},
    lb::add_backends,
    procs::Proc,
    topo::*,
    Topology,
};

const DNS_V4: &str = PROBER_V4;
const PORT: u16 = 5353;
const ZONE: &str = "tm.example.";

fn dns_section(extra: &str) -> String {
    format!(
        "[dns]\nlisten = [\"{DNS_V4}:{PORT}\"]\nzone = \"{ZONE}\"\nttl = \"30s\"\n\
         [[dns.nameserver]]\nname = \"ns1.{ZONE}\"\naddresses = [\"{DNS_V4}\"]\n{extra}\n"
    )
}

/// A query for `name` A, without EDNS, with id `id`.
fn query(id: u16, name: &str) -> Vec<u8> {
    let mut q = Vec::new();
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        q.push(u8::try_from(label.len()).unwrap());
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// An IPv4 UDP packet, header included, from `src` to `dst` (checksums left to the kernel
/// and to UDP's "none").
fn udp_packet(src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16), payload: &[u8]) -> Vec<u8> {
    let udp_len = u16::try_from(8 + payload.len()).unwrap();
    let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
    p.extend_from_slice(&src.0.octets());
    p.extend_from_slice(&dst.0.octets());
    p.extend_from_slice(&src.1.to_be_bytes());
    p.extend_from_slice(&dst.1.to_be_bytes());
    p.extend_from_slice(&udp_len.to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    p
}

const VICTIM: &str = "198.18.0.50";
const VICTIM_PORT: u16 = 40_000;
/// The limit, and the flood at ten times it, for `FLOOD_SECONDS`.
const RATE: u32 = 20;
const FLOOD_SECONDS: u32 = 3;

#[test]
fn a_spoofed_flood_gets_at_most_the_rate_back_and_a_real_resolver_is_answered() {
    let topo = Topology::new();
    let client = topo.client();
    add_backends(&topo, &[VICTIM]);
    let _web = topo.backend.tcp_listen(&format!("{BACKEND_V4}:80"));
    let files = DaemonFiles::new();
    let text = files.header(PROBER_IF)
        + &dns_section(&format!("[dns.rate_limit]\nresponses_per_second = {RATE}\nslip = 2\n"))
        + "[[profile]]\nname = \"web\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\nport = 80\n\
           interval = \"200ms\"\ntimeout = \"200ms\"\n[[profile.endpoint]]\nname = \"a\"\n"
        + &format!("address = \"{BACKEND_V4}\"\n");
    let daemon = RunningDaemon::start(&topo.prober, files.write_config(&text), None).expect("start the daemon");
    daemon.wait_status("web", "a", S::Online, Duration::from_secs(5));
    let victim = topo.backend.udp_bind(&format!("{VICTIM}:{VICTIM_PORT}"));
    victim.set_read_timeout(Some(Duration::from_millis(200))).unwrap();

    let flood = 10 * RATE * FLOOD_SECONDS;
    let forged = udp_packet(
        (VICTIM.parse().unwrap(), VICTIM_PORT),
        (DNS_V4.parse().unwrap(), PORT),
        &query(0x5151, "web.tm.example."),
    );
    let done = AtomicBool::new(false);
    let (resolver_answered, resolver_asked, received) = std::thread::scope(|s| {
        // The real resolver: another prefix, the same name, 10 queries a second (half the
        // limit), each answered within a second or counted as lost.
        let resolver = s.spawn(|| {
            client.enter(|| {
                let sock = UdpSocket::bind(format!("{CLIENT_V4}:0")).unwrap();
                sock.connect(format!("{DNS_V4}:{PORT}")).unwrap();
                sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
                let (mut asked, mut answered) = (0, 0);
                let mut buf = [0u8; 1500];
                for i in 0..(10 * FLOOD_SECONDS) {
                    let id = u16::try_from(i).unwrap();
                    sock.send(&query(id, "web.tm.example.")).unwrap();
                    asked += 1;
                    if let Ok(n) = sock.recv(&mut buf) {
                        let full = n > 12 && buf[..2] == id.to_be_bytes() && buf[2] & 0x02 == 0 && buf[7] == 1;
                        answered += u32::from(full);
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                (answered, asked)
            })
        });
        // The victim counts what reaches it: full answers, truncated ones, and their bytes.
        let counter = s.spawn(|| {
            let mut buf = [0u8; 1500];
            let (mut full, mut truncated, mut bytes) = (0u32, 0u32, 0usize);
            let quiet_after = Duration::from_secs(1);
            let mut last = Instant::now();
            while !done.load(Ordering::Relaxed) || last.elapsed() < quiet_after {
                if let Ok(n) = victim.recv(&mut buf) {
                    last = Instant::now();
                    bytes += n;
                    if buf[2] & 0x02 != 0 {
                        assert_eq!(&buf[6..12], &[0; 6], "a slip carries no records");
                        truncated += 1;
                    } else {
                        full += 1;
                    }
                }
            }
            (full, truncated, bytes)
        });
        // The attacker: the forged queries, evenly paced at ten times the limit.
        topo.backend.enter(|| {
            let start = Instant::now();
            let gap = Duration::from_secs(1) / (10 * RATE);
            for i in 0..flood {
                send_raw_v4(DNS_V4.parse().unwrap(), &forged);
                if let Some(wait) = (start + gap * (i + 1)).checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
        });
        done.store(true, Ordering::Relaxed);
        let (answered, asked) = resolver.join().unwrap();
        (answered, asked, counter.join().unwrap())
    });
    let (full, truncated, bytes) = received;
    let sent_bytes = forged.len() * flood as usize - 28 * flood as usize;
    eprintln!(
        "flood {flood} queries ({sent_bytes} bytes of DNS) at {} / s: the victim got {full} answers and \
         {truncated} slips ({bytes} bytes, {:.2}x); the resolver {resolver_answered} / {resolver_asked}",
        10 * RATE,
        bytes as f64 / sent_bytes as f64
    );
    // At most the limit: a second's burst, then the rate.
    let most = RATE * (FLOOD_SECONDS + 1) + 2;
    assert!(full <= most, "{full} full answers, at most {most}");
    assert!(
        full >= RATE * FLOOD_SECONDS / 2,
        "the rate is given, not withheld: {full}"
    );
    // slip = 2: every other answer held back goes out truncated.
    let held = flood - full;
    assert!(
        truncated.abs_diff(held / 2) <= 2,
        "{truncated} slips of {held} held back"
    );
    assert!(
        bytes < sent_bytes,
        "no amplification: {bytes} bytes back for {sent_bytes}"
    );
    assert_eq!(resolver_answered, resolver_asked, "the real resolver lost answers");
    let metrics = daemon.get("/metrics");
    let text = metrics.as_str().unwrap();
    let dropped = metric(text, "probed_dns_rate_limited_total{action=\"drop\"}");
    let slipped = metric(text, "probed_dns_rate_limited_total{action=\"slip\"}");
    assert_eq!(dropped + slipped, f64::from(held), "{text}");
    daemon.stop();
}

/// Opens `count` connections to the server from this namespace and holds them; a connection
/// the server closes is opened again, at most `count` times more. Says `open` on stdout once
/// all are asked for, then `opened N closed N` at the end.
const HOLDER: &str = r#"
import resource, select, socket, sys, time
count, hold = int(sys.argv[3]), float(sys.argv[4])
resource.setrlimit(resource.RLIMIT_NOFILE, (count + 1000, count + 1000))
addr = (sys.argv[1], int(sys.argv[2]))
def connect():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    s.connect_ex(addr)
    return s
socks = [connect() for _ in range(count)]
print("open", flush=True)
opened, closed, end = count, 0, time.time() + hold
while time.time() < end:
    p = select.poll()
    for s in socks:
        p.register(s, select.POLLIN | select.POLLERR | select.POLLHUP)
    gone = {fd for fd, ev in p.poll(200)}
    keep = []
    for s in socks:
        if s.fileno() in gone:
            s.close()
            closed += 1
            if opened < 2 * count:
                keep.append(connect())
                opened += 1
        else:
            keep.append(s)
    socks = keep
print("opened", opened, "closed", closed, flush=True)
"#;

/// Trickles: `bytes` sends one byte of a query every 300 ms (a whole query would take 10 s);
/// `queries` sends a whole query every second and reads its answer. Each prints the seconds
/// until the server closed the connection, and the answers it got.
const TRICKLE: &str = r#"
import socket, struct, sys, time
mode, addr = sys.argv[3], (sys.argv[1], int(sys.argv[2]))
q = bytes.fromhex("abcd01000001000000000000") + b"\x03web\x02tm\x07example\x00\x00\x01\x00\x01"
framed = struct.pack("!H", len(q)) + q
s = socket.create_connection(addr, timeout=15)
start, answers = time.time(), 0
try:
    if mode == "bytes":
        for b in framed:
            s.send(bytes([b]))
            time.sleep(0.3)
    else:
        for _ in range(30):
            s.send(framed)
            head = s.recv(2)
            if len(head) < 2:
                break
            n = struct.unpack("!H", head)[0]
            got = b""
            while len(got) < n:
                more = s.recv(n - len(got))
                if not more:
                    break
                got += more
            answers += 1
            time.sleep(1)
    s.settimeout(15)
    while s.recv(100):
        pass
except (ConnectionResetError, BrokenPipeError, socket.timeout):
    pass
print("closed after %.2f s, %d answers" % (time.time() - start, answers), flush=True)
"#;

fn script(dir: &std::path::Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}

/// "closed after S s, N answers" from a trickle's output.
fn closed_after(output: &str) -> (f64, u32) {
    let line = output
        .lines()
        .find(|l| l.starts_with("closed after"))
        .unwrap_or_else(|| panic!("{output}"));
    let f: Vec<&str> = line.split_whitespace().collect();
    (f[2].parse().unwrap(), f[4].parse().unwrap())
}

#[test]
fn ten_thousand_idle_connections_and_trickles_leave_answers_and_checks_working() {
    const MAX_CLIENTS: usize = 150;
    // The server's descriptors are counted among the whole process's.
    if !probed_tests::serial::own_process() {
        return;
    }
    let topo = Topology::new();
    let client = topo.client();
    let cert = SelfSigned::new(&["backend.test"]);
    let servers: Vec<_> = [8443, 8444]
        .iter()
        .map(|port| {
            let s = topo
                .backend
                .https_server(&format!("{BACKEND_V4}:{port}"), &cert, Duration::ZERO);
            s.route("/health", Route::status(200));
            s
        })
        .collect();
    let files = DaemonFiles::new();
    let mut text = files.header(PROBER_IF)
        + &dns_section(&format!(
            "[dns.rate_limit]\nresponses_per_second = 0\n[dns.tcp]\nmax_clients = {MAX_CLIENTS}\n\
             max_clients_per_prefix = 100\nidle_timeout = \"2s\"\nmax_lifetime = \"6s\"\n"
        ))
        + "[[profile]]\nname = \"web\"\ndialect = \"lb\"\nrouting = \"priority\"\n[profile.health]\n\
           protocol = \"https\"\npath = \"/health\"\ninterval = \"200ms\"\ntimeout = \"500ms\"\n\
           healthy_threshold = 2\nunhealthy_threshold = 2\n";
    for (i, port) in [8443, 8444].iter().enumerate() {
        text += &format!(
            "[[profile.endpoint]]\nname = \"e{i}\"\naddress = \"{BACKEND_V4}\"\nport = {port}\npriority = {}\n",
            i + 1
        );
    }
    let daemon = RunningDaemon::start(&topo.prober, files.write_config(&text), None).expect("start the daemon");
    for e in ["e0", "e1"] {
        daemon.wait_status("web", e, S::Online, Duration::from_secs(5));
    }
    let before = open_descriptors();
    let holder_py = script(&files.dir, "holder.py", HOLDER);
    let trickle_py = script(&files.dir, "trickle.py", TRICKLE);
    let port = PORT.to_string();
    let holder_log = files.dir.join("holder.log");
    let mut holder = Proc::spawn(
        &topo.backend,
        None,
        &["python3", holder_py.to_str().unwrap(), DNS_V4, &port, "10000", "12"],
        &holder_log,
        "the connection holder",
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !holder.output().contains("open") {
        assert!(
            Instant::now() < deadline,
            "the holder did not open its connections: {}",
            holder.output()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The trickles, from the client's prefix, while the flood goes on.
    let spawn_trickle = |mode: &str, log: &str| {
        Proc::spawn(
            &client,
            None,
            &["python3", trickle_py.to_str().unwrap(), DNS_V4, &port, mode],
            &files.dir.join(log),
            "a trickle",
        )
    };
    let mut bytes = spawn_trickle("bytes", "bytes.log");
    let mut queries = spawn_trickle("queries", "queries.log");
    // A backend dies during the flood: its check still needs a socket, and gets one.
    let mut servers = servers.into_iter();
    let _e0 = servers.next();
    drop(servers.next());
    let died = Instant::now();
    let mut most = 0;
    let mut answered = 0;
    let mut e1_down = None;
    while died.elapsed() < Duration::from_secs(8) {
        most = most.max(open_descriptors().saturating_sub(before));
        for options in [&[][..], &["+tcp"][..]] {
            let d = dig(&client, DNS_V4, PORT, "web.tm.example.", "A", options);
            assert_eq!(d.status, "NOERROR", "{options:?}: {}", d.raw);
            answered += 1;
        }
        if e1_down.is_none() && daemon.endpoint("web", "e1").status == S::Degraded {
            e1_down = Some(died.elapsed());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let metrics = daemon.get("/metrics");
    let text = metrics.as_str().unwrap();
    let refused = metric(text, "probed_dns_tcp_closed_total{reason=\"prefix\"}");
    // At its prefix's cap a new connection takes the place of that prefix's longest idle one
    // (review M2): the flood's own connections make way for it, and none of anyone else's.
    let evicted = metric(text, "probed_dns_tcp_closed_total{reason=\"evicted\"}");
    let idle = metric(text, "probed_dns_tcp_closed_total{reason=\"idle\"}");
    let local_errors: f64 = text
        .lines()
        .filter(|l| l.starts_with("probed_probe_results_total") && l.contains("local-error"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    holder
        .wait(Duration::from_secs(15), || Ok(()))
        .expect("the holder ends");
    bytes
        .wait(Duration::from_secs(15), || Ok(()))
        .expect("the byte trickle ends");
    queries
        .wait(Duration::from_secs(15), || Ok(()))
        .expect("the query trickle ends");
    let (bytes_closed, _) = closed_after(&bytes.output());
    let (queries_closed, queries_answered) = closed_after(&queries.output());
    eprintln!(
        "holder: {}; descriptors at most {most} over the {before} before; {answered} digs answered; \
         refused by prefix {refused}, evicted {evicted}, idle-closed {idle}; byte trickle closed after {bytes_closed} s, \
         query trickle after {queries_closed} s with {queries_answered} answers; e1 down after {e1_down:?}",
        holder.output().trim()
    );
    assert!(
        refused + evicted > 1000.0,
        "the flood was held to its prefix's share: {refused} refused, {evicted} evicted"
    );
    assert!(
        most <= MAX_CLIENTS + 20,
        "the DNS server's descriptors stay within its budget: {most} more than before"
    );
    assert!(
        (1.5..=3.5).contains(&bytes_closed),
        "a byte trickle is closed at the idle timeout"
    );
    assert!(
        (5.5..=8.5).contains(&queries_closed),
        "a query trickle is closed at the lifetime"
    );
    assert!(queries_answered >= 4, "its queries were answered until then");
    let e1_down = e1_down.expect("the dead backend went down during the flood");
    assert!(e1_down < Duration::from_secs(3), "{e1_down:?}");
    assert_eq!(daemon.endpoint("web", "e0").status, S::Online);
    assert_eq!(local_errors, 0.0, "no check lacked a descriptor");
    daemon.stop();
}

/// A daemon answering DNS on the dual-stack `[::]:PORT` with `extra` in its `[dns]`, one TCP
/// profile "web" at `BACKEND_V4:80` (its listener), Online.
fn dual_stack_daemon(extra: &str) -> (Topology, std::net::TcpListener, DaemonFiles, RunningDaemon) {
    let topo = Topology::new();
    let web = topo.backend.tcp_listen(&format!("{BACKEND_V4}:80"));
    let files = DaemonFiles::new();
    let text = files.header(PROBER_IF)
        + &dns_section(extra).replace(
            &format!("listen = [\"{DNS_V4}:{PORT}\"]"),
            &format!("listen = [\"[::]:{PORT}\"]"),
        )
        + "[[profile]]\nname = \"web\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\nport = 80\n\
           interval = \"200ms\"\ntimeout = \"200ms\"\n[[profile.endpoint]]\nname = \"a\"\n"
        + &format!("address = \"{BACKEND_V4}\"\n");
    assert!(text.contains(&format!("\"[::]:{PORT}\"")), "{text}");
    let daemon = RunningDaemon::start(&topo.prober, files.write_config(&text), None).expect("start the daemon");
    daemon.wait_status("web", "a", S::Online, Duration::from_secs(5));
    (topo, web, files, daemon)
}

/// Review H1: on a dual-stack listener (`[::]`), IPv4 clients arrive as `::ffff:a.b.c.d`. Each
/// IPv4 /24 must keep its own rate and its own share of TCP connections, as on an IPv4
/// listener: two loopback sources in different /24s, each asking one name at 1.5 times the
/// rate, each get the rate's worth of full answers; one /24 holding its TCP share does not
/// shut the other out.
#[test]
fn ipv4_clients_of_a_dual_stack_listener_keep_their_own_rate_and_tcp_share() {
    use std::{
        io::{Read, Write},
        net::{SocketAddr, TcpStream},
    };
    let (topo, _web, _files, daemon) = dual_stack_daemon(&format!(
        "[dns.rate_limit]\nresponses_per_second = {RATE}\nslip = 2\n[dns.tcp]\nmax_clients_per_prefix = 4\n"
    ));
    let server: SocketAddr = format!("127.0.0.1:{PORT}").parse().unwrap();

    // UDP: 30 queries from each source at once, then the full answers each one gets back.
    let full_answers = |source: &'static str| {
        topo.prober.enter(move || {
            let sock = UdpSocket::bind(format!("{source}:0")).unwrap();
            sock.connect(server).unwrap();
            for id in 0..30u16 {
                sock.send(&query(id, "web.tm.example.")).unwrap();
            }
            sock.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
            let mut full = 0;
            let mut buf = [0u8; 1500];
            while let Ok(n) = sock.recv(&mut buf) {
                full += u32::from(n > 12 && buf[2] & 0x02 == 0 && buf[7] == 1);
            }
            full
        })
    };
    let first = full_answers("127.0.0.1");
    let second = full_answers("127.1.0.1");
    assert!(
        (RATE..=RATE + 2).contains(&first) && (RATE..=RATE + 2).contains(&second),
        "full answers of 30 at {RATE}/s: {first} and {second} (with one bucket for all IPv4 clients the second got 10, slips only)"
    );

    // TCP: the first source holds its 4 connections; the second is still answered.
    let connect = |source: &'static str| {
        topo.prober.enter(move || {
            let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            s.bind(&format!("{source}:0").parse::<SocketAddr>().unwrap().into())
                .unwrap();
            s.connect_timeout(&server.into(), Duration::from_secs(1)).unwrap();
            let s: TcpStream = s.into();
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            s
        })
    };
    let held: Vec<TcpStream> = (0..4).map(|_| connect("127.0.0.1")).collect();
    let mut other = connect("127.1.0.1");
    let q = query(7, "web.tm.example.");
    let mut framed = u16::try_from(q.len()).unwrap().to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    other.write_all(&framed).unwrap();
    let mut len = [0u8; 2];
    other
        .read_exact(&mut len)
        .expect("the other /24 is answered over TCP while the first holds its share");
    let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
    other.read_exact(&mut answer).unwrap();
    assert_eq!((answer[7], answer[2] & 0x02), (1, 0), "a full answer over TCP");
    // A fifth from the first source takes the place of its own /24's longest idle connection
    // (review M2): the other /24's is left alone.
    let mut fifth = connect("127.0.0.1");
    fifth.write_all(&framed).unwrap();
    fifth.read_exact(&mut len).expect("the fifth is answered");
    let closed = held
        .iter()
        .filter(|s| {
            let mut s: &TcpStream = s;
            s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
            match s.read(&mut [0u8; 1]) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
            }
        })
        .count();
    assert_eq!(closed, 1, "one of the first /24's four made room");
    other.write_all(&framed).unwrap();
    other.read_exact(&mut len).expect("the other /24's connection stays");
    drop(held);
    daemon.stop();
}

/// Review M2: clients that pipeline queries and never read their answers hold every TCP place
/// (`max_clients = 4`); a connection whose answer has waited more than a second for its reader
/// gives way, so a client of another prefix is answered while the flood goes on (it was reset
/// until the stuck writes timed out at `idle_timeout`).
#[test]
fn clients_that_never_read_their_answers_give_way_to_one_that_does() {
    use std::{
        io::{Read, Write},
        net::{SocketAddr, TcpStream},
    };
    let (topo, _web, _files, daemon) = dual_stack_daemon(
        "[dns.rate_limit]\nresponses_per_second = 0\n[dns.tcp]\nmax_clients = 4\nmax_clients_per_prefix = 4\n\
         idle_timeout = \"10s\"\n",
    );
    let server: SocketAddr = format!("127.0.0.1:{PORT}").parse().unwrap();
    let framed = |id: u16| {
        let q = query(id, "web.tm.example.");
        let mut f = u16::try_from(q.len()).unwrap().to_be_bytes().to_vec();
        f.extend_from_slice(&q);
        f
    };
    let connect = |source: &'static str, rcvbuf: Option<usize>| {
        topo.prober.enter(move || {
            let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            if let Some(n) = rcvbuf {
                s.set_recv_buffer_size(n).unwrap();
            }
            s.bind(&format!("{source}:0").parse::<SocketAddr>().unwrap().into())
                .unwrap();
            s.connect_timeout(&server.into(), Duration::from_secs(1)).unwrap();
            let s: TcpStream = s.into();
            s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            s.set_write_timeout(Some(Duration::from_secs(4))).unwrap();
            s
        })
    };
    // Four that write 20,000 queries each and read nothing (a tiny receive window, so the
    // server's answers back up at once).
    let block: Vec<u8> = (0..20_000u32).flat_map(|i| framed(i as u16)).collect();
    let flooders: Vec<TcpStream> = (0..4).map(|_| connect("127.0.0.1", Some(1024))).collect();
    let writers: Vec<std::thread::JoinHandle<()>> = flooders
        .iter()
        .map(|s| {
            let (mut s, block) = (s.try_clone().unwrap(), block.clone());
            std::thread::spawn(move || {
                let _ = s.write_all(&block);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let started = Instant::now();
    let mut other = connect("127.1.0.1", None);
    other.write_all(&framed(7)).unwrap();
    let mut len = [0u8; 2];
    other
        .read_exact(&mut len)
        .expect("a client that reads is answered while four that do not hold every place");
    let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
    other.read_exact(&mut answer).unwrap();
    assert_eq!(answer[7], 1, "a full answer");
    eprintln!("answered in {:?} beside four stuck readers", started.elapsed());
    let metrics = daemon.get("/metrics");
    assert!(
        metric(
            metrics.as_str().unwrap(),
            "probed_dns_tcp_closed_total{reason=\"evicted\"}"
        ) >= 1.0,
        "a stuck reader was evicted"
    );
    drop(flooders);
    for w in writers {
        let _ = w.join();
    }
    daemon.stop();
}
