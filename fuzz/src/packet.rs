//! probe_rx's reply classification, walked on the host over arbitrary bytes with the
//! probe-common headers and classifiers the kernel program calls, each decoded field checked
//! against an independent decoding of the raw bytes.
//!
//! `parse_l3` mirrors probe-ebpf's parse.rs (which reads packet memory through XdpContext and
//! cannot run here); when that parser moves into probe-common, call it instead.
use probe_common::packet::{
    classify_icmp, classify_tcp_flags, EthHdr, IcmpHdr, Ipv4Hdr, Ipv6Hdr, QuotedL4, ReplyClass, TcpHdr, UdpHdr,
    ETH_P_IP, ETH_P_IPV6, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP, TCP_ACK, TCP_RST, TCP_SYN,
};

/// Headers made only of bytes and byte arrays: every bit pattern is a valid value.
trait Wire: Copy {}
impl Wire for EthHdr {}
impl Wire for Ipv4Hdr {}
impl Wire for Ipv6Hdr {}
impl Wire for TcpHdr {}
impl Wire for UdpHdr {}
impl Wire for IcmpHdr {}
impl Wire for QuotedL4 {}

/// The host twin of probe-ebpf's `read_at`: a `T` at `off`, or `None` past the end.
fn read_at<T: Wire>(data: &[u8], off: usize) -> Option<T> {
    let end = off.checked_add(core::mem::size_of::<T>())?;
    let bytes = data.get(off..end)?;
    // SAFETY: `bytes` holds exactly size_of::<T>() bytes; T is a `Wire` header of byte fields
    // (alignment 1, any bit pattern valid), and read_unaligned needs no alignment.
    Some(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

fn be16(data: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([data[off], data[off + 1]])
}

fn be32(data: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([data[off], data[off + 1], data[off + 2], data[off + 3]])
}

struct L3 {
    ipv6: bool,
    proto: u8,
    l4_off: usize,
}

/// As probe-ebpf's parse_l3: IPv6 version 6, or a plain whole IPv4 datagram.
fn parse_l3(data: &[u8], off: usize, v6: bool) -> Option<L3> {
    if v6 {
        let ip = read_at::<Ipv6Hdr>(data, off)?;
        assert_eq!(ip.flow_label(), be32(data, off) & 0x000f_ffff, "flow label");
        if ip.ver_tc_flow[0] >> 4 != 6 {
            return None;
        }
        return Some(L3 {
            ipv6: true,
            proto: ip.next_hdr,
            l4_off: off + Ipv6Hdr::LEN,
        });
    }
    let ip = read_at::<Ipv4Hdr>(data, off)?;
    let (version, ihl) = (data[off] >> 4, usize::from(data[off] & 0x0f));
    let frag = be16(data, off + 6);
    assert_eq!(ip.header_len(), ihl * 4, "IHL");
    assert_eq!(ip.id(), be16(data, off + 4), "IPv4 id");
    let plain = version == 4 && ihl >= 5 && frag & 0x2000 == 0 && frag & 0x1fff == 0;
    assert_eq!(ip.is_plain(), plain, "is_plain of {:02x?}", &data[off..off + 20]);
    if !ip.is_plain() {
        return None;
    }
    assert!(
        (Ipv4Hdr::LEN..=60).contains(&ip.header_len()),
        "a plain header is 20..=60 bytes"
    );
    Some(L3 {
        ipv6: false,
        proto: ip.proto,
        l4_off: off + ip.header_len(),
    })
}

/// What probe_rx would count the frame as; checks every decision on the way.
pub fn classify(data: &[u8]) -> ReplyClass {
    let Some(eth) = read_at::<EthHdr>(data, 0) else {
        return ReplyClass::Other;
    };
    assert_eq!(eth.ethertype(), be16(data, 12));
    let v6 = match eth.ethertype() {
        ETH_P_IP => false,
        ETH_P_IPV6 => true,
        _ => return ReplyClass::Other,
    };
    let Some(l3) = parse_l3(data, EthHdr::LEN, v6) else {
        return ReplyClass::Other;
    };
    match l3.proto {
        IPPROTO_TCP => {
            let Some(tcp) = read_at::<TcpHdr>(data, l3.l4_off) else {
                return ReplyClass::Other;
            };
            let at = l3.l4_off;
            assert_eq!((tcp.sport(), tcp.dport()), (be16(data, at), be16(data, at + 2)));
            assert_eq!((tcp.seq(), tcp.ack()), (be32(data, at + 4), be32(data, at + 8)));
            assert_eq!(tcp.header_len(), usize::from(data[at + 12] >> 4) * 4);
            let flags = data[at + 13];
            let class = classify_tcp_flags(tcp.flags);
            let want = if flags & TCP_RST != 0 {
                ReplyClass::Rst
            } else if flags & TCP_SYN != 0 && flags & TCP_ACK != 0 {
                ReplyClass::SynAck
            } else {
                ReplyClass::Other
            };
            assert_eq!(class, want, "TCP flags {flags:#04x}");
            class
        }
        IPPROTO_ICMP if !l3.ipv6 => icmp(data, &l3),
        IPPROTO_ICMPV6 if l3.ipv6 => icmp(data, &l3),
        _ => ReplyClass::Other,
    }
}

fn icmp(data: &[u8], l3: &L3) -> ReplyClass {
    let Some(icmp) = read_at::<IcmpHdr>(data, l3.l4_off) else {
        return ReplyClass::Other;
    };
    let class = classify_icmp(l3.ipv6, icmp.kind);
    let unreach = if l3.ipv6 { 1 } else { 3 };
    assert_eq!(
        class == ReplyClass::IcmpUnreach,
        icmp.kind == unreach,
        "ICMP type {}",
        icmp.kind
    );
    if class != ReplyClass::IcmpUnreach {
        return class;
    }
    // The quoted probe: same family as the error, then its first eight transport bytes.
    let inner_off = l3.l4_off + IcmpHdr::LEN;
    if let Some(inner) = parse_l3(data, inner_off, l3.ipv6) {
        if inner.proto == IPPROTO_TCP || inner.proto == IPPROTO_UDP {
            if let Some(q) = read_at::<QuotedL4>(data, inner.l4_off) {
                let at = inner.l4_off;
                assert_eq!((q.sport(), q.dport()), (be16(data, at), be16(data, at + 2)));
                assert_eq!(q.seq(), be32(data, at + 4));
            }
        }
    }
    class
}

/// The fuzz entry: classify, then classify every prefix the kernel could see after a
/// truncation, which must never read out of bounds either.
pub fn check(data: &[u8]) {
    classify(data);
    let cut = data.len().min(128);
    for len in (0..cut).step_by(7) {
        classify(&data[..len]);
    }
}
