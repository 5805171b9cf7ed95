//! Rewriting a reply's frame in place into the segment probe_rx sends back (the RST that
//! ends a probe's connection), VLAN tags kept where they were; on a tunnelled probe's flow,
//! wrapped in the outer headers its SYN had (`wrap_in_place`).
use probe_common::{
    frame::{
        outer_len, set_outer_gue_v4, set_outer_gue_v6, set_outer_ipip_v4, set_outer_ipip_v6, OuterGueV4, OuterGueV6,
    },
    packet::{EthHdr, Ipv4Hdr, Ipv6Hdr},
};

use super::*;
use crate::maps::{scratch, Scratch};

/// Turns the matched SYN+ACK in the frame into the RST that closes the half-open connection:
/// back to its sender, from the address and port it was sent to, with seq = its ack. Kept
/// in place with its VLAN tags (if any), so the RST leaves on the VLAN the SYN+ACK came in
/// on. One function per family, each not inlined: together they would not fit the stack.
///
/// With `wrapped`, the RST is written behind room for the outer headers of the probe's road
/// (in this CPU's scratch slot) and left for `wrap_in_place` to finish.
#[inline(always)]
pub(super) fn rst_in_place(ctx: &mut impl Hooked, link: &Link, l3: &L3, wrapped: bool) -> Option<()> {
    if l3.ipv6 {
        rst_v6_in_place(ctx, link, l3, wrapped)
    } else {
        rst_v4_in_place(ctx, link, l3, wrapped)
    }
}

// The untagged RST is written `tags * 4` bytes in (plus the outer headers' length when it is
// to be wrapped), where its Ethernet header ends right before the network header; then the
// MACs and the saved tags go in front of it. No copy of the frame is made on the stack.
#[inline(never)]
fn rst_v4_in_place(ctx: &mut impl Hooked, link: &Link, l3: &L3, wrapped: bool) -> Option<()> {
    let tcp = read_at::<TcpHdr>(ctx, l3.l4_off)?;
    let (sport, dport, seq) = (tcp.dport(), tcp.sport(), tcp.ack());
    let saved = save_tags(ctx, link.tags)?;
    let s = scratch()?;
    let outer = if wrapped { outer_of(s, false) } else { 0 };
    let f = resize_to_at::<RstV4>(ctx, link.tags * VLAN_LEN + outer)?;
    // Built after the resize, from the caller's copies: addresses held across the helper
    // call would be spilled to the stack byte by byte.
    let e = Ends {
        smac: link.eth.dst,
        dmac: link.eth.src,
        saddr: [l3.daddr[0], l3.daddr[1], l3.daddr[2], l3.daddr[3]],
        daddr: [l3.saddr[0], l3.saddr[1], l3.saddr[2], l3.saddr[3]],
        sport,
        dport,
    };
    let sum = write_rst_v4(f, &e, seq);
    if wrapped {
        return stash(s, ((RstV4::LEN - EthHdr::LEN) as u16, sum), sport, saved);
    }
    restore_tags(ctx, link.tags, &e, saved)
}

#[inline(never)]
fn rst_v6_in_place(ctx: &mut impl Hooked, link: &Link, l3: &L3, wrapped: bool) -> Option<()> {
    let tcp = read_at::<TcpHdr>(ctx, l3.l4_off)?;
    let (sport, dport, seq) = (tcp.dport(), tcp.sport(), tcp.ack());
    let saved = save_tags(ctx, link.tags)?;
    let s = scratch()?;
    let outer = if wrapped { outer_of(s, true) } else { 0 };
    let f = resize_to_at::<RstV6>(ctx, link.tags * VLAN_LEN + outer)?;
    // Built after the resize, from the caller's copies: addresses held across the helper
    // call would be spilled to the stack byte by byte.
    let e = Ends {
        smac: link.eth.dst,
        dmac: link.eth.src,
        saddr: l3.daddr,
        daddr: l3.saddr,
        sport,
        dport,
    };
    let sum = write_rst_v6(f, &e, seq);
    if wrapped {
        return stash(s, ((RstV6::LEN - EthHdr::LEN) as u16, sum), sport, saved);
    }
    restore_tags(ctx, link.tags, &e, saved)
}

/// Resizes the frame to `off` bytes plus a `T` (growing it if need be) and returns the `T` at
/// `off` to be written in place; the first `off` bytes are left for the caller to write.
#[inline(always)]
fn resize_to_at<T>(ctx: &mut impl Hooked, off: usize) -> Option<&mut T> {
    if !ctx.resize(off + core::mem::size_of::<T>()) {
        return None;
    }
    let p = ptr_at::<T>(ctx, off)?;
    // SAFETY: ptr_at checked the bounds after the resize; every frame layout has alignment 1;
    // the packet is reached only through `ctx`, borrowed mutably for the reference's life.
    Some(unsafe { &mut *p })
}

pub(super) const VLAN_LEN: usize = core::mem::size_of::<VlanTag>();
/// Where the first VLAN tag starts: after the two MACs.
const TAGS_OFF: usize = 12;

