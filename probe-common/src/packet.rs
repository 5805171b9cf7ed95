//! Wire headers as byte-aligned structs, plus the pure classification of ingress replies.
//!
//! Every field is a byte array (alignment 1), so a header can be read in place from packet
//! memory at any offset, in the kernel and on the host alike. Multi-byte fields are
//! big-endian on the wire; the accessors convert.

pub const ETH_P_IP: u16 = 0x0800;
pub const ETH_P_IPV6: u16 = 0x86dd;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;
pub const IPPROTO_ICMP: u8 = 1;
pub const IPPROTO_ICMPV6: u8 = 58;
/// IPv4 inside IPv4 (IPIP).
pub const IPPROTO_IPIP: u8 = 4;
/// IPv6 inside an IP header (ip6ip6 when the outer one is IPv6).
pub const IPPROTO_IPV6: u8 = 41;

pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_PSH: u8 = 0x08;
pub const TCP_ACK: u8 = 0x10;

/// ICMP (v4) destination unreachable.
pub const ICMP_DEST_UNREACH: u8 = 3;
/// ICMPv6 destination unreachable.
pub const ICMPV6_DEST_UNREACH: u8 = 1;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EthHdr {
    pub dst: [u8; 6],
    pub src: [u8; 6],
    pub ethertype_be: [u8; 2],
}
const _: () = assert!(core::mem::size_of::<EthHdr>() == 14);

