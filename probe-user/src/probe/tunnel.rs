//! The road a check takes: to the endpoint's own address, or through the data path's tunnel to
//! the service address (the VIP) the endpoint answers for, the way the load balancer forwards
//! client flows to a direct-return (DSR) backend. A property of the road, not of a kind: the
//! TCP kind and plain HTTP read the same keys here, and the kernel engine wraps every segment
//! of such a check (the SYN, an HTTP request, the RST that ends it).
use std::net::IpAddr;

use serde::Serialize;

use super::key_field;
use crate::{
    engine::Encap,
    rules::Protocol,
    schema::{
        keys::{
            Allowed::{Int, OneOf, Text as Described},
            Key,
            Reload::Reask,
            Type,
            Unset::{Text, Value},
        },
        read::{Reader, Table},
    },
};

/// A check that takes the data path's road: its SYN to `vip` (at the endpoint's port), inside
/// outer headers to the endpoint's address (`encap`), answered by the endpoint from `vip`
/// straight back to this node (direct server return).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct TunnelTo {
    pub vip: IpAddr,
    pub encap: Encap,
    /// `tunnel_mtu`: the client packet size the SYN's outer packet is made to carry (None: the
    /// SYN alone, as small as it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u16>,
    /// `tunnel_source`: the outer header's source (None: the probe's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<IpAddr>,
}

impl TunnelTo {
    /// The engine's tunnel through this road to `backend`.
    pub fn engine(&self, backend: IpAddr) -> crate::engine::Tunnel {
        crate::engine::Tunnel {
            backend,
            encap: self.encap,
            mtu: self.mtu.unwrap_or(0),
            source: self.source,
        }
    }
}

const IPIP: &str = "ipip";
const GUE: &str = "gue";
/// katran's GUE port, which backends decapsulating its flows already listen on.
const GUE_PORT: u16 = 6080;

/// The protocols whose checks may take the tunnel: TCP, and plain HTTP, which the kernel runs
/// whole (a socket cannot take the tunnel without a tunnel device of the node's own), and UDP
/// request/response (the request sent wrapped by a raw socket, the answer read by a socket).
const ROADS: &[Protocol] = &[Protocol::Tcp, Protocol::Http, Protocol::Udp];

pub const KEYS: &[Key] = &[
    Key::new(
        "tunnel",
        Type::String,
        Text("none: the check goes to the endpoint's address"),
        OneOf(&[IPIP, GUE]),
        Reask,
        "Check through the data path's tunnel, as the load balancer forwards client flows to a \
         direct-return (DSR) backend: the check is addressed to tunnel_vip at the endpoint's port and \
         sent inside outer headers to the endpoint's address, of the endpoint's family: ipip (IPv4 in \
         IPv4, IPv6 in IPv6) or gue (in UDP to tunnel_port, with no GUE header, as katran sends); \
         the endpoint unwraps it and answers from the VIP. A backend that answers on its own address \
         but drops what the tunnel brings (the VIP not on its loopback, its tunnel device down, \
         rp_filter, no service on the VIP) fails this check. TCP checks, plain HTTP checks that the \
         kernel runs whole (no body_match, no keep_alive, a request of at most 256 bytes), and UDP \
         checks with a response (silence through a tunnel proves nothing).",
    )
    .protocols(ROADS, "and tunnel_vip"),
    Key::new(
        "tunnel_vip",
        Type::String,
        Text("none"),
        Described("an IPv4 or IPv6 address, of the endpoints' family"),
        Reask,
        "The service address inside the tunnel: the VIP the endpoints answer for. Required with \
         tunnel.",
    )
    .protocols(ROADS, "and tunnel"),
    Key::new(
        "tunnel_port",
        Type::Integer,
        Value("6080"),
        Int(1, 65_535),
        Reask,
        "With tunnel = \"gue\": the UDP port the endpoints decapsulate on (the outer header's \
         destination; 6080 is katran's). The source port is the probe's own.",
    )
    .protocols(ROADS, "and tunnel = \"gue\""),
    Key::new(
        "tunnel_mtu",
        Type::Integer,
        Text("none: the SYN alone, a few dozen bytes"),
        Int(MIN_MTU as i64, MAX_MTU as i64),
        Reask,
        "The size of the client packets the tunnel must carry (the clients' MTU, 1500 on most \
         links): the SYN's outer packet is padded to that many bytes plus its outer headers, with \
         zeros after the probe that the backend's decapsulation trims, and DF set. A path that cannot \
         carry full-size client packets into the tunnel (an MTU too small on the way or at the \
         backend) then fails the check instead of passing it with a small SYN.",
    )
    .protocols(ROADS, "and tunnel"),
    Key::new(
        "tunnel_source",
        Type::String,
        Text("none: the probe's own source, as the route to the endpoint picks it"),
        Described("an IPv4 or IPv6 address of this node's, of the endpoints' family"),
        Reask,
        "The outer header's source, where the backends admit tunnelled packets from one address \
         only (the load balancers' tunnel source, as katran's health checks use one). The probe \
         inside keeps the node's own source: the backend answers it from the VIP, straight back.",
    )
    .protocols(ROADS, "and tunnel"),
];

