//! probe_rx's reply parser, `probe_common::parse::parse_frame` (the code the kernel program
//! runs, here over a byte slice), checked against a second decoding of the same bytes written
//! from the rules alone: byte offsets and masks, no shared header types. Any disagreement, or
//! a panic in either, is a finding.
use probe_common::packet::{classify_icmp, classify_tcp_flags, ReplyClass, TCP_ACK, TCP_RST, TCP_SYN};
use probe_common::parse::{parse_frame, Parsed, MAX_EXT_HEADERS, MAX_VLAN_TAGS};

fn be16(d: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*d.get(off)?, *d.get(off + 1)?]))
}

fn be32(d: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_be_bytes(d.get(off..off + 4)?.try_into().ok()?))
}

/// The reference decoding of a network header: (is IPv6, protocol, ident, transport offset).
type RefL3 = (bool, u8, u32, usize);

/// IPv4 version 4, IHL >= 5, neither MF nor a fragment offset; IPv6 version 6, at most
/// MAX_EXT_HEADERS hop-by-hop (0), routing (43) or destination-options (60) headers, and no
/// fragment header (44). The header must be whole (20 or 40 bytes); options need not be.
fn ref_l3(d: &[u8], off: usize, v6: bool) -> Option<RefL3> {
    if v6 {
        d.get(off..off + 40)?;
        if d[off] >> 4 != 6 {
            return None;
        }
        let label = be32(d, off)? & 0x000f_ffff;
        let (mut next, mut at) = (d[off + 6], off + 40);
        let mut walked = 0;
        while matches!(next, 0 | 43 | 60) {
            if walked == MAX_EXT_HEADERS {
                return None;
            }
            let len = *d.get(at + 1)?;
            next = d[at];
            at += (usize::from(len) + 1) * 8;
            walked += 1;
        }
        if next == 44 {
            return None;
        }
        return Some((true, next, label, at));
    }
    d.get(off..off + 20)?;
    let (version, ihl) = (d[off] >> 4, usize::from(d[off] & 0x0f));
    let frag = be16(d, off + 6)?;
    if version != 4 || ihl < 5 || frag & 0x2000 != 0 || frag & 0x1fff != 0 {
        return None;
    }
    Some((false, d[off + 9], u32::from(be16(d, off + 4)?), off + ihl * 4))
}

/// Skips up to MAX_VLAN_TAGS 802.1Q/802.1ad tags: (innermost ethertype, network offset).
fn ref_link(d: &[u8]) -> Option<(u16, usize)> {
    let mut ethertype = be16(d, 12)?;
    d.get(..14)?;
    let mut off = 14;
    for _ in 0..MAX_VLAN_TAGS {
        if ethertype != 0x8100 && ethertype != 0x88a8 {
            break;
        }
        ethertype = be16(d, off + 2)?;
        off += 4;
    }
    Some((ethertype, off))
}

fn same_l3(what: &str, got: &probe_common::parse::L3, want: RefL3, d: &[u8], off: usize) {
    let (v6, proto, ident, l4_off) = want;
    assert_eq!(
        (got.ipv6, got.proto, got.ident, got.l4_off),
        (v6, proto, ident, l4_off),
        "{what} at {off}"
    );
    let (s, n) = if v6 { (off + 8, 16) } else { (off + 12, 4) };
    assert_eq!(&got.saddr[..n], &d[s..s + n], "{what} source");
    assert_eq!(&got.daddr[..n], &d[s + n..s + 2 * n], "{what} destination");
    assert!(
        got.saddr[n..].iter().chain(&got.daddr[n..]).all(|&b| b == 0),
        "{what}: padding"
    );
}

