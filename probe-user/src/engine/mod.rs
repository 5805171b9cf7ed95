//! The L4 engine: TCP and UDP probes through the kernel programs, one outcome per probe.
//!
//! Callers submit batches of requests; one engine thread owns the kernel side (it is the
//! generator's single driver), sends batches with live frames, reads outcomes from the ring
//! buffer and times out what got no answer. Results come back on a channel: no per-target
//! polling anywhere.
mod raw;
mod run;
pub mod source;

pub use source::NoXdpTransmit;
pub mod templates;

use std::{
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    sync::{mpsc, Arc},
    time::Duration,
};

use probe_common::counters::{RxCounters, TxCounters};

use crate::kernel::{notrack::NotrackTable, KernelError};

/// How probes leave the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TxPath {
    /// The generator (probe_rx run with BPF_PROG_TEST_RUN live frames): no socket, no stack.
    Xdp,
    /// The same frames sent through a raw IP socket: for devices that cannot transmit XDP frames.
    Raw,
}

impl std::fmt::Display for TxPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TxPath::Xdp => "xdp (live frames)",
            TxPath::Raw => "raw socket",
        })
    }
}

/// Which sender to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxChoice {
    /// XDP when the device advertises XDP transmit (ndo_xdp_xmit), else raw.
    Auto,
    Force(TxPath),
}

/// Engine settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub iface: String,
    /// Further interfaces probes may leave by (as routes say) and replies arrive on; probe_rx
    /// is attached to each. The generator redirects probes to them from `iface`.
    pub more_ifaces: Vec<String>,
    /// How probe_rx attaches: native when the driver takes it, unless told otherwise.
    pub mode: crate::kernel::AttachMode,
    /// Where the reply matcher runs: XDP, or tcx ingress beside another XDP owner.
    pub hook: crate::kernel::Hook,
    /// Load the kernel programs so that they answer BPF_FIB_LOOKUP_SRC as Linux 6.3-6.6 does
    /// (-EINVAL), both in the start-up check and in the generator. For tests of the userspace
    /// fallback on a newer kernel; never set by the daemon.
    pub assume_no_fib_src: bool,
    /// Source addresses; None = whatever the routing table picks for each target.
    pub source_v4: Option<std::net::Ipv4Addr>,
    pub source_v6: Option<std::net::Ipv6Addr>,
    /// Reserved source ports (inclusive), kept clear of the node's ephemeral range.
    pub sport_min: u16,
    pub sport_max: u16,
    pub pin_dir: PathBuf,
    pub tx: TxChoice,
    /// The most probes on the wire at once; more wait in the engine's backlog.
    pub max_inflight: u32,
}

/// Source ports the default range spans: with the 16-bit IPv4 id, a blind forger of a UDP
/// probe's ICMP error has 2^16 * 4096 = 2^28 (id, port) pairs to try.
pub const SECURE_SPORT_SPAN: u32 = 4096;

impl EngineConfig {
    pub fn new(iface: impl Into<String>, pin_dir: impl Into<PathBuf>) -> Self {
        Self {
            iface: iface.into(),
            more_ifaces: Vec::new(),
            mode: crate::kernel::AttachMode::Auto,
            hook: crate::kernel::Hook::Xdp,
            assume_no_fib_src: false,
            source_v4: None,
            source_v6: None,
            sport_min: 61000,
            sport_max: 65095,
            pin_dir: pin_dir.into(),
            tx: TxChoice::Auto,
            max_inflight: probe_common::l4::MAX_INFLIGHT,
        }
    }
}

/// The transport of a probe.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum L4Proto {
    /// SYN, expect SYN+ACK.
    Tcp,
    /// One datagram with this payload, expect silence.
    Udp { payload: Arc<[u8]> },
    /// SYN, then this request (at most probe_common::http::HTTP_REQ_MAX bytes) in answer to
    /// the SYN+ACK, and the response's status line: all in probe_rx, no socket.
    Http { request: Arc<[u8]> },
}

/// One probe to send.
#[derive(Clone, Debug)]
pub struct L4Request {
    /// The caller's handle for the result.
    pub token: u64,
    /// Where the probe is addressed: with a tunnel, the service (the VIP) the backend
    /// answers for.
    pub target: SocketAddr,
    pub proto: L4Proto,
    pub timeout: Duration,
    /// A TCP or HTTP probe wrapped in outer headers to a backend, for the backend to unwrap
    /// and answer from `target` (direct return): the SYN, the request and the RST all go
    /// wrapped. None for a plain probe.
    pub tunnel: Option<Tunnel>,
}

