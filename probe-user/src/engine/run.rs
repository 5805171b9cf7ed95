//! The engine thread: send, match, time out. It owns the kernel side and is the only
//! thread that runs the generator.
use std::{
    cmp::Reverse,
    collections::{BinaryHeap, HashMap, VecDeque},
    net::{IpAddr, SocketAddr},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::{mpsc, Arc},
    time::{Duration, Instant},
};

use probe_common::{
    cookie::probe_cookie,
    frame::{payload_sum, SynV4, SynV6, UdpV4, UdpV6},
    l4::{EventKind, FlowKey, Inflight, ProbeEvent, ProbeJob},
    packet::{IPPROTO_TCP, IPPROTO_UDP},
};

use super::{
    is_v4,
    raw::RawSender,
    source::{choose_path, SourcePicker},
    Cmd, EngineConfig, EngineError, EngineStats, L4Outcome, L4Proto, L4Request, L4Result, Snapshot, TxPath,
};
use crate::hash::FastMap;
use crate::kernel::{
    l4::{KernelConfig, L4Kernel},
    pin::PinDir,
};

/// BPF_FIB_LKUP_RET_FWD_DISABLED, as the generator reports it in a NoRoute event.
const FIB_FWD_DISABLED: u8 = 5;
/// How long to wait for the event of a probe whose entry the kernel already took.
const CLAIM_GRACE: Duration = Duration::from_millis(200);
/// How often the ring buffer is read while probes are on the wire.
const EVENT_TICK: Duration = Duration::from_millis(1);
/// Shortest gap between two warnings about failed generator runs.
const WARN_EVERY: Duration = Duration::from_secs(10);
/// Longest sleep between loop turns when nothing is due.
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// An eventfd that wakes the engine thread when commands arrive.
pub(crate) struct Waker {
    fd: OwnedFd,
}

impl Waker {
    pub(crate) fn new() -> Result<Self, EngineError> {
        // SAFETY: eventfd has no memory preconditions; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(EngineError::Io {
                op: "eventfd",
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd })
    }

    pub(crate) fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
        unsafe { libc::write(self.fd.as_raw_fd(), &one as *const u64 as *const _, 8) };
    }

    fn reset(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64; EAGAIN when not signalled is fine.
        unsafe { libc::read(self.fd.as_raw_fd(), &mut v as *mut u64 as *mut _, 8) };
    }
}

/// What ended a poll.
struct Woke {
    command: bool,
    events: bool,
}

/// Probes that share one template frame: IPv4 or not, and the UDP payload (None for TCP).
type FrameShape = (bool, Option<Arc<[u8]>>);

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
    /// The kernel took the entry before our timeout did: its event is on the way.
    claimed: bool,
    payload: Option<Arc<[u8]>>,
}

pub(crate) struct EngineState {
    kernel: L4Kernel,
    key: [u64; 2],
    path: TxPath,
    path_reason: String,
    raw: RawSender,
    sources: SourcePicker,
    sport_min: u16,
    sport_span: u32,
    slots: Vec<Option<Live>>,
    free: Vec<u32>,
    active_flows: FastMap<FlowKey, u32>,
    deadlines: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    next_gen: u32,
    results: tokio::sync::mpsc::UnboundedSender<L4Result>,
    wake: Arc<Waker>,
    stats: EngineStats,
    events: Vec<ProbeEvent>,
    /// Requests waiting for room in the in-flight table.
    backlog: VecDeque<L4Request>,
    /// When the current loop turn began.
    last_turn: Instant,
    max_inflight: usize,
    /// The operator was told once that a route leaves by an interface without probe_rx.
    warned_iface: bool,
    /// Generator runs that failed, and when that was last logged.
    failed_runs: u64,
    last_run_warning: Option<Instant>,
}

fn random_key() -> [u64; 2] {
    let mut k = [0u64; 2];
    // SAFETY: getrandom writes at most the 16 bytes we pass, into `k`.
    let n = unsafe { libc::getrandom(k.as_mut_ptr() as *mut _, 16, 0) };
    if n != 16 || k == [0, 0] {
        // getrandom cannot fail for 16 bytes once the pool is ready; never run with a zero key.
        let t = Instant::now().elapsed().as_nanos() as u64 ^ std::process::id() as u64;
        k = [t | 1, t.rotate_left(17) | 1];
    }
    k
}