/// Checks parse_frame against the reference on one frame; returns what the matcher would
/// classify it as.
pub fn classify(d: &[u8]) -> ReplyClass {
    let parsed = parse_frame(d);
    let Some((ethertype, l3_off)) = ref_link(d) else {
        assert_eq!(parsed, Parsed::Refused, "a frame cut inside its link header");
        return ReplyClass::Other;
    };
    let v6 = match ethertype {
        0x0800 => false,
        0x86dd => true,
        _ => {
            assert_eq!(parsed, Parsed::NotIp, "ethertype {ethertype:#06x}");
            return ReplyClass::Other;
        }
    };
    let Some(l3) = ref_l3(d, l3_off, v6) else {
        assert_eq!(parsed, Parsed::Refused, "a network header not to read past");
        return ReplyClass::Other;
    };
    let (_, proto, _, l4) = l3;
    let icmp_proto = if v6 { 58 } else { 1 };
    match parsed {
        Parsed::Tcp { link, l3: got, tcp } => {
            assert_eq!(proto, 6);
            assert_eq!((link.eth.ethertype(), link.l3_off), (ethertype, l3_off));
            same_l3("TCP's header", &got, l3, d, l3_off);
            let seg = d.get(l4..l4 + 20).expect("parse_frame read a TCP header past the end");
            assert_eq!(
                (tcp.sport(), tcp.dport()),
                (be16(seg, 0).unwrap(), be16(seg, 2).unwrap())
            );
            assert_eq!((tcp.seq(), tcp.ack()), (be32(seg, 4).unwrap(), be32(seg, 8).unwrap()));
            let flags = seg[13];
            let want = if flags & TCP_RST != 0 {
                ReplyClass::Rst
            } else if flags & (TCP_SYN | TCP_ACK) == TCP_SYN | TCP_ACK {
                ReplyClass::SynAck
            } else {
                ReplyClass::Other
            };
            let class = classify_tcp_flags(tcp.flags);
            assert_eq!(class, want, "TCP flags {flags:#04x}");
            class
        }
        Parsed::Icmp {
            link,
            l3: got,
            icmp,
            quote,
        } => {
            assert_eq!(proto, icmp_proto);
            assert_eq!(link.l3_off, l3_off);
            same_l3("ICMP's header", &got, l3, d, l3_off);
            let msg = d.get(l4..l4 + 8).expect("parse_frame read an ICMP header past the end");
            assert_eq!((icmp.kind, icmp.code), (msg[0], msg[1]));
            let refusing = if v6 {
                msg[0] == 1 && matches!(msg[1], 1 | 4 | 5 | 6)
            } else {
                msg[0] == 3 && matches!(msg[1], 2 | 3 | 9 | 10 | 13)
            };
            let class = classify_icmp(v6, icmp.kind, icmp.code);
            assert_eq!(class == ReplyClass::IcmpUnreach, refusing, "ICMP {}/{}", msg[0], msg[1]);
            // The quote: the same rules at the quoted header, then eight transport bytes.
            let want = refusing
                .then(|| ref_l3(d, l4 + 8, v6))
                .flatten()
                .and_then(|q| Some((q, d.get(q.3..q.3 + 8)?)));
            match (quote, want) {
                (None, None) => {}
                (Some(q), Some((rq, bytes))) => {
                    same_l3("the quote", &q.l3, rq, d, l4 + 8);
                    assert_eq!(
                        (q.l4.sport(), q.l4.dport()),
                        (be16(bytes, 0).unwrap(), be16(bytes, 2).unwrap())
                    );
                    assert_eq!(q.l4.seq(), be32(bytes, 4).unwrap());
                }
                (got, want) => panic!("quote: parse_frame {got:?}, reference {want:?}"),
            }
            class
        }
        Parsed::Other { l3: got, .. } => {
            assert!(proto != 6 && proto != icmp_proto, "protocol {proto} as Other");
            same_l3("the header", &got, l3, d, l3_off);
            ReplyClass::Other
        }
        Parsed::Refused => {
            // Only a transport header cut short, for the two protocols that are read.
            let need = if proto == 6 { 20 } else { 8 };
            assert!(
                (proto == 6 || proto == icmp_proto) && d.len() < l4 + need,
                "refused a whole frame (protocol {proto}, transport at {l4}, {} bytes)",
                d.len()
            );
            ReplyClass::Other
        }
        Parsed::NotIp => panic!("an IP ethertype ({ethertype:#06x}) parsed as not IP"),
    }
}

/// The fuzz entry: the frame, then prefixes of it, as a truncation would leave them.
pub fn check(data: &[u8]) {
    classify(data);
    let cut = data.len().min(160);
    for len in (0..cut).step_by(7) {
        classify(&data[..len]);
    }
}
