//! probe_rx: the reply matcher on ingress, at XDP (`probe_rx`) or at tcx ingress
//! (`probe_rx_tc`, beside a load balancer that owns the interface's XDP hook). Both entry
//! points run the same matcher over the packet bytes and only translate its verdict. It
//! counts every reply class, and matches SYN+ACK, RST and ICMP unreachable against live
//! probes in the in-flight table:
//! - a matched SYN+ACK is reported open and rewritten in place into the RST that closes the
//!   half-open connection, which goes back out of the interface it came in by (XDP_TX, or a
//!   tc redirect to the same device's egress), so the node's own stack never sees it; an HTTP probe's SYN+ACK is
//!   rewritten into the segment that carries its request instead, and the response's first
//!   segment is read for its status line and turned into the RST;
//! - a matched RST or ICMP error is reported and dropped;
//! - an HTTP probe's response is decided here only when its first segment holds a complete,
//!   final status line; anything the kernel cannot be sure of (a status line in pieces, an
//!   interim 1xx, a window or MSS too small for the request, options it does not read) is
//!   reported undecided, the connection reset, and userspace settles the check through a
//!   socket within the same probe's time;
//! - a UDP datagram answering a live UDP probe is consumed (the port is open);
//! - a segment of a probe connection that probe_rx itself just ended (PROBE_ENDED), which
//!   proves it by acknowledging the probe's cookie, is answered with the RST the node's stack
//!   would send;
//! - anything else is passed untouched (and counted as stale or forged when it aims at the
//!   probe port range). A packet is only ever acted on when its whole 4-tuple, our address
//!   included, is a live or just-ended probe's and it echoes that probe's secret cookie: flows
//!   the node forwards or terminates, whatever their ports, are never touched.
use aya_ebpf::{
    bindings::{tcx_action_base, xdp_action},
    helpers::{bpf_ktime_get_ns, bpf_redirect},
    macros::{classifier, xdp},
    programs::{TcContext, XdpContext},
};
use probe_common::{
    counters::RxCounters,
    frame::{write_request_v4, write_request_v6, write_rst_v4, write_rst_v6, Ends, RstV4, RstV6, FLOW_LABEL_MASK},
    http::{judge_head, request_fits, syn_ack_mss, HttpReq, HTTP_REQ_MAX, STATUS_HEAD_LEN},
    l4::{
        Ended, EventKind, FlowKey, Inflight, ProbeEvent, Road, Undecided, STAGE_REQUEST_SENT, TUNNEL_GUE, TUNNEL_NONE,
    },
    packet::{
        classify_icmp, classify_tcp_flags, IcmpHdr, ReplyClass, TcpHdr, ETH_P_IP, ETH_P_IPV6, IPPROTO_ICMP,
        IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP, TCP_ACK, TCP_FIN,
    },
    parse::{parse_link, parse_quote, Link, Packet, VlanTag},
};

use crate::{
    ctx::Packet as Hooked,
    maps::{
        is_probe_port, rst_by_stack, rx_counters, scratch, PROBE_ENDED, PROBE_EVENTS, PROBE_HTTP_REQS, PROBE_INFLIGHT,
        PROBE_ROADS,
    },
    parse::{parse_l3_into, ptr_at, read_at, write_at, Frame, L3},
};

mod http;
mod rewrite;

use http::{fits, no_room, on_http_reply, request_in_place, undecided};
use rewrite::{rst_in_place, wrap_in_place};

/// What the matcher decided, whatever the hook.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Not ours, or not decisive: the packet goes on as if we were not there.
    Pass,
    /// A matched reply, consumed.
    Drop,
    /// Rewritten in place into a RST: send it back out of the interface it came in by
    /// (XDP_TX, or a tc redirect to the same device's egress).
    Bounce,
    /// Rewritten into an HTTP probe's request, or a tunnelled probe's RST: back out of the
    /// interface it came in by, at XDP as a redirect. Not XDP_TX: veth does not wake a peer
    /// without an XDP program for XDP_TX frames (they wait in its ring for the next frame to
    /// arrive by any other path, which in a quiet moment may be never), while a redirect's
    /// flush always does; a request that waits costs the probe its timeout. Plain RSTs keep
    /// XDP_TX: late is harmless for them, and redirecting them too overflowed veth's
    /// 256-frame ring at 30k probes a second (the generator's SYNs were dropped with them);
    /// a tunnelled probe's RST comes after the round's last frame too often to wait.
    BounceNow,
}

