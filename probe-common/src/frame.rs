//! Probe and teardown frames as fixed layouts with pure builders. The generator writes a
//! whole frame with one store; the raw-socket fallback sends the same bytes minus Ethernet.
use crate::{
    csum::{add_bytes, finish, pseudo_v4, pseudo_v6},
    http::REQUEST_WINDOW,
    packet::{
        EthHdr, Ipv4Hdr, Ipv6Hdr, TcpHdr, UdpHdr, ETH_P_IP, ETH_P_IPV6, IPPROTO_IPIP, IPPROTO_IPV6, IPPROTO_TCP,
        IPPROTO_UDP, TCP_ACK, TCP_PSH, TCP_RST, TCP_SYN,
    },
};

/// SYN options a Linux stack would send, less timestamps: MSS, NOP + window scale 7,
/// SACK-permitted + NOP NOP. The MSS bytes (2..4) are set per family.
pub const SYN_OPTS_LEN: usize = 12;
const SYN_OPTS: [u8; SYN_OPTS_LEN] = [2, 4, 0, 0, 1, 3, 3, 7, 4, 2, 1, 1];
const MSS_V4: u16 = 1460;
const MSS_V6: u16 = 1440;
const SYN_WINDOW: u16 = 64240;
const TTL: u8 = 64;

/// Addresses and ports of one probe, from the prober's side, for either family.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ends<A> {
    pub smac: [u8; 6],
    pub dmac: [u8; 6],
    pub saddr: A,
    pub daddr: A,
    pub sport: u16,
    pub dport: u16,
}

