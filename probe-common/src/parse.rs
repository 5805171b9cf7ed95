//! The strict reply parser probe_rx runs, generic over how packet bytes are reached, so the
//! host tests (and the fuzz target) run the very code the kernel does, on byte slices.
//!
//! Strict means: anything the matcher would have to guess about is not read past, and the
//! frame is passed untouched. Up to two VLAN tags, IPv4 version 4 with IHL >= 5 and no
//! fragment, IPv6 version 6 with up to four hop-by-hop/routing/destination-options headers
//! and no fragment header; an ICMP error's quote gets the same checks.
use crate::packet::{
    EthHdr, IcmpHdr, Ipv4Hdr, Ipv6Hdr, QuotedL4, TcpHdr, UdpHdr, ETH_P_IP, ETH_P_IPV6, IPPROTO_ICMP, IPPROTO_ICMPV6,
    IPPROTO_IPIP, IPPROTO_IPV6,
};

/// 802.1Q customer tag (and the TPID of a single tag).
pub const ETH_P_8021Q: u16 = 0x8100;
/// 802.1ad service tag (the outer tag of QinQ).
pub const ETH_P_8021AD: u16 = 0x88a8;
/// Most VLAN tags skipped in front of the network header.
pub const MAX_VLAN_TAGS: usize = 2;
/// Most IPv6 extension headers walked before the transport header.
pub const MAX_EXT_HEADERS: usize = 4;

/// IPv6 extension headers the walk follows; a fragment header ends it (the frame is passed).
pub const IPPROTO_HOPOPTS: u8 = 0;
pub const IPPROTO_ROUTING: u8 = 43;
pub const IPPROTO_FRAGMENT: u8 = 44;
pub const IPPROTO_DSTOPTS: u8 = 60;

/// A type that may be read from any byte offset of a packet.
///
/// # Safety
/// Implementors have alignment 1, no padding, and every bit pattern is a valid value.
pub unsafe trait Wire: Copy {}

// SAFETY: each is repr(C) of u8 and byte arrays only (sizes asserted in packet.rs).
unsafe impl Wire for EthHdr {}
// SAFETY: as above.
unsafe impl Wire for Ipv4Hdr {}
// SAFETY: as above.
unsafe impl Wire for Ipv6Hdr {}
// SAFETY: as above.
unsafe impl Wire for TcpHdr {}
// SAFETY: as above.
unsafe impl Wire for UdpHdr {}
// SAFETY: as above.
unsafe impl Wire for QuotedL4 {}
// SAFETY: as above.
unsafe impl Wire for IcmpHdr {}
// SAFETY: as above.
unsafe impl Wire for VlanTag {}
// SAFETY: as above.
unsafe impl Wire for ExtHdr {}
// SAFETY: byte arrays have alignment 1 and accept any bytes.
unsafe impl<const N: usize> Wire for [u8; N] {}

/// Bounds-checked reads from a packet: the kernel implements it with its `ptr_at`, the host
/// with a byte slice. A read that does not fit is `None`, never a short value.
pub trait Packet {
    fn read<T: Wire>(&self, off: usize) -> Option<T>;
}

impl Packet for [u8] {
    #[inline(always)]
    fn read<T: Wire>(&self, off: usize) -> Option<T> {
        let end = off.checked_add(core::mem::size_of::<T>())?;
        let bytes = self.get(off..end)?;
        // SAFETY: `bytes` holds exactly size_of::<T>() initialised bytes, and T: Wire accepts
        // any bit pattern at any alignment.
        Some(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
    }
}

/// One VLAN tag: the TCI, then the ethertype of what follows.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VlanTag {
    pub tci_be: [u8; 2],
    pub ethertype_be: [u8; 2],
}
const _: () = assert!(core::mem::size_of::<VlanTag>() == 4);

/// The first two bytes of an IPv6 extension header (all three kinds walked share them).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtHdr {
    pub next_hdr: u8,
    /// Length in 8-byte units, not counting the first 8 bytes.
    pub len: u8,
}
const _: () = assert!(core::mem::size_of::<ExtHdr>() == 2);

