//! UDP probes: the outcome words both modes share, and the request/response prober.
//!
//! Plain mode (send a datagram, expect silence) runs on the kernel engine: the generator sends,
//! probe_rx matches the ICMP error that would mean "dead". Request/response mode (a reply
//! containing a configured string means "alive") is answered here, in userspace, with one
//! `connect`ed UDP socket per probe rather than a matcher in XDP, because:
//! - success needs the *payload* of a reply, of any length and at any offset; a substring
//!   search over a variable-length datagram is a bounded-loop problem for the verifier and
//!   would need a per-target expected string in a map, while in userspace it is one call;
//! - a connected socket makes the kernel do the matching we would otherwise write: it only
//!   delivers datagrams from the target's address and port to our port, and turns an ICMP
//!   error quoting our datagram into an error on the socket (with `IP_RECVERR` the exact
//!   ICMP type and code, read from the error queue), with the stack's own checks;
//! - an ephemeral port per probe is unguessable enough for health checks and leaves the
//!   engine's reserved port range to the engine;
//! - request/response checks are the few targets whose operators asked for them (the cure
//!   for ICMP rate limiting), not the hundred-thousand-target sweep the kernel path exists for.
//!
//! The cost is one file descriptor per probe in flight, so probes take a permit from a
//! semaphore first (the open-file limit is finite); the timeout starts after the permit.
use std::{
    io::{self, Read},
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::{io::Interest, net::UdpSocket, sync::Semaphore};

mod config;

pub use config::{Udp, UdpCheck, KEYS};

use crate::engine::L4Outcome;

/// ICMP destination unreachable / port unreachable.
const ICMP_PORT_UNREACH: (u8, u8) = (3, 3);
/// ICMPv6 destination unreachable / port unreachable.
const ICMPV6_PORT_UNREACH: (u8, u8) = (1, 4);
/// Bytes of a reply that are searched for the expected string; longer replies are cut.
pub const MAX_REPLY: usize = 16 * 1024;
/// Request/response probes in flight at once, by default: well below the usual open-file
/// limit, so the daemon's other descriptors never starve.
pub const DEFAULT_CONCURRENCY: usize = 1024;

/// What one UDP probe found, in either mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpOutcome {
    /// Plain mode: no ICMP error within the timeout (healthy by lb semantics).
    Silent,
    /// ICMP port unreachable (3/3) or ICMPv6 port unreachable (1/4).
    PortUnreachable,
    /// Any other ICMP/ICMPv6 destination-unreachable code.
    Unreachable { icmp_type: u8, code: u8 },
    /// Request/response mode: a reply containing the expected string.
    Reply,
    /// Request/response mode: a reply without it.
    ReplyMismatch,
    /// Request/response mode: nothing (or only a suppressed error) within the timeout.
    Timeout,
    /// No route to the target from this node.
    NoRoute,
    /// The socket itself failed (an errno); the probe says nothing about the target.
    SocketError(i32),
    /// This node is short of a resource (an errno such as EMFILE or ENOBUFS): no verdict.
    LocalError(i32),
}

impl From<&UdpOutcome> for crate::outcome::Outcome {
    fn from(o: &UdpOutcome) -> Self {
        match o {
            UdpOutcome::Silent => crate::outcome::Outcome::Silent,
            UdpOutcome::PortUnreachable => crate::outcome::Outcome::PortUnreachable,
            UdpOutcome::Unreachable { .. } => crate::outcome::Outcome::Unreachable,
            UdpOutcome::Reply => crate::outcome::Outcome::Reply,
            UdpOutcome::ReplyMismatch => crate::outcome::Outcome::ReplyMismatch,
            UdpOutcome::Timeout => crate::outcome::Outcome::Timeout,
            UdpOutcome::NoRoute => crate::outcome::Outcome::NoRoute,
            UdpOutcome::SocketError(_) => crate::outcome::Outcome::SocketError,
            UdpOutcome::LocalError(_) => crate::outcome::Outcome::LocalError,
        }
    }
}

impl UdpOutcome {
    /// The verdict of SPEC section 1: silence in plain mode, a matching reply otherwise.
    pub fn healthy(&self) -> bool {
        matches!(self, UdpOutcome::Silent | UdpOutcome::Reply)
    }

    /// Names an ICMP or ICMPv6 destination-unreachable message (the type tells the family:
    /// ICMPv4 type 1 is unassigned).
    pub fn from_icmp(icmp_type: u8, code: u8) -> Self {
        if (icmp_type, code) == ICMP_PORT_UNREACH || (icmp_type, code) == ICMPV6_PORT_UNREACH {
            UdpOutcome::PortUnreachable
        } else {
            UdpOutcome::Unreachable { icmp_type, code }
        }
    }
}

