//! The TCP check: a SYN, answered by a SYN+ACK (healthy) or a RST or an ICMP error (not),
//! crafted and matched by the kernel engine. Its one choice is the road: to the endpoint's
//! address, or through the data path's own tunnel (`tunnel`, `tunnel_vip`) to the service
//! address the endpoint answers for, the way the load balancer forwards client flows to it.
use std::{net::IpAddr, sync::Arc, time::Duration};

use serde::Serialize;

use super::{key_field, CheckKind, EndpointCheck, ProbeKind};
use crate::{
    engine::{Encap, L4Proto, Tunnel},
    rules::{Dialect, Protocol},
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

/// The TCP kind (`probe::kinds`).
pub struct Tcp;

/// A TCP check: where its SYN goes beyond the endpoint's port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TcpCheck {
    /// Through a tunnel to the service address, or (None) to the endpoint's own address.
    pub tunnel: Option<TunnelTo>,
}

/// A check that takes the data path's road: the SYN to `vip` (at the endpoint's port), inside
/// outer headers to the endpoint's address (`encap`), answered by the endpoint from `vip`
/// straight back to this node (direct server return).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct TunnelTo {
    pub vip: IpAddr,
    pub encap: Encap,
}

const IPIP: &str = "ipip";
const GUE: &str = "gue";
/// katran's GUE port, which backends decapsulating its flows already listen on.
const GUE_PORT: u16 = 6080;

const KEYS: &[Key] = &[
    Key::new(
        "tunnel",
        Type::String,
        Text("none: the SYN goes to the endpoint's address"),
        OneOf(&[IPIP, GUE]),
        Reask,
        "Probe through the data path's tunnel, as the load balancer forwards client flows to a \
         direct-return (DSR) backend: the SYN is addressed to tunnel_vip at the endpoint's port and \
         sent inside outer headers to the endpoint's address, of the endpoint's family: ipip (IPv4 in \
         IPv4, IPv6 in IPv6) or gue (in UDP to tunnel_port, with no GUE header, as katran sends); \
         the endpoint unwraps it and answers from the VIP. A backend that answers on its own address \
         but drops what the tunnel brings (the VIP not on its loopback, its tunnel device down, \
         rp_filter, no service on the VIP) fails this check.",
    )
    .protocols(&[Protocol::Tcp], "and tunnel_vip"),
    Key::new(
        "tunnel_vip",
        Type::String,
        Text("none"),
        Described("an IPv4 or IPv6 address, of the endpoints' family"),
        Reask,
        "The service address inside the tunnel: the VIP the endpoints answer for. Required with \
         tunnel.",
    )
    .protocols(&[Protocol::Tcp], "and tunnel"),
    Key::new(
        "tunnel_port",
        Type::Integer,
        Value("6080"),
        Int(1, 65_535),
        Reask,
        "With tunnel = \"gue\": the UDP port the endpoints decapsulate on (the outer header's \
         destination; 6080 is katran's). The source port is the probe's own.",
    )
    .protocols(&[Protocol::Tcp], "and tunnel = \"gue\""),
];

/// Why a tunnelled check cannot be made for an endpoint.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TunnelError(String);

impl CheckKind for Tcp {
    type Settings = TcpCheck;
    type Shared = ();
    type Error = TunnelError;

    const KEYS: &'static [Key] = KEYS;

    fn read(r: &mut Reader<'_>, t: &Table<'_, '_>, _d: Dialect, _p: Protocol) -> Option<TcpCheck> {
        let kind = r.string(t, "tunnel");
        let vip = r.string(t, "tunnel_vip");
        let port = r.int(t, "tunnel_port");
        let Some(kind) = kind else {
            if let Some(vip) = vip {
                r.bad(&vip, "tunnel_vip is the address inside a tunnel: set tunnel too");
                return None;
            }
            if let Some(port) = port {
                r.bad(&port, "tunnel_port is the UDP port of tunnel = \"gue\"");
                return None;
            }
            return Some(TcpCheck { tunnel: None });
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
        let Some(vip) = vip else {
            r.missing(
                t,
                "tunnel_vip",
                "tunnel needs the service address inside it (tunnel_vip)",
            );
            return None;
        };
        match vip.v.parse::<IpAddr>() {
            Ok(ip) if !ip.is_unspecified() && !ip.is_multicast() => Some(TcpCheck {
                tunnel: Some(TunnelTo { vip: ip, encap }),
            }),
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

    fn protocol(_s: &TcpCheck) -> Protocol {
        Protocol::Tcp
    }

    fn identity(s: &TcpCheck, _endpoint: &EndpointCheck<'_>, out: &mut String) {
        if let Some(t) = &s.tunnel {
            match t.encap {
                Encap::Ipip => key_field(out, "tunnel", IPIP),
                Encap::Gue { port } => {
                    key_field(out, "tunnel", GUE);
                    key_field(out, "tunnel_port", &port.to_string());
                }
            }
            key_field(out, "tunnel_vip", &t.vip.to_string());
        }
    }

    fn prepare(
        s: &TcpCheck,
        endpoint: &EndpointCheck<'_>,
        _timeout: Duration,
        _shared: &mut (),
    ) -> Result<ProbeKind, Self::Error> {
        Ok(match &s.tunnel {
            None => ProbeKind::L4(L4Proto::Tcp),
            Some(t) => {
                let via = Tunnel {
                    backend: endpoint.target.ip(),
                    encap: t.encap,
                };
                let inner = std::net::SocketAddr::new(t.vip, endpoint.target.port());
                via.check(&inner).map_err(TunnelError)?;
                ProbeKind::L4Tunnel(Arc::new(*t))
            }
        })
    }
}
