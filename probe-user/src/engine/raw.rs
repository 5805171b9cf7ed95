//! The raw-socket sender: the generator's frames, built by the same probe-common code, sent
//! through the node's IP stack. Used where the device cannot transmit XDP frames, and for a
//! probe whose next hop has no resolved neighbour yet (the stack resolves it).
use probe_common::{
    csum::payload_sum,
    frame::{syn_gue_v4, syn_gue_v6, syn_ipip_v4, syn_ipip_v6, syn_v4, syn_v6, udp_v4, udp_v6, Ends},
    l4::{FlowKey, FAMILY_V4},
    packet::{EthHdr, IPPROTO_TCP},
};

use std::net::IpAddr;

use super::{Encap, EngineError, Tunnel};
use crate::kernel::sys::RawIpSocket;

pub(crate) struct RawSender {
    v4: RawIpSocket,
    v6: Option<RawIpSocket>,
}

impl RawSender {
    pub(crate) fn new() -> Result<Self, EngineError> {
        let v4 = RawIpSocket::open(false).map_err(|source| EngineError::Io {
            op: "open a raw IPv4 socket (needs CAP_NET_RAW)",
            source,
        })?;
        // A node without IPv6 still probes IPv4 targets.
        let v6 = RawIpSocket::open(true).ok();
        Ok(Self { v4, v6 })
    }

    /// Sends the probe of `flow` carrying `cookie` (and `payload` for UDP); a TCP probe with
    /// a `tunnel` goes inside outer headers to its backend (the same family as `flow`'s).
    pub(crate) fn send(
        &self,
        flow: &FlowKey,
        tunnel: Option<Tunnel>,
        cookie: u32,
        payload: Option<&[u8]>,
    ) -> std::io::Result<()> {
        let mut pkt = Vec::with_capacity(96);
        let tcp = flow.proto == IPPROTO_TCP;
        let (plen, psum) = payload.map_or((0, 0), |p| (p.len() as u16, payload_sum(p)));
        if flow.family == FAMILY_V4 {
            let e = Ends {
                smac: [0; 6],
                dmac: [0; 6],
                saddr: flow.saddr_v4(),
                daddr: flow.daddr_v4(),
                sport: flow.sport,
                dport: flow.dport,
            };
            if let Some(
                t @ Tunnel {
                    backend: IpAddr::V4(b),
                    encap,
                    ..
                },
            ) = tunnel
            {
                let pad = t.pad(false);
                let src = match t.source {
                    Some(IpAddr::V4(s)) => s.octets(),
                    _ => e.saddr,
                };
                match encap {
                    Encap::Ipip => {
                        pkt.extend_from_slice(&syn_ipip_v4(&e, (src, b.octets()), cookie, pad).bytes()[EthHdr::LEN..]);
                    }
                    Encap::Gue { port } => {
                        pkt.extend_from_slice(
                            &syn_gue_v4(&e, (src, b.octets(), port), cookie, pad).bytes()[EthHdr::LEN..],
                        );
                    }
                }
                pkt.resize(pkt.len() + usize::from(pad), 0);
            } else if tcp {
                pkt.extend_from_slice(&syn_v4(&e, cookie).bytes()[EthHdr::LEN..]);
            } else {
                pkt.extend_from_slice(&udp_v4(&e, cookie as u16, plen, psum).bytes()[EthHdr::LEN..]);
            }
        } else {
            let e = Ends {
                smac: [0; 6],
                dmac: [0; 6],
                saddr: flow.saddr,
                daddr: flow.daddr,
                sport: flow.sport,
                dport: flow.dport,
            };
            if let Some(
                t @ Tunnel {
                    backend: IpAddr::V6(b),
                    encap,
                    ..
                },
            ) = tunnel
            {
                let pad = t.pad(true);
                let src = match t.source {
                    Some(IpAddr::V6(s)) => s.octets(),
                    _ => e.saddr,
                };
                match encap {
                    Encap::Ipip => {
                        pkt.extend_from_slice(&syn_ipip_v6(&e, (src, b.octets()), cookie, pad).bytes()[EthHdr::LEN..]);
                    }
                    Encap::Gue { port } => {
                        pkt.extend_from_slice(
                            &syn_gue_v6(&e, (src, b.octets(), port), cookie, pad).bytes()[EthHdr::LEN..],
                        );
                    }
                }
                pkt.resize(pkt.len() + usize::from(pad), 0);
            } else if tcp {
                pkt.extend_from_slice(&syn_v6(&e, cookie).bytes()[EthHdr::LEN..]);
            } else {
                pkt.extend_from_slice(&udp_v6(&e, cookie, plen, psum).bytes()[EthHdr::LEN..]);
            }
        }
        if !tcp {
            pkt.extend_from_slice(payload.unwrap_or(&[]));
        }
        if flow.family == FAMILY_V4 {
            let to = match tunnel.map(|t| t.backend) {
                Some(IpAddr::V4(b)) => b,
                _ => flow.daddr_v4().into(),
            };
            self.v4.send_to(&pkt, IpAddr::V4(to))
        } else {
            let Some(sock) = &self.v6 else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    "no IPv6 raw socket",
                ));
            };
            let to = match tunnel.map(|t| t.backend) {
                Some(IpAddr::V6(b)) => b,
                _ => flow.daddr.into(),
            };
            sock.send_to(&pkt, IpAddr::V6(to))
        }
    }
}
