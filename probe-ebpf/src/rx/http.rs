//! probe_rx's kernel HTTP path: an HTTP probe's SYN+ACK becomes the segment that carries
//! its request, and the first segment of the response is judged by its status line, or left
//! to a socket (undecided) when the kernel cannot be sure. The TCP matcher (`mod.rs`) hands
//! over every segment of a connection whose request is out.
use probe_common::packet::EthHdr;

use super::{
    rewrite::{outer_of, restore_tags, save_tags, stash, VLAN_LEN},
    *,
};
use crate::maps::scratch;

/// A segment of a connection whose request is out (HTTP probes). The target proves it saw
/// the request by acknowledging all of it; its response must start at its first sequence
/// number. Then:
/// - a repeated SYN+ACK (our request was lost) is answered with the request again;
/// - data: the status line decides, and the segment becomes the RST that ends the connection;
/// - a FIN without data: closed without a response; a pure ACK is dropped (the node's stack,
///   which has no socket for the flow, would answer it with a RST);
/// - a RST at the target's sequence number: reset before the response.
#[inline(always)]
pub(super) fn on_http_reply(
    frame: &Frame,
    l3: &L3,
    tcp: &TcpHdr,
    class: ReplyClass,
    flow: &FlowKey,
    entry: &Inflight,
    c: &mut RxCounters,
) -> Option<Tcp> {
    if class == ReplyClass::SynAck {
        if tcp.ack() != entry.cookie.wrapping_add(1) {
            c.forged += 1;
            return Some(Tcp::Done(PASS));
        }
        return Some(Tcp::SendRequest(entry.req - 1));
    }
    if class == ReplyClass::Rst {
        if tcp.seq() != entry.peer_seq {
            c.forged += 1;
            return Some(Tcp::Done(PASS));
        }
        if claim_status(flow, entry, EventKind::HttpReset, 0, c) {
            return Some(Tcp::Done(DROP));
        }
        return Some(Tcp::Done(PASS));
    }
    let req_id = entry.req - 1;
    // SAFETY: the template is copied out at once; userspace never changes or deletes a
    // template while a probe that uses it is in flight.
    let req_len = unsafe { PROBE_HTTP_REQS.get(req_id) }.map(|r| r.len)?;
    if tcp.flags & TCP_ACK == 0 || tcp.ack() != entry.cookie.wrapping_add(1).wrapping_add(req_len) {
        c.forged += 1;
        return Some(Tcp::Done(PASS));
    }
    let payload_off = l3.l4_off + tcp.header_len();
    let payload_len = l3.l3_end.saturating_sub(payload_off);
    if tcp.seq() != entry.peer_seq {
        // Not where the response starts: its first segment was lost (the target sends it
        // again, since nothing of it was acknowledged), or a FIN that follows data we have not
        // seen. Neither decides anything yet.
        return Some(Tcp::Done(DROP));
    }
    if payload_len == 0 {
        if tcp.flags & TCP_FIN == 0 {
            return Some(Tcp::Done(DROP));
        }
        // A FIN right where the response would start: closed without a byte of it.
        return Some(ended_by_us(flow, entry, req_len, EventKind::HttpClosed, 0, c));
    }
    let mut head = [0u8; STATUS_HEAD_LEN];
    if payload_len >= STATUS_HEAD_LEN {
        head = frame.read::<[u8; STATUS_HEAD_LEN]>(payload_off)?;
    }
    Some(match judge_head(&head, payload_len) {
        Ok(code) => ended_by_us(flow, entry, req_len, EventKind::HttpStatus, code, c),
        Err(why) => undecided(flow, entry, why, req_len, c),
    })
}

/// Whether the request template `req` fits one segment in answer to this SYN+ACK.
#[inline(always)]
pub(super) fn fits(frame: &Frame, l3: &L3, tcp: &TcpHdr, req: u32) -> Result<(), Undecided> {
    // SAFETY: see on_http_reply: templates in use never change.
    let Some(len) = (unsafe { PROBE_HTTP_REQS.get(req) }).map(|r| r.len) else {
        return Ok(());
    };
    let first = if tcp.header_len() >= 24 {
        frame.read::<[u8; 4]>(l3.l4_off + TcpHdr::LEN)
    } else {
        None
    };
    let mss = syn_ack_mss(tcp.header_len(), first, l3.ipv6)?;
    request_fits(tcp.window(), mss, len)
}

/// Claims an HTTP outcome that ends the connection with our RST, and remembers the flow so
/// that what the target sent before the RST reached it is answered too.
#[inline(always)]
pub(super) fn ended_by_us(
    flow: &FlowKey,
    entry: &Inflight,
    req_len: u32,
    kind: EventKind,
    status: u16,
    c: &mut RxCounters,
) -> Tcp {
    if !claim_status(flow, entry, kind, status, c) {
        return Tcp::Done(PASS);
    }
    let ended = Ended {
        cookie: entry.cookie,
        req_len,
    };
    // A full LRU evicts its oldest entry; a failure only costs the stack's own RST later.
    let _ = PROBE_ENDED.insert(flow, ended, 0);
    Tcp::SendRst
}

/// Leaves the probe to a socket: reported undecided (why in the status field), the
/// connection reset.
#[inline(always)]
pub(super) fn undecided(flow: &FlowKey, entry: &Inflight, why: Undecided, req_len: u32, c: &mut RxCounters) -> Tcp {
    let t = ended_by_us(flow, entry, req_len, EventKind::HttpUndecided, why as u16, c);
    if matches!(t, Tcp::SendRst) {
        c.http_undecided += 1;
    }
    t
}

