//! Packet fixtures for each rule of the strict parser, built byte by byte.
use std::{vec, vec::Vec};

use super::*;
use crate::packet::{IPPROTO_TCP, IPPROTO_UDP, TCP_ACK, TCP_SYN};

const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 2];
const V4_US: [u8; 4] = [198, 18, 0, 1];
const V4_THEM: [u8; 4] = [198, 19, 0, 7];
const V6_US: [u8; 16] = [0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const V6_THEM: [u8; 16] = [0x20, 0x01, 0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];

fn bytes_of<T: Wire>(t: &T) -> Vec<u8> {
    // SAFETY: T: Wire has no padding, so all size_of::<T>() bytes are initialised.
    unsafe { core::slice::from_raw_parts(core::ptr::from_ref(t).cast::<u8>(), core::mem::size_of::<T>()) }.to_vec()
}

/// An Ethernet header with `tags` (TPID, VID) in front of `ethertype`.
fn eth(tags: &[(u16, u16)], ethertype: u16) -> Vec<u8> {
    let mut b = [MAC_A, MAC_B].concat();
    for (tpid, vid) in tags {
        b.extend_from_slice(&tpid.to_be_bytes());
        b.extend_from_slice(&vid.to_be_bytes());
    }
    b.extend_from_slice(&ethertype.to_be_bytes());
    b
}

/// An IPv4 header: `ver_ihl`, `frag_off`, then `options` (counted in IHL by the caller).
fn ipv4(ver_ihl: u8, frag_off: u16, proto: u8, id: u16, options: &[u8]) -> Vec<u8> {
    let mut h = crate::frame::ipv4(V4_THEM, V4_US, proto, 40, id);
    h.ver_ihl = ver_ihl;
    h.frag_off_be = frag_off.to_be_bytes();
    let mut b = bytes_of(&h);
    b.extend_from_slice(options);
    b
}

fn ipv6(src: [u8; 16], dst: [u8; 16], next: u8, label: u32) -> Vec<u8> {
    let h = Ipv6Hdr {
        ver_tc_flow: (0x6000_0000 | (label & 0xf_ffff)).to_be_bytes(),
        payload_len_be: 40u16.to_be_bytes(),
        next_hdr: next,
        hop_limit: 64,
        saddr: src,
        daddr: dst,
    };
    bytes_of(&h)
}

/// An extension header of `units` 8-byte units beyond the first 8.
fn ext(next: u8, units: u8) -> Vec<u8> {
    let mut b = vec![next, units];
    b.resize(8 * (usize::from(units) + 1), 0);
    b
}

fn fragment_hdr(next: u8) -> Vec<u8> {
    vec![next, 0, 0, 1, 0, 0, 0x12, 0x34]
}

fn syn_ack(sport: u16, dport: u16) -> Vec<u8> {
    let t = TcpHdr {
        sport_be: sport.to_be_bytes(),
        dport_be: dport.to_be_bytes(),
        ack_be: 0x1000_0001u32.to_be_bytes(),
        doff_res: 5 << 4,
        flags: TCP_SYN | TCP_ACK,
        ..TcpHdr::default()
    };
    bytes_of(&t)
}

fn udp8(sport: u16, dport: u16) -> Vec<u8> {
    [sport.to_be_bytes(), dport.to_be_bytes(), 28u16.to_be_bytes(), [0, 0]].concat()
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn tcp_of(f: &[u8]) -> (Link, L3, TcpHdr) {
    match parse_frame(f) {
        Parsed::Tcp { link, l3, tcp } => (link, l3, tcp),
        other => panic!("expected a TCP segment, got {other:?}"),
    }
}

fn quote_of(f: &[u8]) -> Option<Quote> {
    match parse_frame(f) {
        Parsed::Icmp { quote, .. } => quote,
        other => panic!("expected an ICMP message, got {other:?}"),
    }
}

#[test]
fn plain_ipv4_tcp() {
    let f = cat(&[
        &eth(&[], ETH_P_IP),
        &ipv4(0x45, 0x4000, IPPROTO_TCP, 7, &[]),
        &syn_ack(80, 61000),
    ]);
    let (link, l3, tcp) = tcp_of(&f);
    assert_eq!((link.tags, link.l3_off, l3.l4_off), (0, 14, 34));
    assert_eq!(&l3.saddr[..4], &V4_THEM);
    assert_eq!(l3.ident, 7);
    assert_eq!((tcp.sport(), tcp.dport()), (80, 61000));
}

#[test]
fn ipv4_ihl_below_five_is_refused() {
    for ihl in 0..5u8 {
        let f = cat(&[
            &eth(&[], ETH_P_IP),
            &ipv4(0x40 | ihl, 0, IPPROTO_TCP, 7, &[]),
            &syn_ack(80, 61000),
        ]);
        assert_eq!(parse_frame(&f[..]), Parsed::Refused, "IHL {ihl}");
    }
}

#[test]
fn ipv4_wrong_version_is_refused() {
    let f = cat(&[
        &eth(&[], ETH_P_IP),
        &ipv4(0x65, 0, IPPROTO_TCP, 7, &[]),
        &syn_ack(80, 61000),
    ]);
    assert_eq!(parse_frame(&f[..]), Parsed::Refused);
}

#[test]
fn ipv4_options_are_skipped_by_ihl() {
    // A record-route option (7, len 11, ptr 4, two slots), padded with end-of-list to 12.
    let opts = [7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let f = cat(&[
        &eth(&[], ETH_P_IP),
        &ipv4(0x48, 0x4000, IPPROTO_TCP, 7, &opts),
        &syn_ack(80, 61000),
    ]);
    let (_, l3, tcp) = tcp_of(&f);
    assert_eq!(l3.l4_off, 14 + 32);
    assert_eq!((tcp.sport(), tcp.dport()), (80, 61000));
    // The longest header, 60 bytes, cut short: refused, not read past the end.
    let f = cat(&[
        &eth(&[], ETH_P_IP),
        &ipv4(0x4f, 0, IPPROTO_TCP, 7, &[1; 40]),
        &syn_ack(80, 61000)[..10],
    ]);
    assert_eq!(parse_frame(&f[..]), Parsed::Refused);
}

#[test]
fn ipv4_fragments_are_refused() {
    for (frag, what) in [
        (0x2000, "MF"),
        (0x0001, "offset 8"),
        (0x3fff, "MF and offset"),
        (0x6000, "DF and MF"),
    ] {
        let f = cat(&[
            &eth(&[], ETH_P_IP),
            &ipv4(0x45, frag, IPPROTO_TCP, 7, &[]),
            &syn_ack(80, 61000),
        ]);
        assert_eq!(parse_frame(&f[..]), Parsed::Refused, "{what}");
    }
}

#[test]
fn one_and_two_vlan_tags_are_skipped() {
    let body = cat(&[&ipv4(0x45, 0, IPPROTO_TCP, 7, &[]), &syn_ack(80, 61000)]);
    for (tags, off) in [
        (vec![(ETH_P_8021Q, 100)], 18),
        (vec![(ETH_P_8021AD, 100)], 18),
        (vec![(ETH_P_8021AD, 100), (ETH_P_8021Q, 200)], 22),
        (vec![(ETH_P_8021Q, 100), (ETH_P_8021Q, 200)], 22),
    ] {
        let f = cat(&[&eth(&tags, ETH_P_IP), &body]);
        let (link, l3, tcp) = tcp_of(&f);
        assert_eq!((link.tags, link.l3_off, l3.l4_off), (tags.len(), off, off + 20));
        assert_eq!(link.eth.ethertype(), ETH_P_IP);
        assert_eq!((link.eth.dst, link.eth.src), (MAC_A, MAC_B));
        assert_eq!(tcp.dport(), 61000);
    }
    // A third tag is not skipped: the frame is no IP as far as the matcher goes.
    let three = [(ETH_P_8021AD, 1), (ETH_P_8021Q, 2), (ETH_P_8021Q, 3)];
    let f = cat(&[&eth(&three, ETH_P_IP), &body]);
    assert_eq!(parse_frame(&f[..]), Parsed::NotIp);
    // A tag cut short.
    let f = cat(&[&eth(&[], ETH_P_8021Q), &[0, 100]]);
    assert_eq!(parse_frame(&f[..]), Parsed::Refused);
    // An IPv6 packet behind a tag.
    let f = cat(&[
        &eth(&[(ETH_P_8021Q, 5)], ETH_P_IPV6),
        &ipv6(V6_THEM, V6_US, IPPROTO_TCP, 0),
        &syn_ack(80, 61000),
    ]);
    assert_eq!(tcp_of(&f).1.l4_off, 18 + 40);
}

#[test]
fn ipv6_extension_headers_are_walked() {
    for (kind, name) in [
        (IPPROTO_HOPOPTS, "hop-by-hop"),
        (IPPROTO_ROUTING, "routing"),
        (IPPROTO_DSTOPTS, "destination options"),
    ] {
        for units in [0u8, 1, 3] {
            let f = cat(&[
                &eth(&[], ETH_P_IPV6),
                &ipv6(V6_THEM, V6_US, kind, 0),
                &ext(IPPROTO_TCP, units),
                &syn_ack(80, 61000),
            ]);
            let (_, l3, tcp) = tcp_of(&f);
            assert_eq!(l3.proto, IPPROTO_TCP, "{name}");
            assert_eq!(l3.l4_off, 54 + 8 * (usize::from(units) + 1), "{name} of {units} units");
            assert_eq!(tcp.dport(), 61000, "{name}");
        }
    }
}

#[test]
fn ipv6_chains_of_up_to_four_headers_and_no_more() {
    let chain = |n: usize| {
        let kinds = [
            IPPROTO_HOPOPTS,
            IPPROTO_DSTOPTS,
            IPPROTO_ROUTING,
            IPPROTO_DSTOPTS,
            IPPROTO_DSTOPTS,
        ];
        let mut f = cat(&[&eth(&[], ETH_P_IPV6), &ipv6(V6_THEM, V6_US, kinds[0], 0)]);
        for i in 0..n {
            let next = if i + 1 < n { kinds[i + 1] } else { IPPROTO_TCP };
            f.extend_from_slice(&ext(next, 0));
        }
        f.extend_from_slice(&syn_ack(80, 61000));
        f
    };
    for n in 1..=MAX_EXT_HEADERS {
        assert_eq!(tcp_of(&chain(n)).1.l4_off, 54 + 8 * n, "{n} headers");
    }
    assert_eq!(
        parse_frame(&chain(MAX_EXT_HEADERS + 1)[..]),
        Parsed::Refused,
        "five headers"
    );
}

#[test]
fn ipv6_fragment_header_and_short_headers_are_refused() {
    let f = cat(&[
        &eth(&[], ETH_P_IPV6),
        &ipv6(V6_THEM, V6_US, IPPROTO_FRAGMENT, 0),
        &fragment_hdr(IPPROTO_TCP),
        &syn_ack(80, 61000),
    ]);
    assert_eq!(parse_frame(&f[..]), Parsed::Refused, "fragment header first");
    let f = cat(&[
        &eth(&[], ETH_P_IPV6),
        &ipv6(V6_THEM, V6_US, IPPROTO_HOPOPTS, 0),
        &ext(IPPROTO_FRAGMENT, 0),
        &fragment_hdr(IPPROTO_TCP),
        &syn_ack(80, 61000),
    ]);
    assert_eq!(parse_frame(&f[..]), Parsed::Refused, "fragment header after hop-by-hop");
    // An extension header that claims more bytes than the frame has.
    let f = cat(&[
        &eth(&[], ETH_P_IPV6),
        &ipv6(V6_THEM, V6_US, IPPROTO_DSTOPTS, 0),
        &ext(IPPROTO_TCP, 0)[..1],
    ]);
    assert_eq!(parse_frame(&f[..]), Parsed::Refused, "header cut short");
    let f = cat(&[
        &eth(&[], ETH_P_IPV6),
        &ipv6(V6_THEM, V6_US, IPPROTO_DSTOPTS, 0),
        &ext(IPPROTO_TCP, 0)[..2],
        &[0; 6 + 16],
    ]);
    match parse_frame(&f[..]) {
        Parsed::Tcp { .. } => panic!("a TCP header inside the padding"),
        p => assert_eq!(p, Parsed::Refused),
    }
    let mut bad = ipv6(V6_THEM, V6_US, IPPROTO_TCP, 0);
    bad[0] = 0x40;
    let f = cat(&[&eth(&[], ETH_P_IPV6), &bad, &syn_ack(80, 61000)]);
    assert_eq!(parse_frame(&f[..]), Parsed::Refused, "version 4 in an IPv6 frame");
}

/// An ICMP error (`kind`/`code`) from the target quoting `quoted` (IP header and on).
fn icmp4(kind: u8, code: u8, quoted: &[u8]) -> Vec<u8> {
    cat(&[
        &eth(&[], ETH_P_IP),
        &ipv4(0x45, 0, IPPROTO_ICMP, 1, &[]),
        &[kind, code, 0, 0, 0, 0, 0, 0],
        quoted,
    ])
}

fn icmp6(kind: u8, code: u8, quoted: &[u8]) -> Vec<u8> {
    cat(&[
        &eth(&[], ETH_P_IPV6),
        &ipv6(V6_THEM, V6_US, IPPROTO_ICMPV6, 0),
        &[kind, code, 0, 0, 0, 0, 0, 0],
        quoted,
    ])
}

/// Our probe as quoted: from us to the target, with `id`.
fn probe4(ver_ihl: u8, frag: u16, id: u16, options: &[u8]) -> Vec<u8> {
    let mut h = crate::frame::ipv4(V4_US, V4_THEM, IPPROTO_UDP, 28, id);
    h.ver_ihl = ver_ihl;
    h.frag_off_be = frag.to_be_bytes();
    cat(&[&bytes_of(&h), options])
}

#[test]
fn icmp_quote_of_a_udp_probe() {
    let f = icmp4(3, 3, &cat(&[&probe4(0x45, 0x4000, 0xbeef, &[]), &udp8(61000, 53)]));
    let q = quote_of(&f).expect("a port unreachable quoting a whole probe");
    assert_eq!((&q.l3.saddr[..4], &q.l3.daddr[..4]), (&V4_US[..], &V4_THEM[..]));
    assert_eq!((q.l3.proto, q.l3.ident), (IPPROTO_UDP, 0xbeef));
    assert_eq!((q.l4.sport(), q.l4.dport()), (61000, 53));
    // Options in the quote are skipped by IHL too.
    let f = icmp4(3, 3, &cat(&[&probe4(0x46, 0, 0xbeef, &[1, 1, 1, 0]), &udp8(61000, 53)]));
    assert_eq!(quote_of(&f).expect("quote with options").l4.sport(), 61000);
}

#[test]
fn an_error_about_a_tunnelled_probes_outer_packet_quotes_the_probe_behind_it() {
    let e = crate::frame::Ends {
        smac: MAC_A,
        dmac: MAC_B,
        saddr: V4_US,
        daddr: [198, 18, 40, 1],
        sport: 61001,
        dport: 443,
    };
    let backend = [198, 18, 0, 10];
    let syn = crate::frame::syn_ipip_v4(&e, (e.saddr, backend), 0x1234_5678, 0);
    // Protocol unreachable from the backend, quoting the outer header and what follows.
    let q = quote_of(&icmp4(3, 2, &syn.bytes()[EthHdr::LEN..])).expect("the probe behind the outer header");
    assert_eq!((&q.l3.saddr[..4], &q.l3.daddr[..4]), (&V4_US[..], &e.daddr[..]));
    assert_eq!(
        (q.l3.proto, q.l4.sport(), q.l4.dport(), q.l4.seq()),
        (IPPROTO_TCP, 61001, 443, 0x1234_5678)
    );
    // An inner header that breaks a rule is refused like an outer one.
    let mut cut = syn.bytes()[EthHdr::LEN..].to_vec();
    cut[Ipv4Hdr::LEN] = 0x44;
    assert_eq!(quote_of(&icmp4(3, 2, &cut)), None, "inner IHL 4");

    let mut d6 = V6_THEM;
    d6[15] = 0x40;
    let e6 = crate::frame::Ends {
        smac: MAC_A,
        dmac: MAC_B,
        saddr: V6_US,
        daddr: d6,
        sport: 61002,
        dport: 443,
    };
    let syn6 = crate::frame::syn_ipip_v6(&e6, (e6.saddr, V6_THEM), 7, 0);
    let q = quote_of(&icmp6(1, 4, &syn6.bytes()[EthHdr::LEN..])).expect("the IPv6 probe behind the outer header");
    assert_eq!((q.l3.daddr, q.l4.sport(), q.l4.seq()), (d6, 61002, 7));
}

#[test]
fn icmp_quotes_get_the_same_checks() {
    let udp = udp8(61000, 53);
    for (quoted, what) in [
        (cat(&[&probe4(0x44, 0, 1, &[]), &udp]), "IHL 4"),
        (cat(&[&probe4(0x40, 0, 1, &[]), &udp]), "IHL 0"),
        (cat(&[&probe4(0x65, 0, 1, &[]), &udp]), "version 6"),
        (cat(&[&probe4(0x45, 0x2000, 1, &[]), &udp]), "MF"),
        (cat(&[&probe4(0x45, 0x0010, 1, &[]), &udp]), "offset"),
        (cat(&[&probe4(0x45, 0, 1, &[]), &udp[..4]]), "ports only: truncated"),
        (probe4(0x45, 0, 1, &[])[..16].to_vec(), "IP header cut short"),
    ] {
        assert_eq!(quote_of(&icmp4(3, 3, &quoted)), None, "{what}");
    }
}

#[test]
fn icmpv6_quotes_walk_extension_headers_but_refuse_fragments() {
    let udp = udp8(61000, 53);
    let q = quote_of(&icmp6(1, 4, &cat(&[&ipv6(V6_US, V6_THEM, IPPROTO_UDP, 0xabcde), &udp]))).expect("plain quote");
    assert_eq!((q.l3.ident, q.l4.sport()), (0xabcde, 61000));
    let q = quote_of(&icmp6(
        1,
        4,
        &cat(&[
            &ipv6(V6_US, V6_THEM, IPPROTO_DSTOPTS, 0xabcde),
            &ext(IPPROTO_UDP, 1),
            &udp,
        ]),
    ))
    .expect("quote with a destination-options header");
    assert_eq!((q.l3.proto, q.l4.dport()), (IPPROTO_UDP, 53));
    let frag = cat(&[
        &ipv6(V6_US, V6_THEM, IPPROTO_FRAGMENT, 0xabcde),
        &fragment_hdr(IPPROTO_UDP),
        &udp,
    ]);
    assert_eq!(quote_of(&icmp6(1, 4, &frag)), None, "fragment header in the quote");
    let short = cat(&[&ipv6(V6_US, V6_THEM, IPPROTO_UDP, 0xabcde), &udp[..6]]);
    assert_eq!(quote_of(&icmp6(1, 4, &short)), None, "truncated quote");
    // An IPv4 quote inside an ICMPv6 error is not IPv6.
    let mixed = cat(&[&probe4(0x45, 0, 1, &[]), &udp, &[0; 20]]);
    assert_eq!(quote_of(&icmp6(1, 4, &mixed)), None, "IPv4 quoted by ICMPv6");
}

#[test]
fn non_refusing_codes_and_other_types_are_not_matched() {
    let v4 = cat(&[&probe4(0x45, 0, 1, &[]), &udp8(61000, 53)]);
    for (kind, code, what) in [
        (3, 0, "net"),
        (3, 1, "host"),
        (3, 4, "frag needed"),
        (3, 5, "source route"),
        (11, 0, "time exceeded"),
        (5, 1, "redirect"),
    ] {
        assert_eq!(quote_of(&icmp4(kind, code, &v4)), None, "ICMP {kind}/{code} ({what})");
    }
    for code in crate::packet::ICMP_REFUSED_CODES {
        assert!(quote_of(&icmp4(3, code, &v4)).is_some(), "ICMP 3/{code}");
    }
    let v6 = cat(&[&ipv6(V6_US, V6_THEM, IPPROTO_UDP, 1), &udp8(61000, 53)]);
    for (kind, code, what) in [
        (1, 0, "no route"),
        (1, 3, "address"),
        (2, 0, "too big"),
        (3, 0, "time exceeded"),
    ] {
        assert_eq!(quote_of(&icmp6(kind, code, &v6)), None, "ICMPv6 {kind}/{code} ({what})");
    }
    for code in crate::packet::ICMPV6_REFUSED_CODES {
        assert!(quote_of(&icmp6(1, code, &v6)).is_some(), "ICMPv6 1/{code}");
    }
}

#[test]
fn short_and_foreign_frames() {
    assert_eq!(parse_frame(&[0u8; 13][..]), Parsed::Refused, "shorter than Ethernet");
    assert_eq!(parse_frame(&eth(&[], 0x0806)[..]), Parsed::NotIp, "ARP");
    let f = cat(&[
        &eth(&[], ETH_P_IP),
        &ipv4(0x45, 0, IPPROTO_UDP, 7, &[]),
        &udp8(53, 61000),
    ]);
    assert!(
        matches!(parse_frame(&f[..]), Parsed::Other { .. }),
        "UDP is not matched"
    );
    let f = cat(&[
        &eth(&[], ETH_P_IP),
        &ipv4(0x45, 0, IPPROTO_TCP, 7, &[]),
        &syn_ack(80, 61000)[..19],
    ]);
    assert_eq!(parse_frame(&f[..]), Parsed::Refused, "TCP header cut short");
}
