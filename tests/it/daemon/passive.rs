//! Passive detection in the daemon, end to end: clients connect through the node's nft VIP at
//! a steady rate; one backend starts refusing, one dropping, one is too slow. Each is ejected
//! from the profile with `[profile.passive]` sooner than its active check alone takes it out of
//! a twin profile without it (the same check), and returns through its active check once
//! well; the healthy backend stays in throughout.
use std::time::{Duration, Instant};

use probed::{changes::ChangeKind, status::EndpointStatus};
use probed_tests::{
    daemon::{mono_ns, DaemonFiles, RunningDaemon},
    passive::{Fault, PassiveRig, VIP_V4},
    topo::Node,
};

const FAULTS: [Fault; 4] = [Fault::Healthy, Fault::Refuse, Fault::Drop, Fault::Slow];

/// The daemon's file: the rig's links as `[source].interfaces`, then one profile per
/// `(name, passive lines)` with every backend as an endpoint, checked every `interval`.
fn config(files: &DaemonFiles, rig: &PassiveRig, interval: &str, profiles: &[(&str, &str)]) -> String {
    let links: Vec<String> = rig.links().iter().map(|l| format!("\"{l}\"")).collect();
    let mut text = files.header("pv0").replace(
        "interfaces = [\"pv0\"]",
        &format!("interfaces = [{}]", links.join(", ")),
    );
    for (name, passive) in profiles {
        text += &format!(
            "\n[[profile]]\nname = \"{name}\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\n\
             interval = \"{interval}\"\ntimeout = \"500ms\"\nhealthy_threshold = 2\nunhealthy_threshold = 3\n{passive}"
        );
        for (i, b) in rig.backends.iter().enumerate() {
            text += &format!(
                "\n[[profile.endpoint]]\nname = \"b{i}\"\naddress = \"{}\"\nport = 80\n",
                b.v4
            );
        }
    }
    text
}

/// `[profile.passive]`: 3 failed handshakes in a row, a 500 ms timeout, `cap` percent at most.
fn passive(cap: u32) -> String {
    format!("[profile.passive]\nconsecutive_failures = 3\ntimeout = \"500ms\"\nmax_ejection_percent = {cap}\n")
}

/// Starts the daemon on `text` in the node and waits for endpoints b0.. of each of `profiles`
/// (`backends` each) to be Online.
fn start(rig: &PassiveRig, files: &DaemonFiles, text: &str, profiles: &[&str], backends: usize) -> RunningDaemon {
    let cfg = files.write_config(text);
    let d = RunningDaemon::start(&rig.node, cfg, Some(&files.config_path())).expect("daemon starts");
    for p in profiles {
        for i in 0..backends {
            d.wait_status(p, &format!("b{i}"), EndpointStatus::Online, Duration::from_secs(15));
        }
    }
    d
}

/// Whether the passive observers are attached to `link` on the node.
fn observed(rig: &PassiveRig, link: &str) -> bool {
    rig.tcx_programs(link).iter().any(|p| p == "passive_out")
}

/// When (CLOCK_MONOTONIC ns) `endpoint` of `profile` first went down by a change of `kind`.
fn down_at(d: &RunningDaemon, profile: &str, endpoint: &str, kind: ChangeKind) -> Option<u64> {
    d.events()
        .into_iter()
        .find(|e| {
            e.profile == profile
                && e.endpoint == endpoint
                && e.kind == kind
                && e.to.is_some_and(|s| s != EndpointStatus::Online)
        })
        .map(|e| e.at_ns)
}

