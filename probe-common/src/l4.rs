//! The L4 engine's shared records: the jobs userspace hands the generator, the in-flight
//! table the matcher consults, and the events it reports.

/// Address family tags used in `FlowKey::family`.
pub const FAMILY_V4: u8 = 4;
pub const FAMILY_V6: u8 = 6;

/// A probe's flow, from the prober's side: our address and port, the target's.
/// IPv4 addresses occupy the first four bytes; the rest stays zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowKey {
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub family: u8,
    pub _pad: [u8; 2],
}
const _: () = assert!(core::mem::size_of::<FlowKey>() == 40);

impl FlowKey {
    pub fn v4(saddr: [u8; 4], daddr: [u8; 4], sport: u16, dport: u16, proto: u8) -> Self {
        let mut k = Self {
            sport,
            dport,
            proto,
            family: FAMILY_V4,
            ..Default::default()
        };
        k.saddr[..4].copy_from_slice(&saddr);
        k.daddr[..4].copy_from_slice(&daddr);
        k
    }

    pub fn v6(saddr: [u8; 16], daddr: [u8; 16], sport: u16, dport: u16, proto: u8) -> Self {
        Self {
            saddr,
            daddr,
            sport,
            dport,
            proto,
            family: FAMILY_V6,
            _pad: [0; 2],
        }
    }

    /// True when the source address is left for the generator to pick (all zero): the route's
    /// preferred source, from the same FIB lookup that finds the next hop.
    #[inline(always)]
    pub fn source_unset(&self) -> bool {
        self.saddr.iter().fold(0u8, |acc, b| acc | b) == 0
    }

    #[inline(always)]
    pub fn saddr_v4(&self) -> [u8; 4] {
        [self.saddr[0], self.saddr[1], self.saddr[2], self.saddr[3]]
    }

    #[inline(always)]
    pub fn daddr_v4(&self) -> [u8; 4] {
        [self.daddr[0], self.daddr[1], self.daddr[2], self.daddr[3]]
    }
}

/// A probe on the wire, waiting for its reply. Whoever deletes the entry owns the outcome:
/// the matcher when a reply arrives, userspace when the timeout passes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inflight {
    /// Userspace's index of the target.
    pub slot: u32,
    /// The probe's generation for that target (part of the cookie).
    pub gen: u32,
    /// The cookie sent (TCP initial sequence number; low 16 bits are the UDP IPv4 id, low 20
    /// bits the UDP IPv6 flow label).
    pub cookie: u32,
    /// The target's next sequence number once its SYN+ACK came (HTTP probes: where the
    /// response starts); 0 before.
    pub peer_seq: u32,
    /// bpf_ktime_get_ns (CLOCK_MONOTONIC) when the probe left.
    pub sent_ns: u64,
    /// HTTP probes: the request template's id plus one (`PROBE_HTTP_REQS`); 0 for a plain SYN
    /// or UDP probe.
    pub req: u32,
    /// Where an HTTP probe is: `STAGE_SYN_SENT`, then `STAGE_REQUEST_SENT`.
    pub stage: u8,
    /// The job's `tunnel`: not `TUNNEL_NONE` when what probe_rx sends on the flow (the RST,
    /// an HTTP probe's request) must be wrapped too, the way its `Road` says.
    pub tunnel: u8,
    pub _pad: [u8; 2],
}
const _: () = assert!(core::mem::size_of::<Inflight>() == 32);

/// An HTTP probe's SYN is out; nothing has come back.
pub const STAGE_SYN_SENT: u8 = 0;
/// The target's SYN+ACK was answered with the request; its response is awaited.
pub const STAGE_REQUEST_SENT: u8 = 1;