/// How a probe travels through the data path's own tunnel: IPv4 in IPv4 or IPv6 in IPv6 to
/// `backend`, which decapsulates it as it does the client flows the load balancer forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tunnel {
    pub backend: IpAddr,
    pub encap: Encap,
    /// 0, or the size of the client packets the tunnel must carry (`tunnel_mtu`): the SYN's
    /// outer packet then holds that many bytes besides its outer headers (the probe and zeros
    /// after it, which the backend's decapsulation trims), DF set.
    pub mtu: u16,
    /// The outer header's source (`tunnel_source`); None: the probe's own source.
    pub source: Option<IpAddr>,
}

/// The outer headers of a tunnelled probe, of the probe's own family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Encap {
    /// IPv4 in IPv4, IPv6 in IPv6.
    Ipip,
    /// The probe in UDP to this port (GUE variant 1: no GUE header, as katran sends).
    Gue { port: u16 },
}

impl Tunnel {
    /// The zeros after the SYN of a probe of the family (`v6`) that make its outer packet
    /// full-size (`mtu`); 0 when it asks for none, or for less than the SYN itself.
    pub fn pad(&self, v6: bool) -> u16 {
        use probe_common::{
            frame::{SynV4, SynV6},
            packet::EthHdr,
        };
        let syn = if v6 { SynV6::LEN } else { SynV4::LEN } - EthHdr::LEN;
        self.mtu.saturating_sub(syn as u16)
    }

    /// Why `target` cannot be probed through this tunnel, if it cannot: both headers are of
    /// one family (there is no IPv4-in-IPv6 or the reverse here).
    pub fn check(&self, target: &SocketAddr) -> Result<(), String> {
        if let Some(src) = self.source.filter(|s| is_v4(s) != is_v4(&self.backend)) {
            return Err(format!(
                "the tunnel's source {src} and the backend {} are of different families",
                self.backend
            ));
        }
        if is_v4(&self.backend) == is_v4(&target.ip()) {
            Ok(())
        } else {
            Err(format!(
                "the backend {} and the service address {} are of different families; \
                 a tunnel carries IPv4 in IPv4 and IPv6 in IPv6 only",
                self.backend,
                target.ip()
            ))
        }
    }
}

/// What a probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum L4Outcome {
    /// TCP: SYN+ACK (the half-open connection was reset).
    Open,
    /// TCP: RST.
    Refused,
    /// ICMP/ICMPv6 destination unreachable quoting the probe.
    Unreachable { icmp_type: u8, code: u8 },
    /// TCP: no answer within the timeout.
    Timeout,
    /// UDP: no ICMP error within the timeout (healthy by lb semantics).
    Silent,
    /// No route to the target from this node.
    NoRoute,
    /// The probe could not be sent for want of a local resource (socket buffers, a full
    /// in-flight table): no verdict on the target.
    LocalError { errno: i32 },
    /// HTTP: the response's status code (the caller judges it).
    HttpStatus { status: u16 },
    /// HTTP: reset by the target after the connection was up, before a response.
    HttpReset,
    /// HTTP: closed by the target without a response.
    HttpClosed,
    /// HTTP: the response does not start with an HTTP/1.x status line.
    HttpMalformed,
    /// HTTP: connected, request sent, no response within the timeout.
    HttpResponseTimeout,
    /// HTTP: the kernel could not send the request from the SYN+ACK's frame (no tailroom on
    /// this driver), or every request template is in use: no verdict; the caller should
    /// probe this check through a socket.
    HttpUnsupported,
    /// HTTP: the kernel could not be sure of the verdict (a status line in pieces, an interim
    /// 1xx, a window or MSS too small for the request, ...): no verdict; the caller settles
    /// the check through a socket.
    HttpUndecided {
        #[serde(serialize_with = "undecided_name")]
        why: probe_common::l4::Undecided,
    },
}

// serde's `serialize_with` hands the field over by reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn undecided_name<S: serde::Serializer>(why: &probe_common::l4::Undecided, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(why.as_str())
}

impl L4Outcome {
    /// The verdict of SPEC section 1.
    pub fn healthy(&self) -> bool {
        matches!(self, L4Outcome::Open | L4Outcome::Silent)
    }
}

impl std::fmt::Display for L4Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            L4Outcome::Open => f.write_str("open"),
            L4Outcome::Refused => f.write_str("refused"),
            L4Outcome::Unreachable { icmp_type, code } => write!(f, "unreachable {icmp_type}/{code}"),
            L4Outcome::Timeout => f.write_str("timeout"),
            L4Outcome::Silent => f.write_str("silent"),
            L4Outcome::NoRoute => f.write_str("no route"),
            L4Outcome::LocalError { errno } => {
                write!(f, "local error: {}", std::io::Error::from_raw_os_error(*errno))
            }
            L4Outcome::HttpStatus { status } => write!(f, "status {status}"),
            L4Outcome::HttpReset => f.write_str("reset"),
            L4Outcome::HttpClosed => f.write_str("closed"),
            L4Outcome::HttpMalformed => f.write_str("http error: no HTTP/1.x status line"),
            L4Outcome::HttpResponseTimeout => f.write_str("timeout response"),
            L4Outcome::HttpUnsupported => f.write_str("local error: no kernel path for this HTTP probe"),
            L4Outcome::HttpUndecided { why } => write!(f, "local error: undecided in the kernel ({})", why.as_str()),
        }
    }
}