/// The L4 engine's outcome of a UDP probe; an error for the TCP and HTTP outcomes.
impl TryFrom<L4Outcome> for UdpOutcome {
    type Error = L4Outcome;

    fn try_from(o: L4Outcome) -> Result<Self, L4Outcome> {
        match o {
            L4Outcome::Silent => Ok(UdpOutcome::Silent),
            L4Outcome::Unreachable { icmp_type, code } => Ok(UdpOutcome::from_icmp(icmp_type, code)),
            L4Outcome::Timeout => Ok(UdpOutcome::Timeout),
            L4Outcome::NoRoute => Ok(UdpOutcome::NoRoute),
            L4Outcome::LocalError { errno } => Ok(UdpOutcome::LocalError(errno)),
            L4Outcome::Open
            | L4Outcome::Refused
            | L4Outcome::HttpStatus { .. }
            | L4Outcome::HttpReset
            | L4Outcome::HttpClosed
            | L4Outcome::HttpMalformed
            | L4Outcome::HttpResponseTimeout
            | L4Outcome::HttpUnsupported
            | L4Outcome::HttpUndecided { .. } => Err(o),
        }
    }
}

impl std::fmt::Display for UdpOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UdpOutcome::Silent => f.write_str("silent"),
            UdpOutcome::PortUnreachable => f.write_str("port unreachable"),
            UdpOutcome::Unreachable { icmp_type, code } => write!(f, "unreachable {icmp_type}/{code}"),
            UdpOutcome::Reply => f.write_str("reply"),
            UdpOutcome::ReplyMismatch => f.write_str("reply mismatch"),
            UdpOutcome::Timeout => f.write_str("timeout"),
            UdpOutcome::NoRoute => f.write_str("no route"),
            UdpOutcome::SocketError(errno) => write!(f, "socket error: {}", io::Error::from_raw_os_error(*errno)),
            UdpOutcome::LocalError(errno) => write!(f, "local error: {}", io::Error::from_raw_os_error(*errno)),
        }
    }
}

/// One request/response probe.
#[derive(Clone, Debug)]
pub struct UdpRequest {
    pub target: SocketAddr,
    /// The datagram's payload (may be empty).
    pub send: Arc<[u8]>,
    /// What the reply must contain (empty: any reply from the target will do).
    pub expect: Arc<[u8]>,
    pub timeout: Duration,
    /// Source address; None = whatever the routing table picks.
    pub source: Option<IpAddr>,
    /// Through the data path's tunnel: the request goes wrapped to `target` (the backend) for
    /// the service address inside, which answers straight back.
    pub tunnel: Option<crate::probe::tunnel::TunnelTo>,
}

/// A request/response check as the runner's task: the request goes to its own target (the
/// check's), the reply's content decides.
impl super::TaskProbe for UdpRequest {
    fn run<'a>(
        &'a self,
        probers: &'a super::Probers,
        _target: SocketAddr,
        _budget: Option<Duration>,
    ) -> super::Probing<'a> {
        Box::pin(async move {
            let r = probers.udp.probe(self).await;
            super::ProbeReport {
                healthy: r.outcome.healthy(),
                outcome: (&r.outcome).into(),
                elapsed: r.elapsed,
                reason: Arc::from(r.outcome.to_string()),
                cert_not_after: None,
            }
        })
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn datagram(&self) -> bool {
        true
    }

    fn tunnel(&self) -> Option<&crate::probe::tunnel::TunnelTo> {
        self.tunnel.as_ref()
    }

    #[cfg(test)]
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The outcome of one request/response probe.
#[derive(Clone, Debug)]
pub struct UdpResult {
    pub target: SocketAddr,
    pub outcome: UdpOutcome,
    /// From the send to the outcome (the whole timeout when nothing came).
    pub elapsed: Duration,
}

/// Request/response prober: any number of concurrent callers, at most `max_in_flight`
/// sockets open at once.
#[derive(Clone, Debug)]
pub struct UdpProber {
    permits: Arc<Semaphore>,
}

impl Default for UdpProber {
    fn default() -> Self {
        Self::new(DEFAULT_CONCURRENCY)
    }
}

impl UdpProber {
    pub fn new(max_in_flight: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max_in_flight.max(1))),
        }
    }

    /// Sends one request and waits for the reply (or the error, or the timeout).
    pub async fn probe(&self, req: &UdpRequest) -> UdpResult {
        // The semaphore is never closed, so acquiring only waits.
        let _permit = self
            .permits
            .acquire()
            .await
            .expect("the prober's semaphore is never closed");
        let start = Instant::now();
        let outcome = tokio::time::timeout(req.timeout, exchange(req))
            .await
            .unwrap_or(UdpOutcome::Timeout);
        UdpResult {
            target: req.target,
            outcome,
            elapsed: start.elapsed(),
        }
    }

    /// Runs every request concurrently (bounded by the permits); results in request order.
    #[cfg(any(test, feature = "testing"))]
    pub async fn probe_all(&self, reqs: Vec<UdpRequest>) -> Vec<UdpResult> {
        let mut set = tokio::task::JoinSet::new();
        for (i, req) in reqs.into_iter().enumerate() {
            let prober = self.clone();
            set.spawn(async move { (i, prober.probe(&req).await) });
        }
        let mut out: Vec<Option<UdpResult>> = vec![None; set.len()];
        while let Some(joined) = set.join_next().await {
            // A probe task only panics on a bug; surface it rather than invent an outcome.
            let (i, r) = joined.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
            out[i] = Some(r);
        }
        out.into_iter().map(|r| r.expect("every task reported")).collect()
    }
}