const PASS: Verdict = Verdict::Pass;
const DROP: Verdict = Verdict::Drop;

#[xdp]
pub fn probe_rx(mut ctx: XdpContext) -> u32 {
    if crate::tx::is_generator_frame(&ctx) {
        return crate::tx::generate(&mut ctx);
    }
    let v = try_probe_rx(&mut ctx).unwrap_or(PASS);
    xdp_verdict(&ctx, v)
}

#[classifier]
pub fn probe_rx_tc(mut ctx: TcContext) -> i32 {
    crate::ctx::pull_headers(&ctx, TC_HEADER_BYTES);
    let v = try_probe_rx(&mut ctx).unwrap_or(PASS);
    tc_verdict(&ctx, v)
}

#[inline(always)]
fn xdp_verdict(ctx: &XdpContext, v: Verdict) -> u32 {
    match v {
        Verdict::Pass => xdp_action::XDP_PASS,
        Verdict::Drop => xdp_action::XDP_DROP,
        Verdict::Bounce => xdp_action::XDP_TX,
        // SAFETY: bpf_redirect only records the target ifindex for after the program returns.
        Verdict::BounceNow => unsafe { bpf_redirect(ctx.ingress_ifindex() as u32, 0) as u32 },
    }
}

/// The tcx action for a verdict. Pass is TCX_NEXT, not TCX_PASS: the programs attached
/// after ours (the load balancer's) must still see the packet.
#[inline(always)]
fn tc_verdict(ctx: &TcContext, v: Verdict) -> i32 {
    match v {
        Verdict::Pass => tcx_action_base::TCX_NEXT,
        Verdict::Drop => tcx_action_base::TCX_DROP,
        Verdict::Bounce | Verdict::BounceNow => {
            // SAFETY: reading the ingress ifindex from the program's own __sk_buff context.
            let ifindex = unsafe { (*ctx.skb.skb).ifindex };
            // SAFETY: bpf_redirect only records the target (flags 0: that device's egress)
            // for after the program returns TCX_REDIRECT.
            unsafe { bpf_redirect(ifindex, 0) };
            tcx_action_base::TCX_REDIRECT
        }
    }
}

/// The most header bytes the matcher reads (an ICMP error quoting an IPv4 header with
/// options, or an IPv6 one with extension headers, and the quoted ports): pulled into the
/// skb's linear part, where direct packet access reaches. XDP frames are always linear.
const TC_HEADER_BYTES: u32 = 256;

/// The matcher. Not inlined into the entry point, so the generator's call chain does not
/// carry the matcher's stack frame (the verifier allows 512 bytes along any chain).
#[inline(never)]
fn try_probe_rx(ctx: &mut impl Hooked) -> Option<Verdict> {
    let c = rx_counters()?;
    // Up to two VLAN tags are skipped; a frame with more is no IP to us.
    let frame = Frame::of(ctx);
    let link = parse_link(&frame)?;
    let v6 = match link.eth.ethertype() {
        ETH_P_IP => false,
        ETH_P_IPV6 => true,
        _ => {
            c.other += 1;
            return Some(PASS);
        }
    };
    // Strict: a header the parser will not read past (a fragment, say) is passed untouched.
    let mut l3 = L3::default();
    if !parse_l3_into(&frame, link.l3_off, v6, &mut l3) {
        return Some(PASS);
    }
    match l3.proto {
        IPPROTO_TCP => match on_tcp(&frame, &l3, c)? {
            Tcp::Done(action) => Some(action),
            // The outcome is taken; the stack, which has no socket for the flow, sends the RST.
            Tcp::SendRst if rst_by_stack() => Some(PASS),
            Tcp::SendRst => {
                // Sibling calls of on_tcp, not callees: their stack frames never add up.
                let wrapped = tunnelled();
                rst_in_place(ctx, &link, &l3, wrapped)?;
                if wrapped {
                    wrap_in_place(ctx, &link, &l3)?;
                    c.tunnel_sent += 1;
                    c.rst_sent += 1;
                    // Sent at once: a tunnelled probe's answer comes late in a round (through
                    // the backend's decapsulation), often after the round's last frame, and an
                    // XDP_TX frame on veth then waits for good (see BounceNow). The backend
                    // would hold the half-open connection until its retries end.
                    return Some(Verdict::BounceNow);
                }
                c.rst_sent += 1;
                Some(Verdict::Bounce)
            }
            Tcp::SendRequest(req) => {
                let wrapped = tunnelled();
                if request_in_place(ctx, &link, &l3, req, wrapped).is_some() {
                    if wrapped {
                        wrap_in_place(ctx, &link, &l3)?;
                        c.tunnel_sent += 1;
                    }
                    c.http_requests += 1;
                    return Some(Verdict::BounceNow);
                }
                // No room in the frame for the request (it is unchanged): the probe ends
                // here, and the half-open connection with the RST the SYN+ACK becomes.
                if no_room(&l3, &Frame::of(ctx), c) {
                    rst_in_place(ctx, &link, &l3, wrapped)?;
                    if wrapped {
                        wrap_in_place(ctx, &link, &l3)?;
                    }
                    c.rst_sent += 1;
                    return Some(Verdict::Bounce);
                }
                Some(PASS)
            }
        },
        IPPROTO_UDP => on_udp(&frame, &l3, c),
        IPPROTO_ICMP if !v6 => on_icmp(&frame, &l3, c),
        IPPROTO_ICMPV6 if v6 => on_icmp(&frame, &l3, c),
        _ => {
            c.other += 1;
            Some(PASS)
        }
    }
}

