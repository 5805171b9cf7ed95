//! Passive detection: what the node's forwarded TCP handshakes say about each backend.
//!
//! Two tcx programs watch the interface toward the backends. At egress, `passive_out` sees each
//! client SYN after the node's NAT and routing (its destination is the backend) and opens a
//! [`Handshake`] in an LRU map keyed by the flow as it goes out ([`FlowKey`], client to backend).
//! At ingress, `passive_in` sees the backend's answer before the node translates it back: a
//! SYN+ACK or a RST from the backend, or an ICMP destination unreachable quoting the SYN, and
//! closes the handshake with an [`Outcome`]. A client's SYN sent again after the backend's
//! `timeout` closes it as timed out. Each outcome lands in the backend's [`PassiveStats`], an
//! array slot that userspace reads through a shared mapping. Neither program changes a packet:
//! both return "next" whatever they see.
//!
//! The decisions are the pure functions here (`on_syn`, `on_answer`), run by the host tests
//! exactly as the programs run them.

use crate::l4::FlowKey;

/// The most backends passive detection watches at once (PASSIVE_STATS slots).
pub const MAX_PASSIVE_BACKENDS: u32 = 65_536;
/// Handshakes in flight the LRU holds (the loader may size it otherwise).
pub const DEFAULT_PASSIVE_FLOWS: u32 = 65_536;

/// A backend as forwarded segments name it (the address and port they go to).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BackendKey {
    /// IPv4 in the first four bytes (the rest zero), or IPv6; network byte order.
    pub addr: [u8; 16],
    /// Host byte order.
    pub port: u16,
    /// `l4::FAMILY_V4` or `l4::FAMILY_V6`.
    pub family: u8,
    pub _pad: u8,
}
const _: () = assert!(core::mem::size_of::<BackendKey>() == 20);

impl BackendKey {
    /// The key of the backend at `addr`.
    pub fn of(addr: core::net::SocketAddr) -> Self {
        let mut k = Self {
            port: addr.port(),
            ..Self::default()
        };
        match addr.ip() {
            core::net::IpAddr::V4(a) => {
                k.addr[..4].copy_from_slice(&a.octets());
                k.family = crate::l4::FAMILY_V4;
            }
            core::net::IpAddr::V6(a) => {
                k.addr = a.octets();
                k.family = crate::l4::FAMILY_V6;
            }
        }
        k
    }
}

/// What userspace tells the kernel of a watched backend (PASSIVE_BACKENDS value).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendRule {
    /// Its PASSIVE_STATS slot.
    pub id: u32,
    /// A handshake not answered within this many milliseconds failed (timed out when the
    /// client's SYN comes again, slow when the SYN+ACK comes late).
    pub timeout_ms: u32,
}
const _: () = assert!(core::mem::size_of::<BackendRule>() == 8);

/// A handshake seen leaving for a backend and not yet answered (PASSIVE_FLOWS value).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Handshake {
    /// When the client's first SYN went out.
    pub first_ns: u64,
    /// The client's initial sequence number: an answer must acknowledge it (SYN+ACK, RST) or
    /// quote it (ICMP).
    pub isn: u32,
    /// SYNs seen (the first and the client's retransmissions), saturating.
    pub syns: u16,
    /// `OPEN` or `DONE`.
    pub state: u8,
    pub _pad: u8,
}
const _: () = assert!(core::mem::size_of::<Handshake>() == 16);

impl Handshake {
    pub const OPEN: u8 = 0;
    /// An outcome was counted: later segments of the flow count nothing.
    pub const DONE: u8 = 1;
}

/// One backend's counters (PASSIVE_STATS slot), all totals since the slot was given to the
/// backend except the run fields. The kernel adds with atomic adds; userspace reads through the
/// shared mapping and zeroes `peak` (and `peak_first_ns`) after each read.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassiveStats {
    /// Handshakes seen starting (client SYNs toward the backend, one per flow).
    pub started: u64,
    /// Answered by a SYN+ACK within the timeout.
    pub completed: u64,
    /// Answered by a RST.
    pub refused: u64,
    /// Answered by an ICMP destination unreachable (from the backend or a router before it).
    pub unreachable: u64,
    /// Not answered within the timeout: the client sent its SYN again, or the SYN+ACK came late.
    pub timed_out: u64,
    /// Sum of the completed handshakes' round trips (SYN out to SYN+ACK in), nanoseconds.
    pub rtt_sum_ns: u64,
    /// Failures in a row since the last completed handshake.
    pub consecutive: u64,
    /// The longest run of failures in a row since userspace last zeroed it: a run that
    /// reached the threshold and was broken before userspace looked still shows.
    pub peak: u64,
    /// When the current run of failures began (its first failure).
    pub streak_first_ns: u64,
    /// When the last failure was counted.
    pub last_fail_ns: u64,
    /// When the run that set `peak` began.
    pub peak_first_ns: u64,
}
const _: () = assert!(core::mem::size_of::<PassiveStats>() == 88);

