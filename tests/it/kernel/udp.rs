//! UDP probes end to end, against the backend namespace's own UDP stack: plain mode through
//! the kernel engine (XDP and raw-socket paths), the ICMP rate-limit trap and its cure
//! (request/response mode), and forged ICMP errors that must change nothing.
use std::{
    net::UdpSocket,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::Arc,
    time::Duration,
};

use probe_common::{
    csum::{add_bytes, finish, pseudo_v6},
    frame::ipv4,
    l4::{FlowKey, Inflight, FAMILY_V4},
    packet::{Ipv4Hdr, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_UDP},
};
use probed::{
    engine::{L4Proto, L4Request, L4Result, TxChoice, TxPath},
    probe::udp::{UdpOutcome, UdpProber, UdpRequest},
};
use probed_tests::{
    l4::{collect, run_batch, start_engine},
    probed_bin,
    servers::Responder,
    topo::*,
    Netns, TestPins, Topology,
};

const LISTEN: u16 = 5300;
const CLOSED: u16 = 5301;
const REJECTED: u16 = 5302;
const DROPPED: u16 = 5303;
const WRONG: u16 = 5304;
const PAYLOAD: &[u8] = b"probed health check";

fn udp_req(token: u64, target: &str, timeout_ms: u64) -> L4Request {
    L4Request {
        token,
        target: target.parse().unwrap(),
        proto: L4Proto::Udp {
            payload: Arc::from(PAYLOAD),
        },
        timeout: Duration::from_millis(timeout_ms),
        tunnel: None,
    }
}

fn outcome(r: &L4Result) -> UdpOutcome {
    UdpOutcome::try_from(r.outcome).unwrap_or_else(|o| panic!("{}: TCP outcome {o:?} for a UDP probe", r.target))
}

/// Waits for one datagram on `sock` and returns its payload.
fn received(sock: &UdpSocket) -> Vec<u8> {
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 512];
    let (n, _) = sock
        .recv_from(&mut buf)
        .unwrap_or_else(|e| panic!("the listener {:?} got no probe: {e}", sock.local_addr()));
    buf[..n].to_vec()
}

fn plain_mode_outcomes(tx: TxChoice, want_path: TxPath) {
    let topo = Topology::new();
    topo.backend
        .nft_reject_icmp("udp", REJECTED, "admin-prohibited", "admin-prohibited");
    let l4 = topo.backend.udp_bind(&format!("{BACKEND_V4}:{LISTEN}"));
    let l6 = topo.backend.udp_bind(&format!("[{BACKEND_V6}]:{LISTEN}"));
    let pins = TestPins::new();
    let mut reqs = Vec::new();
    for (i, port) in [LISTEN, CLOSED, REJECTED].into_iter().enumerate() {
        reqs.push(udp_req(i as u64, &format!("{BACKEND_V4}:{port}"), 400));
        reqs.push(udp_req(100 + i as u64, &format!("[{BACKEND_V6}]:{port}"), 400));
    }
    let (results, snap) = topo.prober.enter(|| run_batch(&pins, tx, want_path, &reqs));
    assert_eq!(
        snap.rx.matched_unreach, 4,
        "closed and rejected, both families: {:?}",
        snap.rx
    );
    assert_eq!(results.len(), reqs.len(), "one result per probe: {results:?}");
    for r in &results {
        let v6 = r.target.is_ipv6();
        let (want, words) = match r.target.port() {
            LISTEN => (UdpOutcome::Silent, "silent"),
            CLOSED => (UdpOutcome::PortUnreachable, "port unreachable"),
            // admin-prohibited: ICMP 3/13, ICMPv6 1/1.
            _ if v6 => (UdpOutcome::Unreachable { icmp_type: 1, code: 1 }, "unreachable 1/1"),
            _ => (UdpOutcome::Unreachable { icmp_type: 3, code: 13 }, "unreachable 3/13"),
        };
        let got = outcome(r);
        assert_eq!(got, want, "{}", r.target);
        assert_eq!(got.to_string(), words);
        assert_eq!(got.healthy(), r.target.port() == LISTEN, "{}", r.target);
        if got == UdpOutcome::Silent {
            assert!(
                r.elapsed >= Duration::from_millis(400),
                "silence waited the timeout: {:?}",
                r.elapsed
            );
        } else {
            assert!(
                r.elapsed < Duration::from_millis(400),
                "ICMP error time {:?} is an RTT",
                r.elapsed
            );
        }
    }
    // The listeners really got the probes, payload intact: a datagram with a bad checksum
    // would be dropped by the backend silently, and "silent" would then mean nothing.
    assert_eq!(received(&l4), PAYLOAD, "IPv4 listener");
    assert_eq!(received(&l6), PAYLOAD, "IPv6 listener");
}

