//! test_reflector: a benchmark and test fixture, never loaded by the daemon. Attached to a
//! backend's interface it plays a remote TCP stack at almost no cost: every SYN is answered
//! with a SYN+ACK (ack = seq + 1), every FIN with an RST, and every other segment (the
//! prober's RST, a client's ACK) is consumed. On one machine the backend's own TCP work
//! otherwise runs on the prober's CPUs and swamps what the prober itself costs.
use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use probe_common::{
    frame::{write_segment_v4, write_segment_v6, Ends, RstV4, RstV6},
    packet::{EthHdr, TcpHdr, ETH_P_IP, ETH_P_IPV6, IPPROTO_TCP, TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN},
};

use crate::parse::{parse_l3, read_at, shrink_to};

#[xdp]
pub fn test_reflector(ctx: XdpContext) -> u32 {
    try_reflect(&ctx).unwrap_or(xdp_action::XDP_PASS)
}

#[inline(always)]
fn try_reflect(ctx: &XdpContext) -> Option<u32> {
    let eth = read_at::<EthHdr>(ctx, 0)?;
    let v6 = match eth.ethertype() {
        ETH_P_IP => false,
        ETH_P_IPV6 => true,
        _ => return Some(xdp_action::XDP_PASS),
    };
    let l3 = parse_l3(ctx, EthHdr::LEN, v6)?;
    if l3.proto != IPPROTO_TCP {
        return Some(xdp_action::XDP_PASS);
    }
    let tcp = read_at::<TcpHdr>(ctx, l3.l4_off)?;
    let (seq, ack, flags) = if tcp.flags & TCP_RST != 0 {
        return Some(xdp_action::XDP_DROP);
    } else if tcp.flags & (TCP_SYN | TCP_ACK) == TCP_SYN {
        // A fixed transform of the client's sequence number stands in for our ISN.
        (tcp.seq() ^ 0x5a5a_5a5a, tcp.seq().wrapping_add(1), TCP_SYN | TCP_ACK)
    } else if tcp.flags & TCP_FIN != 0 {
        (tcp.ack(), 0, TCP_RST)
    } else {
        return Some(xdp_action::XDP_DROP);
    };
    let (sport, dport) = (tcp.dport(), tcp.sport());
    if v6 {
        let e = Ends {
            smac: eth.dst,
            dmac: eth.src,
            saddr: l3.daddr,
            daddr: l3.saddr,
            sport,
            dport,
        };
        write_segment_v6(shrink_to::<RstV6>(ctx)?, &e, seq, ack, flags);
    } else {
        let a = |x: &[u8; 16]| [x[0], x[1], x[2], x[3]];
        let e = Ends {
            smac: eth.dst,
            dmac: eth.src,
            saddr: a(&l3.daddr),
            daddr: a(&l3.saddr),
            sport,
            dport,
        };
        write_segment_v4(shrink_to::<RstV4>(ctx)?, &e, seq, ack, flags);
    }
    Some(xdp_action::XDP_TX)
}
