//! The engine thread: send, match, time out. It owns the kernel side and is the only
//! thread that runs the generator. This file holds its state and its loop; sending, replies
//! and timeouts, and sleeping between turns have their own files.
mod cooling;
mod deadlines;
mod replies;
mod send;
mod wait;

use std::{
    collections::VecDeque,
    net::SocketAddr,
    sync::{mpsc, Arc},
    time::{Duration, Instant},
};

use probe_common::l4::{FlowKey, ProbeEvent};

use send::SEND_SLICE;
pub(crate) use wait::Waker;

use super::{
    raw::RawSender,
    source::{choose_path, needs_fib_src, SourcePicker},
    templates::Templates,
    Cmd, EngineConfig, EngineError, EngineStats, L4Outcome, L4Request, L4Result, Snapshot, TxChoice, TxPath,
};
use crate::hash::FastMap;
use crate::kernel::{
    l4::{KernelConfig, L4Kernel},
    pin::PinDir,
};

/// The interfaces probe_rx is attached to are checked at most this often (an ioctl each).
const IFACE_CHECK_EVERY: Duration = Duration::from_millis(1);

/// How often the engine asks whether its devices still transmit XDP frames (a netlink query
/// per interface): shorter than any probe's timeout, so that a probe lost to the change is
/// known for what it is before it would time out.
const XMIT_CHECK_EVERY: Duration = Duration::from_millis(100);

/// A probe on the wire.
struct Live {
    token: u64,
    target: SocketAddr,
    /// Its entry in `active_flows`: the flow as requested, with no source address when the
    /// generator picks it.
    key: FlowKey,
    /// The flow on the wire, once the source is known: the in-flight table's key.
    flow: FlowKey,
    gen: u32,
    udp: bool,
    sent: Instant,
    /// From submit to `sent`.
    queued: Duration,
    /// The kernel took the entry before our timeout did: its event is on the way.
    claimed: bool,
    payload: Option<Arc<[u8]>>,
    /// HTTP probes: the request template's id plus one (0 for others).
    req: u32,
    tunnel: Option<super::Tunnel>,
}

pub(crate) struct EngineState {
    kernel: L4Kernel,
    key: [u64; 2],
    path: TxPath,
    path_reason: String,
    /// The path and its reason as the engine's handle reads them (metrics, `probed check`).
    shared_path: Arc<std::sync::Mutex<(TxPath, String)>>,
    /// probe_rx leaves the RSTs to the stack (it cannot send frames back out).
    rst_by_stack: bool,
    /// Why probe_rx could not send frames back out when the engine started, if it could not.
    no_frames_out: Option<super::source::NoXdpTransmit>,
    /// When `watch_xdp_tx` next asks the devices.
    next_xmit_check: Instant,
    /// When a device was found to have lost XDP transmit: probes sent before then that time
    /// out are no verdict.
    xdp_tx_lost_at: Option<Instant>,
    raw: RawSender,
    sources: SourcePicker,
    /// The generator picks unset sources itself (BPF_FIB_LOOKUP_SRC works on this kernel).
    fib_src: bool,
    sport_min: u16,
    sport_span: u32,
    slots: Vec<Option<Live>>,
    free: Vec<u32>,
    active_flows: FastMap<FlowKey, u32>,
    /// Flows of probes that just ended, passed over by the next picks.
    cooling: cooling::Cooling,
    deadlines: deadlines::Deadlines,
    next_gen: u32,
    results: tokio::sync::mpsc::UnboundedSender<L4Result>,
    wake: Arc<Waker>,
    stats: EngineStats,
    events: Vec<ProbeEvent>,
    /// Requests waiting for room in the in-flight table.
    /// Probes not sent yet, with when they were submitted.
    backlog: VecDeque<(Instant, L4Request)>,
    /// When the current loop turn began.
    last_turn: Instant,
    /// When `lost_interface` next asks the kernel.
    next_iface_check: Instant,
    max_inflight: usize,
    /// The operator was told once that a route leaves by an interface without probe_rx.
    warned_iface: bool,
    /// Generator runs that failed, and when that was last logged.
    failed_runs: u64,
    last_run_warning: Option<Instant>,
    /// Flows of tunnelled probes that have ended, with when their roads (PROBE_ROADS) may go:
    /// once the flow has rested (`cooling`), in the order they ended.
    retired_roads: VecDeque<(Instant, FlowKey)>,
    /// HTTP request templates in the kernel, and when unused ones are next freed.
    templates: Templates,
    next_sweep: Instant,
}