impl EngineState {
    pub(crate) fn new(
        cfg: &EngineConfig,
        results: tokio::sync::mpsc::UnboundedSender<L4Result>,
        wake: Arc<Waker>,
    ) -> Result<Self, EngineError> {
        let key = random_key();
        let pins = PinDir::create(&cfg.pin_dir)?;
        let kcfg = KernelConfig {
            iface: cfg.iface.clone(),
            more_ifaces: cfg.more_ifaces.clone(),
            mode: cfg.mode,
            sport_min: cfg.sport_min,
            sport_max: cfg.sport_max,
            key,
            max_inflight: cfg.max_inflight,
        };
        let kernel = L4Kernel::load(&kcfg, pins)?;
        let (path, path_reason) = choose_path(&cfg.iface, &cfg.more_ifaces, cfg.tx);
        Ok(Self {
            kernel,
            key,
            path,
            path_reason,
            raw: RawSender::new()?,
            sources: SourcePicker::new(cfg.source_v4, cfg.source_v6),
            sport_min: cfg.sport_min,
            sport_span: (cfg.sport_max - cfg.sport_min) as u32 + 1,
            slots: Vec::new(),
            free: Vec::new(),
            active_flows: FastMap::default(),
            deadlines: BinaryHeap::new(),
            next_gen: 1,
            results,
            wake,
            stats: EngineStats::default(),
            events: Vec::new(),
            backlog: VecDeque::new(),
            last_turn: Instant::now(),
            max_inflight: cfg.max_inflight as usize,
            warned_iface: false,
            failed_runs: 0,
            last_run_warning: None,
        })
    }

    pub(crate) fn rx_mode(&self) -> crate::kernel::AttachMode {
        self.kernel.rx_mode()
    }

    pub(crate) fn path(&self) -> (TxPath, String) {
        (self.path, self.path_reason.clone())
    }