#[inline(always)]
pub(super) fn save_tags(ctx: &impl Hooked, tags: usize) -> Option<[VlanTag; 2]> {
    Some(match tags {
        0 => [VlanTag::default(); 2],
        1 => [read_at::<VlanTag>(ctx, TAGS_OFF)?, VlanTag::default()],
        _ => read_at::<[VlanTag; 2]>(ctx, TAGS_OFF)?,
    })
}

#[inline(always)]
pub(super) fn restore_tags<A>(ctx: &mut impl Hooked, tags: usize, e: &Ends<A>, saved: [VlanTag; 2]) -> Option<()> {
    if tags == 0 {
        return Some(());
    }
    write_at(ctx, 0, e.dmac)?;
    write_at(ctx, 6, e.smac)?;
    write_at(ctx, TAGS_OFF, saved[0])?;
    if tags > 1 {
        write_at(ctx, TAGS_OFF + VLAN_LEN, saved[1])?;
    }
    Some(())
}

/// How many bytes of outer headers the scratch slot's road puts in front of a packet.
#[inline(always)]
pub(super) fn outer_of(s: &Scratch, ipv6: bool) -> usize {
    outer_len(ipv6, s.road.tunnel == TUNNEL_GUE)
}

/// Leaves what `wrap_in_place` needs of the segment just written: `inner` (its IP packet's
/// length and word sum), our port, and the frame's VLAN tags.
#[inline(always)]
pub(super) fn stash(s: &mut Scratch, inner: (u16, u64), sport: u16, tags: [VlanTag; 2]) -> Option<()> {
    s.len = inner.0;
    s.sum = inner.1;
    s.sport = sport;
    s.tags = tags;
    Some(())
}

/// Finishes a segment written behind room for outer headers (`rst_in_place` or
/// `request_in_place` with a road): the road's outer headers, from its outer source (our
/// address, or `tunnel_source`) to the backend,
/// then the Ethernet header with the saved tags. A sibling call of the writer, not a callee,
/// so their stack frames never add up.
///
/// The outer packet goes to the neighbour the reply came from, as a plain RST does: the
/// backend itself when it answers directly, or the router between, which routes the outer
/// packet by its destination. Sent plainly to the service address, the segment would reach
/// whichever backend the data path picks for it, or none.
#[inline(never)]
pub(super) fn wrap_in_place(ctx: &mut impl Hooked, link: &Link, l3: &L3) -> Option<()> {
    let s = scratch()?;
    if l3.ipv6 {
        wrap_v6(ctx, link, s)
    } else {
        wrap_v4(ctx, link, s)
    }
}

#[inline(always)]
fn wrap_v4(ctx: &mut impl Hooked, link: &Link, s: &Scratch) -> Option<()> {
    let at = EthHdr::LEN + link.tags * VLAN_LEN;
    let r = &s.road;
    let us = [r.outer_src[0], r.outer_src[1], r.outer_src[2], r.outer_src[3]];
    let backend = [r.outer[0], r.outer[1], r.outer[2], r.outer[3]];
    if s.road.tunnel == TUNNEL_GUE {
        let h = ptr_at::<OuterGueV4>(ctx, at)?;
        // SAFETY: ptr_at checked the bounds; the layout has alignment 1.
        set_outer_gue_v4(
            unsafe { &mut *h },
            (&us, &backend),
            (s.sport, s.road.port),
            (s.len, s.sum),
        );
    } else {
        let h = ptr_at::<Ipv4Hdr>(ctx, at)?;
        // SAFETY: as above.
        set_outer_ipip_v4(unsafe { &mut *h }, (&us, &backend), s.len);
    }
    write_eth(ctx, link, s.tags, ETH_P_IP)
}

#[inline(always)]
fn wrap_v6(ctx: &mut impl Hooked, link: &Link, s: &Scratch) -> Option<()> {
    let at = EthHdr::LEN + link.tags * VLAN_LEN;
    if s.road.tunnel == TUNNEL_GUE {
        let h = ptr_at::<OuterGueV6>(ctx, at)?;
        // SAFETY: ptr_at checked the bounds; the layout has alignment 1.
        set_outer_gue_v6(
            unsafe { &mut *h },
            (&s.road.outer_src, &s.road.outer),
            (s.sport, s.road.port),
            (s.len, s.sum),
        );
    } else {
        let h = ptr_at::<Ipv6Hdr>(ctx, at)?;
        // SAFETY: as above.
        set_outer_ipip_v6(unsafe { &mut *h }, (&s.road.outer_src, &s.road.outer), s.len);
    }
    write_eth(ctx, link, s.tags, ETH_P_IPV6)
}

/// The frame's Ethernet header, back to the reply's sender: the MACs, the saved tags, and
/// `ethertype` after them.
#[inline(always)]
fn write_eth(ctx: &mut impl Hooked, link: &Link, saved: [VlanTag; 2], ethertype: u16) -> Option<()> {
    let e = Ends {
        smac: link.eth.dst,
        dmac: link.eth.src,
        ..Ends::<()>::default()
    };
    if link.tags == 0 {
        return write_at(
            ctx,
            0,
            EthHdr {
                dst: e.dmac,
                src: e.smac,
                ethertype_be: ethertype.to_be_bytes(),
            },
        );
    }
    restore_tags(ctx, link.tags, &e, saved)?;
    write_at(ctx, TAGS_OFF + link.tags * VLAN_LEN, ethertype.to_be_bytes())
}