/// One probe for the generator to send.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeJob {
    pub flow: FlowKey,
    pub slot: u32,
    pub gen: u32,
    /// HTTP probes: the request template's id plus one; 0 for a plain SYN or UDP probe.
    pub req: u32,
    /// `TUNNEL_NONE`, or how the probe is wrapped on its way to `outer`.
    pub tunnel: u8,
    pub _pad: u8,
    /// `TUNNEL_GUE`: the outer UDP header's destination port.
    pub tunnel_port: u16,
    /// A tunnelled probe's backend: the outer header's destination (IPv4 in the first four
    /// bytes), while `flow` is the inner packet, addressed to the service (the VIP) the
    /// backend decapsulates it for. Zero for a plain probe.
    pub outer: [u8; 16],
    /// A tunnelled probe's outer source (`tunnel_source`), or zero: the inner packet's.
    pub outer_src: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<ProbeJob>() == 88);

impl ProbeJob {
    /// The outer header's source of a tunnelled job: its own, or the inner packet's.
    #[inline(always)]
    pub fn outer_source(&self) -> [u8; 16] {
        if self.outer_src.iter().fold(0u8, |acc, b| acc | b) == 0 {
            self.flow.saddr
        } else {
            self.outer_src
        }
    }
}

/// `ProbeJob::tunnel`: a plain probe, sent to `flow`'s destination.
pub const TUNNEL_NONE: u8 = 0;
/// The probe inside an outer header of its own family to the backend: IPv4 in IPv4 (IPIP,
/// protocol 4) or IPv6 in IPv6 (next header 41), as katran and IPVS's tunnel mode forward.
pub const TUNNEL_IPIP: u8 = 1;
/// The probe inside UDP to the backend's `tunnel_port` (GUE variant 1, as katran sends: the
/// inner packet right after the UDP header), over the probe's own family.
pub const TUNNEL_GUE: u8 = 2;

/// How a tunnelled probe's flow reaches its backend (PROBE_ROADS, by the in-flight flow):
/// what probe_rx needs to wrap the segments it sends on the flow after the SYN, the RST that
/// ends it and an HTTP probe's request, as the generator wrapped the SYN. Written with the
/// in-flight entry, deleted by userspace when the probe ends.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Road {
    /// The backend: the outer header's destination (IPv4 in the first four bytes).
    pub outer: [u8; 16],
    /// The outer header's source.
    pub outer_src: [u8; 16],
    /// `TUNNEL_IPIP` or `TUNNEL_GUE`.
    pub tunnel: u8,
    pub _pad: u8,
    /// `TUNNEL_GUE`: the outer UDP destination port.
    pub port: u16,
}
const _: () = assert!(core::mem::size_of::<Road>() == 36);

impl Road {
    /// The road of a tunnelled job (None for a plain one).
    #[inline(always)]
    pub fn of(job: &ProbeJob) -> Option<Road> {
        (job.tunnel != TUNNEL_NONE).then_some(Road {
            outer: job.outer,
            outer_src: job.outer_source(),
            tunnel: job.tunnel,
            _pad: 0,
            port: job.tunnel_port,
        })
    }
}

impl ProbeJob {
    /// A plain probe of `flow`.
    pub fn plain(flow: FlowKey, slot: u32, gen: u32, req: u32) -> Self {
        Self {
            flow,
            slot,
            gen,
            req,
            ..Default::default()
        }
    }
}

/// What the kernel reports for a probe.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// SYN+ACK with the right ack: the port is open (the RST went back).
    Open = 1,
    /// RST answering the probe.
    Refused = 2,
    /// ICMP/ICMPv6 destination unreachable quoting the probe.
    Unreachable = 3,
    /// The generator found a route but no resolved neighbour: send through the stack.
    NoNeighbour = 4,
    /// The generator found no route to the target.
    NoRoute = 5,
    /// HTTP: the response's status line, its code in `ProbeEvent::status` (the connection was
    /// reset).
    HttpStatus = 6,
    /// HTTP: the target reset the connection after its SYN+ACK, before any response.
    HttpReset = 7,
    /// HTTP: the target closed the connection (FIN) without a response.
    HttpClosed = 8,
    /// HTTP: the first bytes of the response are no HTTP/1.x status line.
    HttpMalformed = 9,
    /// HTTP: the SYN+ACK's frame could not be grown to carry the request (the driver gives
    /// XDP no tailroom); the connection was reset and the check must use a socket.
    HttpNoRoom = 10,
    /// HTTP: the kernel cannot be sure of this probe's verdict (why: an [`Undecided`] code in
    /// `ProbeEvent::status`); the connection was reset and the check is settled through a
    /// socket within the same probe's time.
    HttpUndecided = 11,
}

