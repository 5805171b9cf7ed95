//! Where the reply matcher runs beside a load balancer that owns the probe interface's XDP
//! hook: `hook = "xdp"` refuses and leaves the other program alone; `hook = "tcx"` probes TCP
//! and UDP beside it at tcx ingress and takes only its own link away. Also the source-address
//! fallback for kernels without BPF_FIB_LOOKUP_SRC (Linux 6.3-6.6), simulated.
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use aya::{
    programs::{tc::TcAttachOptions, LinkOrder, SchedClassifier, TcAttachType, Xdp},
    Ebpf,
};
use probed::{
    engine::{EngineError, L4Outcome, L4Proto, L4Request, L4Result, TxChoice, TxPath},
    kernel::{netlink::attached_xdp_programs, AttachMode, Hook, KernelError},
};
use probed_tests::{
    l4::{assert_backend_reset, collect, start_engine_with},
    topo::*,
    Netns, TestPins, Topology,
};

const TCP_OPEN: u16 = 8080;
const TCP_CLOSED: u16 = 8081;
const UDP_OPEN: u16 = 5300;
const UDP_CLOSED: u16 = 5301;

/// The load balancer's program: test_slot_lb in native mode on the probe interface, with no
/// VIP set, so it passes every packet on (as an LB does with traffic not for its VIPs).
/// Detached when dropped (closing its link detaches it, whatever namespace the thread is in).
struct ForeignXdp {
    _ebpf: Ebpf,
    id: u32,
}

impl ForeignXdp {
    fn attach(ns: &Netns, iface: &str) -> Self {
        ns.enter(|| {
            let mut ebpf = Ebpf::load(probed::kernel::FIXTURE_OBJECT).expect("load the fixtures' object");
            let prog: &mut Xdp = ebpf.program_mut("test_slot_lb").unwrap().try_into().unwrap();
            prog.load().expect("load test_slot_lb");
            probed::kernel::attach_xdp(prog, "test_slot_lb", iface, AttachMode::Driver).expect("attach test_slot_lb");
            let id = prog.info().expect("test_slot_lb info").id();
            Self { _ebpf: ebpf, id }
        })
    }
}

/// Another tcx ingress program on the probe interface, after ours: a second copy of
/// probe_rx_tc with empty maps and no port range, which passes (TCX_NEXT) everything.
/// Detached when dropped.
struct ForeignTcx {
    _ebpf: Ebpf,
    id: u32,
}

impl ForeignTcx {
    fn attach(ns: &Netns, iface: &str) -> Self {
        ns.enter(|| {
            let mut ebpf = Ebpf::load(probed::kernel::BPF_OBJECT).expect("load probed's object");
            let prog: &mut SchedClassifier = ebpf.program_mut("probe_rx_tc").unwrap().try_into().unwrap();
            prog.load().expect("load probe_rx_tc");
            prog.attach_with_options(
                iface,
                TcAttachType::Ingress,
                TcAttachOptions::TcxOrder(LinkOrder::last()),
            )
            .expect("attach a second probe_rx_tc");
            let id = prog.info().expect("info").id();
            Self { _ebpf: ebpf, id }
        })
    }
}

/// The ids of the tcx ingress programs on `iface`, in chain order.
fn tcx_ingress(ns: &Netns, iface: &str) -> Vec<(u32, String)> {
    ns.enter(|| {
        let (_, progs) = SchedClassifier::query_tcx(iface, TcAttachType::Ingress).expect("query tcx ingress");
        progs
            .iter()
            .map(|p| (p.id(), p.name_as_str().unwrap_or("").to_string()))
            .collect()
    })
}

fn xdp_ids(ns: &Netns, iface: &str) -> Vec<u32> {
    ns.enter(|| {
        let index = probed::kernel::if_index(iface).unwrap();
        attached_xdp_programs(index).expect("ask rtnetlink for the XDP programs")
    })
}

fn tcp(token: u64, target: String) -> L4Request {
    L4Request {
        token,
        target: target.parse().unwrap(),
        proto: L4Proto::Tcp,
        timeout: Duration::from_millis(500),
        tunnel: None,
    }
}

fn udp(token: u64, target: String) -> L4Request {
    L4Request {
        token,
        target: target.parse().unwrap(),
        proto: L4Proto::Udp {
            payload: Arc::from(&b"probed hooks test"[..]),
        },
        timeout: Duration::from_millis(500),
        tunnel: None,
    }
}

