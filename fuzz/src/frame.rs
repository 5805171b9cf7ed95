//! The frame builders of probe-common (the generator's SYN and UDP probes, probe_rx's RST):
//! for any addresses, ports, numbers and payload, every frame has the right lengths, header
//! checksums a receiver accepts, the fields it was given, and classifies as what it is.
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use probe_common::{
    csum::{finish, payload_sum, pseudo_v4, pseudo_v6},
    frame::{rst_v4, rst_v6, segment_v4, syn_v4, syn_v6, udp_v4, udp_v6, Ends, FLOW_LABEL_MASK},
    packet::{classify_tcp_flags, ReplyClass, IPPROTO_TCP, IPPROTO_UDP, TCP_ACK, TCP_RST, TCP_SYN},
};

/// The largest UDP payload a probe can carry in one untagged 1500-byte frame (IPv4).
const MAX_PAYLOAD: usize = 1472;

fn ends<A>(u: &mut Unstructured<'_>, addr: impl Fn(&mut Unstructured<'_>) -> Result<A>) -> Result<Ends<A>> {
    Ok(Ends {
        smac: u.arbitrary()?,
        dmac: u.arbitrary()?,
        saddr: addr(u)?,
        daddr: addr(u)?,
        sport: u.arbitrary()?,
        dport: u.arbitrary()?,
    })
}

/// IPv4 header: version/IHL, total length and a checksum that folds to zero.
fn check_ipv4(b: &[u8], proto: u8, e: &Ends<[u8; 4]>) {
    assert_eq!(&b[12..14], &[0x08, 0x00], "ethertype");
    assert_eq!((&b[0..6], &b[6..12]), (&e.dmac[..], &e.smac[..]), "MACs");
    let ip = &b[14..34];
    assert_eq!(ip[0], 0x45);
    assert_eq!(
        usize::from(u16::from_be_bytes([ip[2], ip[3]])),
        b.len() - 14,
        "total length"
    );
    assert_eq!(ip[9], proto);
    assert_eq!((&ip[12..16], &ip[16..20]), (&e.saddr[..], &e.daddr[..]));
    assert_eq!(finish(payload_sum(ip)), 0, "IPv4 header checksum");
    let seg = &b[34..];
    let sum = pseudo_v4(&e.saddr, &e.daddr, proto, seg.len() as u16) + payload_sum(seg);
    assert_eq!(finish(sum), 0, "transport checksum over IPv4");
    assert_eq!(u16::from_be_bytes([seg[0], seg[1]]), e.sport);
    assert_eq!(u16::from_be_bytes([seg[2], seg[3]]), e.dport);
}

fn check_ipv6(b: &[u8], proto: u8, e: &Ends<[u8; 16]>, flow_label: u32) {
    assert_eq!(&b[12..14], &[0x86, 0xdd], "ethertype");
    let ip = &b[14..54];
    let first = u32::from_be_bytes([ip[0], ip[1], ip[2], ip[3]]);
    assert_eq!(
        first,
        0x6000_0000 | (flow_label & FLOW_LABEL_MASK),
        "version, class, label"
    );
    assert_eq!(
        usize::from(u16::from_be_bytes([ip[4], ip[5]])),
        b.len() - 54,
        "payload length"
    );
    assert_eq!(ip[6], proto);
    let seg = &b[54..];
    let sum = pseudo_v6(&e.saddr, &e.daddr, proto, seg.len() as u32) + payload_sum(seg);
    assert_eq!(finish(sum), 0, "transport checksum over IPv6");
    assert_eq!(u16::from_be_bytes([seg[0], seg[1]]), e.sport);
    assert_eq!(u16::from_be_bytes([seg[2], seg[3]]), e.dport);
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let e4 = ends(u, |u| u.arbitrary::<[u8; 4]>())?;
    let e6 = ends(u, |u| u.arbitrary::<[u8; 16]>())?;
    let (seq, ack, flags): (u32, u32, u8) = (u.arbitrary()?, u.arbitrary()?, u.arbitrary()?);
    let (ip_id, label): (u16, u32) = (u.arbitrary()?, u.arbitrary()?);
    let payload_len = u.int_in_range(0..=MAX_PAYLOAD)?;
    let payload = u.bytes(payload_len.min(u.len()))?;

    let f = syn_v4(&e4, seq);
    check_ipv4(f.bytes(), IPPROTO_TCP, &e4);
    assert_eq!((f.tcp.seq(), f.tcp.flags, f.tcp.header_len()), (seq, TCP_SYN, 32));
    assert_eq!(classify_tcp_flags(f.tcp.flags), ReplyClass::Other, "a SYN is no reply");
    let f = syn_v6(&e6, seq);
    check_ipv6(f.bytes(), IPPROTO_TCP, &e6, 0);
    assert_eq!(f.tcp.seq(), seq);

    let f = rst_v4(&e4, seq);
    check_ipv4(f.bytes(), IPPROTO_TCP, &e4);
    assert_eq!(
        (f.tcp.seq(), f.tcp.flags & (TCP_RST | TCP_SYN | TCP_ACK)),
        (seq, TCP_RST)
    );
    let f = rst_v6(&e6, seq);
    check_ipv6(f.bytes(), IPPROTO_TCP, &e6, 0);
    assert_eq!(classify_tcp_flags(f.tcp.flags), ReplyClass::Rst);

    let f = segment_v4(&e4, seq, ack, flags);
    check_ipv4(f.bytes(), IPPROTO_TCP, &e4);
    assert_eq!((f.tcp.seq(), f.tcp.ack(), f.tcp.flags), (seq, ack, flags));

    let len = payload.len() as u16;
    let h = udp_v4(&e4, ip_id, len, payload_sum(payload));
    let mut frame = h.bytes().to_vec();
    frame.extend_from_slice(payload);
    check_ipv4(&frame, IPPROTO_UDP, &e4);
    assert_eq!(h.ip.id(), ip_id, "the IPv4 id carries the cookie");
    assert_ne!(h.udp.csum_be, [0, 0], "a computed zero is sent as all ones");
    let h = udp_v6(&e6, label, len, payload_sum(payload));
    let mut frame = h.bytes().to_vec();
    frame.extend_from_slice(payload);
    check_ipv6(&frame, IPPROTO_UDP, &e6, label);
    assert_eq!(h.ip.flow_label(), label & FLOW_LABEL_MASK);
    Ok(())
}

pub fn check(data: &[u8]) {
    let _ = run(&mut Unstructured::new(data));
}