#[inline(always)]
fn family(ipv6: bool) -> u8 {
    if ipv6 {
        probe_common::l4::FAMILY_V6
    } else {
        probe_common::l4::FAMILY_V4
    }
}

/// What on_tcp decided: an action, a matched reply to be turned into the RST that ends its
/// connection, or an HTTP probe's SYN+ACK to be turned into the segment carrying its request
/// (the template's id).
enum Tcp {
    Done(Verdict),
    SendRst,
    SendRequest(u32),
}

// on_tcp, on_icmp and rst_in_place are not inlined: each gets its own stack frame, and
// they are called one after the other, so their frames never add up along a call chain
// (the verifier allows 512 bytes).

/// A TCP segment: matched against the live probes, and what to do with it. For a tunnelled
/// probe's flow it copies the road (from PROBE_ROADS) into this CPU's scratch slot: what is
/// sent back must then be wrapped as the SYN was (`tunnelled`).
#[inline(never)]
fn on_tcp(frame: &Frame, l3: &L3, c: &mut RxCounters) -> Option<Tcp> {
    let road = &mut scratch()?.road;
    road.tunnel = TUNNEL_NONE;
    let tcp = frame.read::<TcpHdr>(l3.l4_off)?;
    let class = classify_tcp_flags(tcp.flags);
    match class {
        ReplyClass::SynAck => c.syn_ack += 1,
        ReplyClass::Rst => c.rst += 1,
        _ => c.other += 1,
    }
    if !is_probe_port(tcp.dport()) {
        return Some(Tcp::Done(PASS));
    }
    let flow = reply_flow(l3, &tcp);
    let Some(entry) = live(&flow) else {
        if class != ReplyClass::Other {
            c.stale += 1;
            return Some(Tcp::Done(PASS));
        }
        if tcp.flags & TCP_ACK != 0 && just_ended(&flow, tcp.ack()) {
            // A segment of a probe connection probe_rx has just reset (the FIN or the rest of
            // a response that crossed its RST), proven by its ack. The node's stack, which has
            // no socket for it, would answer with a RST (seq = its ack) after conntrack picked
            // the flow up; the RST is sent from here instead. Any other segment, such as a
            // forwarded client flow whose port falls in the range, is passed untouched.
            c.late_reset += 1;
            // Wrapped when the probe was tunnelled and its road is still known (an HTTP
            // probe's stays while its flow rests); else as a plain probe's.
            fill_road(&flow, road);
            return Some(Tcp::SendRst);
        }
        return Some(Tcp::Done(PASS));
    };
    if entry.tunnel != TUNNEL_NONE && !fill_road(&flow, road) {
        // Its road did not fit the table: a RST goes unwrapped, but a request must not go
        // to the service address directly (it would be checked there, not through the
        // tunnel): the probe ends without a verdict, as one without room for its request.
        c.no_road += 1;
        if entry.req != 0 && class == ReplyClass::SynAck && claim(&flow, &entry, EventKind::HttpNoRoom, 0, 0, c) {
            return Some(Tcp::SendRst);
        }
        if entry.req != 0 {
            return Some(Tcp::Done(PASS));
        }
    }
    if entry.stage == STAGE_REQUEST_SENT {
        return on_http_reply(frame, l3, &tcp, class, &flow, &entry, c);
    }
    if class == ReplyClass::Other {
        return Some(Tcp::Done(PASS));
    }
    // Both a SYN+ACK and the RST refusing a SYN acknowledge exactly the cookie plus one.
    if tcp.flags & TCP_ACK == 0 || tcp.ack() != entry.cookie.wrapping_add(1) {
        c.forged += 1;
        return Some(Tcp::Done(PASS));
    }
    if class == ReplyClass::Rst {
        if claim(&flow, &entry, EventKind::Refused, 0, 0, c) {
            c.matched_refused += 1;
            return Some(Tcp::Done(DROP));
        }
        return Some(Tcp::Done(PASS));
    }
    if entry.req != 0 {
        // An HTTP probe: the connection is up; the request goes out in the SYN+ACK's frame,
        // when one segment can carry it. Otherwise a socket does the exchange.
        if let Err(why) = fits(frame, l3, &tcp, entry.req - 1) {
            return Some(undecided(&flow, &entry, why, 0, c));
        }
        // The target's first sequence number is where its response will start.
        let Some(e) = PROBE_INFLIGHT.get_ptr_mut(flow) else {
            c.stale += 1;
            return Some(Tcp::Done(PASS));
        };
        // SAFETY: a pointer to a live hash-map value; the fields are plain integers, and a
        // concurrent delete by userspace only makes this write land in a freed entry that
        // nothing reads again (its timeout already owns the outcome).
        unsafe {
            (*e).peer_seq = tcp.seq().wrapping_add(1);
            (*e).stage = STAGE_REQUEST_SENT;
        }
        return Some(Tcp::SendRequest(entry.req - 1));
    }
    if !claim(&flow, &entry, EventKind::Open, 0, 0, c) {
        return Some(Tcp::Done(PASS));
    }
    c.matched_open += 1;
    Some(Tcp::SendRst)
}