macro_rules! frame {
    ($(#[$m:meta])* $name:ident { $($field:ident: $ty:ty),* } = $len:expr) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $name { $(pub $field: $ty),* }
        const _: () = assert!(core::mem::size_of::<$name>() == $len);
        const _: () = assert!(core::mem::align_of::<$name>() == 1);
        impl $name {
            pub const LEN: usize = $len;
            /// The frame's bytes, Ethernet header first.
            pub fn bytes(&self) -> &[u8] {
                // SAFETY: the struct is repr(C) of byte arrays and byte-array headers
                // (alignment 1, size asserted above), so it has no padding and all of its
                // LEN bytes are initialised.
                unsafe { core::slice::from_raw_parts(core::ptr::from_ref(self).cast::<u8>(), Self::LEN) }
            }
        }
    };
}

frame!(/// A TCP SYN over IPv4 with options.
    SynV4 { eth: EthHdr, ip: Ipv4Hdr, tcp: TcpHdr, opts: [u8; SYN_OPTS_LEN] } = 66);
frame!(/// A TCP SYN over IPv6 with options.
    SynV6 { eth: EthHdr, ip: Ipv6Hdr, tcp: TcpHdr, opts: [u8; SYN_OPTS_LEN] } = 86);
frame!(/// A TCP SYN over IPv4 to a service address, inside an IPv4 header to the backend (IPIP).
    SynIpipV4 { eth: EthHdr, outer: Ipv4Hdr, ip: Ipv4Hdr, tcp: TcpHdr, opts: [u8; SYN_OPTS_LEN] } = 86);
frame!(/// A TCP SYN over IPv6 to a service address, inside an IPv6 header to the backend (ip6ip6).
    SynIpipV6 { eth: EthHdr, outer: Ipv6Hdr, ip: Ipv6Hdr, tcp: TcpHdr, opts: [u8; SYN_OPTS_LEN] } = 126);
frame!(/// A TCP SYN over IPv4 to a service address, inside UDP over IPv4 to the backend (GUE
    /// variant 1: the inner packet right after the UDP header, as katran sends it).
    SynGueV4 { eth: EthHdr, outer: Ipv4Hdr, udp: UdpHdr, ip: Ipv4Hdr, tcp: TcpHdr, opts: [u8; SYN_OPTS_LEN] } = 94);
frame!(/// The IPv6 form of `SynGueV4`.
    SynGueV6 { eth: EthHdr, outer: Ipv6Hdr, udp: UdpHdr, ip: Ipv6Hdr, tcp: TcpHdr, opts: [u8; SYN_OPTS_LEN] } = 134);
frame!(/// A bare TCP RST over IPv4.
    RstV4 { eth: EthHdr, ip: Ipv4Hdr, tcp: TcpHdr } = 54);
frame!(/// A bare TCP RST over IPv6.
    RstV6 { eth: EthHdr, ip: Ipv6Hdr, tcp: TcpHdr } = 74);
frame!(/// The headers of a UDP probe over IPv4; the payload follows in the template frame.
    UdpV4 { eth: EthHdr, ip: Ipv4Hdr, udp: UdpHdr } = 42);
frame!(/// The headers of a UDP probe over IPv6; the payload follows in the template frame.
    UdpV6 { eth: EthHdr, ip: Ipv6Hdr, udp: UdpHdr } = 62);

#[inline(always)]
fn eth<A>(e: &Ends<A>, ethertype: u16) -> EthHdr {
    EthHdr {
        dst: e.dmac,
        src: e.smac,
        ethertype_be: ethertype.to_be_bytes(),
    }
}

/// An IPv4 header (DF set, TTL 64) with its checksum.
#[inline(always)]
pub fn ipv4(saddr: [u8; 4], daddr: [u8; 4], proto: u8, payload_len: u16, id: u16) -> Ipv4Hdr {
    let tot_len = Ipv4Hdr::LEN as u16 + payload_len;
    let frag: u16 = 0x4000;
    let mut sum =
        0x4500u64 + u64::from(tot_len) + u64::from(id) + u64::from(frag) + ((u64::from(TTL) << 8) | u64::from(proto));
    sum = add_bytes(add_bytes(sum, &saddr), &daddr);
    Ipv4Hdr {
        ver_ihl: 0x45,
        tos: 0,
        tot_len_be: tot_len.to_be_bytes(),
        id_be: id.to_be_bytes(),
        frag_off_be: frag.to_be_bytes(),
        ttl: TTL,
        proto,
        csum_be: finish(sum).to_be_bytes(),
        saddr,
        daddr,
    }
}

/// The flow-label bits of the first word of an IPv6 header.
pub const FLOW_LABEL_MASK: u32 = 0x000f_ffff;

/// An IPv6 header (hop limit 64, traffic class 0) with `flow_label` (low 20 bits used).
#[inline(always)]
fn ipv6(saddr: [u8; 16], daddr: [u8; 16], next_hdr: u8, payload_len: u16, flow_label: u32) -> Ipv6Hdr {
    Ipv6Hdr {
        ver_tc_flow: (0x6000_0000 | (flow_label & FLOW_LABEL_MASK)).to_be_bytes(),
        payload_len_be: payload_len.to_be_bytes(),
        next_hdr,
        hop_limit: TTL,
        saddr,
        daddr,
    }
}

/// Sum of a TCP header's words, the checksum field excluded.
#[inline(always)]
fn tcp_sum(t: &TcpHdr) -> u64 {
    let mut sum = add_bytes(0, &t.sport_be);
    sum = add_bytes(sum, &t.dport_be);
    sum = add_bytes(sum, &t.seq_be);
    sum = add_bytes(sum, &t.ack_be);
    sum += (u64::from(t.doff_res) << 8) | u64::from(t.flags);
    sum = add_bytes(sum, &t.window_be);
    add_bytes(sum, &t.urg_be)
}

#[inline(always)]
fn tcp(sport: u16, dport: u16, seq: u32, ack: u32, hdr_len: usize, flags: u8, window: u16) -> TcpHdr {
    TcpHdr {
        sport_be: sport.to_be_bytes(),
        dport_be: dport.to_be_bytes(),
        seq_be: seq.to_be_bytes(),
        ack_be: ack.to_be_bytes(),
        doff_res: ((hdr_len / 4) as u8) << 4,
        flags,
        window_be: window.to_be_bytes(),
        csum_be: [0; 2],
        urg_be: [0; 2],
    }
}

/// Fills an option-less TCP header in place, checksum zero: (seq, ack, flags, window). In
/// place rather than built and copied: probe_rx writes these in stack frames the verifier's
/// 512 bytes for the call chain leave little room in.
#[inline(always)]
fn set_tcp(t: &mut TcpHdr, (sport, dport): (u16, u16), (seq, ack, flags, window): (u32, u32, u8, u16)) {
    t.sport_be = sport.to_be_bytes();
    t.dport_be = dport.to_be_bytes();
    t.seq_be = seq.to_be_bytes();
    t.ack_be = ack.to_be_bytes();
    t.doff_res = ((TcpHdr::LEN / 4) as u8) << 4;
    t.flags = flags;
    t.window_be = window.to_be_bytes();
    t.csum_be = [0; 2];
    t.urg_be = [0; 2];
}

#[inline(always)]
fn syn_opts(mss: u16) -> [u8; SYN_OPTS_LEN] {
    let mut o = SYN_OPTS;
    let m = mss.to_be_bytes();
    o[2] = m[0];
    o[3] = m[1];
    o
}

const SYN_TCP_LEN: usize = TcpHdr::LEN + SYN_OPTS_LEN;

/// Writes the SYN of a TCP probe whose initial sequence number is `isn` into `f` (which may
/// be packet memory: the kernel builds in place, its stack is too small for copies).
#[inline(always)]
pub fn write_syn_v4(f: &mut SynV4, e: &Ends<[u8; 4]>, isn: u32) {
    f.eth = eth(e, ETH_P_IP);
    f.ip = ipv4(e.saddr, e.daddr, IPPROTO_TCP, SYN_TCP_LEN as u16, 0);
    f.opts = syn_opts(MSS_V4);
    f.tcp = tcp(e.sport, e.dport, isn, 0, SYN_TCP_LEN, TCP_SYN, SYN_WINDOW);
    let sum = pseudo_v4(&e.saddr, &e.daddr, IPPROTO_TCP, SYN_TCP_LEN as u16) + tcp_sum(&f.tcp);
    f.tcp.csum_be = finish(add_bytes(sum, &f.opts)).to_be_bytes();
}

#[inline(always)]
pub fn write_syn_v6(f: &mut SynV6, e: &Ends<[u8; 16]>, isn: u32) {
    f.eth = eth(e, ETH_P_IPV6);
    f.ip = ipv6(e.saddr, e.daddr, IPPROTO_TCP, SYN_TCP_LEN as u16, 0);
    f.opts = syn_opts(MSS_V6);
    f.tcp = tcp(e.sport, e.dport, isn, 0, SYN_TCP_LEN, TCP_SYN, SYN_WINDOW);
    let sum = pseudo_v6(&e.saddr, &e.daddr, IPPROTO_TCP, SYN_TCP_LEN as u32) + tcp_sum(&f.tcp);
    f.tcp.csum_be = finish(add_bytes(sum, &f.opts)).to_be_bytes();
}

// The tunnelled writers fill each header in place, field by field, rather than building it
// on the stack and copying it: the generator writes them in one BPF function, and headers
// built by value took 440 bytes of its stack (the verifier allows 512 for the call chain).

/// Fills `h` as `ipv4` builds it.
#[inline(always)]
fn set_ipv4(h: &mut Ipv4Hdr, (saddr, daddr): (&[u8; 4], &[u8; 4]), proto: u8, payload_len: u16) {
    let tot_len = Ipv4Hdr::LEN as u16 + payload_len;
    h.ver_ihl = 0x45;
    h.tos = 0;
    h.tot_len_be = tot_len.to_be_bytes();
    h.id_be = [0; 2];
    h.frag_off_be = 0x4000u16.to_be_bytes();
    h.ttl = TTL;
    h.proto = proto;
    h.saddr = *saddr;
    h.daddr = *daddr;
    let sum = 0x4500u64 + u64::from(tot_len) + 0x4000 + ((u64::from(TTL) << 8) | u64::from(proto));
    h.csum_be = finish(add_bytes(add_bytes(sum, saddr), daddr)).to_be_bytes();
}

/// Fills `h` as `ipv6` builds it, flow label 0.
#[inline(always)]
fn set_ipv6(h: &mut Ipv6Hdr, (saddr, daddr): (&[u8; 16], &[u8; 16]), next_hdr: u8, payload_len: u16) {
    h.ver_tc_flow = 0x6000_0000u32.to_be_bytes();
    h.payload_len_be = payload_len.to_be_bytes();
    h.next_hdr = next_hdr;
    h.hop_limit = TTL;
    h.saddr = *saddr;
    h.daddr = *daddr;
}

/// Fills a SYN's TCP header and options (MSS `mss`) with its checksum over `pseudo`; returns
/// the segment's word sum, checksum included.
#[inline(always)]
fn set_syn(
    t: &mut TcpHdr,
    opts: &mut [u8; SYN_OPTS_LEN],
    (sport, dport): (u16, u16),
    isn: u32,
    (mss, pseudo): (u16, u64),
) -> u64 {
    t.sport_be = sport.to_be_bytes();
    t.dport_be = dport.to_be_bytes();
    t.seq_be = isn.to_be_bytes();
    t.ack_be = [0; 4];
    t.doff_res = ((SYN_TCP_LEN / 4) as u8) << 4;
    t.flags = TCP_SYN;
    t.window_be = SYN_WINDOW.to_be_bytes();
    t.csum_be = [0; 2];
    t.urg_be = [0; 2];
    *opts = SYN_OPTS;
    opts[2..4].copy_from_slice(&mss.to_be_bytes());
    let segment = tcp_sum(t) + add_bytes(0, opts);
    let csum = finish(pseudo + segment);
    t.csum_be = csum.to_be_bytes();
    segment + u64::from(csum)
}

/// Writes the SYN of a tunnelled TCP probe behind `outer_len` bytes of outer headers: `e` is
/// the inner flow (our address to the service's). The MSS is a full-size segment less those
/// bytes, what a client's tunnel device would offer. Returns the inner packet's word sum.
#[inline(always)]
pub fn inner_syn_v4(
    (ip, tcp_h, opts): (&mut Ipv4Hdr, &mut TcpHdr, &mut [u8; SYN_OPTS_LEN]),
    e: &Ends<[u8; 4]>,
    isn: u32,
    outer_len: usize,
) -> u64 {
    set_ipv4(ip, (&e.saddr, &e.daddr), IPPROTO_TCP, SYN_TCP_LEN as u16);
    let pseudo = pseudo_v4(&e.saddr, &e.daddr, IPPROTO_TCP, SYN_TCP_LEN as u16);
    let mss = MSS_V4 - outer_len as u16;
    ipv4_sum(ip) + set_syn(tcp_h, opts, (e.sport, e.dport), isn, (mss, pseudo))
}

#[inline(always)]
pub fn inner_syn_v6(
    (ip, tcp_h, opts): (&mut Ipv6Hdr, &mut TcpHdr, &mut [u8; SYN_OPTS_LEN]),
    e: &Ends<[u8; 16]>,
    isn: u32,
    outer_len: usize,
) -> u64 {
    set_ipv6(ip, (&e.saddr, &e.daddr), IPPROTO_TCP, SYN_TCP_LEN as u16);
    let pseudo = pseudo_v6(&e.saddr, &e.daddr, IPPROTO_TCP, SYN_TCP_LEN as u32);
    let mss = MSS_V6 - outer_len as u16;
    ipv6_sum(ip) + set_syn(tcp_h, opts, (e.sport, e.dport), isn, (mss, pseudo))
}

/// Writes a tunnelled SYN inside an IPv4 header from `src` (the inner source, or
/// `tunnel_source`) to `backend` (IPIP). `pad` zero bytes follow the inner packet inside the outer one (the frame holds
/// them): a full-size outer packet, which a path that cannot carry full-size client packets
/// into the tunnel drops, while the backend's decapsulation trims them (the inner header's
/// length says where the probe ends).
#[inline(always)]
pub fn write_syn_ipip_v4(
    f: &mut SynIpipV4,
    e: &Ends<[u8; 4]>,
    (src, backend): (&[u8; 4], &[u8; 4]),
    isn: u32,
    pad: u16,
) {
    f.eth = eth(e, ETH_P_IP);
    set_ipv4(
        &mut f.outer,
        (src, backend),
        IPPROTO_IPIP,
        (Ipv4Hdr::LEN + SYN_TCP_LEN) as u16 + pad,
    );
    inner_syn_v4((&mut f.ip, &mut f.tcp, &mut f.opts), e, isn, Ipv4Hdr::LEN);
}

/// As `write_syn_ipip_v4`, IPv6 in IPv6.
#[inline(always)]
pub fn write_syn_ipip_v6(
    f: &mut SynIpipV6,
    e: &Ends<[u8; 16]>,
    (src, backend): (&[u8; 16], &[u8; 16]),
    isn: u32,
    pad: u16,
) {
    f.eth = eth(e, ETH_P_IPV6);
    set_ipv6(
        &mut f.outer,
        (src, backend),
        IPPROTO_IPV6,
        (Ipv6Hdr::LEN + SYN_TCP_LEN) as u16 + pad,
    );
    inner_syn_v6((&mut f.ip, &mut f.tcp, &mut f.opts), e, isn, Ipv6Hdr::LEN);
}

/// Fills a UDP header to `port` from the probe's own port, with its checksum over `sum`
/// (pseudo-header and payload).
#[inline(always)]
fn set_udp(u: &mut UdpHdr, (sport, dport): (u16, u16), len: u16, sum: u64) {
    u.sport_be = sport.to_be_bytes();
    u.dport_be = dport.to_be_bytes();
    u.len_be = len.to_be_bytes();
    u.csum_be = udp_csum(sum + u64::from(sport) + u64::from(dport) + u64::from(len));
}

/// Writes a tunnelled SYN inside UDP to `backend`:`port` (GUE variant 1). The UDP source port
/// is the probe's own, so a backend spreading tunnels over queues by it spreads probes too;
/// the UDP checksum is computed (IPv6 requires it; IPv4 gets one as well). `pad` as for
/// IPIP: zeros, which add nothing to the checksum but their length.
#[inline(always)]
pub fn write_syn_gue_v4(
    f: &mut SynGueV4,
    e: &Ends<[u8; 4]>,
    (src, backend, port): (&[u8; 4], &[u8; 4], u16),
    isn: u32,
    pad: u16,
) {
    let len = (UdpHdr::LEN + Ipv4Hdr::LEN + SYN_TCP_LEN) as u16 + pad;
    f.eth = eth(e, ETH_P_IP);
    set_ipv4(&mut f.outer, (src, backend), IPPROTO_UDP, len);
    let inner = inner_syn_v4((&mut f.ip, &mut f.tcp, &mut f.opts), e, isn, Ipv4Hdr::LEN + UdpHdr::LEN);
    let pseudo = pseudo_v4(src, backend, IPPROTO_UDP, len);
    set_udp(&mut f.udp, (e.sport, port), len, pseudo + inner);
}

/// As `write_syn_gue_v4`, over IPv6.
#[inline(always)]
pub fn write_syn_gue_v6(
    f: &mut SynGueV6,
    e: &Ends<[u8; 16]>,
    (src, backend, port): (&[u8; 16], &[u8; 16], u16),
    isn: u32,
    pad: u16,
) {
    let len = (UdpHdr::LEN + Ipv6Hdr::LEN + SYN_TCP_LEN) as u16 + pad;
    f.eth = eth(e, ETH_P_IPV6);
    set_ipv6(&mut f.outer, (src, backend), IPPROTO_UDP, len);
    let inner = inner_syn_v6((&mut f.ip, &mut f.tcp, &mut f.opts), e, isn, Ipv6Hdr::LEN + UdpHdr::LEN);
    let pseudo = pseudo_v6(src, backend, IPPROTO_UDP, u32::from(len));
    set_udp(&mut f.udp, (e.sport, port), len, pseudo + inner);
}

/// The outer headers of a GUE-wrapped packet over IPv4: what probe_rx puts in front of the
/// segments it sends on a tunnelled probe's flow.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OuterGueV4 {
    pub ip: Ipv4Hdr,
    pub udp: UdpHdr,
}
const _: () = assert!(core::mem::size_of::<OuterGueV4>() == 28);