    pub(crate) fn run(mut self, cmds: mpsc::Receiver<Cmd>) {
        loop {
            self.last_turn = Instant::now();
            self.wake.reset();
            let mut batch = Vec::new();
            loop {
                match cmds.try_recv() {
                    Ok(Cmd::Probe(reqs)) => batch.extend(reqs),
                    Ok(Cmd::Snapshot(reply)) => {
                        let _ = reply.send(self.snapshot());
                    }
                    Ok(Cmd::Stop) | Err(mpsc::TryRecvError::Disconnected) => return,
                    Err(mpsc::TryRecvError::Empty) => break,
                }
            }
            self.stats.submitted += batch.len() as u64;
            self.backlog.extend(batch);
            self.pump();
            self.read_events();
            self.expire(Instant::now());
            self.pump();
            self.wait();
        }
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            rx: self.kernel.rx_counters().unwrap_or_default(),
            tx: self.kernel.tx_counters().unwrap_or_default(),
            engine: self.stats,
            inflight: self.active_flows.len(),
        }
    }

    /// Sleeps until a command, reply events or the next deadline.
    ///
    /// At most one turn per tick reads the ring buffer: at fleet rates a wake-up per reply
    /// would cost more than the probe. So when replies wake the thread less than a tick after
    /// the last turn, it lets the rest of the tick pass first (a command still cuts it
    /// short). RTTs are stamped in the kernel, so the tick delays results by up to a
    /// millisecond without making them less exact. With nothing arriving the thread sleeps
    /// until the next deadline: an idle engine wakes a few times a second, not once a tick.
    fn wait(&mut self) {
        let wait = match self.deadlines.peek() {
            Some(Reverse((due, _, _))) => due.saturating_duration_since(Instant::now()).min(IDLE_WAIT),
            None => IDLE_WAIT,
        };
        let woke = self.poll(true, wait);
        if woke.events && !woke.command {
            let since = Instant::now().saturating_duration_since(self.last_turn);
            if since < EVENT_TICK {
                self.poll(false, EVENT_TICK - since);
            }
        }
    }

    /// One poll on the command eventfd and, when `events`, the ring buffer; says which fired.
    fn poll(&self, events: bool, wait: Duration) -> Woke {
        let mut fds = [
            libc::pollfd {
                fd: self.wake.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.kernel.events_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let nfds = if events { 2 } else { 1 };
        // Round up so a deadline 0.4 ms away does not turn into a busy loop.
        let ms = wait.as_micros().div_ceil(1000) as i32;
        // SAFETY: `fds` is a valid array of at least `nfds` pollfd for the duration of the call.
        unsafe { libc::poll(fds.as_mut_ptr(), nfds, ms) };
        Woke {
            command: fds[0].revents & libc::POLLIN != 0,
            events: events && fds[1].revents & libc::POLLIN != 0,
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
        self.active_flows.remove(&live.key);
        self.stats.completed += 1;
        let _ = self.results.send(L4Result {
            token: live.token,
            target: live.target,
            outcome,
            elapsed,
        });
    }

    fn reject(&mut self, req: &L4Request, outcome: L4Outcome) {
        self.stats.rejected += 1;
        let _ = self.results.send(L4Result {
            token: req.token,
            target: req.target,
            outcome,
            elapsed: Duration::ZERO,
        });
    }

    /// A source port for this flow that no live probe uses. With no source address the
    /// flow leaves it unset, for the generator to fill in, and the port is kept unique per
    /// target and port alone.
    fn pick_flow(&self, src: Option<IpAddr>, req: &L4Request, proto: u8, gen: u32) -> Option<FlowKey> {
        let seed = (gen as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ req.target.port() as u64;
        for attempt in 0..16u64 {
            let off = ((seed >> 17).wrapping_add(attempt * 7919) % self.sport_span as u64) as u16;
            let sport = self.sport_min + off;
            let flow = match (src, req.target.ip()) {
                (Some(IpAddr::V4(s)), IpAddr::V4(d)) => {
                    FlowKey::v4(s.octets(), d.octets(), sport, req.target.port(), proto)
                }
                (Some(IpAddr::V6(s)), IpAddr::V6(d)) => {
                    FlowKey::v6(s.octets(), d.octets(), sport, req.target.port(), proto)
                }
                (None, IpAddr::V4(d)) => FlowKey::v4([0; 4], d.octets(), sport, req.target.port(), proto),
                (None, IpAddr::V6(d)) => FlowKey::v6([0; 16], d.octets(), sport, req.target.port(), proto),
                _ => return None,
            };
            if !self.active_flows.contains_key(&flow) {
                return Some(flow);
            }
        }
        None
    }

    /// Sends as much of the backlog as the in-flight table has room for.
    fn pump(&mut self) {
        let room = self.max_inflight.saturating_sub(self.active_flows.len());
        let n = room.min(self.backlog.len());
        if n > 0 {
            let batch: Vec<_> = self.backlog.drain(..n).collect();
            self.send(batch);
        }
        self.stats.backlog = self.backlog.len() as u64;
    }

    fn send(&mut self, reqs: Vec<L4Request>) {
        // Group by frame shape: family and transport (and payload for UDP).
        let mut groups: HashMap<FrameShape, Vec<ProbeJob>> = HashMap::new();
        let now = Instant::now();
        for req in reqs {
            // On the XDP path the generator's route lookup picks any source not configured.
            let src = match self.path {
                TxPath::Xdp => self.sources.configured(req.target.ip()),
                TxPath::Raw => match self.sources.source_for(req.target.ip(), now) {
                    Some(src) => Some(src),
                    None => {
                        self.reject(&req, L4Outcome::NoRoute);
                        continue;
                    }
                },
            };
            let (proto, payload) = match &req.proto {
                L4Proto::Tcp => (IPPROTO_TCP, None),
                L4Proto::Udp { payload } => (IPPROTO_UDP, Some(payload.clone())),
            };
            let gen = self.next_gen;
            self.next_gen = self.next_gen.wrapping_add(1).max(1);
            let Some(flow) = self.pick_flow(src, &req, proto, gen) else {
                self.reject(&req, L4Outcome::NoRoute);
                continue;
            };
            let live = Live {
                token: req.token,
                target: req.target,
                key: flow,
                flow,
                gen,
                udp: payload.is_some(),
                sent: now,
                claimed: false,
                payload: payload.clone(),
            };
            let slot = self.alloc_slot(live);
            self.active_flows.insert(flow, slot);
            self.deadlines.push(Reverse((now + req.timeout, slot, gen)));
            groups
                .entry((is_v4(&req.target.ip()), payload))
                .or_default()
                .push(ProbeJob { flow, slot, gen });
        }
        for ((v4, payload), mut jobs) in groups {
            match self.path {
                TxPath::Xdp => self.send_xdp(v4, payload.as_deref(), &mut jobs),
                TxPath::Raw => {
                    for job in &jobs {
                        self.send_raw(job);
                    }
                }
            }
        }
    }

    fn send_xdp(&mut self, v4: bool, payload: Option<&[u8]>, jobs: &mut [ProbeJob]) {
        let head = match (v4, payload.is_some()) {
            (true, false) => SynV4::LEN,
            (false, false) => SynV6::LEN,
            (true, true) => UdpV4::LEN,
            (false, true) => UdpV6::LEN,
        };
        let mut template = vec![0u8; head];
        let (psum, plen) = match payload {
            Some(p) => {
                template.extend_from_slice(p);
                (payload_sum(p), p.len() as u32)
            }
            None => (0, 0),
        };
        for chunk in jobs.chunks_mut(probe_common::l4::MAX_JOBS as usize) {
            match self.kernel.send(chunk, &template, psum, plen) {
                Ok(_) => {
                    // Learn the flows as sent: their sources, where the generator picked them.
                    for job in chunk.iter() {
                        if let Some(live) = self.slots.get_mut(job.slot as usize).and_then(|l| l.as_mut()) {
                            if live.gen == job.gen && !job.flow.source_unset() {
                                live.flow = job.flow;
                            }
                        }
                    }
                }
                Err(e) => {
                    // A run fails for every batch while the cause lasts (the interface was
                    // deleted, say): say so at most every WARN_EVERY, not once per batch.
                    self.failed_runs += 1;
                    let now = Instant::now();
                    if self.last_run_warning.is_none_or(|t| now - t >= WARN_EVERY) {
                        log::warn!(
                            "generator run failed ({e}); sending through the raw socket instead \
                             ({} failed runs so far)",
                            self.failed_runs
                        );
                        self.last_run_warning = Some(now);
                    }
                    for job in chunk.iter() {
                        self.send_raw(job);
                    }
                }
            }
        }
    }

    /// Sends one probe through the stack: records it in the in-flight table under the same
    /// cookie the generator would use, then hands the IP packet to a raw socket.
    fn send_raw(&mut self, job: &ProbeJob) {
        let mut job = *job;
        if job.flow.source_unset() {
            // The generator could not route it: ask the routing table for a source here.
            let Some(src) = self.sources.source_for(ip_of(&job.flow), Instant::now()) else {
                self.fail_now(job.slot, L4Outcome::NoRoute);
                return;
            };
            match src {
                IpAddr::V4(a) => job.flow.saddr[..4].copy_from_slice(&a.octets()),
                IpAddr::V6(a) => job.flow.saddr = a.octets(),
            }
            if let Some(live) = self.slots.get_mut(job.slot as usize).and_then(|l| l.as_mut()) {
                live.flow = job.flow;
            }
        }
        let cookie = probe_cookie(&self.key, &job.flow, job.gen);
        let entry = Inflight {
            slot: job.slot,
            gen: job.gen,
            cookie,
            _pad: 0,
            sent_ns: crate::clock::mono_ns(),
        };
        if self.kernel.track(&job.flow, entry).is_err() {
            self.fail_now(job.slot, L4Outcome::NoRoute);
            return;
        }
        let payload = self
            .slots
            .get(job.slot as usize)
            .and_then(|l| l.as_ref())
            .and_then(|l| l.payload.clone());
        if let Err(e) = self.raw.send(&job.flow, cookie, payload.as_deref()) {
            log::debug!("raw send to slot {} failed: {e}", job.slot);
            if self.kernel.claim(&job.flow) {
                self.fail_now(job.slot, L4Outcome::NoRoute);
            }
        }
    }

    fn fail_now(&mut self, slot: u32, outcome: L4Outcome) {
        self.finish(slot, outcome, Duration::ZERO);
    }

    fn read_events(&mut self) {
        let mut events = std::mem::take(&mut self.events);
        self.kernel.drain_events(&mut events);
        for ev in events.drain(..) {
            let Some(live) = self.slots.get(ev.slot as usize).and_then(|l| l.as_ref()) else {
                continue;
            };
            if live.gen != ev.gen {
                continue;
            }
            let outcome = match EventKind::from_u8(ev.kind) {
                Some(EventKind::Open) => L4Outcome::Open,
                Some(EventKind::Refused) => L4Outcome::Refused,
                Some(EventKind::Unreachable) => L4Outcome::Unreachable {
                    icmp_type: ev.icmp_type,
                    code: ev.icmp_code,
                },
                Some(kind @ (EventKind::NoNeighbour | EventKind::NoRoute)) => {
                    // The generator hands a probe back when the next hop has no resolved neighbour
                    // (the stack resolves it while sending; later probes take the XDP path
                    // again) or when bpf_fib_lookup refuses because forwarding is off for the
                    // family. Any other lookup failure means there is no route.
                    if kind == EventKind::NoNeighbour || ev.icmp_code == FIB_FWD_DISABLED {
                        self.stats.stack_fallbacks += 1;
                        let job = ProbeJob {
                            flow: live.flow,
                            slot: ev.slot,
                            gen: ev.gen,
                        };
                        self.send_raw(&job);
                        continue;
                    }
                    if ev.icmp_code == probe_common::l4::FIB_NOT_A_PROBE_IFACE {
                        if !self.warned_iface {
                            self.warned_iface = true;
                            log::warn!(
                                "the route to {} leaves by an interface probe_rx is not attached to; \
                                 list every interface probes leave by in [source].interfaces \
                                 (such targets are reported as no route)",
                                live.target
                            );
                        }
                    } else {
                        log::debug!(
                            "no route for slot {} (bpf_fib_lookup returned {})",
                            ev.slot,
                            ev.icmp_code
                        );
                    }
                    self.fail_now(ev.slot, L4Outcome::NoRoute);
                    continue;
                }
                None => continue,
            };
            self.finish(ev.slot, outcome, Duration::from_nanos(ev.rtt_ns));
        }
        self.events = events;
    }

    fn expire(&mut self, now: Instant) {
        while let Some(Reverse((due, slot, gen))) = self.deadlines.peek().copied() {
            if due > now {
                break;
            }
            self.deadlines.pop();
            let Some(live) = self.slots.get_mut(slot as usize).and_then(|l| l.as_mut()) else {
                continue;
            };
            if live.gen != gen {
                continue;
            }
            if live.claimed {
                // The kernel took it but its event never came (it always should).
                self.stats.lost += 1;
                let elapsed = now - live.sent;
                self.finish(slot, L4Outcome::Timeout, elapsed);
                continue;
            }
            let flow = live.flow;
            let udp = live.udp;
            let elapsed = now - live.sent;
            if self.kernel.claim(&flow) {
                self.finish(slot, if udp { L4Outcome::Silent } else { L4Outcome::Timeout }, elapsed);
            } else {
                // A reply won the race: its event is in the ring buffer or about to be.
                live.claimed = true;
                self.deadlines.push(Reverse((now + CLAIM_GRACE, slot, gen)));
                self.read_events();
            }
        }
    }
}

/// The target address of a flow.
fn ip_of(flow: &FlowKey) -> IpAddr {
    if flow.family == probe_common::l4::FAMILY_V4 {
        IpAddr::from(flow.daddr_v4())
    } else {
        IpAddr::from(flow.daddr)
    }
}
