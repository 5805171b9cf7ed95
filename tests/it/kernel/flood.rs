//! Issue 13: over a million forged SYN+ACKs, RSTs and ICMP errors aimed at the live probes'
//! exact tuples (learned by capturing the probes on the backend's link), sent while the
//! daemon probes TCP-open, TCP-refused, TCP-dark, UDP-open and UDP-closed targets over IPv4
//! and IPv6. No verdict may change, and the counters must account for every forged frame.
use std::{collections::BTreeMap, net::IpAddr, time::Duration};

use probe_common::packet::{IPPROTO_TCP, IPPROTO_UDP};
use probed::status::EndpointStatus as S;
use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    flood::{
        link_drops, parse_mac, results_by_profile, rx_counters, Capture, Flooder, Kind, Passed, PassedCounters, Stream,
    },
    topo::*,
    Topology,
};

/// Forged frames to send; the flood must finish within `FLOOD_LIMIT`.
const TOTAL: u64 = 1_200_000;
const FLOOD_LIMIT: Duration = Duration::from_secs(90);

/// (profile, port, transport, verdict, the one outcome its probes give).
const FLEET: &[(&str, u16, u8, S, &str)] = &[
    ("tcp-open", 8080, IPPROTO_TCP, S::Online, "open"),
    ("tcp-refused", 8081, IPPROTO_TCP, S::Degraded, "refused"),
    ("tcp-dark", 8082, IPPROTO_TCP, S::Degraded, "timeout"),
    ("udp-open", 5353, IPPROTO_UDP, S::Online, "silent"),
    ("udp-closed", 5354, IPPROTO_UDP, S::Degraded, "port-unreachable"),
];

fn config_text(files: &DaemonFiles) -> String {
    let mut text = files.header(PROBER_IF);
    for (name, port, proto, _, _) in FLEET {
        let protocol = if *proto == IPPROTO_TCP { "tcp" } else { "udp" };
        text += &format!(
            "[[profile]]\nname = \"{name}\"\ndialect = \"lb\"\nrouting = \"priority\"\n\n[profile.health]\n\
             protocol = \"{protocol}\"\nhealthy_threshold = 4\nunhealthy_threshold = 4\n"
        );
        for (i, (ep, addr)) in [("v4", BACKEND_V4), ("v6", BACKEND_V6)].into_iter().enumerate() {
            text += &format!(
                "\n[[profile.endpoint]]\nname = \"{ep}\"\naddress = \"{addr}\"\nport = {port}\npriority = {}\n",
                i + 1
            );
        }
        text += "\n";
    }
    text
}

fn event_count(daemon: &RunningDaemon) -> usize {
    daemon.events().len()
}

/// Waits until no event has been written for 300 ms (at most 3 s): the settling changes are
/// all in the file before the flood's "before" is taken.
fn events_settled(daemon: &RunningDaemon) -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let mut n = event_count(daemon);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = event_count(daemon);
        if now == n || std::time::Instant::now() > deadline {
            return now;
        }
        n = now;
    }
}

fn transitions(metrics: &str) -> Vec<String> {
    metrics
        .lines()
        .filter(|l| l.starts_with("probed_transitions_total"))
        .map(str::to_string)
        .collect()
}

fn metrics(daemon: &RunningDaemon) -> String {
    let (code, v) = daemon.call("GET", "/metrics");
    assert_eq!(code, 200, "GET /metrics: {v}");
    v.as_str().expect("metrics are text").to_string()
}

/// probe_rx's counters and the passed-frame counters after it, read in a quiet moment: the
/// daemon probes on through the reads, and a late genuine reply (a SYN+ACK the backend sends
/// again when the RST ending its probe was lost in the flood) counted by probe_rx before one
/// read and by nft after the other would unbalance the sums by one. Both are read twice, 30 ms
/// apart, until neither moved (at most 30 tries; the last reads otherwise).
fn quiet_counters(pins: &std::path::Path, passed: &PassedCounters) -> (probe_common::counters::RxCounters, Passed) {
    let mut last = (rx_counters(pins), passed.read());
    for _ in 0..30 {
        std::thread::sleep(Duration::from_millis(30));
        let now = (rx_counters(pins), passed.read());
        let quiet = now.1 == last.1 && (now.0.stale, now.0.forged) == (last.0.stale, last.0.forged);
        last = now;
        if quiet {
            break;
        }
    }
    last
}