/// The link layer: the MAC addresses, and the ethertype behind any VLAN tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// Destination and source MACs; `ethertype_be` is the innermost one.
    pub eth: EthHdr,
    /// VLAN tags skipped (0 to MAX_VLAN_TAGS).
    pub tags: usize,
    /// Offset of the network header.
    pub l3_off: usize,
}

/// Reads the Ethernet header and skips up to two VLAN tags (802.1Q or 802.1ad, in any
/// order). A frame with more tags keeps a VLAN ethertype, which is no IP: the caller passes it.
#[inline(always)]
pub fn parse_link<P: Packet + ?Sized>(p: &P) -> Option<Link> {
    let mut eth = p.read::<EthHdr>(0)?;
    let mut off = EthHdr::LEN;
    let mut tags = 0;
    for _ in 0..MAX_VLAN_TAGS {
        let t = eth.ethertype();
        if t != ETH_P_8021Q && t != ETH_P_8021AD {
            break;
        }
        let tag = p.read::<VlanTag>(off)?;
        eth.ethertype_be = tag.ethertype_be;
        off += core::mem::size_of::<VlanTag>();
        tags += 1;
    }
    Some(Link { eth, tags, l3_off: off })
}

/// The network header of a frame (or of an ICMP error's quote), as far as matching needs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct L3 {
    pub ipv6: bool,
    /// IPv4 addresses in the first four bytes, the rest zero.
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    /// The transport protocol, after any extension headers.
    pub proto: u8,
    /// The IPv4 id, or the IPv6 flow label (where a UDP probe carries its cookie bits).
    pub ident: u32,
    /// Offset of the transport header.
    pub l4_off: usize,
    /// Offset of the end of the IP packet, as its length field says (link-layer padding of
    /// short frames lies beyond it). In a quote it may lie past the frame's end.
    pub l3_end: usize,
}

/// Parses an IPv4 (or, with `ipv6`, IPv6) header at `off`. `None` means "do not read past":
/// a wrong version, an IHL below 5, a fragment (MF set or an offset: a probe's reply never is
/// one, and a fragment's transport header is absent or partial), an IPv6 fragment header,
/// more than MAX_EXT_HEADERS extension headers, or a header cut short.
#[inline(always)]
pub fn parse_l3<P: Packet + ?Sized>(p: &P, off: usize, ipv6: bool) -> Option<L3> {
    if ipv6 {
        let ip = p.read::<Ipv6Hdr>(off)?;
        if ip.ver_tc_flow[0] >> 4 != 6 {
            return None;
        }
        let (proto, l4_off) = skip_ext_headers(p, ip.next_hdr, off + Ipv6Hdr::LEN)?;
        Some(L3 {
            ipv6: true,
            saddr: ip.saddr,
            daddr: ip.daddr,
            proto,
            ident: ip.flow_label(),
            l4_off,
            l3_end: off + Ipv6Hdr::LEN + usize::from(u16::from_be_bytes(ip.payload_len_be)),
        })
    } else {
        let ip = p.read::<Ipv4Hdr>(off)?;
        if !ip.is_plain() {
            return None;
        }
        let (mut saddr, mut daddr) = ([0u8; 16], [0u8; 16]);
        saddr[..4].copy_from_slice(&ip.saddr);
        daddr[..4].copy_from_slice(&ip.daddr);
        Some(L3 {
            ipv6: false,
            saddr,
            daddr,
            proto: ip.proto,
            ident: u32::from(ip.id()),
            // Options, if any, are skipped whole: IHL counts them.
            l4_off: off + ip.header_len(),
            l3_end: off + usize::from(u16::from_be_bytes(ip.tot_len_be)),
        })
    }
}