/// The IPv6 form of `OuterGueV4`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OuterGueV6 {
    pub ip: Ipv6Hdr,
    pub udp: UdpHdr,
}
const _: () = assert!(core::mem::size_of::<OuterGueV6>() == 48);

/// How many bytes of outer headers a tunnel puts in front of a packet: one IP header of the
/// inner family, and a UDP header for GUE.
#[inline(always)]
pub const fn outer_len(ipv6: bool, gue: bool) -> usize {
    let ip = if ipv6 { Ipv6Hdr::LEN } else { Ipv4Hdr::LEN };
    if gue {
        ip + UdpHdr::LEN
    } else {
        ip
    }
}

/// Fills the IPIP header in front of an inner IPv4 packet of `inner_len` bytes, from `saddr`
/// to `backend`.
#[inline(always)]
pub fn set_outer_ipip_v4(h: &mut Ipv4Hdr, (saddr, backend): (&[u8; 4], &[u8; 4]), inner_len: u16) {
    set_ipv4(h, (saddr, backend), IPPROTO_IPIP, inner_len);
}

/// Fills the IPv6 header in front of an inner IPv6 packet of `inner_len` bytes.
#[inline(always)]
pub fn set_outer_ipip_v6(h: &mut Ipv6Hdr, (saddr, backend): (&[u8; 16], &[u8; 16]), inner_len: u16) {
    set_ipv6(h, (saddr, backend), IPPROTO_IPV6, inner_len);
}