#[test]
fn xdp_path_silent_port_unreachable_and_rejected_v4_v6() {
    plain_mode_outcomes(TxChoice::Auto, TxPath::Xdp);
}

#[test]
fn raw_socket_path_gives_the_same_udp_outcomes() {
    plain_mode_outcomes(TxChoice::Force(TxPath::Raw), TxPath::Raw);
}

fn rr_req(target: String, timeout_ms: u64) -> UdpRequest {
    UdpRequest {
        target: target.parse().unwrap(),
        send: Arc::from(&b"PING"[..]),
        expect: Arc::from(&b"PONG"[..]),
        timeout: Duration::from_millis(timeout_ms),
        source: None,
        tunnel: None,
    }
}

/// Runs request/response probes from inside `ns`.
fn rr_probe(ns: &Netns, reqs: Vec<UdpRequest>) -> Vec<probed::probe::udp::UdpResult> {
    ns.enter(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(UdpProber::new(64).probe_all(reqs))
    })
}

#[test]
fn request_response_reply_mismatch_closed_and_rejected_v4_v6() {
    let topo = Topology::new();
    topo.backend
        .nft_reject_icmp("udp", REJECTED, "admin-prohibited", "admin-prohibited");
    let _servers = [
        Responder::start(&topo.backend, &format!("{BACKEND_V4}:{LISTEN}"), b"PONG "),
        Responder::start(&topo.backend, &format!("[{BACKEND_V6}]:{LISTEN}"), b"PONG "),
        Responder::start(&topo.backend, &format!("{BACKEND_V4}:{WRONG}"), b"BUSY "),
        Responder::start(&topo.backend, &format!("[{BACKEND_V6}]:{WRONG}"), b"BUSY "),
    ];
    // A bound socket that never answers: healthy in plain mode, a timeout here.
    let _mute = topo.backend.udp_bind(&format!("{BACKEND_V4}:{DROPPED}"));
    let mut reqs = Vec::new();
    for host in [BACKEND_V4.to_string(), format!("[{BACKEND_V6}]")] {
        for port in [LISTEN, WRONG, CLOSED, REJECTED] {
            reqs.push(rr_req(format!("{host}:{port}"), 1000));
        }
    }
    reqs.push(rr_req(format!("{BACKEND_V4}:{DROPPED}"), 300));
    let results = rr_probe(&topo.prober, reqs);
    for r in &results {
        let want = match (r.target.port(), r.target.is_ipv6()) {
            (LISTEN, _) => UdpOutcome::Reply,
            (WRONG, _) => UdpOutcome::ReplyMismatch,
            (CLOSED, _) => UdpOutcome::PortUnreachable,
            (REJECTED, false) => UdpOutcome::Unreachable { icmp_type: 3, code: 13 },
            (REJECTED, true) => UdpOutcome::Unreachable { icmp_type: 1, code: 1 },
            _ => UdpOutcome::Timeout,
        };
        assert_eq!(r.outcome, want, "{}", r.target);
        assert_eq!(r.outcome.healthy(), r.target.port() == LISTEN, "{}", r.target);
        if want == UdpOutcome::Timeout {
            assert!(r.elapsed >= Duration::from_millis(300), "{:?}", r.elapsed);
        } else {
            assert!(
                r.elapsed < Duration::from_millis(1000),
                "answered, not timed out: {:?}",
                r.elapsed
            );
        }
    }
    assert_eq!(results.len(), 9);
}