/// claim for HTTP outcomes, counted as such.
#[inline(always)]
pub(super) fn claim_status(flow: &FlowKey, entry: &Inflight, kind: EventKind, status: u16, c: &mut RxCounters) -> bool {
    let claimed = claim(flow, entry, kind, 0, status, c);
    if claimed {
        c.matched_http += 1;
    }
    claimed
}

/// Reports an HTTP probe whose SYN+ACK frame could not carry its request, and takes its
/// entry; true when the caller should reset the connection.
#[inline(never)]
pub(super) fn no_room(l3: &L3, frame: &Frame, c: &mut RxCounters) -> bool {
    let Some(tcp) = frame.read::<TcpHdr>(l3.l4_off) else {
        return false;
    };
    let flow = reply_flow(l3, &tcp);
    let Some(entry) = live(&flow) else {
        return false;
    };
    c.http_no_room += 1;
    claim(&flow, &entry, EventKind::HttpNoRoom, 0, 0, c)
}

/// Turns an HTTP probe's SYN+ACK into the segment that acknowledges it and carries the
/// request (template `req`): back to its sender, seq = its ack, ack = its seq + 1. The frame
/// grows to hold the request; None when it cannot (then it is unchanged). With `wrapped`, as
/// `rst_in_place`: written behind room for the road's outer headers, for `wrap_in_place`.
#[inline(always)]
pub(super) fn request_in_place(ctx: &mut impl Hooked, link: &Link, l3: &L3, req: u32, wrapped: bool) -> Option<()> {
    if l3.ipv6 {
        request_v6_in_place(ctx, link, l3, req, wrapped)
    } else {
        request_v4_in_place(ctx, link, l3, req, wrapped)
    }
}

/// The template's length, bounded for the verifier: 1..=HTTP_REQ_MAX.
#[inline(always)]
fn bounded_len(r: &HttpReq) -> usize {
    ((r.len as usize).wrapping_sub(1) & (HTTP_REQ_MAX - 1)) + 1
}

/// The part of a request segment both families share: the SYN+ACK's ports and numbers read,
/// the frame resized to `off + hdr + len` (the VLAN tags, the room for outer headers and the
/// segment's headers come before the request) and the template's bytes copied in after them.
struct Prepared {
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    len: usize,
    sum: u64,
    saved: [VlanTag; 2],
    off: usize,
}

#[inline(always)]
fn prepare_request(
    ctx: &mut impl Hooked,
    link: &Link,
    l3: &L3,
    req: u32,
    (hdr, outer): (usize, usize),
) -> Option<Prepared> {
    let tcp = read_at::<TcpHdr>(ctx, l3.l4_off)?;
    // SAFETY: see on_http_reply: templates in use never change.
    let r = unsafe { PROBE_HTTP_REQS.get(req) }?;
    let len = bounded_len(r);
    let saved = save_tags(ctx, link.tags)?;
    let off = link.tags * VLAN_LEN + outer;
    if !ctx.resize(off + hdr + len) || !ctx.store(off + hdr, r.bytes.as_ptr(), len as u32) {
        return None;
    }
    Some(Prepared {
        sport: tcp.dport(),
        dport: tcp.sport(),
        seq: tcp.ack(),
        ack: tcp.seq().wrapping_add(1),
        len,
        sum: r.sum,
        saved,
        off,
    })
}

#[inline(never)]
fn request_v4_in_place(ctx: &mut impl Hooked, link: &Link, l3: &L3, req: u32, wrapped: bool) -> Option<()> {
    let s = scratch()?;
    let outer = if wrapped { outer_of(s, false) } else { 0 };
    let p = prepare_request(ctx, link, l3, req, (RstV4::LEN, outer))?;
    let f = ptr_at::<RstV4>(ctx, p.off)?;
    let e = Ends {
        smac: link.eth.dst,
        dmac: link.eth.src,
        saddr: [l3.daddr[0], l3.daddr[1], l3.daddr[2], l3.daddr[3]],
        daddr: [l3.saddr[0], l3.saddr[1], l3.saddr[2], l3.saddr[3]],
        sport: p.sport,
        dport: p.dport,
    };
    // SAFETY: ptr_at checked the bounds after the resize; the layout has alignment 1.
    let sum = write_request_v4(unsafe { &mut *f }, &e, p.seq, p.ack, p.len as u16, p.sum);
    if wrapped {
        let inner = (RstV4::LEN - EthHdr::LEN + p.len) as u16;
        return stash(s, (inner, sum), p.sport, p.saved);
    }
    restore_tags(ctx, link.tags, &e, p.saved)
}

#[inline(never)]
fn request_v6_in_place(ctx: &mut impl Hooked, link: &Link, l3: &L3, req: u32, wrapped: bool) -> Option<()> {
    let s = scratch()?;
    let outer = if wrapped { outer_of(s, true) } else { 0 };
    let p = prepare_request(ctx, link, l3, req, (RstV6::LEN, outer))?;
    let f = ptr_at::<RstV6>(ctx, p.off)?;
    let e = Ends {
        smac: link.eth.dst,
        dmac: link.eth.src,
        saddr: l3.daddr,
        daddr: l3.saddr,
        sport: p.sport,
        dport: p.dport,
    };
    // SAFETY: as for IPv4.
    let sum = write_request_v6(unsafe { &mut *f }, &e, p.seq, p.ack, p.len as u16, p.sum);
    if wrapped {
        let inner = (RstV6::LEN - EthHdr::LEN + p.len) as u16;
        return stash(s, (inner, sum), p.sport, p.saved);
    }
    restore_tags(ctx, link.tags, &e, p.saved)
}