/// Whether a tunnelled probe that ended with `outcome` left its road for userspace to delete:
/// probe_rx deletes a TCP probe's road itself when it takes the outcome (open, refused,
/// unreachable), so the common case costs no syscall; an HTTP probe's road stays for the
/// backend's late segments, and a timeout or a local error was never the kernel's.
fn road_left(req: u32, outcome: L4Outcome) -> bool {
    req != 0
        || !matches!(
            outcome,
            L4Outcome::Open | L4Outcome::Refused | L4Outcome::Unreachable { .. }
        )
}

/// Room for probes waiting to be sent that an empty backlog keeps: beyond it a drained
/// backlog gives its memory back, down to one send slice. Two slices: with eight, 65k TCP
/// targets kept 1.8 MB of a first round's room for good, and a turn rarely brings more
/// than a slice once the first rounds are out.
const BACKLOG_KEPT: usize = 2 * SEND_SLICE;

/// How often unused HTTP request templates are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// The cookie key, from the kernel's random pool. There is no fallback: a key anyone could
/// guess (a time, a pid) would let a blind attacker forge replies, so an engine without a
/// random key does not start.
fn random_key() -> Result<[u64; 2], EngineError> {
    key_from(|buf| crate::kernel::sys::getrandom(buf))
}

/// Times getrandom may be interrupted by a signal (it blocks only until the pool is seeded,
/// once per boot) before the engine gives up.
const KEY_READ_TRIES: usize = 8;

/// A key from `fill`, which reads random bytes the way getrandom(2) does. Anything short of
/// 16 bytes that are not all zero is an error.
fn key_from(mut fill: impl FnMut(&mut [u8; 16]) -> std::io::Result<usize>) -> Result<[u64; 2], EngineError> {
    let mut buf = [0u8; 16];
    let mut last = None;
    for _ in 0..KEY_READ_TRIES {
        let source = match fill(&mut buf) {
            Ok(16) => {
                let (a, b) = buf.split_at(8);
                let k = [
                    u64::from_ne_bytes(a.try_into().expect("8 bytes")),
                    u64::from_ne_bytes(b.try_into().expect("8 bytes")),
                ];
                if k == [0, 0] {
                    std::io::Error::other("getrandom gave 16 zero bytes")
                } else {
                    return Ok(k);
                }
            }
            Ok(n) => std::io::Error::other(format!("{n} random bytes of 16")),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                last = Some(e);
                continue;
            }
            Err(e) => e,
        };
        return Err(key_error(source));
    }
    Err(key_error(last.unwrap_or_else(|| std::io::Error::other("no tries"))))
}

fn key_error(source: std::io::Error) -> EngineError {
    EngineError::Io {
        op: "read the cookie key from getrandom",
        source,
    }
}

/// Asks the kernel once whether the generator can pick sources (BPF_FIB_LOOKUP_SRC, Linux
/// 6.7+), when it would have to; says so when it cannot, since every probe of a family
/// without a configured source then costs a route lookup here (cached for 30 s).
/// The XDP path needs the kernel to run the generator (live-frame test runs of probe_rx).
/// Where it refuses them at start, the path's reason says so: each run then fails and its
/// probes go through the raw socket (`send_xdp`'s fallback), while replies are matched and
/// RSTs sent in XDP as on the XDP path.
fn live_frames_check(kernel: &mut L4Kernel, cfg: &EngineConfig, chosen: &mut (TxPath, String)) {
    if chosen.0 != TxPath::Xdp || matches!(cfg.tx, TxChoice::Force(_)) {
        return;
    }
    let Err(e) = kernel.live_frames_supported() else {
        return;
    };
    let why = format!(
        "this kernel refuses the XDP live-frame runs the generator needs ({}): each run falls back \
         to the raw socket; replies are still matched in XDP",
        crate::errors::chain(&e)
    );
    log::warn!("{why}");
    chosen.1 = format!("{}; but {why}", chosen.1);
}

fn fib_src_check(kernel: &mut L4Kernel, cfg: &EngineConfig, path: TxPath) -> bool {
    if !needs_fib_src(path, cfg.source_v4.is_some(), cfg.source_v6.is_some()) {
        return true;
    }
    let supported = kernel.fib_lookup_src_supported().unwrap_or_else(|e| {
        log::warn!("cannot check this kernel's bpf_fib_lookup for BPF_FIB_LOOKUP_SRC ({e}); assuming it lacks it");
        false
    });
    if !supported {
        log::warn!(
            "this kernel's bpf_fib_lookup does not take BPF_FIB_LOOKUP_SRC (added in Linux 6.7): \
             probed picks probe source addresses in userspace from the routing table (cached 30 s \
             per target) instead of in the generator; set [source].addresses to skip the lookups"
        );
    }
    supported
}