impl PassiveStats {
    /// Handshakes that failed, of any kind.
    pub fn failed(&self) -> u64 {
        self.refused + self.unreachable + self.timed_out
    }

    /// Handshakes with an outcome (the rest are in flight, or were given up unanswered
    /// without a second SYN, or fell out of the LRU).
    pub fn decided(&self) -> u64 {
        self.completed + self.failed()
    }
}

/// How a handshake ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Completed { rtt_ns: u64 },
    Refused,
    Unreachable,
    TimedOut,
}

/// What an answer from the backend's side is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A SYN+ACK acknowledging `ack - 1`.
    SynAck { ack: u32 },
    /// A RST; `ack` is its acknowledgment number when it carries ACK.
    Rst { ack: Option<u32> },
    /// An ICMP destination unreachable quoting a segment whose sequence number is `seq`.
    Unreachable { seq: u32 },
}

/// What a client SYN toward a watched backend does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SynStep {
    /// A new handshake: record it and count it started.
    Start,
    /// The same handshake's SYN again, unanswered for `timeout_ns` or more: it timed out.
    TimedOut,
    /// The same SYN again before the timeout, or a flow already decided: count its SYN only.
    Again,
    /// A SYN with another sequence number on a flow already known (open or decided): the client
    /// started over on the same ports. Replace the entry and count it started.
    Restart,
}

/// Decides a client SYN. `flow` is the entry for its flow, if any.
#[inline(always)]
pub fn on_syn(flow: Option<&Handshake>, seq: u32, now_ns: u64, timeout_ns: u64) -> SynStep {
    let Some(f) = flow else {
        return SynStep::Start;
    };
    if f.isn != seq {
        return SynStep::Restart;
    }
    if f.state == Handshake::OPEN && now_ns.saturating_sub(f.first_ns) >= timeout_ns {
        SynStep::TimedOut
    } else {
        SynStep::Again
    }
}

/// Decides an answer on an open handshake: None when the handshake is already decided or the
/// answer does not belong to it (a SYN+ACK or RST not acknowledging the client's SYN, an ICMP
/// error quoting another segment): such a packet is not the backend's answer to this SYN.
#[inline(always)]
pub fn on_answer(flow: &Handshake, answer: Answer, now_ns: u64, timeout_ns: u64) -> Option<Outcome> {
    if flow.state != Handshake::OPEN {
        return None;
    }
    let acks_syn = |ack: u32| ack == flow.isn.wrapping_add(1);
    match answer {
        Answer::SynAck { ack } if acks_syn(ack) => {
            let rtt_ns = now_ns.saturating_sub(flow.first_ns);
            Some(if rtt_ns > timeout_ns {
                Outcome::TimedOut
            } else {
                Outcome::Completed { rtt_ns }
            })
        }
        // A RST in answer to a SYN acknowledges it (RFC 9293 3.10.7.3).
        Answer::Rst { ack: Some(ack) } if acks_syn(ack) => Some(Outcome::Refused),
        Answer::Unreachable { seq } if seq == flow.isn => Some(Outcome::Unreachable),
        _ => None,
    }
}

/// Whether an ICMP error of this type and code says a segment could not reach its
/// destination: every destination unreachable but IPv4's "fragmentation needed" (which says
/// the path works and asks for smaller packets).
#[inline(always)]
pub fn is_unreachable(ipv6: bool, kind: u8, code: u8) -> bool {
    if ipv6 {
        kind == crate::packet::ICMPV6_DEST_UNREACH
    } else {
        kind == crate::packet::ICMP_DEST_UNREACH && code != 4
    }
}

/// The flow key of a client SYN going out: client to backend, as on the wire.
#[inline(always)]
pub fn syn_flow(l3: &crate::parse::L3, sport: u16, dport: u16) -> FlowKey {
    flow_of(l3.ipv6, l3.saddr, l3.daddr, sport, dport)
}

/// The flow key of the handshake a segment from the backend answers (addresses and ports
/// swapped back to the SYN's direction).
#[inline(always)]
pub fn answer_flow(l3: &crate::parse::L3, sport: u16, dport: u16) -> FlowKey {
    flow_of(l3.ipv6, l3.daddr, l3.saddr, dport, sport)
}

#[inline(always)]
fn flow_of(ipv6: bool, client: [u8; 16], backend: [u8; 16], cport: u16, bport: u16) -> FlowKey {
    FlowKey {
        saddr: client,
        daddr: backend,
        sport: cport,
        dport: bport,
        proto: crate::packet::IPPROTO_TCP,
        family: if ipv6 {
            crate::l4::FAMILY_V6
        } else {
            crate::l4::FAMILY_V4
        },
        _pad: [0; 2],
    }
}

/// The backend a flow key (as `syn_flow` makes it) goes to.
#[inline(always)]
pub fn backend_of(flow: &FlowKey) -> BackendKey {
    BackendKey {
        addr: flow.daddr,
        port: flow.dport,
        family: flow.family,
        _pad: 0,
    }
}