/// Walks hop-by-hop, routing and destination-options headers from `next` at `off`; returns
/// the transport protocol and its offset. A fragment header, a header cut short, or a chain
/// longer than MAX_EXT_HEADERS is `None`.
#[inline(always)]
fn skip_ext_headers<P: Packet + ?Sized>(p: &P, mut next: u8, mut off: usize) -> Option<(u8, usize)> {
    for _ in 0..MAX_EXT_HEADERS {
        match next {
            IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_DSTOPTS => {
                let h = p.read::<ExtHdr>(off)?;
                next = h.next_hdr;
                off += (usize::from(h.len) + 1) * 8;
            }
            IPPROTO_FRAGMENT => return None,
            _ => return Some((next, off)),
        }
    }
    match next {
        IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_DSTOPTS | IPPROTO_FRAGMENT => None,
        _ => Some((next, off)),
    }
}

/// What an ICMP error quotes of our probe: its network header and its ports (plus, for
/// TCP, the sequence number).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quote {
    pub l3: L3,
    pub l4: QuotedL4,
}

/// Parses the datagram an ICMP or ICMPv6 error at `icmp_off` quotes, with the same rules as
/// the outer header (the same family as the outer one), and its first eight transport bytes.
/// An error about a tunnelled probe's outer packet (IPv4 in IPv4, IPv6 in IPv6: a backend that
/// cannot unwrap it) quotes the probe behind the outer header: that is the quote returned, read
/// with the same rules. Only a probe's own flow and cookie make either match anything.
#[inline(always)]
pub fn parse_quote<P: Packet + ?Sized>(p: &P, icmp_off: usize, ipv6: bool) -> Option<Quote> {
    let mut l3 = parse_l3(p, icmp_off + IcmpHdr::LEN, ipv6)?;
    let wrapped = if ipv6 { IPPROTO_IPV6 } else { IPPROTO_IPIP };
    if l3.proto == wrapped {
        l3 = parse_l3(p, l3.l4_off, ipv6)?;
    }
    let l4 = p.read::<QuotedL4>(l3.l4_off)?;
    Some(Quote { l3, l4 })
}

/// The whole parse of one ingress frame: what the matcher is given to decide on. probe_rx
/// takes the same steps one at a time (so each stays small for the verifier); the host tests
/// and the fuzz target take them here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Not IPv4 or IPv6 (after at most two VLAN tags).
    NotIp,
    /// An IP header the parser does not read past (see `parse_l3`), or a frame cut short.
    Refused,
    /// A TCP segment.
    Tcp { link: Link, l3: L3, tcp: TcpHdr },
    /// An ICMP/ICMPv6 message; `quote` only for an error the matcher considers (see
    /// `packet::classify_icmp`) whose quote passes the same checks.
    Icmp {
        link: Link,
        l3: L3,
        icmp: IcmpHdr,
        quote: Option<Quote>,
    },
    /// Another transport protocol.
    Other { link: Link, l3: L3 },
}

/// Parses a frame from its Ethernet header on.
pub fn parse_frame<P: Packet + ?Sized>(p: &P) -> Parsed {
    let Some(link) = parse_link(p) else {
        return Parsed::Refused;
    };
    let ipv6 = match link.eth.ethertype() {
        ETH_P_IP => false,
        ETH_P_IPV6 => true,
        _ => return Parsed::NotIp,
    };
    let Some(l3) = parse_l3(p, link.l3_off, ipv6) else {
        return Parsed::Refused;
    };
    let icmp_proto = if ipv6 { IPPROTO_ICMPV6 } else { IPPROTO_ICMP };
    match l3.proto {
        crate::packet::IPPROTO_TCP => match p.read::<TcpHdr>(l3.l4_off) {
            Some(tcp) => Parsed::Tcp { link, l3, tcp },
            None => Parsed::Refused,
        },
        proto if proto == icmp_proto => {
            let Some(icmp) = p.read::<IcmpHdr>(l3.l4_off) else {
                return Parsed::Refused;
            };
            let quote = match crate::packet::classify_icmp(ipv6, icmp.kind, icmp.code) {
                crate::packet::ReplyClass::IcmpUnreach => parse_quote(p, l3.l4_off, ipv6),
                _ => None,
            };
            Parsed::Icmp { link, l3, icmp, quote }
        }
        _ => Parsed::Other { link, l3 },
    }
}

#[cfg(test)]
mod tests;