impl EngineState {
    pub(crate) fn new(
        cfg: &EngineConfig,
        results: tokio::sync::mpsc::UnboundedSender<L4Result>,
        wake: Arc<Waker>,
    ) -> Result<Self, EngineError> {
        let key = random_key()?;
        let pins = PinDir::create(&cfg.pin_dir)?;
        let devs = std::iter::once(cfg.iface.as_str()).chain(cfg.more_ifaces.iter().map(String::as_str));
        let no_frames_out =
            super::source::frames_back_out(cfg.hook, cfg.mode, devs, super::source::device_can_xmit_xdp).err();
        if let Some(why) = &no_frames_out {
            log::warn!(
                "probe_rx cannot send frames back out here ({why}): the RSTs that end TCP probes are left \
                 to the node's stack, and HTTP checks go through sockets"
            );
        }
        let rst_by_stack = no_frames_out.is_some();
        let kcfg = KernelConfig {
            rst_by_stack,
            iface: cfg.iface.clone(),
            more_ifaces: cfg.more_ifaces.clone(),
            mode: cfg.mode,
            hook: cfg.hook,
            simulate_no_fib_src: cfg.assume_no_fib_src,
            sport_min: cfg.sport_min,
            sport_max: cfg.sport_max,
            key,
            max_inflight: cfg.max_inflight,
        };
        let mut kernel = L4Kernel::load(&kcfg, pins)?;
        let mut chosen = choose_path(&cfg.iface, &cfg.more_ifaces, cfg.tx);
        live_frames_check(&mut kernel, cfg, &mut chosen);
        let (path, path_reason) = chosen;
        let fib_src = fib_src_check(&mut kernel, cfg, path);
        Ok(Self {
            kernel,
            key,
            path,
            shared_path: Arc::new(std::sync::Mutex::new((path, path_reason.clone()))),
            path_reason,
            rst_by_stack,
            no_frames_out,
            next_xmit_check: Instant::now() + XMIT_CHECK_EVERY,
            xdp_tx_lost_at: None,
            raw: RawSender::new()?,
            sources: SourcePicker::new(cfg.source_v4, cfg.source_v6),
            fib_src,
            sport_min: cfg.sport_min,
            sport_span: u32::from(cfg.sport_max - cfg.sport_min) + 1,
            slots: Vec::new(),
            free: Vec::new(),
            active_flows: FastMap::default(),
            cooling: cooling::Cooling::default(),
            deadlines: deadlines::Deadlines::default(),
            next_gen: 1,
            results,
            wake,
            stats: EngineStats::default(),
            events: Vec::new(),
            backlog: VecDeque::new(),
            last_turn: Instant::now(),
            next_iface_check: Instant::now(),
            max_inflight: cfg.max_inflight as usize,
            warned_iface: false,
            failed_runs: 0,
            last_run_warning: None,
            retired_roads: VecDeque::new(),
            templates: Templates::new(probe_common::http::MAX_HTTP_REQS),
            next_sweep: Instant::now() + SWEEP_EVERY,
        })
    }

    pub(crate) fn rx_mode(&self) -> crate::kernel::AttachMode {
        self.kernel.rx_mode()
    }

    pub(crate) fn hook(&self) -> crate::kernel::Hook {
        self.kernel.hook()
    }

    /// Whether probe_rx could send frames back out (HTTP requests among them) when the engine
    /// started, or why not.
    pub(crate) fn frames_out(&self) -> Result<(), super::source::NoXdpTransmit> {
        self.no_frames_out.clone().map_or(Ok(()), Err)
    }

    /// The transmit path and why, as it is now and as it will be if it changes.
    pub(crate) fn path(&self) -> Arc<std::sync::Mutex<(TxPath, String)>> {
        self.shared_path.clone()
    }