/// `tunnel_mtu`'s bounds: IPv6's minimum link MTU, and what one page of a generator frame
/// holds with the outer headers (jumbo client packets are not probed).
const MIN_MTU: u16 = 1280;
const MAX_MTU: u16 = 3000;

/// The road the health table `t` names: Some(None) for the endpoint's own address, None
/// when a key is wrong (the reader has the error).
pub(crate) fn read(r: &mut Reader<'_>, t: &Table<'_, '_>) -> Option<Option<TunnelTo>> {
    let kind = r.string(t, "tunnel");
    let vip = r.string(t, "tunnel_vip");
    let port = r.int(t, "tunnel_port");
    let mtu = r.int(t, "tunnel_mtu");
    let source = r.string(t, "tunnel_source");
    let Some(kind) = kind else {
        if let Some(source) = source {
            r.bad(&source, "tunnel_source is a tunnel's outer source: set tunnel too");
            return None;
        }
        if let Some(vip) = vip {
            r.bad(&vip, "tunnel_vip is the address inside a tunnel: set tunnel too");
            return None;
        }
        if let Some(port) = port {
            r.bad(&port, "tunnel_port is the UDP port of tunnel = \"gue\"");
            return None;
        }
        if let Some(mtu) = mtu {
            r.bad(&mtu, "tunnel_mtu sizes what a tunnel carries: set tunnel too");
            return None;
        }
        return Some(None);
    };
    let mtu = match mtu {
        None => None,
        Some(m) => match u16::try_from(m.v) {
            Ok(v) if (MIN_MTU..=MAX_MTU).contains(&v) => Some(v),
            _ => {
                r.bad(&m, format!("expected a packet size from {MIN_MTU} to {MAX_MTU} bytes"));
                return None;
            }
        },
    };
    let encap = match (kind.v.as_str(), port) {
        (IPIP, None) => Encap::Ipip,
        (IPIP, Some(port)) => {
            r.bad(&port, "tunnel_port is the UDP port of tunnel = \"gue\"; ipip has none");
            return None;
        }
        (GUE, None) => Encap::Gue { port: GUE_PORT },
        (GUE, Some(p)) => match u16::try_from(p.v) {
            Ok(port) if port > 0 => Encap::Gue { port },
            _ => {
                r.bad(&p, "expected a port from 1 to 65535");
                return None;
            }
        },
        _ => {
            r.bad(
                &kind,
                format!("expected \"{IPIP}\" (IPv4 in IPv4, IPv6 in IPv6) or \"{GUE}\" (in UDP)"),
            );
            return None;
        }
    };
    let source = match source {
        None => None,
        Some(item) => match item.v.parse::<IpAddr>() {
            Ok(ip) if !ip.is_unspecified() && !ip.is_multicast() && !ip.is_loopback() => Some(ip),
            _ => {
                r.bad(&item, "expected an IPv4 or IPv6 unicast address of this node's");
                return None;
            }
        },
    };
    let Some(vip) = vip else {
        r.missing(
            t,
            "tunnel_vip",
            "tunnel needs the service address inside it (tunnel_vip)",
        );
        return None;
    };
    match vip.v.parse::<IpAddr>() {
        Ok(ip) if !ip.is_unspecified() && !ip.is_multicast() => Some(Some(TunnelTo {
            vip: ip,
            encap,
            mtu,
            source,
        })),
        Ok(_) => {
            r.bad(&vip, "expected a unicast address");
            None
        }
        Err(_) => {
            r.bad(&vip, "expected an IPv4 or IPv6 address");
            None
        }
    }
}