/// Fills the GUE outer headers (IPv4 and UDP from `sport` to `port`) in front of an inner
/// packet of `inner_len` bytes whose word sum is `inner_sum` (what the segment writers return).
#[inline(always)]
pub fn set_outer_gue_v4(
    h: &mut OuterGueV4,
    (saddr, backend): (&[u8; 4], &[u8; 4]),
    (sport, port): (u16, u16),
    (inner_len, inner_sum): (u16, u64),
) {
    let len = UdpHdr::LEN as u16 + inner_len;
    set_ipv4(&mut h.ip, (saddr, backend), IPPROTO_UDP, len);
    let pseudo = pseudo_v4(saddr, backend, IPPROTO_UDP, len);
    set_udp(&mut h.udp, (sport, port), len, pseudo + inner_sum);
}

/// As `set_outer_gue_v4`, over IPv6 (whose UDP checksum is mandatory).
#[inline(always)]
pub fn set_outer_gue_v6(
    h: &mut OuterGueV6,
    (saddr, backend): (&[u8; 16], &[u8; 16]),
    (sport, port): (u16, u16),
    (inner_len, inner_sum): (u16, u64),
) {
    let len = UdpHdr::LEN as u16 + inner_len;
    set_ipv6(&mut h.ip, (saddr, backend), IPPROTO_UDP, len);
    let pseudo = pseudo_v6(saddr, backend, IPPROTO_UDP, u32::from(len));
    set_udp(&mut h.udp, (sport, port), len, pseudo + inner_sum);
}

/// The word sum of an IPv4 header, its checksum included.
#[inline(always)]
fn ipv4_sum(h: &Ipv4Hdr) -> u64 {
    let mut sum = (u64::from(h.ver_ihl) << 8) | u64::from(h.tos);
    sum = add_bytes(sum, &h.tot_len_be);
    sum = add_bytes(sum, &h.id_be);
    sum = add_bytes(sum, &h.frag_off_be);
    sum += (u64::from(h.ttl) << 8) | u64::from(h.proto);
    sum = add_bytes(sum, &h.csum_be);
    add_bytes(add_bytes(sum, &h.saddr), &h.daddr)
}

/// The word sum of an IPv6 header.
#[inline(always)]
fn ipv6_sum(h: &Ipv6Hdr) -> u64 {
    let mut sum = add_bytes(0, &h.ver_tc_flow);
    sum = add_bytes(sum, &h.payload_len_be);
    sum += (u64::from(h.next_hdr) << 8) | u64::from(h.hop_limit);
    add_bytes(add_bytes(sum, &h.saddr), &h.daddr)
}

/// Writes the RST that closes a half-open probe: `seq` is the SYN+ACK's ack.
#[inline(always)]
pub fn write_rst_v4(f: &mut RstV4, e: &Ends<[u8; 4]>, seq: u32) -> u64 {
    write_segment_v4(f, e, seq, 0, TCP_RST)
}

#[inline(always)]
pub fn write_rst_v6(f: &mut RstV6, e: &Ends<[u8; 16]>, seq: u32) -> u64 {
    write_segment_v6(f, e, seq, 0, TCP_RST)
}

/// Writes a bare (option-less, empty) TCP segment with the given numbers and flags.
#[inline(always)]
pub fn write_segment_v4(f: &mut RstV4, e: &Ends<[u8; 4]>, seq: u32, ack: u32, flags: u8) -> u64 {
    write_tcp_v4(f, e, (seq, ack, flags, 0), 0, 0)
}

#[inline(always)]
pub fn write_segment_v6(f: &mut RstV6, e: &Ends<[u8; 16]>, seq: u32, ack: u32, flags: u8) -> u64 {
    write_tcp_v6(f, e, (seq, ack, flags, 0), 0, 0)
}