impl EthHdr {
    pub const LEN: usize = 14;
    #[inline(always)]
    pub fn ethertype(&self) -> u16 {
        u16::from_be_bytes(self.ethertype_be)
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ipv4Hdr {
    pub ver_ihl: u8,
    pub tos: u8,
    pub tot_len_be: [u8; 2],
    pub id_be: [u8; 2],
    pub frag_off_be: [u8; 2],
    pub ttl: u8,
    pub proto: u8,
    pub csum_be: [u8; 2],
    pub saddr: [u8; 4],
    pub daddr: [u8; 4],
}
const _: () = assert!(core::mem::size_of::<Ipv4Hdr>() == 20);

impl Ipv4Hdr {
    pub const LEN: usize = 20;
    /// Header length in bytes (IHL * 4).
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        ((self.ver_ihl & 0x0f) as usize) * 4
    }
    #[inline(always)]
    pub fn id(&self) -> u16 {
        u16::from_be_bytes(self.id_be)
    }

    /// A header the matcher may read past: version 4, a length of at least the 20 fixed bytes,
    /// and a whole datagram (no fragment: a probe's reply never is one, and a fragment's
    /// transport header is absent or partial).
    #[inline(always)]
    pub fn is_plain(&self) -> bool {
        let fragment = u16::from_be_bytes(self.frag_off_be) & 0x3fff; // MF flag and offset
        self.ver_ihl >> 4 == 4 && self.ver_ihl & 0x0f >= 5 && fragment == 0
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ipv6Hdr {
    pub ver_tc_flow: [u8; 4],
    pub payload_len_be: [u8; 2],
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<Ipv6Hdr>() == 40);

impl Ipv6Hdr {
    pub const LEN: usize = 40;
    /// The 20-bit flow label.
    #[inline(always)]
    pub fn flow_label(&self) -> u32 {
        u32::from_be_bytes(self.ver_tc_flow) & 0x000f_ffff
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpHdr {
    pub sport_be: [u8; 2],
    pub dport_be: [u8; 2],
    pub seq_be: [u8; 4],
    pub ack_be: [u8; 4],
    /// Data offset in the high nibble.
    pub doff_res: u8,
    pub flags: u8,
    pub window_be: [u8; 2],
    pub csum_be: [u8; 2],
    pub urg_be: [u8; 2],
}
const _: () = assert!(core::mem::size_of::<TcpHdr>() == 20);

impl TcpHdr {
    pub const LEN: usize = 20;
    #[inline(always)]
    pub fn sport(&self) -> u16 {
        u16::from_be_bytes(self.sport_be)
    }
    #[inline(always)]
    pub fn dport(&self) -> u16 {
        u16::from_be_bytes(self.dport_be)
    }
    #[inline(always)]
    pub fn seq(&self) -> u32 {
        u32::from_be_bytes(self.seq_be)
    }
    #[inline(always)]
    pub fn ack(&self) -> u32 {
        u32::from_be_bytes(self.ack_be)
    }
    /// The advertised window (unscaled in a SYN or SYN+ACK).
    #[inline(always)]
    pub fn window(&self) -> u16 {
        u16::from_be_bytes(self.window_be)
    }
    /// Header length in bytes (data offset * 4).
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        ((self.doff_res >> 4) as usize) * 4
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpHdr {
    pub sport_be: [u8; 2],
    pub dport_be: [u8; 2],
    pub len_be: [u8; 2],
    pub csum_be: [u8; 2],
}
const _: () = assert!(core::mem::size_of::<UdpHdr>() == 8);

impl UdpHdr {
    pub const LEN: usize = 8;
    #[inline(always)]
    pub fn sport(&self) -> u16 {
        u16::from_be_bytes(self.sport_be)
    }
    #[inline(always)]
    pub fn dport(&self) -> u16 {
        u16::from_be_bytes(self.dport_be)
    }
}

/// The first eight bytes of the transport header an ICMP error quotes (all RFC 792
/// guarantees): ports, then the TCP sequence number (for UDP: length and checksum).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuotedL4 {
    pub sport_be: [u8; 2],
    pub dport_be: [u8; 2],
    pub seq_be: [u8; 4],
}
const _: () = assert!(core::mem::size_of::<QuotedL4>() == 8);

impl QuotedL4 {
    #[inline(always)]
    pub fn sport(&self) -> u16 {
        u16::from_be_bytes(self.sport_be)
    }
    #[inline(always)]
    pub fn dport(&self) -> u16 {
        u16::from_be_bytes(self.dport_be)
    }
    #[inline(always)]
    pub fn seq(&self) -> u32 {
        u32::from_be_bytes(self.seq_be)
    }
}

/// The first eight bytes of an ICMP or ICMPv6 message.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IcmpHdr {
    pub kind: u8,
    pub code: u8,
    pub csum_be: [u8; 2],
    pub rest: [u8; 4],
}
const _: () = assert!(core::mem::size_of::<IcmpHdr>() == 8);

impl IcmpHdr {
    pub const LEN: usize = 8;
}

/// What an ingress frame is, as far as the reply matcher cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyClass {
    /// A TCP segment with SYN and ACK (a port answering a probe).
    SynAck,
    /// A TCP segment with RST (a closed port).
    Rst,
    /// ICMP/ICMPv6 destination unreachable.
    IcmpUnreach,
    /// Anything else: never touched.
    Other,
}

/// Classifies a TCP segment by its flags. RST wins over everything, as it does in a stack.
#[inline(always)]
pub fn classify_tcp_flags(flags: u8) -> ReplyClass {
    if flags & TCP_RST != 0 {
        ReplyClass::Rst
    } else if flags & (TCP_SYN | TCP_ACK) == (TCP_SYN | TCP_ACK) {
        ReplyClass::SynAck
    } else {
        ReplyClass::Other
    }
}

/// ICMP destination-unreachable codes that count as an answer to a probe: the target, or a
/// firewall in front of it, refused the datagram. 2 protocol and 3 port unreachable come from
/// the target's own stack; 9, 10 and 13 (administratively prohibited) are what REJECT rules
/// send. Not counted (the probe runs on to its timeout): 0/1 net/host unreachable, which
/// routers send about the path; 4 fragmentation needed, which says the path works; and the
/// obsolete or source-side codes 5-8, 11, 12, 14 and 15.
pub const ICMP_REFUSED_CODES: [u8; 5] = [2, 3, 9, 10, 13];
/// The same for ICMPv6 destination unreachable: 4 port unreachable from the target; 1
/// administratively prohibited, 5 source address failed policy and 6 reject route from a
/// filter. Not counted: 0 no route and 3 address unreachable (the path), 2 beyond scope and
/// 7 source routing header (our side).
pub const ICMPV6_REFUSED_CODES: [u8; 4] = [1, 4, 5, 6];

/// Classifies an ICMP message of either family by its type and code: only a destination
/// unreachable with one of the refused codes above is `IcmpUnreach`.
#[inline(always)]
pub fn classify_icmp(ipv6: bool, kind: u8, code: u8) -> ReplyClass {
    let refused = if ipv6 {
        kind == ICMPV6_DEST_UNREACH && matches!(code, 1 | 4 | 5 | 6)
    } else {
        kind == ICMP_DEST_UNREACH && matches!(code, 2 | 3 | 9 | 10 | 13)
    };
    if refused {
        ReplyClass::IcmpUnreach
    } else {
        ReplyClass::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_whole_ipv4_headers_are_read_past() {
        let plain = Ipv4Hdr {
            ver_ihl: 0x45,
            frag_off_be: [0x40, 0], // DF only
            ..Ipv4Hdr::default()
        };
        assert!(plain.is_plain());
        assert!(!Ipv4Hdr { ver_ihl: 0x44, ..plain }.is_plain(), "IHL below 5");
        assert!(!Ipv4Hdr { ver_ihl: 0x65, ..plain }.is_plain(), "not version 4");
        assert!(
            !Ipv4Hdr {
                frag_off_be: [0x20, 0],
                ..plain
            }
            .is_plain(),
            "more fragments"
        );
        assert!(
            !Ipv4Hdr {
                frag_off_be: [0, 8],
                ..plain
            }
            .is_plain(),
            "a later fragment"
        );
    }

    #[test]
    fn tcp_flags_classify() {
        assert_eq!(classify_tcp_flags(TCP_SYN | TCP_ACK), ReplyClass::SynAck);
        assert_eq!(classify_tcp_flags(TCP_RST | TCP_ACK), ReplyClass::Rst);
        assert_eq!(classify_tcp_flags(TCP_RST), ReplyClass::Rst);
        assert_eq!(classify_tcp_flags(TCP_SYN), ReplyClass::Other);
        assert_eq!(classify_tcp_flags(TCP_ACK | TCP_PSH), ReplyClass::Other);
        assert_eq!(classify_tcp_flags(TCP_SYN | TCP_ACK | TCP_RST), ReplyClass::Rst);
    }

    #[test]
    fn icmp_types_classify_per_family() {
        assert_eq!(classify_icmp(false, 3, 3), ReplyClass::IcmpUnreach);
        assert_eq!(classify_icmp(false, 1, 3), ReplyClass::Other);
        assert_eq!(classify_icmp(true, 1, 4), ReplyClass::IcmpUnreach);
        assert_eq!(classify_icmp(true, 3, 4), ReplyClass::Other);
        assert_eq!(classify_icmp(false, 0, 0), ReplyClass::Other);
    }

    #[test]
    fn only_refusing_unreachable_codes_count() {
        for code in 0..=255u8 {
            let v4 = classify_icmp(false, ICMP_DEST_UNREACH, code) == ReplyClass::IcmpUnreach;
            assert_eq!(v4, ICMP_REFUSED_CODES.contains(&code), "ICMP 3/{code}");
            let v6 = classify_icmp(true, ICMPV6_DEST_UNREACH, code) == ReplyClass::IcmpUnreach;
            assert_eq!(v6, ICMPV6_REFUSED_CODES.contains(&code), "ICMPv6 1/{code}");
        }
        // Named: fragmentation needed and host unreachable do not fail a probe.
        assert_eq!(classify_icmp(false, 3, 4), ReplyClass::Other, "frag needed");
        assert_eq!(classify_icmp(false, 3, 1), ReplyClass::Other, "host unreachable");
        assert_eq!(classify_icmp(true, 1, 3), ReplyClass::Other, "address unreachable");
    }
}