#[test]
fn icmp_rate_limit_fools_plain_mode_but_not_request_response() {
    const N: u16 = 50;
    const FIRST: u16 = 7000;
    let topo = Topology::new();
    // Per-peer ICMP rate limiting, as a loaded Linux backend applies it: after a short burst,
    // one destination-unreachable per minute to the same prober. (Per peer and per
    // namespace, unlike icmp_msgs_per_sec, whose token bucket every namespace shares, so
    // the tests running beside this one keep their ICMP errors.)
    topo.backend.sysctl("net.ipv4.icmp_ratemask", "6168");
    topo.backend.sysctl("net.ipv4.icmp_ratelimit", "60000");
    let targets: Vec<String> = (0..N).map(|i| format!("{BACKEND_V4}:{}", FIRST + i)).collect();
    let pins = TestPins::new();
    let reqs: Vec<_> = targets
        .iter()
        .enumerate()
        .map(|(i, t)| udp_req(i as u64, t, 500))
        .collect();
    let plain = topo.prober.enter(|| {
        let (engine, mut rx) = start_engine(&pins, TxChoice::Auto);
        engine.submit(reqs).unwrap();
        collect(&mut rx, N as usize, Duration::from_secs(5))
    });
    assert_eq!(plain.len(), N as usize);
    let plain: Vec<UdpOutcome> = plain.iter().map(outcome).collect();
    let fooled = plain.iter().filter(|o| o.healthy()).count();
    let dead = plain.iter().filter(|o| **o == UdpOutcome::PortUnreachable).count();
    assert!(
        fooled > 0,
        "every closed port answered despite the rate limit; the trap did not spring: {plain:?}"
    );
    assert_eq!(fooled + dead, N as usize, "only silence or port unreachable: {plain:?}");

    let rr = rr_probe(&topo.prober, targets.iter().map(|t| rr_req(t.clone(), 500)).collect());
    assert_eq!(rr.len(), N as usize);
    let healthy: Vec<_> = rr.iter().filter(|r| r.outcome.healthy()).collect();
    assert!(
        healthy.is_empty(),
        "request/response mode called closed ports healthy: {healthy:?}"
    );
    eprintln!(
        "plain mode: {fooled} of {N} closed ports looked healthy; request/response: 0 of {N} ({} timeouts)",
        rr.iter().filter(|r| r.outcome == UdpOutcome::Timeout).count()
    );
}

/// Serialises an IPv4 header.
fn ip_bytes(h: &Ipv4Hdr) -> Vec<u8> {
    let mut b = vec![h.ver_ihl, h.tos];
    b.extend_from_slice(&h.tot_len_be);
    b.extend_from_slice(&h.id_be);
    b.extend_from_slice(&h.frag_off_be);
    b.extend_from_slice(&[h.ttl, h.proto]);
    b.extend_from_slice(&h.csum_be);
    b.extend_from_slice(&h.saddr);
    b.extend_from_slice(&h.daddr);
    b
}

/// An ICMP port unreachable from the backend to the prober quoting a UDP datagram of
/// `flow` whose IPv4 id was `id`: the bytes a raw socket with IP_HDRINCL sends.
fn forged_port_unreachable(flow: &FlowKey, id: u16) -> Vec<u8> {
    let udp_len = 8 + PAYLOAD.len() as u16;
    let mut quoted = ip_bytes(&ipv4(flow.saddr_v4(), flow.daddr_v4(), IPPROTO_UDP, udp_len, id));
    quoted.extend_from_slice(&flow.sport.to_be_bytes());
    quoted.extend_from_slice(&flow.dport.to_be_bytes());
    quoted.extend_from_slice(&udp_len.to_be_bytes());
    quoted.extend_from_slice(&[0, 0]);
    let mut icmp = vec![3, 3, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&quoted);
    let mut sum = 0u64;
    for c in icmp.chunks(2) {
        sum = add_bytes(sum, &[c[0], c.get(1).copied().unwrap_or(0)]);
    }
    let csum = finish(sum).to_be_bytes();
    icmp[2..4].copy_from_slice(&csum);
    let mut pkt = ip_bytes(&ipv4(
        flow.daddr_v4(),
        flow.saddr_v4(),
        IPPROTO_ICMP,
        icmp.len() as u16,
        0x4242,
    ));
    pkt.extend_from_slice(&icmp);
    pkt
}