/// The headers of an option-less TCP segment: (seq, ack, flags, window), followed in the frame
/// by `payload_len` bytes whose word sum is `payload_sum`. Returns the word sum of the IP
/// packet (headers, checksums and payload), what a UDP outer header's checksum covers.
#[inline(always)]
fn write_tcp_v4(f: &mut RstV4, e: &Ends<[u8; 4]>, h: (u32, u32, u8, u16), payload_len: u16, payload_sum: u64) -> u64 {
    let seg_len = TcpHdr::LEN as u16 + payload_len;
    f.eth = eth(e, ETH_P_IP);
    set_ipv4(&mut f.ip, (&e.saddr, &e.daddr), IPPROTO_TCP, seg_len);
    set_tcp(&mut f.tcp, (e.sport, e.dport), h);
    let segment = tcp_sum(&f.tcp) + payload_sum;
    let csum = finish(pseudo_v4(&e.saddr, &e.daddr, IPPROTO_TCP, seg_len) + segment);
    f.tcp.csum_be = csum.to_be_bytes();
    ipv4_sum(&f.ip) + segment + u64::from(csum)
}

#[inline(always)]
fn write_tcp_v6(f: &mut RstV6, e: &Ends<[u8; 16]>, h: (u32, u32, u8, u16), payload_len: u16, payload_sum: u64) -> u64 {
    let seg_len = TcpHdr::LEN as u16 + payload_len;
    f.eth = eth(e, ETH_P_IPV6);
    set_ipv6(&mut f.ip, (&e.saddr, &e.daddr), IPPROTO_TCP, seg_len);
    set_tcp(&mut f.tcp, (e.sport, e.dport), h);
    let segment = tcp_sum(&f.tcp) + payload_sum;
    let csum = finish(pseudo_v6(&e.saddr, &e.daddr, IPPROTO_TCP, u32::from(seg_len)) + segment);
    f.tcp.csum_be = csum.to_be_bytes();
    ipv6_sum(&f.ip) + segment + u64::from(csum)
}

/// Writes the headers of the segment that carries an HTTP probe's request: ACK of the
/// target's SYN+ACK (`ack`), our `seq`, PSH, `payload_len` bytes of payload whose word sum
/// is `payload_sum` following the headers in the frame.
#[inline(always)]
pub fn write_request_v4(
    f: &mut RstV4,
    e: &Ends<[u8; 4]>,
    seq: u32,
    ack: u32,
    payload_len: u16,
    payload_sum: u64,
) -> u64 {
    write_tcp_v4(
        f,
        e,
        (seq, ack, TCP_ACK | TCP_PSH, REQUEST_WINDOW),
        payload_len,
        payload_sum,
    )
}

#[inline(always)]
pub fn write_request_v6(
    f: &mut RstV6,
    e: &Ends<[u8; 16]>,
    seq: u32,
    ack: u32,
    payload_len: u16,
    payload_sum: u64,
) -> u64 {
    write_tcp_v6(
        f,
        e,
        (seq, ack, TCP_ACK | TCP_PSH, REQUEST_WINDOW),
        payload_len,
        payload_sum,
    )
}

/// Value-returning forms of the writers, for userspace (raw-socket fallback, tests).
pub fn syn_v4(e: &Ends<[u8; 4]>, isn: u32) -> SynV4 {
    let mut f = SynV4::default();
    write_syn_v4(&mut f, e, isn);
    f
}

pub fn syn_v6(e: &Ends<[u8; 16]>, isn: u32) -> SynV6 {
    let mut f = SynV6::default();
    write_syn_v6(&mut f, e, isn);
    f
}

pub fn syn_ipip_v4(e: &Ends<[u8; 4]>, (src, backend): ([u8; 4], [u8; 4]), isn: u32, pad: u16) -> SynIpipV4 {
    let mut f = SynIpipV4::default();
    write_syn_ipip_v4(&mut f, e, (&src, &backend), isn, pad);
    f
}

pub fn syn_ipip_v6(e: &Ends<[u8; 16]>, (src, backend): ([u8; 16], [u8; 16]), isn: u32, pad: u16) -> SynIpipV6 {
    let mut f = SynIpipV6::default();
    write_syn_ipip_v6(&mut f, e, (&src, &backend), isn, pad);
    f
}

pub fn syn_gue_v4(e: &Ends<[u8; 4]>, (src, backend, port): ([u8; 4], [u8; 4], u16), isn: u32, pad: u16) -> SynGueV4 {
    let mut f = SynGueV4::default();
    write_syn_gue_v4(&mut f, e, (&src, &backend, port), isn, pad);
    f
}

pub fn syn_gue_v6(e: &Ends<[u8; 16]>, (src, backend, port): ([u8; 16], [u8; 16], u16), isn: u32, pad: u16) -> SynGueV6 {
    let mut f = SynGueV6::default();
    write_syn_gue_v6(&mut f, e, (&src, &backend, port), isn, pad);
    f
}

pub fn rst_v4(e: &Ends<[u8; 4]>, seq: u32) -> RstV4 {
    let mut f = RstV4::default();
    write_rst_v4(&mut f, e, seq);
    f
}

pub fn rst_v6(e: &Ends<[u8; 16]>, seq: u32) -> RstV6 {
    let mut f = RstV6::default();
    write_rst_v6(&mut f, e, seq);
    f
}

/// A bare TCP segment over IPv4 (tests use it to forge replies).
pub fn segment_v4(e: &Ends<[u8; 4]>, seq: u32, ack: u32, flags: u8) -> RstV4 {
    let mut f = RstV4::default();
    write_segment_v4(&mut f, e, seq, ack, flags);
    f
}

#[inline(always)]
fn udp(e_sport: u16, e_dport: u16, len: u16) -> UdpHdr {
    UdpHdr {
        sport_be: e_sport.to_be_bytes(),
        dport_be: e_dport.to_be_bytes(),
        len_be: len.to_be_bytes(),
        csum_be: [0; 2],
    }
}

/// A UDP checksum of zero means "none"; a computed zero is sent as all ones (RFC 768).
#[inline(always)]
fn udp_csum(sum: u64) -> [u8; 2] {
    let c = finish(sum);
    if c == 0 { 0xffff_u16 } else { c }.to_be_bytes()
}