/// The probe vocabulary's name for it.
impl From<L4Outcome> for crate::outcome::Outcome {
    fn from(o: L4Outcome) -> Self {
        match o {
            L4Outcome::Open => crate::outcome::Outcome::Open,
            L4Outcome::Refused => crate::outcome::Outcome::Refused,
            L4Outcome::Unreachable { .. } => crate::outcome::Outcome::Unreachable,
            L4Outcome::Timeout | L4Outcome::HttpResponseTimeout => crate::outcome::Outcome::Timeout,
            L4Outcome::Silent => crate::outcome::Outcome::Silent,
            L4Outcome::NoRoute => crate::outcome::Outcome::NoRoute,
            L4Outcome::LocalError { .. } | L4Outcome::HttpUnsupported | L4Outcome::HttpUndecided { .. } => {
                crate::outcome::Outcome::LocalError
            }
            L4Outcome::HttpStatus { .. } => crate::outcome::Outcome::Status,
            L4Outcome::HttpReset => crate::outcome::Outcome::Reset,
            L4Outcome::HttpClosed => crate::outcome::Outcome::Closed,
            L4Outcome::HttpMalformed => crate::outcome::Outcome::HttpError,
        }
    }
}

/// The outcome of one request.
#[derive(Clone, Debug)]
pub struct L4Result {
    pub token: u64,
    pub target: SocketAddr,
    pub outcome: L4Outcome,
    /// Send to outcome: the RTT for replies, the wait for timeouts.
    pub elapsed: Duration,
    /// Submit to send: how long the probe waited for the engine before it went on the wire,
    /// which the caller's schedule counts as lateness (zero for a request refused outright).
    pub queued: Duration,
}

/// Engine-side figures, beside the kernel counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct EngineStats {
    pub submitted: u64,
    pub completed: u64,
    /// Probes the generator handed back to the stack (neighbour not resolved yet, or forwarding
    /// off for that family) and sent through the raw socket.
    pub stack_fallbacks: u64,
    /// Results whose kernel event never came after the entry vanished (should stay 0).
    pub lost: u64,
    /// Requests refused before sending (no source address, port range exhausted).
    pub rejected: u64,
    /// Requests waiting for room in the in-flight table right now.
    pub backlog: u64,
    /// HTTP request templates in the kernel right now.
    pub http_templates: u64,
}

/// Errors starting or talking to the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error("{op}")]
    Io {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("the engine thread has stopped")]
    Stopped,
    #[error("source port range {min}-{max} is empty or reversed")]
    PortRange { min: u16, max: u16 },
}

pub(crate) enum Cmd {
    /// Probes, and when they were submitted.
    Probe(std::time::Instant, Vec<L4Request>),
    Snapshot(mpsc::Sender<Snapshot>),
    Stop,
}

/// Counters at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct Snapshot {
    pub rx: RxCounters,
    pub tx: TxCounters,
    pub engine: EngineStats,
    pub inflight: usize,
    /// Roads of tunnelled probes the kernel holds (PROBE_ROADS): those in flight and those
    /// whose flow rests; none a while after the last tunnelled probe.
    pub roads: usize,
}