    /// Whether the devices probe_rx runs on still transmit XDP frames, asked every 100 ms while
    /// something depends on it. A device can lose it under a running engine (veth: the peer's
    /// GRO turned off): frames sent back out (the RSTs probe_rx writes in native XDP, the
    /// generator's probes) would then be dropped, and every probe would time out for a fault
    /// of this node, or meet the half-open connection a lost RST left. From then on the RSTs
    /// are left to the stack and probes go through the raw socket, until the daemon restarts
    /// (HTTP checks move to sockets by the runner's own guard).
    fn watch_xdp_tx(&mut self) {
        use crate::kernel::{AttachMode, Hook};
        let now = Instant::now();
        // What a device without XDP transmit would break: the RSTs probe_rx sends back out
        // in native XDP, and the generator's probes on the XDP path.
        let native = self.kernel.hook() == Hook::Xdp && self.kernel.rx_mode() != AttachMode::Skb;
        let rsts_at_risk = native && !self.rst_by_stack;
        let sends_at_risk = self.path == TxPath::Xdp;
        if !(rsts_at_risk || sends_at_risk) || now < self.next_xmit_check {
            return;
        }
        self.next_xmit_check = now + XMIT_CHECK_EVERY;
        let Some(dev) = self
            .kernel
            .interfaces()
            .find(|d| !super::source::device_can_xmit_xdp(d))
            .map(str::to_string)
        else {
            return;
        };
        let why = format!("{dev} no longer advertises XDP transmit (ndo_xdp_xmit)");
        log::warn!(
            "{why}: from now on probes go through the raw socket and the node's stack sends the RSTs \
             that end them, until probed restarts; probes that were on the wire are no verdict"
        );
        if rsts_at_risk {
            if let Err(e) = self.kernel.set_rst_by_stack() {
                log::error!("cannot tell probe_rx to leave the RSTs to the stack: {e}");
            }
            self.rst_by_stack = true;
        }
        if sends_at_risk {
            self.path = TxPath::Raw;
            self.path_reason = why;
            if let Ok(mut shared) = self.shared_path.lock() {
                *shared = (self.path, self.path_reason.clone());
            }
        }
        self.xdp_tx_lost_at = Some(now);
    }

    pub(crate) fn run(mut self, cmds: mpsc::Receiver<Cmd>) {
        loop {
            self.last_turn = Instant::now();
            // Before anything is sent or timed out: failures are only the backend's doing
            // while probe_rx can still see replies.
            if self.lost_interface() {
                return;
            }
            self.watch_xdp_tx();
            self.wake.reset();
            // Straight into the backlog: a batch gathered first held a second copy of a
            // burst (sharing one core with a busy runner, the engine found 10-22k probes
            // waiting per turn in the first rounds of 65k TCP checks).
            loop {
                match cmds.try_recv() {
                    Ok(Cmd::Probe(at, reqs)) => {
                        self.stats.submitted += reqs.len() as u64;
                        self.backlog.extend(reqs.into_iter().map(|r| (at, r)));
                    }
                    Ok(Cmd::Snapshot(reply)) => {
                        let _ = reply.send(self.snapshot());
                    }
                    Ok(Cmd::Stop) | Err(mpsc::TryRecvError::Disconnected) => return,
                    Err(mpsc::TryRecvError::Empty) => break,
                }
            }
            // Sending and reading replies take turns, a slice at a time: a backlog of a whole
            // fleet due at once (500k probes) sent in one go kept its replies in the ring for
            // the second it took, the in-flight table a quarter of a million deep and cold in
            // the cache. Bounded: every slice sends something or the loop ends.
            loop {
                let sent = self.pump(SEND_SLICE);
                self.read_events();
                self.expire(Instant::now());
                if sent == 0 || self.backlog.is_empty() {
                    break;
                }
            }
            // A burst's room is kept only while a burst waits: 80 bytes a probe, and heaptrack
            // found 8 MB of it held after those first rounds.
            if self.backlog.is_empty() && self.backlog.capacity() > BACKLOG_KEPT {
                self.backlog.shrink_to(SEND_SLICE);
            }
            self.sweep_templates();
            self.forget_roads(Instant::now());
            self.wait();
        }
    }

    /// Whether an interface probe_rx was attached to is gone. Then the engine must stop:
    /// replies there are no longer matched, and reporting the probes' timeouts would fail
    /// every L4 backend for a fault of this node. Ending the thread closes the results
    /// channel, and the daemon exits with an error for its service manager to restart it.
    fn lost_interface(&mut self) -> bool {
        let now = Instant::now();
        if now < self.next_iface_check {
            return false;
        }
        self.next_iface_check = now + IFACE_CHECK_EVERY;
        let Some(iface) = self.kernel.lost_interface() else {
            return false;
        };
        log::error!(
            "{iface}, where probe_rx was attached, is gone (deleted or recreated): the L4 engine \
             stops, since no reply can be matched there any more"
        );
        true
    }

    fn snapshot(&self) -> Snapshot {
        let mut engine = self.stats;
        engine.http_templates = self.templates.held() as u64;
        Snapshot {
            rx: self.kernel.rx_counters().unwrap_or_default(),
            tx: self.kernel.tx_counters().unwrap_or_default(),
            engine,
            inflight: self.active_flows.len(),
            roads: self.kernel.roads(),
        }
    }