/// The road in a check's identity (nothing for the endpoint's own address, so that keys of
/// checks without a tunnel stay as they were).
pub(crate) fn identity(road: Option<&TunnelTo>, out: &mut String) {
    let Some(t) = road else { return };
    match t.encap {
        Encap::Ipip => key_field(out, "tunnel", IPIP),
        Encap::Gue { port } => {
            key_field(out, "tunnel", GUE);
            key_field(out, "tunnel_port", &port.to_string());
        }
    }
    key_field(out, "tunnel_vip", &t.vip.to_string());
    if let Some(mtu) = t.mtu {
        key_field(out, "tunnel_mtu", &mtu.to_string());
    }
    if let Some(source) = t.source {
        key_field(out, "tunnel_source", &source.to_string());
    }
}

/// The engine's tunnel to `backend` for a check through `t`, once its families agree.
pub fn engine_tunnel(t: &TunnelTo, backend: std::net::SocketAddr) -> Result<crate::engine::Tunnel, String> {
    let via = t.engine(backend.ip());
    via.check(&std::net::SocketAddr::new(t.vip, backend.port()))?;
    Ok(via)
}

/// Why a check through a tunnel cannot be made for an endpoint.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TunnelError(pub String);

/// A UDP datagram from `local` to `service` carrying `payload`, wrapped for the backend as the
/// load balancer wraps a client's (`t`): the bytes a raw socket sends, outer IP header first.
/// The outer source is `t.source`, else `local`'s address; a GUE header's source port is
/// `local`'s.
pub(crate) fn wrapped_datagram(
    t: &crate::engine::Tunnel,
    local: std::net::SocketAddr,
    service: std::net::SocketAddr,
    payload: &[u8],
) -> Vec<u8> {
    use probe_common::{
        csum::payload_sum,
        frame::{
            set_outer_gue_v4, set_outer_gue_v6, set_outer_ipip_v4, set_outer_ipip_v6, udp_v4, udp_v6, Ends, OuterGueV4,
            OuterGueV6,
        },
        packet::{EthHdr, Ipv4Hdr, Ipv6Hdr},
    };
    fn ends<A>((saddr, daddr): (A, A), (sport, dport): (u16, u16)) -> Ends<A> {
        Ends {
            smac: [0; 6],
            dmac: [0; 6],
            saddr,
            daddr,
            sport,
            dport,
        }
    }
    let ports = (local.port(), service.port());
    let len = payload.len() as u16;
    let sum = payload_sum(payload);
    let mut inner = match (local.ip(), service.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            udp_v4(&ends((s.octets(), d.octets()), ports), 0, len, sum).bytes()[EthHdr::LEN..].to_vec()
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            udp_v6(&ends((s.octets(), d.octets()), ports), 0, len, sum).bytes()[EthHdr::LEN..].to_vec()
        }
        _ => unreachable!("a tunnel carries one family (Tunnel::check)"),
    };
    inner.extend_from_slice(payload);
    let inner_len = inner.len() as u16;
    let inner_sum = payload_sum(&inner);
    let src = t.source.unwrap_or(local.ip());
    let mut out = match (src, t.backend, t.encap) {
        (IpAddr::V4(s), IpAddr::V4(b), Encap::Ipip) => {
            let mut h = Ipv4Hdr::default();
            set_outer_ipip_v4(&mut h, (&s.octets(), &b.octets()), inner_len);
            header_bytes(&h)
        }
        (IpAddr::V4(s), IpAddr::V4(b), Encap::Gue { port }) => {
            let mut h = OuterGueV4::default();
            set_outer_gue_v4(
                &mut h,
                (&s.octets(), &b.octets()),
                (local.port(), port),
                (inner_len, inner_sum),
            );
            header_bytes(&h)
        }
        (IpAddr::V6(s), IpAddr::V6(b), Encap::Ipip) => {
            let mut h = Ipv6Hdr::default();
            set_outer_ipip_v6(&mut h, (&s.octets(), &b.octets()), inner_len);
            header_bytes(&h)
        }
        (IpAddr::V6(s), IpAddr::V6(b), Encap::Gue { port }) => {
            let mut h = OuterGueV6::default();
            set_outer_gue_v6(
                &mut h,
                (&s.octets(), &b.octets()),
                (local.port(), port),
                (inner_len, inner_sum),
            );
            header_bytes(&h)
        }
        _ => unreachable!("a tunnel carries one family (Tunnel::check)"),
    };
    out.extend_from_slice(&inner);
    out
}