/// Whether a segment of `flow` acknowledging `ack` belongs to a probe connection probe_rx
/// has just ended.
#[inline(always)]
fn just_ended(flow: &FlowKey, ack: u32) -> bool {
    // SAFETY: the value is copied out at once.
    unsafe { PROBE_ENDED.get(flow) }.is_some_and(|e| e.acknowledged_by(ack))
}

/// A UDP datagram: one answering a live plain UDP probe (its 4-tuple, with the probe's secret
/// source port) is consumed; the probe still ends at its timeout, silent and so healthy.
#[inline(never)]
fn on_udp(frame: &Frame, l3: &L3, c: &mut RxCounters) -> Option<Verdict> {
    c.other += 1;
    let ports = frame.read::<[u8; 4]>(l3.l4_off)?;
    let (sport, dport) = (
        u16::from_be_bytes([ports[0], ports[1]]),
        u16::from_be_bytes([ports[2], ports[3]]),
    );
    if !is_probe_port(dport) {
        return Some(PASS);
    }
    let flow = FlowKey {
        saddr: l3.daddr,
        daddr: l3.saddr,
        sport: dport,
        dport: sport,
        proto: IPPROTO_UDP,
        family: family(l3.ipv6),
        _pad: [0; 2],
    };
    if live(&flow).is_none() {
        return Some(PASS);
    }
    c.udp_reply += 1;
    Some(DROP)
}

/// The probe flow a TCP reply belongs to: the reply's destination is our side of it.
#[inline(always)]
fn reply_flow(l3: &L3, tcp: &TcpHdr) -> FlowKey {
    FlowKey {
        saddr: l3.daddr,
        daddr: l3.saddr,
        sport: tcp.dport(),
        dport: tcp.sport(),
        proto: IPPROTO_TCP,
        family: family(l3.ipv6),
        _pad: [0; 2],
    }
}