    /// Deletes the HTTP request templates no probe has used for a while.
    fn sweep_templates(&mut self) {
        let now = Instant::now();
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now + SWEEP_EVERY;
        for id in self.templates.sweep(now) {
            if let Err(e) = self.kernel.remove_http_req(id) {
                log::debug!("cannot delete HTTP request template {id}: {e}");
            }
        }
    }

    fn alloc_slot(&mut self, live: Live) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(live);
                i
            }
            None => {
                self.slots.push(Some(live));
                (self.slots.len() - 1) as u32
            }
        }
    }

    fn finish(&mut self, slot: u32, outcome: L4Outcome, elapsed: Duration) {
        let Some(live) = self.slots.get_mut(slot as usize).and_then(Option::take) else {
            return;
        };
        self.free.push(slot);
        if live.req != 0 {
            self.templates.release(live.req - 1, Instant::now());
        }
        if live.tunnel.is_some() && road_left(live.req, outcome) {
            // Kept while the flow rests: what the backend sends after the probe's end (its
            // FIN, a response sent again) is answered with a RST wrapped like the rest.
            self.retired_roads
                .push_back((self.last_turn + cooling::COOLING, live.flow));
        }
        self.active_flows.remove(&live.key);
        self.cooling.rest(&live.key, self.last_turn);
        self.stats.completed += 1;
        let _ = self.results.send(L4Result {
            token: live.token,
            target: live.target,
            outcome,
            elapsed,
            queued: live.queued,
        });
    }

    /// Deletes the roads of tunnelled probes whose flows have rested, unless a new probe has
    /// taken the flow since (its own road is in the entry then).
    fn forget_roads(&mut self, now: Instant) {
        while let Some(&(due, flow)) = self.retired_roads.front() {
            if due > now {
                break;
            }
            self.retired_roads.pop_front();
            if !self.kernel.in_flight(&flow) {
                self.kernel.forget_road(&flow);
            }
        }
    }

    fn reject(&mut self, req: &L4Request, outcome: L4Outcome) {
        self.stats.rejected += 1;
        let _ = self.results.send(L4Result {
            token: req.token,
            target: req.target,
            outcome,
            elapsed: Duration::ZERO,
            queued: Duration::ZERO,
        });
    }

    fn fail_now(&mut self, slot: u32, outcome: L4Outcome) {
        self.finish(slot, outcome, Duration::ZERO);
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::{key_from, road_left, L4Outcome};

    #[test]
    fn only_roads_probe_rx_did_not_take_are_left_to_userspace() {
        // TCP outcomes probe_rx takes: it deleted the road.
        for o in [
            L4Outcome::Open,
            L4Outcome::Refused,
            L4Outcome::Unreachable { icmp_type: 3, code: 3 },
        ] {
            assert!(!road_left(0, o), "{o}");
        }
        // A timeout or a local error is userspace's; an HTTP probe's road stays for its flow's rest.
        assert!(road_left(0, L4Outcome::Timeout));
        assert!(road_left(0, L4Outcome::LocalError { errno: libc::ENOBUFS }));
        assert!(road_left(3, L4Outcome::HttpStatus { status: 200 }));
        assert!(road_left(3, L4Outcome::Refused));
    }

    #[test]
    fn a_failed_getrandom_stops_the_engine() {
        // No fallback key: every failure is an error, never a key made up from the clock.
        let err = |kind| move |_: &mut [u8; 16]| Err::<usize, _>(io::Error::from(kind));
        assert!(key_from(err(io::ErrorKind::Unsupported)).is_err(), "ENOSYS");
        assert!(key_from(err(io::ErrorKind::Interrupted)).is_err(), "EINTR every time");
        assert!(key_from(|_| Ok(8)).is_err(), "a short read");
        assert!(key_from(|_| Ok(16)).is_err(), "16 zero bytes");
        let msg = key_from(|_| Ok(3)).unwrap_err().to_string();
        assert!(msg.contains("getrandom"), "{msg}");
    }

    #[test]
    fn getrandom_is_retried_after_a_signal() {
        let mut calls = 0;
        let key = key_from(|buf| {
            calls += 1;
            if calls < 3 {
                return Err(io::Error::from(io::ErrorKind::Interrupted));
            }
            buf.copy_from_slice(&[7; 16]);
            Ok(16)
        })
        .expect("a key after two EINTRs");
        assert_eq!(key, [u64::from_ne_bytes([7; 8]); 2]);
        assert_eq!(calls, 3);
    }
}