/// An IPv6 header with `flow_label`, serialised.
fn ip6_bytes(src: [u8; 16], dst: [u8; 16], next: u8, payload_len: u16, flow_label: u32) -> Vec<u8> {
    let mut b = (0x6000_0000u32 | (flow_label & 0xfffff)).to_be_bytes().to_vec();
    b.extend_from_slice(&payload_len.to_be_bytes());
    b.extend_from_slice(&[next, 64]);
    b.extend_from_slice(&src);
    b.extend_from_slice(&dst);
    b
}

/// An ICMPv6 port unreachable from the backend to the prober quoting a UDP datagram of
/// `flow` whose flow label was `label`.
fn forged_port_unreachable_v6(flow: &FlowKey, label: u32) -> Vec<u8> {
    let udp_len = 8 + PAYLOAD.len() as u16;
    let mut quoted = ip6_bytes(flow.saddr, flow.daddr, IPPROTO_UDP, udp_len, label);
    quoted.extend_from_slice(&flow.sport.to_be_bytes());
    quoted.extend_from_slice(&flow.dport.to_be_bytes());
    quoted.extend_from_slice(&udp_len.to_be_bytes());
    quoted.extend_from_slice(&[0, 0]);
    let mut icmp = vec![1, 4, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&quoted);
    let mut sum = pseudo_v6(&flow.daddr, &flow.saddr, IPPROTO_ICMPV6, icmp.len() as u32);
    for c in icmp.chunks(2) {
        sum = add_bytes(sum, &[c[0], c.get(1).copied().unwrap_or(0)]);
    }
    let csum = finish(sum).to_be_bytes();
    icmp[2..4].copy_from_slice(&csum);
    let mut pkt = ip6_bytes(flow.daddr, flow.saddr, IPPROTO_ICMPV6, icmp.len() as u16, 0);
    pkt.extend_from_slice(&icmp);
    pkt
}

/// Sends `pkt` (a whole IP packet, header included) to the source of `flow` through a raw
/// socket of the calling thread's namespace.
fn inject(pkt: &[u8], flow: &FlowKey) {
    send_on(&raw_socket(flow.family == FAMILY_V4), pkt, flow);
}

/// A raw socket (IP header included) in the calling thread's namespace. It stays in that
/// namespace wherever it is used from.
fn raw_socket(v4: bool) -> OwnedFd {
    let family = if v4 { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: plain socket(2); IPPROTO_RAW implies that we supply the IP header. Checked.
    let fd = unsafe { libc::socket(family, libc::SOCK_RAW, libc::IPPROTO_RAW) };
    assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
    // SAFETY: fd is fresh and owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Sends `pkt` to the source of `flow` through `fd`.
fn send_on(fd: &OwnedFd, pkt: &[u8], flow: &FlowKey) {
    let v4 = flow.family == FAMILY_V4;
    // SAFETY: sockaddr_storage is plain data, valid when zeroed.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = if v4 {
        // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
        let sa = unsafe { &mut *(&raw mut ss).cast::<libc::sockaddr_in>() };
        sa.sin_family = libc::AF_INET as u16;
        sa.sin_addr.s_addr = u32::from_ne_bytes(flow.saddr_v4());
        std::mem::size_of::<libc::sockaddr_in>()
    } else {
        // SAFETY: as above.
        let sa = unsafe { &mut *(&raw mut ss).cast::<libc::sockaddr_in6>() };
        sa.sin6_family = libc::AF_INET6 as u16;
        sa.sin6_addr.s6_addr = flow.saddr;
        std::mem::size_of::<libc::sockaddr_in6>()
    };
    // SAFETY: `pkt` and `ss` are valid for the lengths passed.
    let rc = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            pkt.as_ptr().cast(),
            pkt.len(),
            0,
            (&raw const ss).cast::<libc::sockaddr>(),
            len as u32,
        )
    };
    assert_eq!(rc, pkt.len() as isize, "sendto: {}", std::io::Error::last_os_error());
}

