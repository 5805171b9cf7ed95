//! probe_rx: XDP on ingress. Classifies replies (SYN+ACK, RST, ICMP unreachable) and counts
//! them. Every frame is passed on; foreign traffic is never touched.
use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use probe_common::{
    counters::RxCounters,
    packet::{
        classify_icmp, classify_tcp_flags, EthHdr, IcmpHdr, Ipv4Hdr, Ipv6Hdr, ReplyClass, TcpHdr,
        ETH_P_IP, ETH_P_IPV6, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_TCP,
    },
};

use crate::{maps::PROBE_RX_COUNTERS, parse::read_at};

#[xdp]
pub fn probe_rx(ctx: XdpContext) -> u32 {
    try_probe_rx(&ctx).unwrap_or(xdp_action::XDP_PASS)
}

/// Reads just enough of the frame to classify it. A frame too short to parse is `Other`.
#[inline(always)]
fn classify(ctx: &XdpContext) -> ReplyClass {
    let Some(eth) = read_at::<EthHdr>(ctx, 0) else {
        return ReplyClass::Other;
    };
    let (proto, l4_off, ipv6) = match eth.ethertype() {
        ETH_P_IP => {
            let Some(ip) = read_at::<Ipv4Hdr>(ctx, EthHdr::LEN) else {
                return ReplyClass::Other;
            };
            (ip.proto, EthHdr::LEN + ip.header_len(), false)
        }
        ETH_P_IPV6 => {
            let Some(ip) = read_at::<Ipv6Hdr>(ctx, EthHdr::LEN) else {
                return ReplyClass::Other;
            };
            // Extension headers are not followed: probe replies never carry them.
            (ip.next_hdr, EthHdr::LEN + Ipv6Hdr::LEN, true)
        }
        _ => return ReplyClass::Other,
    };
    match proto {
        IPPROTO_TCP => match read_at::<TcpHdr>(ctx, l4_off) {
            Some(tcp) => classify_tcp_flags(tcp.flags),
            None => ReplyClass::Other,
        },
        IPPROTO_ICMP if !ipv6 => match read_at::<IcmpHdr>(ctx, l4_off) {
            Some(icmp) => classify_icmp(false, icmp.kind),
            None => ReplyClass::Other,
        },
        IPPROTO_ICMPV6 if ipv6 => match read_at::<IcmpHdr>(ctx, l4_off) {
            Some(icmp) => classify_icmp(true, icmp.kind),
            None => ReplyClass::Other,
        },
        _ => ReplyClass::Other,
    }
}

#[inline(always)]
fn try_probe_rx(ctx: &XdpContext) -> Option<u32> {
    let class = classify(ctx);
    let counters = PROBE_RX_COUNTERS.get_ptr_mut(0)?;
    // SAFETY: the pointer comes from a successful per-CPU array lookup, so it points at this
    // CPU's slot, which nothing else writes while this program runs on this CPU.
    let counters: &mut RxCounters = unsafe { &mut *counters };
    match class {
        ReplyClass::SynAck => counters.syn_ack += 1,
        ReplyClass::Rst => counters.rst += 1,
        ReplyClass::IcmpUnreach => counters.icmp_unreach += 1,
        ReplyClass::Other => counters.other += 1,
    }
    Some(xdp_action::XDP_PASS)
}