#[test]
fn a_million_forged_replies_change_no_verdict_and_are_all_counted() {
    // The flood takes both cores for its length: no other test's timing would hold beside it,
    // nor would its own "no reply lost" beside another's load.
    let _alone = probed_tests::serial::alone();
    let topo = Topology::new();
    let _open4 = topo.backend.tcp_listen(&format!("{BACKEND_V4}:8080"));
    let _open6 = topo.backend.tcp_listen(&format!("[{BACKEND_V6}]:8080"));
    topo.backend.nft_drop("tcp", 8082);
    let _udp4 = topo.backend.udp_bind(&format!("{BACKEND_V4}:5353"));
    let _udp6 = topo.backend.udp_bind(&format!("[{BACKEND_V6}]:5353"));
    // Every closed-port probe gets its genuine ICMP error, however many come in a second.
    topo.backend.sysctl("net.ipv4.icmp_ratelimit", "0");
    topo.backend.sysctl("net.ipv6.icmp.ratelimit", "0");

    let files = DaemonFiles::new();
    let mut config = files.write_config(&config_text(&files));
    for p in &mut config.profiles {
        p.health.interval = Duration::from_millis(200);
        p.health.timeout = Duration::from_millis(150);
    }
    let daemon = RunningDaemon::start(&topo.prober, config, None).expect("start the daemon");
    for (profile, _, _, status, _) in FLEET {
        for ep in ["v4", "v6"] {
            daemon.wait_status(profile, ep, *status, Duration::from_secs(5));
        }
    }

    // The attacker: a capture of the probes and a sender, both on the backend's link.
    let passed = PassedCounters::install(&topo.prober);
    let capture = Capture::start(&topo.backend, BACKEND_IF);
    let flooder = Flooder::new(&topo.backend, BACKEND_IF, parse_mac(&topo.prober.mac(PROBER_IF)));
    let targets: Vec<(IpAddr, u16, u8)> = FLEET
        .iter()
        .flat_map(|(_, port, proto, _, _)| {
            [BACKEND_V4, BACKEND_V6].map(|a| (a.parse::<IpAddr>().unwrap(), *port, *proto))
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while capture.tuples().len() < targets.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "the capture saw probes to only {:?}",
            capture.tuples().keys().collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let streams: Vec<Stream> = targets
        .iter()
        .flat_map(|&target| {
            let kinds: &[Kind] = if target.2 == IPPROTO_TCP {
                &[Kind::SynAck, Kind::Rst, Kind::IcmpTcp]
            } else {
                &[Kind::IcmpUdp]
            };
            kinds.iter().map(move |&kind| Stream { target, kind })
        })
        .collect();

    let events_before = events_settled(&daemon);
    let metrics_before = metrics(&daemon);
    let (rx_before, passed_before) = quiet_counters(&files.pins.path, &passed);
    let drops_before = (
        link_drops(&topo.backend, BACKEND_IF),
        link_drops(&topo.prober, PROBER_IF),
    );
    let probes_before = capture.probes_seen();

    let report = flooder.flood(&capture, &streams, TOTAL, FLOOD_LIMIT, 0x5eed_f100d);
    // The last probes of the flood end (timeout 150 ms) before the counters are read.
    std::thread::sleep(Duration::from_millis(400));

    let probes = capture.probes_seen() - probes_before;
    let (rx_after, passed_after) = quiet_counters(&files.pins.path, &passed);
    let drops_after = (
        link_drops(&topo.backend, BACKEND_IF),
        link_drops(&topo.prober, PROBER_IF),
    );
    let metrics_after = metrics(&daemon);
    let events_after = event_count(&daemon);
    eprintln!(
        "flood: {} forged frames in {:.2} s ({:.0} frames/s, {} busy retries) during {probes} probes; {:?}",
        report.total(),
        report.elapsed.as_secs_f64(),
        report.rate(),
        report.busy,
        report.sent
    );
    assert_eq!(
        report.total(),
        TOTAL,
        "the flood did not finish within {FLOOD_LIMIT:?}: {report:?}"
    );

    // 1. No verdict changed: no event, no transition, every endpoint as it was.
    assert_eq!(
        events_after,
        events_before,
        "changes during the flood: {:#?}",
        &daemon.events()[events_before..]
    );
    assert_eq!(transitions(&metrics_after), transitions(&metrics_before));
    for (profile, _, _, status, _) in FLEET {
        for ep in ["v4", "v6"] {
            let v = daemon.endpoint(profile, ep);
            assert_eq!(v.status, *status, "{profile}/{ep} after the flood: {v:#?}");
        }
    }

    // 2. Probe by probe: every result during the flood is the target's own outcome. The one
    // exception the design allows is a UDP probe whose 16-bit IPv4 id (20-bit flow label) a
    // random forgery hit: expected hits = forgeries at live UDP probes / 2^16 (< 1 here).
    let results = |m: &str| results_by_profile(m);
    let (before, after) = (results(&metrics_before), results(&metrics_after));
    let mut deltas: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (k, v) in &after {
        let d = v - before.get(k).copied().unwrap_or(0);
        if d > 0 {
            deltas.insert(k.clone(), d);
        }
    }
    eprintln!("results during the flood: {deltas:?}");
    let mut udp_hits = 0;
    let mut lost = 0;
    for ((profile, outcome), n) in &deltas {
        let (_, _, _, _, want) = FLEET.iter().find(|f| f.0 == profile).expect("a fleet profile");
        if outcome == want {
            continue;
        }
        if profile == "udp-open" && outcome == "port-unreachable" {
            udp_hits += n;
            continue;
        }
        // A genuine reply lost on the way: the kernel drops packets when a million frames fill
        // its queues and both cores (a SYN+ACK, an RST or an ICMP error that never reaches
        // probe_rx within the 150 ms timeout). The probe then ends as no reply at all, which no
        // forgery can cause (a forged frame can only add a reply, and is passed unless its
        // cookie matches). One to four of some sixty probes per profile were seen lost so on
        // this 2-core machine under CI, before and after the engine's changes, once two in a row
        // (a closed UDP port's two ICMP errors, which flipped it at a threshold of 2); no verdict
        // moves for it (checked above), since every threshold is four. A tenth of the profile's
        // probes under fire is allowed; more is a fault of ours, not the kernel's.
        let no_reply = if *profile == "udp-closed" { "silent" } else { "timeout" };
        let under_fire: u64 = deltas.iter().filter(|((p, _), _)| p == profile).map(|(_, n)| n).sum();
        if outcome == no_reply && *n <= (under_fire / 10).max(2) {
            eprintln!("{profile}: {n} of {under_fire} replies lost in the flood (ended {outcome})");
            lost += n;
            continue;
        }
        panic!("{profile}: {n} probe(s) ended {outcome} during the flood, expected {want}: {deltas:?}");
    }
    for (profile, _, _, _, want) in FLEET {
        let n = deltas
            .get(&((*profile).to_string(), (*want).to_string()))
            .copied()
            .unwrap_or(0);
        // At least two probes per endpoint ran under fire (some 40 on a loaded 2-core box).
        assert!(n >= 4, "{profile}: only {n} results during the flood: {deltas:?}");
    }

    // 3. Every forged frame is accounted for: probe_rx passed it to the stack (counted by
    // kind after XDP), or it decided a probe (a UDP hit above). Nothing was lost on the link.
    let drops = (
        drops_after.0 .0 - drops_before.0 .0 + drops_after.0 .1 - drops_before.0 .1,
        drops_after.1 .0 - drops_before.1 .0 + drops_after.1 .1 - drops_before.1 .1,
    );
    // A frame the veth refused (its peer's ring full) fails its send with ENOBUFS and is
    // counted dropped by the veth, never as sent: at most one per busy retry, plus the genuine
    // replies the backend's stack sent into a full ring: those found lost above, and some
    // whose loss no outcome shows (a dropped SYN+ACK is sent again by the backend a second
    // later, and its probe still ends open): two, or one in fifty of the probes under fire
    // (four were seen in CI, of some 300 probes).
    eprintln!(
        "link drops (backend, prober): {drops:?}; refused sends {}; replies lost {lost}",
        report.busy
    );
    assert!(
        drops.0 + drops.1 <= report.busy + lost + (probes / 50).max(2),
        "frames dropped on the veth (backend, prober) {drops:?} beyond the {} refused sends and {lost} lost replies",
        report.busy
    );
    let mut forged_passed = 0;
    let mut genuine_passed = 0;
    let mut not_passed = 0;
    for (key, sent) in &report.sent {
        let (f1, g1) = passed_after[key];
        let (f0, g0) = passed_before[key];
        let (f, g) = (f1 - f0, g1 - g0);
        eprintln!(
            "  {} {}: sent {sent}, passed {f}; genuine passed {g}",
            key.0.name(),
            key.1
        );
        forged_passed += f;
        genuine_passed += g;
        assert!(f <= *sent, "{key:?}: more forged frames passed than sent");
        if key.0 == Kind::IcmpUdp {
            not_passed += sent - f;
        } else {
            assert_eq!(
                f, *sent,
                "{key:?}: every forged TCP reply and TCP-quoting ICMP error passes (a 32-bit cookie)"
            );
        }
    }
    assert!(
        not_passed >= udp_hits && not_passed <= udp_hits + 2,
        "forged UDP errors not passed ({not_passed}) = the hits seen in results ({udp_hits}), plus at most \
         two on closed ports where the genuine error arrives within microseconds"
    );
    assert!(udp_hits <= 5, "{udp_hits} forged UDP errors decided a probe");

    // 4. The kernel's own counters: each passed forgery was counted forged (a live probe's
    // flow, wrong cookie) or stale (no live probe on that flow).
    let d = |f: fn(&probe_common::counters::RxCounters) -> u64| f(&rx_after) - f(&rx_before);
    let (forged, stale) = (d(|c| c.forged), d(|c| c.stale));
    eprintln!(
        "probe_rx: forged {forged}, stale {stale}, matched {}/{}/{}, ringbuf_full {}; frames passed: {forged_passed} \
         forged + {genuine_passed} genuine; UDP hits {udp_hits}; hit rate {:.2e}",
        d(|c| c.matched_open),
        d(|c| c.matched_refused),
        d(|c| c.matched_unreach),
        d(|c| c.ringbuf_full),
        udp_hits as f64 / report.total() as f64
    );
    assert_eq!(d(|c| c.ringbuf_full), 0, "no event lost");
    assert_eq!(
        forged + stale,
        forged_passed + genuine_passed,
        "forged + stale = every reply probe_rx passed to the stack (forged frames and late genuine ones)"
    );
    let class = |sum: u64, matched: u64, kinds: &[Kind]| {
        let passed: u64 = passed_after
            .iter()
            .filter(|(k, _)| kinds.contains(&k.0))
            .map(|(k, (f, g))| f + g - passed_before[k].0 - passed_before[k].1)
            .sum();
        assert_eq!(sum - matched, passed, "{kinds:?}: counted by class = matched + passed");
    };
    class(d(|c| c.syn_ack), d(|c| c.matched_open), &[Kind::SynAck]);
    class(d(|c| c.rst), d(|c| c.matched_refused), &[Kind::Rst]);
    class(
        d(|c| c.icmp_unreach),
        d(|c| c.matched_unreach),
        &[Kind::IcmpTcp, Kind::IcmpUdp],
    );

    drop(capture);
    drop(passed);
    daemon.stop();
}