/// A backend with an open and a closed TCP port and a bound and an unbound UDP port on both
/// families, counting the RSTs it receives.
fn backend() -> (Topology, Vec<std::net::TcpListener>, Vec<std::net::UdpSocket>) {
    let topo = Topology::new();
    topo.backend.nft_input_rule("tcp flags & rst == rst counter");
    let tcp = vec![
        topo.backend.tcp_listen(&format!("{BACKEND_V4}:{TCP_OPEN}")),
        topo.backend.tcp_listen(&format!("[{BACKEND_V6}]:{TCP_OPEN}")),
    ];
    let udp = vec![
        topo.backend.udp_bind(&format!("{BACKEND_V4}:{UDP_OPEN}")),
        topo.backend.udp_bind(&format!("[{BACKEND_V6}]:{UDP_OPEN}")),
    ];
    (topo, tcp, udp)
}

/// Every port kind on both families: two open, two refused, two silent, two unreachable.
fn every_kind() -> Vec<L4Request> {
    let mut reqs = Vec::new();
    for (i, host) in [BACKEND_V4.to_string(), format!("[{BACKEND_V6}]")]
        .into_iter()
        .enumerate()
    {
        let t = 10 * i as u64;
        reqs.push(tcp(t, format!("{host}:{TCP_OPEN}")));
        reqs.push(tcp(t + 1, format!("{host}:{TCP_CLOSED}")));
        reqs.push(udp(t + 2, format!("{host}:{UDP_OPEN}")));
        reqs.push(udp(t + 3, format!("{host}:{UDP_CLOSED}")));
    }
    reqs
}

/// Median wall time from submitting one TCP probe to an open port to its result, over `n`
/// probes one after another: what a generator run costs at this hook, printed for the docs.
fn median_turnaround(
    engine: &probed::engine::L4Engine,
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<L4Result>,
    n: u64,
) -> Duration {
    let mut took = Vec::new();
    for i in 0..n {
        let started = Instant::now();
        engine
            .submit(vec![tcp(1000 + i, format!("{BACKEND_V4}:{TCP_OPEN}"))])
            .unwrap();
        let got = collect(rx, 1, Duration::from_secs(2));
        assert_eq!(got.len(), 1, "probe {i} got its result");
        assert_eq!(got[0].outcome, L4Outcome::Open);
        took.push(started.elapsed());
    }
    took.sort();
    took[took.len() / 2]
}

fn assert_every_kind(results: &[L4Result], want: usize) {
    assert_eq!(results.len(), want, "one result per probe: {results:?}");
    for r in results {
        let v6 = r.target.is_ipv6();
        let expected = match r.target.port() {
            TCP_OPEN => L4Outcome::Open,
            TCP_CLOSED => L4Outcome::Refused,
            UDP_OPEN => L4Outcome::Silent,
            // Port unreachable: ICMP 3/3, ICMPv6 1/4.
            _ if v6 => L4Outcome::Unreachable { icmp_type: 1, code: 4 },
            _ => L4Outcome::Unreachable { icmp_type: 3, code: 3 },
        };
        assert_eq!(r.outcome, expected, "{} (token {})", r.target, r.token);
    }
}

#[test]
fn xdp_hook_refuses_an_interface_with_a_foreign_xdp_program_and_leaves_it() {
    let topo = Topology::new();
    let foreign = ForeignXdp::attach(&topo.prober, PROBER_IF);
    assert_eq!(xdp_ids(&topo.prober, PROBER_IF), vec![foreign.id]);
    let pins = TestPins::new();
    let err = topo.prober.enter(|| {
        let mut cfg = probed::engine::EngineConfig::new(PROBER_IF, &pins.path);
        cfg.hook = Hook::Xdp;
        match probed::engine::L4Engine::start(cfg) {
            Ok(_) => panic!("the engine started on an interface with someone else's XDP program"),
            Err(e) => e,
        }
    });
    let EngineError::Kernel(KernelError::ForeignXdp { iface, prog_id, .. }) = &err else {
        panic!("expected ForeignXdp, got {err:?}");
    };
    assert_eq!((iface.as_str(), *prog_id), (PROBER_IF, foreign.id));
    let text = err.to_string();
    for needle in [
        PROBER_IF,
        "hook = \"tcx\"",
        "interface of its own",
        &foreign.id.to_string(),
    ] {
        assert!(text.contains(needle), "the message names {needle:?}: {text}");
    }
    assert_eq!(
        xdp_ids(&topo.prober, PROBER_IF),
        vec![foreign.id],
        "the foreign program is still attached, untouched"
    );
    assert!(
        tcx_ingress(&topo.prober, PROBER_IF).is_empty(),
        "nothing left at tcx ingress"
    );
}