#[test]
fn passive_detection_ejects_sooner_than_the_active_check_and_the_active_check_brings_it_back() {
    let rig = PassiveRig::new(FAULTS.len(), Node::RIG);
    let files = DaemonFiles::new();
    let text = config(&files, &rig, "2s", &[("passive", passive(75).as_str()), ("active", "")]);
    let d = start(&rig, &files, &text, &["passive", "active"], FAULTS.len());
    let load = rig.load(&[VIP_V4.to_string()], 40, 16.0, Duration::from_millis(2500));
    std::thread::sleep(Duration::from_secs(2));
    let fault_ns = mono_ns();
    for (i, f) in FAULTS.iter().enumerate() {
        rig.fault(i, *f);
    }
    // Both profiles take every faulty backend out, passive detection first. The active check
    // alone may never take the slow one out: the probes whose SYN it answers pass, and break
    // the run of failures it needs.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut table = String::from("  backend  fault    passive ejection  active check alone\n");
    for (i, f) in FAULTS.iter().enumerate().skip(1) {
        let name = format!("b{i}");
        let active_needed = *f != Fault::Slow;
        let (passive, active) = loop {
            let p = down_at(&d, "passive", &name, ChangeKind::Passive);
            let a = down_at(&d, "active", &name, ChangeKind::Health);
            match (p, a) {
                (Some(p), Some(a)) => break (p, Some(a)),
                (Some(p), None) if !active_needed && Instant::now() > deadline => break (p, None),
                _ => {}
            }
            assert!(
                Instant::now() < deadline,
                "{name} ({f:?}) not down in both: {:#?}",
                d.events()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let ms = |at: u64| at.saturating_sub(fault_ns) as f64 / 1e6;
        let active_ms = active.map_or_else(|| "not within 20 s".to_string(), |a| format!("{:.0} ms", ms(a)));
        table += &format!(
            "  {name:<8} {:<8} {:>10.0} ms {:>18}\n",
            format!("{f:?}"),
            ms(passive),
            active_ms
        );
        if let Some(active) = active {
            assert!(
                passive < active,
                "{name} ({f:?}): passive {} ms, active {} ms",
                ms(passive),
                ms(active)
            );
        }
        // The event says why, with the counts.
        let ejected = d
            .events()
            .into_iter()
            .find(|e| e.profile == "passive" && e.endpoint == name && e.kind == ChangeKind::Passive)
            .unwrap();
        let reason = ejected
            .results
            .first()
            .map(|r| r.reason.to_string())
            .unwrap_or_default();
        assert!(reason.starts_with("passive: "), "{name}: {reason}");
        table += &format!("           {reason}\n");
    }
    eprintln!("detection time from the fault (40 client connections a second through the VIP):\n{table}");
    // The status view says what the clients met, and the metrics count it.
    let view = d.endpoint("passive", "b1");
    let seen = view.passive.expect("passive counts in the view");
    assert!(
        seen.refused >= 3 && seen.completed > 0 && seen.mean_rtt_ms > 0.0,
        "{seen:?}"
    );
    assert_eq!(d.endpoint("active", "b1").passive, None);
    let (_, metrics) = d.call("GET", "/metrics");
    let text = metrics.as_str().unwrap_or_default().to_string();
    for series in [
        "probed_passive_handshakes_total{profile=\"passive\",result=\"refused\"}",
        "probed_passive_ejections_total{profile=\"passive\",result=\"ejected\"}",
    ] {
        assert!(
            probed_tests::daemon::metric(&text, series) >= 1.0,
            "{series} in\n{text}"
        );
    }
    // The healthy backend was never ejected, and its clients all connected.
    assert_eq!(down_at(&d, "passive", "b0", ChangeKind::Passive), None);
    for i in 1..FAULTS.len() {
        rig.fault(i, Fault::Healthy);
    }
    let conns = load.finish();
    let b0: Vec<_> = conns.iter().filter(|c| c.who.as_deref() == Some("b0")).collect();
    assert!(b0.len() >= 100, "{} connections to b0", b0.len());
    // Back through their active checks (two successes at 2 s).
    for i in 1..FAULTS.len() {
        let back = d.wait_status(
            "passive",
            &format!("b{i}"),
            EndpointStatus::Online,
            Duration::from_secs(15),
        );
        let _ = back;
        let up = d
            .events()
            .into_iter()
            .rev()
            .find(|e| e.profile == "passive" && e.endpoint == format!("b{i}") && e.to == Some(EndpointStatus::Online))
            .expect("an event back online");
        assert_eq!(up.kind, ChangeKind::Health, "b{i} came back by {:?}", up.kind);
    }
    d.stop();
}

/// A fault on the clients' side (the backends' route back to them broken) fails every
/// backend's handshakes at once: passive detection ejects no more than its cap, and the
/// active checks (from the node, whose route works) bring back what it ejected.
#[test]
fn a_client_side_fault_ejects_at_most_the_cap() {
    let rig = PassiveRig::new(4, Node::RIG);
    let files = DaemonFiles::new();
    let text = config(&files, &rig, "1s", &[("web", passive(25).as_str())]);
    let d = start(&rig, &files, &text, &["web"], 4);
    let load = rig.load(&[VIP_V4.to_string()], 40, 8.0, Duration::from_millis(1500));
    std::thread::sleep(Duration::from_millis(1500));
    for b in &rig.backends {
        b.ns.ip(&["route", "add", "blackhole", "198.18.200.0/24"]);
    }
    let mut most = 0;
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        let out = (0..4)
            .filter(|i| d.endpoint("web", &format!("b{i}")).passive.is_some_and(|p| p.ejected))
            .count();
        most = most.max(out);
        std::thread::sleep(Duration::from_millis(50));
    }
    for b in &rig.backends {
        b.ns.ip(&["route", "del", "blackhole", "198.18.200.0/24"]);
    }
    let conns = load.finish();
    let ejections = d.events().into_iter().filter(|e| e.kind == ChangeKind::Passive).count();
    let (_, metrics) = d.call("GET", "/metrics");
    let text = metrics.as_str().unwrap_or_default().to_string();
    let capped = probed_tests::daemon::metric(
        &text,
        "probed_passive_ejections_total{profile=\"web\",result=\"capped\"}",
    );
    eprintln!(
        "client-side fault: at most {most} of 4 out at once, {ejections} ejections, {capped} held back by the cap, \
         {} of {} client connections failed",
        conns.iter().filter(|c| c.result != "ok").count(),
        conns.len()
    );
    assert_eq!(most, 1, "the cap (25% of 4) held, and it was reached");
    assert!(ejections >= 1 && capped >= 1.0);
    // What was ejected comes back through its active check (the node's own route works).
    for i in 0..4 {
        d.wait_status("web", &format!("b{i}"), EndpointStatus::Online, Duration::from_secs(10));
    }
    d.stop();
}

/// `[profile.passive]` added by a reload starts the observers and moves nothing else (the
/// endpoints keep their status and their checks); taken out again, the observers go.
#[test]
fn a_reload_adds_and_removes_passive_detection_and_moves_nothing_else() {
    let rig = PassiveRig::new(2, Node::RIG);
    let files = DaemonFiles::new();
    let plain = config(&files, &rig, "1s", &[("web", "")]);
    let with = config(&files, &rig, "1s", &[("web", passive(50).as_str())]);
    let d = start(&rig, &files, &plain, &["web"], 2);
    assert!(!observed(&rig, "pv0"));
    let events = d.events().len();
    std::fs::write(files.config_path(), &with).unwrap();
    let (code, report) = d.call("POST", "/v1/reload");
    assert_eq!(code, 200, "{report}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !(observed(&rig, "pv0") && observed(&rig, "pv1")) {
        assert!(Instant::now() < deadline, "no observers after the reload");
        std::thread::sleep(Duration::from_millis(20));
    }
    let moved: Vec<_> = d
        .events()
        .into_iter()
        .skip(events)
        .filter(|e| e.endpoint.starts_with('b'))
        .collect();
    assert!(moved.is_empty(), "the reload moved endpoints: {moved:#?}");
    // And it acts: a backend that refuses its clients goes.
    rig.fault(1, Fault::Refuse);
    let conns = rig
        .load(&[rig.backends[1].v4.clone()], 20, 1.0, Duration::from_millis(1500))
        .finish();
    assert!(conns.iter().all(|c| c.result == "refused"), "{conns:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while down_at(&d, "web", "b1", ChangeKind::Passive).is_none() {
        assert!(Instant::now() < deadline, "b1 not ejected: {:#?}", d.events());
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(files.config_path(), &plain).unwrap();
    let (code, report) = d.call("POST", "/v1/reload");
    assert_eq!(code, 200, "{report}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while observed(&rig, "pv0") || observed(&rig, "pv1") {
        assert!(
            Instant::now() < deadline,
            "observers left after the reload took passive out"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    d.stop();
}

/// With an XDP load balancer reading the bpf sink's slot table (test_slot_lb: it rewrites the
/// VIP to the slot's backend and hands the packet to the node's stack), passive detection sees
/// the flows it forwards; the backend it ejects leaves the table through the sink, as on any
/// verdict, and the clients' connections stop failing.
#[test]
fn passive_detection_ejects_from_a_bpf_slot_table() {
    let rig = PassiveRig::new(3, Node::RIG);
    let files = DaemonFiles::new();
    // Its active check alone would take 6 s or more: what follows is passive detection's.
    let mut text = config(&files, &rig, "2s", &[("web", passive(50).as_str())]);
    text = text.replace("dialect = \"lb\"\n", "dialect = \"lb\"\nrouting = \"weighted\"\n");
    text += &("\n".to_string() + &probed_tests::lb::doc_block("bpf-sink"));
    let d = start(&rig, &files, &text, &["web"], 3);
    let paths = probed::sinks::bpf::pin_paths(&files.pins.path, "web_lb");
    let _lb = probed_tests::lb::SlotLb::attach(
        &rig.node,
        probed_tests::topo::LB_IF,
        [198, 18, 211, 1],
        &paths.0,
        &paths.1,
    );
    // test_slot_lb does not translate replies back; the node does it here, statelessly, so
    // that the clients' connections complete.
    rig.node.nft(
        "table ip probed_slot_return {
            chain back {
                type filter hook forward priority mangle; policy accept;
                ip daddr 198.18.200.2 tcp sport 80 ip saddr set 198.18.211.1
            }
        }",
    );
    rig.fault(1, Fault::Refuse);
    let conns = rig
        .load(&["198.18.211.1".to_string()], 40, 6.0, Duration::from_millis(1500))
        .finish();
    let ejected = d
        .events()
        .into_iter()
        .find(|e| e.endpoint == "b1" && e.kind == ChangeKind::Passive)
        .unwrap_or_else(|| panic!("b1 not ejected by passive detection: {:#?}", d.events()));
    let at = ejected.at_ns as f64 / 1e9;
    let first = conns.iter().map(|c| c.start).fold(f64::MAX, f64::min);
    let refused_before = conns.iter().filter(|c| c.result == "refused" && c.start < at).count();
    // A connection that started once the sink had flipped the table (well within 0.2 s of the
    // verdict) went to a healthy backend.
    let late: Vec<_> = conns
        .iter()
        .filter(|c| c.start > at + 0.2 && c.result != "ok")
        .collect();
    eprintln!(
        "bpf slot table: b1 ejected {:.0} ms after the first client connection, {refused_before} refused before, \
         {} of {} connections failed after",
        (at - first) * 1e3,
        late.len(),
        conns.iter().filter(|c| c.start > at + 0.2).count()
    );
    assert!(refused_before >= 3, "the clients met the refusing backend first");
    assert!(late.is_empty(), "connections failed after the ejection: {late:?}");
    assert!(at - first < 2.0, "ejected within 2 s of the first connection");
    d.stop();
}