#[test]
fn forged_icmp_errors_change_nothing() {
    let topo = Topology::new();
    // Dropped in silence, so the probes stay in flight while we forge errors about them.
    topo.backend.nft_drop("udp", DROPPED);
    let pins = TestPins::new();
    let targets = [format!("{BACKEND_V4}:{DROPPED}"), format!("[{BACKEND_V6}]:{DROPPED}")];
    let results = topo.prober.enter(|| {
        let (engine, mut rx) = start_engine(&pins, TxChoice::Auto);
        engine
            .submit(
                targets
                    .iter()
                    .enumerate()
                    .map(|(i, t)| udp_req(i as u64, t, 2000))
                    .collect(),
            )
            .unwrap();
        // The live probes' flows and cookies, read from the pinned in-flight table.
        let inflight = aya::maps::MapData::from_pin(pins.path.join("PROBE_INFLIGHT")).expect("open pinned map");
        let table: aya::maps::HashMap<_, FlowKey, Inflight> =
            aya::maps::HashMap::try_from(aya::maps::Map::HashMap(inflight)).expect("in-flight table");
        let mut live = Vec::new();
        for _ in 0..100 {
            live = table
                .iter()
                .filter_map(Result::ok)
                .filter(|(k, _)| k.dport == DROPPED && k.proto == IPPROTO_UDP)
                .collect();
            if live.len() == 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(live.len(), 2, "both probes are in the in-flight table");
        let before = engine.snapshot().unwrap().rx;

        topo.backend.enter(|| {
            for (flow, entry) in &live {
                // (a) The live probe's source port, but a destination port nobody probed.
                let unprobed = FlowKey {
                    dport: DROPPED + 100,
                    ..*flow
                };
                // (b) The live probe's flow exactly, but the wrong cookie bits: an IPv4 id or
                // an IPv6 flow label the probe did not carry.
                let (a, b) = if flow.family == FAMILY_V4 {
                    let id = entry.cookie as u16;
                    (
                        forged_port_unreachable(&unprobed, id),
                        forged_port_unreachable(flow, id ^ 0x5a5a),
                    )
                } else {
                    let label = entry.cookie & 0xfffff;
                    (
                        forged_port_unreachable_v6(&unprobed, label),
                        forged_port_unreachable_v6(flow, label ^ 0x5a5a5),
                    )
                };
                inject(&a, flow);
                inject(&b, flow);
            }
        });
        // The counters move as soon as probe_rx has seen all four.
        let mut after = before;
        for _ in 0..100 {
            after = engine.snapshot().unwrap().rx;
            if after.stale - before.stale >= 2 && after.forged - before.forged >= 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            after.icmp_unreach - before.icmp_unreach,
            4,
            "probe_rx saw all four: {after:?}"
        );
        assert_eq!(
            after.stale - before.stale,
            2,
            "unprobed ports count as stale: {after:?}"
        );
        assert_eq!(
            after.forged - before.forged,
            2,
            "wrong id / flow label count as forged: {after:?}"
        );
        assert_eq!(after.matched_unreach, 0, "nothing matched: {after:?}");
        let results = collect(&mut rx, 2, Duration::from_secs(5));
        assert_eq!(engine.snapshot().unwrap().inflight, 0);
        results
    });
    assert_eq!(results.len(), 2, "one result per probe");
    for r in &results {
        assert_eq!(
            outcome(r),
            UdpOutcome::Silent,
            "{}: the forgeries did not fail the probe",
            r.target
        );
        assert!(
            r.elapsed >= Duration::from_millis(2000),
            "it ran its full timeout: {:?}",
            r.elapsed
        );
    }
}

/// Runs `probed ARGS` inside `ns`; returns (success, stdout).
fn probed_in(ns: &Netns, bin: &std::path::Path, args: &[&str]) -> (bool, String) {
    let child = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.name])
        .arg(bin)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn probed");
    // `ip netns exec` execs probed in place: the PID is probed's, and so is its pin directory's.
    let pins = std::path::PathBuf::from(format!("/sys/fs/bpf/probed-check-{}", child.id()));
    let out = child.wait_with_output().expect("wait for probed");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "probed {args:?} failed to run ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // Only this run's own: other tests' `probed check` runs may be under way beside it.
    assert!(
        !pins.exists(),
        "probed {args:?} removed its pin directory {}",
        pins.display()
    );
    (out.status.success(), stdout)
}