#[test]
fn tcx_hook_probes_beside_a_foreign_xdp_program_and_removes_only_its_link() {
    let (topo, _tcp, _udp) = backend();
    // RSTs the prober's own stack sends pass its output hook; the matcher's, redirected at tc,
    // never do. Removed with the namespace.
    topo.prober.nft(
        "table inet probed_hooks_test {\n chain output {\n type filter hook output priority 0; policy accept;\n          tcp flags & rst == rst counter\n }\n}\n",
    );
    let foreign = ForeignXdp::attach(&topo.prober, PROBER_IF);
    let other_tcx = ForeignTcx::attach(&topo.prober, PROBER_IF);
    let pins = TestPins::new();
    let reqs = every_kind();
    let (results, ours) = topo.prober.enter(|| {
        let (engine, mut rx) = start_engine_with(&pins, TxChoice::Auto, |c| c.hook = Hook::Tcx);
        assert_eq!(engine.hook(), Hook::Tcx);
        probed_tests::l4::xdp_or_refused(&engine);
        let chain = {
            let (_, progs) = SchedClassifier::query_tcx(PROBER_IF, TcAttachType::Ingress).unwrap();
            progs.iter().map(aya::programs::ProgramInfo::id).collect::<Vec<_>>()
        };
        assert_eq!(chain.len(), 2, "ours and the other tcx program: {chain:?}");
        assert_eq!(chain[1], other_tcx.id, "ours goes first, the other keeps its place");
        engine.submit(reqs.clone()).unwrap();
        let results = collect(&mut rx, reqs.len(), Duration::from_secs(5));
        let median = median_turnaround(&engine, &mut rx, 20);
        eprintln!("tcx hook: submit-to-result median over 20 open probes: {median:?}");
        let snap = engine.snapshot().unwrap();
        assert_eq!(snap.inflight, 0, "{snap:?}");
        assert_eq!(
            (snap.rx.matched_open, snap.rx.matched_refused, snap.rx.matched_unreach),
            (22, 2, 2),
            "{:?}",
            snap.rx
        );
        assert_eq!(snap.rx.rst_sent, 22, "one RST per open probe");
        assert_eq!((snap.rx.forged, snap.rx.stale), (0, 0), "{:?}", snap.rx);
        (results, chain[0])
    });
    assert_every_kind(&results, reqs.len());
    assert_backend_reset(&topo, 22);
    let listing = topo
        .prober
        .exec("nft", &["list", "chain", "inet", "probed_hooks_test", "output"]);
    assert_eq!(
        probed_tests::servers::counted_packets(&listing, "tcp flags & rst == rst"),
        0,
        "the prober's stack sent no RST of its own: every one was the rewritten SYN+ACK\n{listing}"
    );
    assert_eq!(
        xdp_ids(&topo.prober, PROBER_IF),
        vec![foreign.id],
        "the LB's XDP program stayed"
    );
    let left: Vec<u32> = tcx_ingress(&topo.prober, PROBER_IF).iter().map(|p| p.0).collect();
    assert_eq!(left, vec![other_tcx.id], "only our link ({ours}) went away");
}

/// On Linux 6.3-6.6 bpf_fib_lookup refuses BPF_FIB_LOOKUP_SRC with -EINVAL; the engine must
/// notice at start and pick sources in userspace. The programs are loaded to answer as those
/// kernels do, in the check and in the generator: without the fallback every probe would end
/// as "no route".
#[test]
fn without_fib_lookup_src_sources_are_picked_in_userspace() {
    let (topo, _tcp, _udp) = backend();
    let pins = TestPins::new();
    let reqs = every_kind();
    let results = topo.prober.enter(|| {
        let (engine, mut rx) = start_engine_with(&pins, TxChoice::Auto, |c| {
            c.assume_no_fib_src = true;
            c.source_v4 = None;
            c.source_v6 = None;
        });
        let path = probed_tests::l4::xdp_or_refused(&engine);
        engine.submit(reqs.clone()).unwrap();
        let results = collect(&mut rx, reqs.len(), Duration::from_secs(5));
        let snap = engine.snapshot().unwrap();
        if path == TxPath::Raw {
            // The raw socket's sources are the stack's: nothing for the generator to pick.
            assert_eq!(snap.tx.sent, 0, "{:?}", snap.tx);
            return results;
        }
        assert_eq!(
            snap.tx.no_route, 0,
            "the generator was never asked to pick: {:?}",
            snap.tx
        );
        assert_eq!(
            snap.tx.sent,
            reqs.len() as u64,
            "all went out by the generator: {:?}",
            snap.tx
        );
        results
    });
    assert_every_kind(&results, reqs.len());
    assert_backend_reset(&topo, 2);
}

/// The same turnaround with probe_rx attached at XDP (no foreign program), for comparison:
/// the generator's test run then finds its program already in the XDP dispatcher.
#[test]
fn xdp_hook_turnaround_for_comparison() {
    let (topo, _tcp, _udp) = backend();
    let pins = TestPins::new();
    topo.prober.enter(|| {
        let (engine, mut rx) = start_engine_with(&pins, TxChoice::Auto, |c| c.hook = Hook::Xdp);
        probed_tests::l4::xdp_or_refused(&engine);
        let median = median_turnaround(&engine, &mut rx, 20);
        eprintln!("xdp hook: submit-to-result median over 20 open probes: {median:?}");
    });
    assert_backend_reset(&topo, 20);
}
