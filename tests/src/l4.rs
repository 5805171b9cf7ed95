//! Helpers for tests of the L4 engine: start it inside the prober namespace's thread and
//! collect results with a bound on time.
use std::time::{Duration, Instant};

use probed::engine::{EngineConfig, L4Engine, L4Request, L4Result, Snapshot, TxChoice, TxPath};

use crate::{topo::PROBER_IF, TestPins, Topology};

/// Starts an engine on the prober's veth; call it inside `prober.enter`.
pub fn start_engine(pins: &TestPins, tx: TxChoice) -> (L4Engine, tokio::sync::mpsc::UnboundedReceiver<L4Result>) {
    start_engine_with(pins, tx, |_| {})
}

/// As `start_engine`, with a last word on the configuration.
pub fn start_engine_with(
    pins: &TestPins,
    tx: TxChoice,
    adjust: impl FnOnce(&mut EngineConfig),
) -> (L4Engine, tokio::sync::mpsc::UnboundedReceiver<L4Result>) {
    let mut cfg = EngineConfig::new(PROBER_IF, &pins.path);
    cfg.tx = tx;
    cfg.mode = xdp_mode();
    cfg.hook = hook();
    adjust(&mut cfg);
    L4Engine::start(cfg).unwrap_or_else(|e| panic!("start the L4 engine: {e:?}"))
}

/// The XDP mode tests attach in: `PROBED_XDP_MODE` (auto, driver or skb), else auto, which
/// is what the daemon uses by default (native on veth).
pub fn xdp_mode() -> probed::kernel::AttachMode {
    match std::env::var("PROBED_XDP_MODE") {
        Ok(v) => probed::kernel::AttachMode::parse(&v).unwrap_or_else(|| {
            panic!(
                "PROBED_XDP_MODE={v:?}: expected one of {:?}",
                probed::kernel::AttachMode::NAMES
            )
        }),
        Err(_) => probed::kernel::AttachMode::Auto,
    }
}

/// The hook the reply matcher runs at in tests: `PROBED_HOOK` (xdp or tcx), else xdp, the
/// daemon's default. `PROBED_HOOK=tcx` runs the L4 suites with probe_rx_tc.
pub fn hook() -> probed::kernel::Hook {
    match std::env::var("PROBED_HOOK") {
        Ok(v) => probed::kernel::Hook::parse(&v)
            .unwrap_or_else(|| panic!("PROBED_HOOK={v:?}: expected one of {:?}", probed::kernel::Hook::NAMES)),
        Err(_) => probed::kernel::Hook::Xdp,
    }
}

/// The end-of-run checks both transmit paths share: no reply counted forged or stale, and on
/// the XDP path the generator built one frame per probe.
pub fn assert_clean_run(snap: &Snapshot, path: TxPath, probes: usize) {
    assert_eq!((snap.rx.forged, snap.rx.stale), (0, 0), "{:?}", snap.rx);
    if path == TxPath::Xdp {
        assert_eq!(
            snap.tx.sent, probes as u64,
            "the generator built every frame: {:?}",
            snap.tx
        );
    }
}

/// How an engine on the XDP path sends: by the generator, or (`TxPath::Raw`) by the raw
/// socket where this kernel refuses the generator's live-frame runs, which the engine must
/// say in the path's reason (printed here, since the generator then goes untested on this
/// machine). Any other path fails.
pub fn xdp_or_refused(engine: &L4Engine) -> TxPath {
    let (path, why) = (engine.tx_path(), engine.tx_path_reason());
    assert_eq!(path, TxPath::Xdp, "transmit path: {why}");
    if why.contains("refuses the XDP live-frame runs") {
        eprintln!("note: {why}; the XDP generator is not tested on this kernel");
        return TxPath::Raw;
    }
    path
}

/// One batch through a fresh engine; call it inside `prober.enter`. Starts the engine on `tx`,
/// checks that it chose `want_path`, submits `reqs` and waits up to 5 s for their results;
/// then checks that nothing is left in flight and that the run was clean (`assert_clean_run`).
/// Returns the results as they came and the engine's counters at the end.
pub fn run_batch(pins: &TestPins, tx: TxChoice, want_path: TxPath, reqs: &[L4Request]) -> (Vec<L4Result>, Snapshot) {
    let (engine, mut rx) = start_engine(pins, tx);
    let want_path = match want_path {
        TxPath::Xdp if tx == TxChoice::Auto => xdp_or_refused(&engine),
        _ => {
            assert_eq!(engine.tx_path(), want_path, "transmit path");
            want_path
        }
    };
    engine.submit(reqs.to_vec()).unwrap();
    let results = collect(&mut rx, reqs.len(), Duration::from_secs(5));
    let snap = engine.snapshot().unwrap();
    assert_eq!(snap.inflight, 0, "nothing left in flight: {snap:?}");
    assert_clean_run(&snap, want_path, reqs.len());
    (results, snap)
}

/// The backend saw exactly `n` RSTs (counted by its `tcp flags & rst == rst` input rule) and
/// keeps no half-open connection: the matcher rewrote each SYN+ACK into an RST and sent it
/// back, and the prober's own stack sent none.
pub fn assert_backend_reset(topo: &Topology, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let synrecv = topo.backend.exec("ss", &["-Htan", "state", "syn-recv"]);
        if synrecv.trim().is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "half-open connections left on the backend:\n{synrecv}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        topo.backend.nft_rule_packets("tcp flags & rst == rst"),
        n,
        "RSTs seen by the backend"
    );
}

/// Waits for `n` results, or until `within` has passed; returns what arrived.
pub fn collect(rx: &mut tokio::sync::mpsc::UnboundedReceiver<L4Result>, n: usize, within: Duration) -> Vec<L4Result> {
    let deadline = Instant::now() + within;
    let mut out = Vec::with_capacity(n);
    while out.len() < n && Instant::now() < deadline {
        match rx.try_recv() {
            Ok(r) => out.push(r),
            Err(tokio::sync::mpsc::error::TryRecvError::Empty) => std::thread::sleep(Duration::from_millis(1)),
            Err(_) => break,
        }
    }
    out
}