impl EventKind {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Open,
            2 => Self::Refused,
            3 => Self::Unreachable,
            4 => Self::NoNeighbour,
            5 => Self::NoRoute,
            6 => Self::HttpStatus,
            7 => Self::HttpReset,
            8 => Self::HttpClosed,
            9 => Self::HttpMalformed,
            10 => Self::HttpNoRoom,
            11 => Self::HttpUndecided,
            _ => return None,
        })
    }
}

/// Why probe_rx left an HTTP probe to a socket (`EventKind::HttpUndecided`): each is a case
/// where reading one segment could give another verdict than a real client would.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Undecided {
    /// The first segment holds no complete status line (a server may write it in pieces).
    Partial = 1,
    /// An interim 1xx response (100 Continue, 103 Early Hints): the final one follows.
    Interim = 2,
    /// The first bytes are no HTTP/1.x status line the kernel reads (the socket path's
    /// parser gives the exact reason).
    NotStatus = 3,
    /// The SYN+ACK's window is smaller than the request.
    Window = 4,
    /// The target's MSS is smaller than the request.
    Mss = 5,
    /// The SYN+ACK's options do not start with an MSS option, so its MSS is not known.
    Options = 6,
}

impl Undecided {
    pub const ALL: [Undecided; 6] = [
        Self::Partial,
        Self::Interim,
        Self::NotStatus,
        Self::Window,
        Self::Mss,
        Self::Options,
    ];

    pub fn from_u16(v: u16) -> Option<Self> {
        Self::ALL.into_iter().find(|u| *u as u16 == v)
    }

    /// Its name in logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Partial => "partial_status_line",
            Self::Interim => "interim_response",
            Self::NotStatus => "not_a_status_line",
            Self::Window => "small_window",
            Self::Mss => "small_mss",
            Self::Options => "unknown_options",
        }
    }
}

/// A probe connection probe_rx has just ended with its RST (PROBE_ENDED, by flow): a segment
/// the target sent before it saw that RST (its FIN, the rest of its response) must
/// acknowledge `cookie + 1` or `cookie + 1 + req_len`, which proves it belongs to the probe;
/// only such a segment is answered with a RST. Nothing else in the probe port range is
/// touched: the node forwards or terminates other flows with those ports.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ended {
    pub cookie: u32,
    /// The request's length (0 when none was sent).
    pub req_len: u32,
}
const _: () = assert!(core::mem::size_of::<Ended>() == 8);

impl Ended {
    /// Whether a segment acknowledging `ack` belongs to this ended probe connection.
    #[inline(always)]
    pub fn acknowledged_by(&self, ack: u32) -> bool {
        let syn = self.cookie.wrapping_add(1);
        ack == syn || ack == syn.wrapping_add(self.req_len)
    }
}

/// PROBE_RX_CTL bit: the RSTs that end probe connections are left to the node's stack.
pub const RX_CTL_RST_BY_STACK: u32 = 1;

/// PROBE_ENDED's size: an LRU of the connections ended most recently. An entry is needed for
/// about one round trip after the RST (what the target sent before it arrived); at 30,000
/// HTTP probes a second this holds two seconds of them.
pub const MAX_ENDED: u32 = 1 << 16;

