//! Rewriting a reply's frame in place into the segment probe_rx sends back (the RST that
//! ends a probe's connection), VLAN tags kept where they were.
use super::*;

/// Turns the matched SYN+ACK in the frame into the RST that closes the half-open connection:
/// back to its sender, from the address and port it was sent to, with seq = its ack. Kept
/// in place with its VLAN tags (if any), so the RST leaves on the VLAN the SYN+ACK came in
/// on. One function per family, each not inlined: together they would not fit the stack.
#[inline(always)]
pub(super) fn rst_in_place(ctx: &mut impl Hooked, link: &Link, l3: &L3) -> Option<()> {
    if l3.ipv6 {
        rst_v6_in_place(ctx, link, l3)
    } else {
        rst_v4_in_place(ctx, link, l3)
    }
}

// The untagged RST is written `tags * 4` bytes in, where its Ethernet header ends right
// before the network header; then the MACs and the saved tags go in front of it. No copy of
// the frame is made on the stack.
#[inline(never)]
fn rst_v4_in_place(ctx: &mut impl Hooked, link: &Link, l3: &L3) -> Option<()> {
    let tcp = read_at::<TcpHdr>(ctx, l3.l4_off)?;
    let (sport, dport, seq) = (tcp.dport(), tcp.sport(), tcp.ack());
    let saved = save_tags(ctx, link.tags)?;
    let f = shrink_to_at::<RstV4>(ctx, link.tags * VLAN_LEN)?;
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
    write_rst_v4(f, &e, seq);
    restore_tags(ctx, link.tags, &e, saved)
}

#[inline(never)]
fn rst_v6_in_place(ctx: &mut impl Hooked, link: &Link, l3: &L3) -> Option<()> {
    let tcp = read_at::<TcpHdr>(ctx, l3.l4_off)?;
    let (sport, dport, seq) = (tcp.dport(), tcp.sport(), tcp.ack());
    let saved = save_tags(ctx, link.tags)?;
    let f = shrink_to_at::<RstV6>(ctx, link.tags * VLAN_LEN)?;
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
    write_rst_v6(f, &e, seq);
    restore_tags(ctx, link.tags, &e, saved)
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