/// One probe's exchange, without the timeout (the caller bounds it).
async fn exchange(req: &UdpRequest) -> UdpOutcome {
    if let Some(t) = &req.tunnel {
        return tunnelled(req, t).await;
    }
    let sock = match open(req) {
        Ok(s) => s,
        Err(e) => return io_outcome(e),
    };
    if let Err(e) = sock.send(&req.send).await {
        return error_outcome(&sock, e);
    }
    let mut buf = vec![0u8; MAX_REPLY];
    // Wait for READABLE or ERROR: an ICMP error raises only EPOLLERR, and tokio's own
    // `recv` waits for READABLE alone (and its `try_recv` would not even try without it).
    // The socket is non-blocking, so a plain read returns WouldBlock instead of waiting.
    let raw = socket2::SockRef::from(&sock);
    let got = sock
        .async_io(Interest::READABLE | Interest::ERROR, || (&*raw).read(&mut buf))
        .await;
    match got {
        Ok(n) if contains(&buf[..n], &req.expect) => UdpOutcome::Reply,
        // The first datagram from the target decides: a service that answers with something
        // else is answering wrong, and waiting longer would only hide it.
        Ok(_) => UdpOutcome::ReplyMismatch,
        Err(e) => error_outcome(&sock, e),
    }
}

/// A request through the data path's tunnel: a socket of ours takes the answer, which comes
/// from the service address inside the tunnel straight back (direct return), while the request
/// leaves by a raw socket, wrapped for the backend (`req.target`) as the load balancer wraps a
/// client's. The socket is not connected (the node may have no route to the service address):
/// it reads what comes to its port and keeps only the service's answer; an ICMP error quoting
/// the inner datagram (the backend's "port unreachable" from the service address) reaches it
/// as on a connected one.
async fn tunnelled(req: &UdpRequest, t: &crate::probe::tunnel::TunnelTo) -> UdpOutcome {
    use std::os::fd::{AsRawFd, FromRawFd};
    let service = SocketAddr::new(t.vip, req.target.port());
    let src = match req.source.map_or_else(|| route_source(req.target), Ok) {
        Ok(ip) => ip,
        Err(e) => return io_outcome(e),
    };
    let sock = match crate::kernel::sys::udp_with_recverr(SocketAddr::new(src, 0)).and_then(UdpSocket::from_std) {
        Ok(s) => s,
        Err(e) => return io_outcome(e),
    };
    let local = match sock.local_addr() {
        Ok(a) => a,
        Err(e) => return io_outcome(e),
    };
    let packet = crate::probe::tunnel::wrapped_datagram(&t.engine(req.target.ip()), local, service, &req.send);
    let sent =
        crate::kernel::sys::RawIpSocket::open(src.is_ipv6()).and_then(|raw| raw.send_to(&packet, req.target.ip()));
    if let Err(e) = sent {
        return io_outcome(e);
    }
    // SAFETY: a second view of the socket's descriptor for recv_from, never closed
    // (ManuallyDrop); `sock` owns it and outlives every use here.
    let view = std::mem::ManuallyDrop::new(unsafe { std::net::UdpSocket::from_raw_fd(sock.as_raw_fd()) });
    let mut buf = vec![0u8; MAX_REPLY];
    loop {
        let got = sock
            .async_io(Interest::READABLE | Interest::ERROR, || view.recv_from(&mut buf))
            .await;
        match got {
            Ok((n, from)) if from == service => {
                return if contains(&buf[..n], &req.expect) {
                    UdpOutcome::Reply
                } else {
                    UdpOutcome::ReplyMismatch
                };
            }
            // Not the service's answer: another sender found the port.
            Ok(_) => {}
            Err(e) => return error_outcome(&sock, e),
        }
    }
}

/// The address the route to `to` leaves from (a UDP connect sends nothing).
fn route_source(to: SocketAddr) -> io::Result<IpAddr> {
    let any: IpAddr = if to.is_ipv4() {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        Ipv6Addr::UNSPECIFIED.into()
    };
    let probe = std::net::UdpSocket::bind(SocketAddr::new(any, 0))?;
    probe.connect(to)?;
    Ok(probe.local_addr()?.ip())
}