#[cfg(feature = "user")]
mod pod {
    // Each record is repr(C), made of integers and byte arrays with explicit padding fields
    // (sizes asserted above), so it has no implicit padding and every bit pattern is valid.
    // SAFETY: see above.
    unsafe impl aya::Pod for super::BackendKey {}
    // SAFETY: see above.
    unsafe impl aya::Pod for super::BackendRule {}
    // SAFETY: see above.
    unsafe impl aya::Pod for super::Handshake {}
    // SAFETY: see above.
    unsafe impl aya::Pod for super::PassiveStats {}
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: u64 = 1_000_000_000;

    fn open(first_ns: u64, isn: u32) -> Handshake {
        Handshake {
            first_ns,
            isn,
            syns: 1,
            state: Handshake::OPEN,
            _pad: 0,
        }
    }

    #[test]
    fn a_syn_starts_a_handshake_and_its_retransmission_after_the_timeout_fails_it() {
        assert_eq!(on_syn(None, 7, 0, TIMEOUT), SynStep::Start);
        let f = open(100, 7);
        assert_eq!(on_syn(Some(&f), 7, 100 + TIMEOUT - 1, TIMEOUT), SynStep::Again);
        assert_eq!(on_syn(Some(&f), 7, 100 + TIMEOUT, TIMEOUT), SynStep::TimedOut);
        let done = Handshake {
            state: Handshake::DONE,
            ..f
        };
        assert_eq!(
            on_syn(Some(&done), 7, 100 + 5 * TIMEOUT, TIMEOUT),
            SynStep::Again,
            "a decided flow counts once"
        );
        assert_eq!(on_syn(Some(&f), 8, 200, TIMEOUT), SynStep::Restart);
        assert_eq!(on_syn(Some(&done), 8, 200, TIMEOUT), SynStep::Restart);
    }

    #[test]
    fn only_an_answer_to_the_clients_syn_decides_it() {
        let f = open(1_000, u32::MAX);
        // The ISN wraps: its SYN+ACK acknowledges 0.
        assert_eq!(
            on_answer(&f, Answer::SynAck { ack: 0 }, 5_000, TIMEOUT),
            Some(Outcome::Completed { rtt_ns: 4_000 })
        );
        assert_eq!(on_answer(&f, Answer::SynAck { ack: 1 }, 5_000, TIMEOUT), None);
        assert_eq!(
            on_answer(&f, Answer::SynAck { ack: 0 }, 1_000 + TIMEOUT + 1, TIMEOUT),
            Some(Outcome::TimedOut),
            "a SYN+ACK later than the timeout is a slow backend's"
        );
        assert_eq!(
            on_answer(&f, Answer::Rst { ack: Some(0) }, 2_000, TIMEOUT),
            Some(Outcome::Refused)
        );
        assert_eq!(on_answer(&f, Answer::Rst { ack: None }, 2_000, TIMEOUT), None);
        assert_eq!(on_answer(&f, Answer::Rst { ack: Some(5) }, 2_000, TIMEOUT), None);
        assert_eq!(
            on_answer(&f, Answer::Unreachable { seq: u32::MAX }, 2_000, TIMEOUT),
            Some(Outcome::Unreachable)
        );
        assert_eq!(on_answer(&f, Answer::Unreachable { seq: 0 }, 2_000, TIMEOUT), None);
        let done = Handshake {
            state: Handshake::DONE,
            ..f
        };
        assert_eq!(on_answer(&done, Answer::SynAck { ack: 0 }, 2_000, TIMEOUT), None);
    }

    #[test]
    fn fragmentation_needed_is_no_failure() {
        assert!(is_unreachable(false, 3, 1));
        assert!(is_unreachable(false, 3, 3));
        assert!(!is_unreachable(false, 3, 4));
        assert!(!is_unreachable(false, 11, 0));
        assert!(is_unreachable(true, 1, 0));
        assert!(!is_unreachable(true, 2, 0), "packet too big");
    }

    #[test]
    fn the_answer_flow_is_the_syn_flow() {
        let mut l3 = crate::parse::L3 {
            ipv6: false,
            saddr: [0; 16],
            daddr: [0; 16],
            proto: 6,
            ident: 0,
            l4_off: 34,
            l3_end: 60,
        };
        l3.saddr[..4].copy_from_slice(&[198, 18, 1, 2]);
        l3.daddr[..4].copy_from_slice(&[198, 18, 2, 3]);
        let syn = syn_flow(&l3, 40_000, 80);
        let back = crate::parse::L3 {
            saddr: l3.daddr,
            daddr: l3.saddr,
            ..l3
        };
        assert_eq!(answer_flow(&back, 80, 40_000), syn);
        let b = backend_of(&syn);
        assert_eq!(b, BackendKey::of("198.18.2.3:80".parse().unwrap()));
        assert_eq!(
            (&b.addr[..4], b.port, b.family),
            (&[198u8, 18, 2, 3][..], 80, crate::l4::FAMILY_V4)
        );
    }
}