#[test]
fn check_command_plain_and_request_response() {
    let bin = probed_bin();
    let topo = Topology::new();
    let _listener = topo.backend.udp_bind(&format!("{BACKEND_V4}:{LISTEN}"));
    let _pong = Responder::start(&topo.backend, &format!("[{BACKEND_V6}]:{LISTEN}"), b"PONG ");
    let _busy = Responder::start(&topo.backend, &format!("{BACKEND_V4}:{WRONG}"), b"BUSY ");
    let url = |host: &str, port: u16| format!("udp://{host}:{port}");
    let v4 = BACKEND_V4.to_string();
    let v6 = format!("[{BACKEND_V6}]");
    let cases: Vec<(Vec<String>, bool, &str)> = vec![
        (
            vec![url(&v4, LISTEN), "--count".into(), "2".into()],
            true,
            "healthy silent",
        ),
        (vec![url(&v4, CLOSED)], false, "unhealthy port unreachable"),
        (vec![url(&v6, CLOSED)], false, "unhealthy port unreachable"),
        (
            vec![
                url(&v6, LISTEN),
                "--send".into(),
                "PING".into(),
                "--expect".into(),
                "PONG".into(),
            ],
            true,
            "healthy reply",
        ),
        (
            vec![
                url(&v4, WRONG),
                "--send".into(),
                "PING".into(),
                "--expect".into(),
                "PONG".into(),
            ],
            false,
            "unhealthy reply mismatch",
        ),
    ];
    for (args, ok, words) in cases {
        let mut all = vec!["check", "--timeout", "300", "--interval", "50"];
        all.extend(args.iter().map(String::as_str));
        let (success, out) = probed_in(&topo.prober, &bin, &all);
        assert_eq!(success, ok, "exit status of {all:?}: {out}");
        let lines: Vec<_> = out.lines().collect();
        let want_lines = if args.contains(&"--count".to_string()) { 2 } else { 1 };
        assert_eq!(lines.len(), want_lines, "one line per probe: {out}");
        for l in lines {
            assert!(l.contains(words) && l.ends_with("ms"), "{all:?}: {l}");
        }
    }
    let (success, out) = probed_in(
        &topo.prober,
        &bin,
        &["check", "--json", "--timeout", "300", &url(&v4, CLOSED)],
    );
    assert!(!success);
    assert!(
        out.contains(r#""verdict":"unhealthy""#) && out.contains(r#""outcome":"port unreachable""#),
        "JSON line: {out}"
    );
}

/// The source port the first probe of a daemon got before ports were keyed (M1): a public
/// formula of the generation (1) and the target port, over the old 4001-port default range.
fn old_predicted_sport(dport: u16) -> u16 {
    let gen = 1u64;
    61000 + (((gen.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(dport)) >> 17) % 4001) as u16
}

/// A blind forger's two sweeps against one live IPv4 UDP probe: every IPv4 id but the right
/// one at the right source port (what knowing the port buys), and every id at the port the
/// old unkeyed formula predicts. Neither fails the check; every packet is counted forged or
/// stale. Then the one right id does fail it: the sweeps' packets were well formed.
#[test]
fn blind_forgery_sweeps_never_fail_a_udp_check() {
    const CHUNK: u32 = 512;
    let topo = Topology::new();
    topo.backend.nft_drop("udp", DROPPED);
    let pins = TestPins::new();
    let target = format!("{BACKEND_V4}:{DROPPED}");
    // One raw socket in the backend's namespace, used from the prober's thread below.
    let fd = topo.backend.enter(|| raw_socket(true));
    let (results, sent, took) = topo.prober.enter(|| {
        let (engine, mut rx) = start_engine(&pins, TxChoice::Auto);
        engine.submit(vec![udp_req(1, &target, 60_000)]).unwrap();
        let (flow, entry) = probed_tests::forge::inflight(&pins.path)
            .into_iter()
            .next()
            .or_else(|| {
                std::thread::sleep(Duration::from_millis(200));
                probed_tests::forge::inflight(&pins.path).into_iter().next()
            })
            .expect("the probe is in the in-flight table");
        let right_id = entry.cookie as u16;
        let old_sport = old_predicted_sport(DROPPED);
        let before = engine.snapshot().unwrap().rx;
        // (sport, id) pairs of both sweeps; the right pair is never among them.
        let sweeps = [flow.sport, old_sport];
        let mut sent = 0u64;
        let start = std::time::Instant::now();
        for sport in sweeps {
            let forged = FlowKey { sport, ..flow };
            let ids: Vec<u16> = (0..=u16::MAX)
                .filter(|&id| sport != flow.sport || id != right_id)
                .collect();
            for chunk in ids.chunks(CHUNK as usize) {
                for &id in chunk {
                    send_on(&fd, &forged_port_unreachable(&forged, id), &flow);
                }
                sent += chunk.len() as u64;
                // Paced by probe_rx's counters, so no packet is lost to a full veth ring.
                let deadline = std::time::Instant::now() + Duration::from_secs(5);
                loop {
                    let rx = engine.snapshot().unwrap().rx;
                    if (rx.forged + rx.stale) - (before.forged + before.stale) >= sent {
                        break;
                    }
                    assert!(
                        std::time::Instant::now() < deadline,
                        "probe_rx saw {} of {sent} forgeries: {rx:?}",
                        (rx.forged + rx.stale) - (before.forged + before.stale)
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        let took = start.elapsed();
        let after = engine.snapshot().unwrap();
        let same_port = u64::from(old_sport == flow.sport);
        assert_eq!(after.rx.matched_unreach, 0, "no forgery matched: {:?}", after.rx);
        assert_eq!(after.inflight, 1, "the probe is still waiting: {after:?}");
        assert_eq!(
            after.rx.forged - before.forged,
            65_535 + same_port * 65_535,
            "wrong ids at the live port count as forged: {:?}",
            after.rx
        );
        assert_eq!(
            after.rx.stale - before.stale,
            65_536 - same_port * 65_536,
            "the old formula's port holds no probe (stale): {:?}",
            after.rx
        );
        assert!(rx.try_recv().is_err(), "no result yet");
        // The control: the right (port, id) pair fails the check at once.
        send_on(&fd, &forged_port_unreachable(&flow, right_id), &flow);
        (collect(&mut rx, 1, Duration::from_secs(5)), sent, took)
    });
    eprintln!(
        "{sent} forged port-unreachables ({} bytes as IP, {} bytes as frames) in {took:?}, none matched",
        sent * 56,
        sent * 70
    );
    assert_eq!(results.len(), 1);
    assert_eq!(
        outcome(&results[0]),
        UdpOutcome::PortUnreachable,
        "the right id and port do match: the sweeps were well formed"
    );
}