/// A non-blocking UDP socket connected to the target, reporting ICMP errors in detail.
fn open(req: &UdpRequest) -> io::Result<UdpSocket> {
    let v4 = req.target.is_ipv4();
    let local = match (req.source, v4) {
        (Some(ip), _) => SocketAddr::new(ip, 0),
        (None, true) => SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0),
        (None, false) => SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), 0),
    };
    let std_sock = crate::kernel::sys::connected_udp_with_recverr(local, req.target)?;
    UdpSocket::from_std(std_sock)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// An error from socket setup or sending, where no ICMP detail can exist.
fn io_outcome(e: io::Error) -> UdpOutcome {
    match e.raw_os_error() {
        Some(libc::ENETUNREACH | libc::EHOSTUNREACH) => UdpOutcome::NoRoute,
        Some(errno) if crate::outcome::is_local_resource_errno(errno) => UdpOutcome::LocalError(errno),
        Some(errno) => UdpOutcome::SocketError(errno),
        None => UdpOutcome::SocketError(libc::EIO),
    }
}

/// An error on a connected socket: the ICMP message behind it when the error queue holds
/// one, else what the errno alone says.
fn error_outcome(sock: &UdpSocket, e: io::Error) -> UdpOutcome {
    if let Some((t, c)) = crate::kernel::sys::queued_icmp(sock) {
        return UdpOutcome::from_icmp(t, c);
    }
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => UdpOutcome::PortUnreachable,
        _ => io_outcome(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_and_words() {
        let cases = [
            (UdpOutcome::Silent, true, "silent"),
            (UdpOutcome::PortUnreachable, false, "port unreachable"),
            (
                UdpOutcome::Unreachable { icmp_type: 3, code: 13 },
                false,
                "unreachable 3/13",
            ),
            (UdpOutcome::Reply, true, "reply"),
            (UdpOutcome::ReplyMismatch, false, "reply mismatch"),
            (UdpOutcome::Timeout, false, "timeout"),
            (UdpOutcome::NoRoute, false, "no route"),
        ];
        for (o, healthy, words) in cases {
            assert_eq!(o.healthy(), healthy, "{o:?}");
            assert_eq!(o.to_string(), words);
        }
    }

    #[test]
    fn port_unreachable_is_named_in_both_families() {
        assert_eq!(UdpOutcome::from_icmp(3, 3), UdpOutcome::PortUnreachable);
        assert_eq!(UdpOutcome::from_icmp(1, 4), UdpOutcome::PortUnreachable);
        // ICMPv6 1/3 is "address unreachable", not a port.
        assert_eq!(
            UdpOutcome::from_icmp(1, 3),
            UdpOutcome::Unreachable { icmp_type: 1, code: 3 }
        );
        assert_eq!(
            UdpOutcome::try_from(L4Outcome::Unreachable { icmp_type: 3, code: 3 }),
            Ok(UdpOutcome::PortUnreachable)
        );
        assert_eq!(UdpOutcome::try_from(L4Outcome::Open), Err(L4Outcome::Open));
    }

    #[test]
    fn containment() {
        assert!(contains(b"+PONG ok", b"PONG"));
        assert!(contains(b"anything", b""));
        assert!(!contains(b"PON", b"PONG"));
        assert!(!contains(b"", b"x"));
    }

    /// A real exchange on the host's loopback: an echo-like responder, a wrong responder,
    /// and a closed port.
    #[tokio::test]
    async fn loopback_reply_mismatch_and_closed_port() {
        let server = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        let wrong = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let wrong_addr = wrong.local_addr().unwrap();
        let closed_addr = {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.local_addr().unwrap()
        };
        let responder = |s: std::net::UdpSocket, answer: &'static [u8]| {
            std::thread::spawn(move || {
                let mut b = [0u8; 64];
                if let Ok((_, from)) = s.recv_from(&mut b) {
                    let _ = s.send_to(answer, from);
                }
            })
        };
        let t1 = responder(server, b"status: PONG\n");
        let t2 = responder(wrong, b"status: BUSY\n");
        let req = |target| UdpRequest {
            target,
            send: Arc::from(&b"PING"[..]),
            expect: Arc::from(&b"PONG"[..]),
            timeout: Duration::from_secs(2),
            source: None,
            tunnel: None,
        };
        let prober = UdpProber::new(2);
        let r = prober
            .probe_all(vec![req(addr), req(wrong_addr), req(closed_addr)])
            .await;
        let got: Vec<_> = r.iter().map(|r| r.outcome).collect();
        assert_eq!(
            got,
            [
                UdpOutcome::Reply,
                UdpOutcome::ReplyMismatch,
                UdpOutcome::PortUnreachable
            ]
        );
        t1.join().unwrap();
        t2.join().unwrap();
    }
}