/// A ring-buffer record: one per matched reply (or per probe the generator could not send).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeEvent {
    /// Reply time minus send time, in nanoseconds (0 for generator events).
    pub rtt_ns: u64,
    pub slot: u32,
    pub gen: u32,
    pub kind: u8,
    pub icmp_type: u8,
    pub icmp_code: u8,
    pub _pad: u8,
    /// HttpStatus: the response's status code.
    pub status: u16,
    pub _pad2: [u8; 2],
}
const _: () = assert!(core::mem::size_of::<ProbeEvent>() == 24);

/// Generator control, index 0 of PROBE_TX_CTL: the run's job count and the next job to take.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxCtl {
    /// Next job index; the generator takes jobs with an atomic fetch-add.
    pub next: u64,
    /// Jobs in PROBE_JOBS for this run.
    pub count: u64,
    /// One's-complement sum of the UDP payload in the template frame (userspace computes it).
    pub payload_sum: u64,
    /// UDP payload length in the template frame.
    pub payload_len: u32,
    pub _pad: u32,
    /// The prefix that marks the generator's frames (`cookie::generator_marker` of this
    /// start's key; never 0, and 0 here means "no generator frames yet").
    pub marker: u64,
}
const _: () = assert!(core::mem::size_of::<TxCtl>() == 40);

/// The per-daemon cookie key, index 0 of PROBE_KEY.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CookieKey {
    pub k: [u64; 2],
}
const _: () = assert!(core::mem::size_of::<CookieKey>() == 16);

/// Most jobs one generator run takes (PROBE_JOBS entries). The engine hands the generator a
/// slice of at most this many at a time; the array is mapped into the daemon whole, 88 bytes
/// an entry (352 KiB).
pub const MAX_JOBS: u32 = 4096;

/// The most interfaces probe_rx is attached to at once.
pub const MAX_IFACES: u32 = 64;

/// Reported as the lookup result of a NoRoute event when the route leaves by an interface
/// probe_rx is not attached to (its replies could not be matched). Above every
/// BPF_FIB_LKUP_RET_* code.
pub const FIB_NOT_A_PROBE_IFACE: u8 = 200;

/// Bytes in front of the template frame that mark a generator frame. The engine runs probe_rx
/// itself with BPF_PROG_RUN (live frames) and puts `TxCtl::marker` (keyed per daemon start, so
/// nothing else on the node or the wire can know it) before the Ethernet header; probe_rx
/// strips it (bpf_xdp_adjust_head) before the probe leaves. A frame from the wire would have
/// to start with those 64 secret bits to be taken for one. In the packet rather than in XDP
/// metadata: some kernels refuse bpf_xdp_adjust_meta to XDP programs and give test runs no
/// metadata (seen on a 6.18 build).
pub const GENERATOR_MARK_LEN: usize = 8;
/// Default in-flight table size: the most probes on the wire at once (about 32 MiB of
/// preallocated hash table). The engine holds further probes back until entries free up.
pub const MAX_INFLIGHT: u32 = 1 << 18;

#[cfg(feature = "user")]
mod pod {
    // Each record is repr(C), made of integers and byte arrays with explicit padding fields
    // (sizes asserted above), so it has no implicit padding and every bit pattern is valid.
    // SAFETY: see above.
    unsafe impl aya::Pod for super::FlowKey {}
    // SAFETY: see above.
    unsafe impl aya::Pod for super::Inflight {}
    // SAFETY: see above.
    unsafe impl aya::Pod for super::ProbeJob {}
    // SAFETY: see above.
    unsafe impl aya::Pod for super::ProbeEvent {}
    // SAFETY: see above.
    unsafe impl aya::Pod for super::TxCtl {}
    // SAFETY: see above.
    unsafe impl aya::Pod for super::CookieKey {}
    // SAFETY: see above.
    unsafe impl aya::Pod for super::Ended {}
    // SAFETY: see above.
    unsafe impl aya::Pod for super::Road {}
}