/// A running engine. Dropping it stops the thread, detaches probe_rx, removes the pins and
/// the conntrack exemption (`kernel::notrack`).
pub struct L4Engine {
    cmds: mpsc::Sender<Cmd>,
    wake: Arc<run::Waker>,
    /// The transmit path and why: the engine thread moves it to the raw socket if a device
    /// loses XDP transmit.
    path: Arc<std::sync::Mutex<(TxPath, String)>>,
    rx_mode: crate::kernel::AttachMode,
    hook: crate::kernel::Hook,
    /// Whether probe_rx can send HTTP requests on these interfaces, or why not.
    kernel_http: Result<(), source::NoXdpTransmit>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl L4Engine {
    /// Loads the programs on `cfg.iface` (in the caller's network namespace) and starts the
    /// engine thread. Results arrive on the returned receiver.
    pub fn start(cfg: EngineConfig) -> Result<(Self, tokio::sync::mpsc::UnboundedReceiver<L4Result>), EngineError> {
        if cfg.sport_min == 0 || cfg.sport_min > cfg.sport_max {
            return Err(EngineError::PortRange {
                min: cfg.sport_min,
                max: cfg.sport_max,
            });
        }
        let ports = u32::from(cfg.sport_max - cfg.sport_min) + 1;
        if ports < SECURE_SPORT_SPAN {
            log::warn!(
                "source ports {}-{} are {ports} ports: a blind forged ICMP error needs about {} packets \
                 to fail an IPv4 UDP check in plain mode; use {SECURE_SPORT_SPAN} ports or more (2^28 packets)",
                cfg.sport_min,
                cfg.sport_max,
                u64::from(ports) << 16
            );
        }
        let (results_tx, results_rx) = tokio::sync::mpsc::unbounded_channel();
        let (cmds, cmd_rx) = mpsc::channel();
        let wake = Arc::new(run::Waker::new()?);
        // Before the first probe, so none is tracked. It is dropped (and the table deleted) by
        // the engine thread when it ends, in the namespace it was installed in (threads start in
        // their creator's namespace, while the L4Engine may be dropped from any thread), or
        // here by `?` and the unwinding below if the start fails.
        let ifaces: Vec<String> = std::iter::once(cfg.iface.clone())
            .chain(cfg.more_ifaces.iter().cloned())
            .collect();
        let sources: Vec<IpAddr> = cfg
            .source_v4
            .map(IpAddr::V4)
            .into_iter()
            .chain(cfg.source_v6.map(IpAddr::V6))
            .collect();
        let guard = crate::kernel::notrack::Guard {
            ifaces: &ifaces,
            sources: &sources,
            sport_min: cfg.sport_min,
            sport_max: cfg.sport_max,
            uid: crate::kernel::process::euid(),
        };
        let notrack = NotrackTable::install_or_warn(&cfg.pin_dir, &guard);
        crate::kernel::notrack::warn_bound_in_range(&guard);
        let state = run::EngineState::new(&cfg, results_tx, wake.clone())?;
        let path = state.path();
        let rx_mode = state.rx_mode();
        let hook = state.hook();
        let kernel_http = state.frames_out();
        let thread = std::thread::Builder::new()
            .name("probed-l4".into())
            .spawn(move || {
                state.run(cmd_rx);
                drop(notrack);
            })
            .map_err(|source| EngineError::Io {
                op: "spawn the engine thread",
                source,
            })?;
        Ok((
            Self {
                cmds,
                wake,
                path,
                rx_mode,
                hook,
                kernel_http,
                thread: Some(thread),
            },
            results_rx,
        ))
    }

    /// Which sender the engine uses.
    pub fn tx_path(&self) -> TxPath {
        self.path.lock().map_or(TxPath::Raw, |p| p.0)
    }

    /// The mode probe_rx runs in (driver or skb).
    pub fn rx_mode(&self) -> crate::kernel::AttachMode {
        self.rx_mode
    }

    /// Where the reply matcher runs.
    pub fn hook(&self) -> crate::kernel::Hook {
        self.hook
    }

    /// Whether plain HTTP probes (`L4Proto::Http`) can run here, or why not: checked once at
    /// start, on every interface probe_rx is attached to.
    pub fn kernel_http(&self) -> Result<(), source::NoXdpTransmit> {
        self.kernel_http.clone()
    }

    /// Where the reply matcher runs, in words for the operator: "xdp (driver)", "tcx ingress".
    pub fn rx_where(&self) -> String {
        match self.hook {
            crate::kernel::Hook::Xdp => format!("xdp ({})", self.rx_mode),
            crate::kernel::Hook::Tcx => "tcx ingress".into(),
        }
    }

    /// Why it uses that sender, in words for the operator.
    pub fn tx_path_reason(&self) -> String {
        self.path.lock().map_or_else(|_| String::new(), |p| p.1.clone())
    }

    /// Queues probes; each yields exactly one result.
    pub fn submit(&self, reqs: Vec<L4Request>) -> Result<(), EngineError> {
        self.cmds
            .send(Cmd::Probe(std::time::Instant::now(), reqs))
            .map_err(|_| EngineError::Stopped)?;
        self.wake.wake();
        Ok(())
    }

    /// Kernel and engine counters.
    pub fn snapshot(&self) -> Result<Snapshot, EngineError> {
        let (tx, rx) = mpsc::channel();
        self.cmds.send(Cmd::Snapshot(tx)).map_err(|_| EngineError::Stopped)?;
        self.wake.wake();
        rx.recv_timeout(Duration::from_secs(5))
            .map_err(|_| EngineError::Stopped)
    }
}

impl Drop for L4Engine {
    fn drop(&mut self) {
        let _ = self.cmds.send(Cmd::Stop);
        self.wake.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The family tag of an address, as the kernel records use it.
pub(crate) fn is_v4(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V4(_))
}