/// The headers of a UDP probe carrying `payload_len` bytes whose word sum is `payload_sum`
/// (see [`crate::csum::payload_sum`]); the IPv4 id carries the low half of the cookie.
#[inline(always)]
pub fn write_udp_v4(f: &mut UdpV4, e: &Ends<[u8; 4]>, ip_id: u16, payload_len: u16, payload_sum: u64) {
    let len = UdpHdr::LEN as u16 + payload_len;
    f.eth = eth(e, ETH_P_IP);
    f.ip = ipv4(e.saddr, e.daddr, IPPROTO_UDP, len, ip_id);
    f.udp = udp(e.sport, e.dport, len);
    let sum =
        pseudo_v4(&e.saddr, &e.daddr, IPPROTO_UDP, len) + u64::from(e.sport) + u64::from(e.dport) + u64::from(len);
    f.udp.csum_be = udp_csum(sum + payload_sum);
}

/// The IPv6 form: with no IP id to carry it, the cookie's low 20 bits ride in the flow label,
/// which an ICMPv6 error quotes like the rest of the header (RFC 4443 2.4(c)).
#[inline(always)]
pub fn write_udp_v6(f: &mut UdpV6, e: &Ends<[u8; 16]>, flow_label: u32, payload_len: u16, payload_sum: u64) {
    let len = UdpHdr::LEN as u16 + payload_len;
    f.eth = eth(e, ETH_P_IPV6);
    f.ip = ipv6(e.saddr, e.daddr, IPPROTO_UDP, len, flow_label);
    f.udp = udp(e.sport, e.dport, len);
    let sum = pseudo_v6(&e.saddr, &e.daddr, IPPROTO_UDP, u32::from(len))
        + u64::from(e.sport)
        + u64::from(e.dport)
        + u64::from(len);
    f.udp.csum_be = udp_csum(sum + payload_sum);
}

pub fn udp_v4(e: &Ends<[u8; 4]>, ip_id: u16, payload_len: u16, payload_sum: u64) -> UdpV4 {
    let mut f = UdpV4::default();
    write_udp_v4(&mut f, e, ip_id, payload_len, payload_sum);
    f
}