/// A wire header's bytes.
fn header_bytes<T: Copy>(h: &T) -> Vec<u8> {
    // SAFETY: probe_common's headers are repr(C) structs of byte arrays with alignment 1 and
    // no padding (their sizes are asserted there), so every byte is initialised.
    unsafe { std::slice::from_raw_parts(std::ptr::from_ref(h).cast::<u8>(), std::mem::size_of::<T>()) }.to_vec()
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use probe_common::csum::{finish, payload_sum, pseudo_v4, pseudo_v6};

    use super::*;
    use crate::engine::Tunnel;

    /// The transport checksum of `seg` from `s` to `d` verifies (IPv4 or IPv6 addresses).
    fn verifies(s: IpAddr, d: IpAddr, proto: u8, seg: &[u8]) -> bool {
        let pseudo = match (s, d) {
            (IpAddr::V4(s), IpAddr::V4(d)) => pseudo_v4(&s.octets(), &d.octets(), proto, seg.len() as u16),
            (IpAddr::V6(s), IpAddr::V6(d)) => pseudo_v6(&s.octets(), &d.octets(), proto, seg.len() as u32),
            _ => unreachable!(),
        };
        finish(pseudo + payload_sum(seg)) == 0
    }

    #[test]
    fn a_wrapped_datagram_is_the_clients_inside_the_tunnels_headers() {
        let local: SocketAddr = "198.18.0.1:40000".parse().unwrap();
        let service: SocketAddr = "198.18.40.1:53".parse().unwrap();
        let backend: IpAddr = "198.18.0.10".parse().unwrap();
        let gue = Tunnel {
            backend,
            encap: Encap::Gue { port: 6080 },
            mtu: 0,
            source: None,
        };
        let b = wrapped_datagram(&gue, local, service, b"ping?");
        assert_eq!(b.len(), 20 + 8 + 20 + 8 + 5);
        assert_eq!(finish(payload_sum(&b[..20])), 0, "outer header checksum");
        assert_eq!(
            (b[9], &b[12..16], &b[16..20]),
            (17, &[198, 18, 0, 1][..], &[198, 18, 0, 10][..])
        );
        assert!(verifies(local.ip(), backend, 17, &b[20..]), "outer UDP checksum");
        assert_eq!(u16::from_be_bytes([b[22], b[23]]), 6080);
        assert!(verifies(local.ip(), service.ip(), 17, &b[48..]), "inner UDP checksum");
        assert_eq!(&b[56..], b"ping?");
        // IPv6 in IPv6 from a tunnel source of its own.
        let local: SocketAddr = "[2001:2::1]:40000".parse().unwrap();
        let service: SocketAddr = "[2001:2:40::1]:53".parse().unwrap();
        let source: IpAddr = "2001:2::100".parse().unwrap();
        let ipip = Tunnel {
            backend: "2001:2::10".parse().unwrap(),
            encap: Encap::Ipip,
            mtu: 0,
            source: Some(source),
        };
        let b = wrapped_datagram(&ipip, local, service, b"");
        assert_eq!(b.len(), 40 + 40 + 8);
        assert_eq!(
            (b[6], &b[8..24]),
            (41, &"2001:2::100".parse::<std::net::Ipv6Addr>().unwrap().octets()[..])
        );
        assert!(verifies(local.ip(), service.ip(), 17, &b[80..]), "inner UDP checksum");
    }
}