#[inline(never)]
fn on_icmp(frame: &Frame, l3: &L3, c: &mut RxCounters) -> Option<Verdict> {
    let icmp = frame.read::<IcmpHdr>(l3.l4_off)?;
    // Only destination unreachable with a code that says "refused" (port unreachable,
    // administratively prohibited, ...: see packet.rs) may end a probe.
    if classify_icmp(l3.ipv6, icmp.kind, icmp.code) != ReplyClass::IcmpUnreach {
        c.other += 1;
        return Some(PASS);
    }
    c.icmp_unreach += 1;
    // The error quotes our probe: its source is us, its destination the target. The quote
    // gets the outer header's checks (version, IHL, no fragment, extension headers).
    let quote = parse_quote(frame, l3.l4_off, l3.ipv6)?;
    let (inner, q) = (quote.l3, quote.l4);
    if inner.proto != IPPROTO_TCP && inner.proto != IPPROTO_UDP {
        return Some(PASS);
    }
    if !is_probe_port(q.sport()) {
        return Some(PASS);
    }
    let flow = FlowKey {
        saddr: inner.saddr,
        daddr: inner.daddr,
        sport: q.sport(),
        dport: q.dport(),
        proto: inner.proto,
        family: family(l3.ipv6),
        _pad: [0; 2],
    };
    let Some(entry) = live(&flow) else {
        c.stale += 1;
        return Some(PASS);
    };
    let echoes_cookie = if inner.proto == IPPROTO_TCP {
        q.seq() == entry.cookie
    } else if !l3.ipv6 {
        inner.ident == entry.cookie & 0xffff
    } else {
        // IPv6 has no id: the UDP probe carries the cookie's low 20 bits as its flow label.
        inner.ident == entry.cookie & FLOW_LABEL_MASK
    };
    if !echoes_cookie {
        c.forged += 1;
        return Some(PASS);
    }
    if claim(
        &flow,
        &entry,
        EventKind::Unreachable,
        u16::from_be_bytes([icmp.kind, icmp.code]),
        0,
        c,
    ) {
        c.matched_unreach += 1;
        return Some(DROP);
    }
    Some(PASS)
}

/// Whether on_tcp found the packet's flow to be a tunnelled probe's, with its road.
#[inline(always)]
fn tunnelled() -> bool {
    scratch().is_some_and(|s| s.road.tunnel != TUNNEL_NONE)
}

/// Copies `flow`'s road into `road`; false when there is none.
#[inline(always)]
fn fill_road(flow: &FlowKey, road: &mut Road) -> bool {
    // SAFETY: the value is copied out at once.
    match unsafe { PROBE_ROADS.get(flow) } {
        Some(r) => {
            *road = *r;
            true
        }
        None => false,
    }
}

/// The live probe of `flow`, copied out of the table.
#[inline(always)]
fn live(flow: &FlowKey) -> Option<Inflight> {
    // SAFETY: the value is copied out at once, before anything can delete the entry.
    unsafe { PROBE_INFLIGHT.get(flow) }.copied()
}

/// Takes ownership of a probe's outcome: reserves the event first, so that once the entry
/// is deleted the event is certain to follow; whoever deletes the entry reports the outcome.
#[inline(always)]
fn claim(flow: &FlowKey, entry: &Inflight, kind: EventKind, icmp: u16, status: u16, c: &mut RxCounters) -> bool {
    let Some(mut slot) = PROBE_EVENTS.reserve::<ProbeEvent>(0) else {
        // No room to report the reply. The entry is taken all the same, so that the engine's
        // timeout finds it gone and, with no event to follow, reports "no verdict": left in
        // place it would time out as silence, a UDP probe's healthy outcome, whatever the
        // reply said. The packet is passed (a SYN+ACK gets the stack's own RST).
        if PROBE_INFLIGHT.remove(flow).is_ok() {
            c.ringbuf_full += 1;
        } else {
            c.stale += 1;
        }
        return false;
    };
    if PROBE_INFLIGHT.remove(flow).is_err() {
        // Userspace timed the probe out a moment ago: the reply is late.
        slot.discard(0);
        c.stale += 1;
        return false;
    }
    if entry.tunnel != TUNNEL_NONE && entry.req == 0 {
        // A tunnelled TCP probe is over: on_tcp has its road in the scratch slot for the RST,
        // and nothing later is answered on its flow. (An HTTP probe's road stays for the
        // backend's late segments; userspace deletes it once the flow has rested.)
        let _ = PROBE_ROADS.remove(flow);
    }
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    slot.write(ProbeEvent {
        rtt_ns: now.saturating_sub(entry.sent_ns),
        slot: entry.slot,
        gen: entry.gen,
        kind: kind as u8,
        icmp_type: (icmp >> 8) as u8,
        icmp_code: icmp as u8,
        _pad: 0,
        status,
        _pad2: [0; 2],
    });
    slot.submit(0);
    true
}