pub fn udp_v6(e: &Ends<[u8; 16]>, flow_label: u32, payload_len: u16, payload_sum: u64) -> UdpV6 {
    let mut f = UdpV6::default();
    write_udp_v6(&mut f, e, flow_label, payload_len, payload_sum);
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{csum::payload_sum, packet::TCP_ACK};

    fn ends4() -> Ends<[u8; 4]> {
        Ends {
            smac: [2, 0, 0, 0, 0, 1],
            dmac: [2, 0, 0, 0, 0, 2],
            saddr: [198, 18, 0, 1],
            daddr: [198, 19, 1, 2],
            sport: 61234,
            dport: 443,
        }
    }

    fn ends6() -> Ends<[u8; 16]> {
        let mut s = [0u8; 16];
        s[..4].copy_from_slice(&[0x20, 0x01, 0, 2]);
        let mut d = s;
        s[15] = 1;
        d[15] = 2;
        Ends {
            smac: [2, 0, 0, 0, 0, 1],
            dmac: [2, 0, 0, 0, 0, 2],
            saddr: s,
            daddr: d,
            sport: 61234,
            dport: 80,
        }
    }

    /// Verifies a transport checksum the way a receiver does: the sum over pseudo-header and
    /// segment (checksum included) folds to zero.
    fn verify_v4(saddr: [u8; 4], daddr: [u8; 4], proto: u8, seg: &[u8]) {
        let sum = pseudo_v4(&saddr, &daddr, proto, seg.len() as u16) + payload_sum(seg);
        assert_eq!(finish(sum), 0, "transport checksum");
    }

    fn verify_v6(saddr: [u8; 16], daddr: [u8; 16], proto: u8, seg: &[u8]) {
        let sum = pseudo_v6(&saddr, &daddr, proto, seg.len() as u32) + payload_sum(seg);
        assert_eq!(finish(sum), 0, "transport checksum");
    }

    #[test]
    fn syn_v4_is_well_formed() {
        let e = ends4();
        let f = syn_v4(&e, 0xdead_beef);
        let b = f.bytes();
        assert_eq!(b.len(), 66);
        assert_eq!(&b[12..14], &[0x08, 0x00]);
        assert_eq!(finish(payload_sum(&b[14..34])), 0, "IPv4 header checksum");
        assert_eq!(u16::from_be_bytes([b[16], b[17]]), 52, "total length");
        verify_v4(e.saddr, e.daddr, IPPROTO_TCP, &b[34..]);
        assert_eq!(f.tcp.seq(), 0xdead_beef);
        assert_eq!(f.tcp.flags, TCP_SYN);
        assert_eq!(f.tcp.header_len(), 32);
        assert_eq!(&f.opts[..4], &[2, 4, 0x05, 0xb4], "MSS 1460");
    }

    #[test]
    fn syn_v6_is_well_formed() {
        let e = ends6();
        let f = syn_v6(&e, 7);
        let b = f.bytes();
        assert_eq!(b.len(), 86);
        assert_eq!(&b[12..14], &[0x86, 0xdd]);
        assert_eq!(u16::from_be_bytes([b[18], b[19]]), 32, "payload length");
        verify_v6(e.saddr, e.daddr, IPPROTO_TCP, &b[54..]);
        assert_eq!(&f.opts[..4], &[2, 4, 0x05, 0xa0], "MSS 1440");
    }

    #[test]
    fn tunnelled_syns_carry_the_plain_probe_to_the_service_inside_a_header_to_the_backend() {
        let e = ends4();
        let backend = [198, 18, 30, 11];
        let f = syn_ipip_v4(&e, (e.saddr, backend), 0xdead_beef, 0);
        let b = f.bytes();
        assert_eq!(b.len(), 86);
        assert_eq!(&b[12..14], &[0x08, 0x00]);
        assert_eq!(finish(payload_sum(&b[14..34])), 0, "outer header checksum");
        assert_eq!(
            (f.outer.proto, f.outer.saddr, f.outer.daddr),
            (IPPROTO_IPIP, e.saddr, backend)
        );
        assert_eq!(u16::from_be_bytes(f.outer.tot_len_be), 72, "outer total length");
        assert_eq!(finish(payload_sum(&b[34..54])), 0, "inner header checksum");
        assert_eq!(
            (f.ip.saddr, f.ip.daddr, u16::from_be_bytes(f.ip.tot_len_be)),
            (e.saddr, e.daddr, 52)
        );
        verify_v4(e.saddr, e.daddr, IPPROTO_TCP, &b[54..]);
        assert_eq!((f.tcp.seq(), f.tcp.flags), (0xdead_beef, TCP_SYN));
        assert_eq!(
            &f.opts[..4],
            &[2, 4, 0x05, 0xa0],
            "MSS 1440: the outer header's 20 bytes off"
        );
        // The inner packet is the plain probe but for its MSS.
        let plain = syn_v4(&e, 0xdead_beef);
        assert_eq!(plain.ip, f.ip);
        assert_eq!(f.tcp.seq_be, plain.tcp.seq_be);

        let e = ends6();
        let mut backend = e.daddr;
        backend[15] = 0x30;
        let f = syn_ipip_v6(&e, (e.saddr, backend), 7, 0);
        let b = f.bytes();
        assert_eq!(b.len(), 126);
        assert_eq!(
            (f.outer.next_hdr, f.outer.saddr, f.outer.daddr),
            (IPPROTO_IPV6, e.saddr, backend)
        );
        assert_eq!(u16::from_be_bytes(f.outer.payload_len_be), 72, "outer payload length");
        assert_eq!(
            (f.ip.next_hdr, f.ip.daddr, u16::from_be_bytes(f.ip.payload_len_be)),
            (IPPROTO_TCP, e.daddr, 32)
        );
        verify_v6(e.saddr, e.daddr, IPPROTO_TCP, &b[94..]);
        assert_eq!(
            &f.opts[..4],
            &[2, 4, 0x05, 0x78],
            "MSS 1400: the outer header's 40 bytes off"
        );
    }

    /// A header's bytes (every header is repr(C) of byte arrays, alignment 1).
    fn raw<T>(v: &T) -> std::vec::Vec<u8> {
        // SAFETY: see above: no padding, every byte initialised.
        unsafe { core::slice::from_raw_parts(core::ptr::from_ref(v).cast::<u8>(), core::mem::size_of::<T>()) }.to_vec()
    }

    /// A request segment wrapped as probe_rx wraps it: the inner frame written `outer` bytes
    /// in, then the outer headers over the inner frame's Ethernet header.
    fn wrapped_request_v6(e: &Ends<[u8; 16]>, backend: [u8; 16], gue: bool, payload: &[u8]) -> std::vec::Vec<u8> {
        let outer = outer_len(true, gue);
        let mut f = RstV6::default();
        let sum = write_request_v6(&mut f, e, 1, 2, payload.len() as u16, payload_sum(payload));
        let inner_len = (RstV6::LEN - EthHdr::LEN + payload.len()) as u16;
        let mut out = f.bytes()[..EthHdr::LEN].to_vec();
        if gue {
            let mut h = OuterGueV6::default();
            set_outer_gue_v6(&mut h, (&e.saddr, &backend), (e.sport, 6080), (inner_len, sum));
            out.extend_from_slice(&raw(&h.ip));
            out.extend_from_slice(&raw(&h.udp));
        } else {
            let mut h = Ipv6Hdr::default();
            set_outer_ipip_v6(&mut h, (&e.saddr, &backend), inner_len);
            out.extend_from_slice(&raw(&h));
        }
        assert_eq!(out.len(), EthHdr::LEN + outer);
        out.extend_from_slice(&f.bytes()[EthHdr::LEN..]);
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn wrapped_segments_carry_the_inner_packet_with_valid_checksums() {
        let e = ends6();
        let mut backend = e.daddr;
        backend[15] = 0x30;
        // An odd length, so the inner packet's sum pads as the UDP checksum does.
        let payload = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n!";
        for gue in [false, true] {
            let b = wrapped_request_v6(&e, backend, gue, payload);
            let inner = EthHdr::LEN + outer_len(true, gue);
            assert_eq!(b.len(), inner + 60 + payload.len());
            let outer_payload = u16::from_be_bytes([b[18], b[19]]) as usize;
            assert_eq!(outer_payload, b.len() - 54, "outer payload length");
            if gue {
                assert_eq!(b[20], IPPROTO_UDP);
                verify_v6(e.saddr, backend, IPPROTO_UDP, &b[54..]);
            } else {
                assert_eq!(b[20], IPPROTO_IPV6);
            }
            verify_v6(e.saddr, e.daddr, IPPROTO_TCP, &b[inner + 40..]);
            assert_eq!(&b[b.len() - payload.len()..], payload);
        }
        // IPv4: the outer header's checksum, and the UDP one over an odd-length inner packet.
        let e = ends4();
        let backend = [198, 18, 30, 11];
        let mut f = RstV4::default();
        let sum = write_rst_v4(&mut f, &e, 5);
        let mut h = OuterGueV4::default();
        set_outer_gue_v4(&mut h, (&e.saddr, &backend), (e.sport, 6080), (40, sum));
        let mut dgram = raw(&h.udp);
        dgram.extend_from_slice(&f.bytes()[EthHdr::LEN..]);
        verify_v4(e.saddr, backend, IPPROTO_UDP, &dgram);
        assert_eq!(finish(payload_sum(&raw(&h.ip))), 0, "outer header checksum");
        let mut ip = Ipv4Hdr::default();
        set_outer_ipip_v4(&mut ip, (&e.saddr, &backend), 40);
        assert_eq!((ip.proto, u16::from_be_bytes(ip.tot_len_be)), (IPPROTO_IPIP, 60));
    }

    #[test]
    fn an_outer_source_of_its_own_leaves_the_inner_probe_as_it_was() {
        let e = ends4();
        let (src, backend) = ([198, 18, 0, 100], [198, 18, 30, 11]);
        let f = syn_gue_v4(&e, (src, backend, 6080), 3, 0);
        assert_eq!((f.outer.saddr, f.outer.daddr, f.ip.saddr), (src, backend, e.saddr));
        assert_eq!(finish(payload_sum(&f.bytes()[14..34])), 0, "outer header checksum");
        verify_v4(src, backend, IPPROTO_UDP, &f.bytes()[34..]);
        assert_eq!(f.ip, syn_gue_v4(&e, (e.saddr, backend, 6080), 3, 0).ip);
        let e = ends6();
        let (mut src, mut backend) = (e.saddr, e.daddr);
        src[15] = 0x99;
        backend[15] = 0x30;
        let f = syn_ipip_v6(&e, (src, backend), 3, 0);
        assert_eq!((f.outer.saddr, f.ip.saddr), (src, e.saddr));
    }

    #[test]
    fn padded_syns_are_full_size_outside_and_the_plain_probe_inside() {
        // A client packet of 1500 bytes: the inner SYN (52 bytes over IPv4) and 1448 zeros.
        let e = ends4();
        let backend = [198, 18, 30, 11];
        let f = syn_ipip_v4(&e, (e.saddr, backend), 1, 1448);
        assert_eq!(u16::from_be_bytes(f.outer.tot_len_be), 1520, "outer total length");
        assert_eq!(u16::from_be_bytes(f.outer.frag_off_be) & 0x4000, 0x4000, "DF");
        assert_eq!(finish(payload_sum(&f.bytes()[14..34])), 0, "outer header checksum");
        assert_eq!(
            u16::from_be_bytes(f.ip.tot_len_be),
            52,
            "the inner packet ends where it did"
        );
        assert_eq!(f.ip, syn_ipip_v4(&e, (e.saddr, backend), 1, 0).ip);
        let e = ends6();
        let mut backend = e.daddr;
        backend[15] = 0x30;
        let f = syn_gue_v6(&e, (e.saddr, backend, 6080), 9, 1428);
        assert_eq!(
            u16::from_be_bytes(f.outer.payload_len_be),
            8 + 1500,
            "outer payload length"
        );
        assert_eq!(u16::from_be_bytes(f.udp.len_be), 8 + 1500);
        let mut dgram = f.bytes()[54..].to_vec();
        dgram.resize(8 + 1500, 0);
        verify_v6(e.saddr, backend, IPPROTO_UDP, &dgram);
        verify_v6(e.saddr, e.daddr, IPPROTO_TCP, &f.bytes()[102..]);
    }

    #[test]
    fn gue_syns_carry_the_probe_in_udp_with_a_valid_checksum() {
        let e = ends4();
        let backend = [198, 18, 30, 11];
        let f = syn_gue_v4(&e, (e.saddr, backend, 6080), 0xdead_beef, 0);
        let b = f.bytes();
        assert_eq!(b.len(), 94);
        assert_eq!(finish(payload_sum(&b[14..34])), 0, "outer header checksum");
        assert_eq!(
            (f.outer.proto, f.outer.daddr, u16::from_be_bytes(f.outer.tot_len_be)),
            (IPPROTO_UDP, backend, 80)
        );
        assert_eq!(
            (f.udp.sport(), f.udp.dport(), u16::from_be_bytes(f.udp.len_be)),
            (e.sport, 6080, 60)
        );
        verify_v4(e.saddr, backend, IPPROTO_UDP, &b[34..]);
        assert_eq!(finish(payload_sum(&b[42..62])), 0, "inner header checksum");
        verify_v4(e.saddr, e.daddr, IPPROTO_TCP, &b[62..]);
        assert_eq!(
            &f.opts[..4],
            &[2, 4, 0x05, 0x98],
            "MSS 1432: 28 bytes of outer headers off"
        );

        let e = ends6();
        let mut backend = e.daddr;
        backend[15] = 0x30;
        let f = syn_gue_v6(&e, (e.saddr, backend, 6080), 9, 0);
        let b = f.bytes();
        assert_eq!(b.len(), 134);
        assert_eq!(
            (f.outer.next_hdr, u16::from_be_bytes(f.outer.payload_len_be)),
            (IPPROTO_UDP, 80)
        );
        verify_v6(e.saddr, backend, IPPROTO_UDP, &b[54..]);
        verify_v6(e.saddr, e.daddr, IPPROTO_TCP, &b[102..]);
        assert_eq!(&f.opts[..4], &[2, 4, 0x05, 0x70], "MSS 1392");
    }

    #[test]
    fn rst_frames_are_well_formed() {
        let e = ends4();
        let f = rst_v4(&e, 0x1000_0001);
        let b = f.bytes();
        assert_eq!(finish(payload_sum(&b[14..34])), 0);
        verify_v4(e.saddr, e.daddr, IPPROTO_TCP, &b[34..]);
        assert_eq!(f.tcp.flags & (TCP_RST | TCP_ACK | TCP_SYN), TCP_RST);
        assert_eq!(f.tcp.seq(), 0x1000_0001);
        let e = ends6();
        let f = rst_v6(&e, 5);
        verify_v6(e.saddr, e.daddr, IPPROTO_TCP, &f.bytes()[54..]);
    }

    #[test]
    fn request_segments_checksum_with_payload() {
        let req = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        let (len, sum) = (req.len() as u16, payload_sum(req));
        let e = ends4();
        let mut f = RstV4::default();
        write_request_v4(&mut f, &e, 11, 22, len, sum);
        assert_eq!(finish(payload_sum(&f.bytes()[14..34])), 0, "IPv4 header checksum");
        assert_eq!(u16::from_be_bytes(f.ip.tot_len_be), 40 + len);
        assert_eq!((f.tcp.seq(), f.tcp.ack(), f.tcp.flags), (11, 22, TCP_ACK | TCP_PSH));
        let mut seg = f.bytes()[34..].to_vec();
        seg.extend_from_slice(req);
        verify_v4(e.saddr, e.daddr, IPPROTO_TCP, &seg);
        let e = ends6();
        let mut f = RstV6::default();
        write_request_v6(&mut f, &e, 11, 22, len, sum);
        assert_eq!(u16::from_be_bytes(f.ip.payload_len_be), 20 + len);
        let mut seg = f.bytes()[54..].to_vec();
        seg.extend_from_slice(req);
        verify_v6(e.saddr, e.daddr, IPPROTO_TCP, &seg);
    }

    #[test]
    fn udp_frames_checksum_with_payload() {
        for payload in [&b""[..], b"ping", b"odd", b"health-check request payload!"] {
            let e = ends4();
            let h = udp_v4(&e, 0x1234, payload.len() as u16, payload_sum(payload));
            let mut seg = h.bytes()[34..].to_vec();
            seg.extend_from_slice(payload);
            verify_v4(e.saddr, e.daddr, IPPROTO_UDP, &seg);
            assert_eq!(finish(payload_sum(&raw(&h)[14..34])), 0);
            let e = ends6();
            let h = udp_v6(
                &e,
                0xabcde_u32 | 0xfff0_0000,
                payload.len() as u16,
                payload_sum(payload),
            );
            assert_eq!(
                h.ip.ver_tc_flow,
                [0x60, 0x0a, 0xbc, 0xde],
                "version 6, cookie in the flow label only"
            );
            let mut seg = h.bytes()[54..].to_vec();
            seg.extend_from_slice(payload);
            verify_v6(e.saddr, e.daddr, IPPROTO_UDP, &seg);
        }
    }
}
