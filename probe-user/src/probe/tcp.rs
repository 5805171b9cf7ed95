//! The TCP check: a SYN, answered by a SYN+ACK (healthy) or a RST or an ICMP error (not),
//! crafted and matched by the kernel engine. Its one choice is the road: to the endpoint's
//! address, or through the data path's own tunnel (`tunnel`, `tunnel_vip`) to the service
//! address the endpoint answers for, the way the load balancer forwards client flows to it.
use std::{net::IpAddr, sync::Arc, time::Duration};

use serde::Serialize;

use super::{key_field, CheckKind, EndpointCheck, ProbeKind};
use crate::{
    engine::{L4Proto, Tunnel},
    rules::{Dialect, Protocol},
    schema::{
        keys::{
            Allowed::{OneOf, Text as Described},
            Key,
            Reload::Reask,
            Type,
            Unset::Text,
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
/// an outer header to the endpoint's address (IPv4 in IPv4, IPv6 in IPv6), answered by the
/// endpoint from `vip` straight back to this node (direct server return).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TunnelTo {
    pub vip: IpAddr,
}

/// The one encapsulation so far.
const IPIP: &str = "ipip";

const KEYS: &[Key] = &[
    Key::new(
        "tunnel",
        Type::String,
        Text("none: the SYN goes to the endpoint's address"),
        OneOf(&[IPIP]),
        Reask,
        "Probe through the data path's tunnel, as the load balancer forwards client flows to a \
         direct-return (DSR) backend: the SYN is addressed to tunnel_vip at the endpoint's port and \
         sent inside an outer header to the endpoint's address (ipip: IPv4 in IPv4 for IPv4 endpoints, \
         IPv6 in IPv6 for IPv6 ones); the endpoint unwraps it and answers from the VIP. A backend \
         that answers on its own address but drops what the tunnel brings (the VIP not on its \
         loopback, its tunnel device down, rp_filter, no service on the VIP) fails this check.",
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
        let tunnel = match (kind, vip) {
            (None, None) => None,
            (Some(kind), _) if kind.v != IPIP => {
                r.bad(&kind, format!("expected \"{IPIP}\" (IPv4 in IPv4, IPv6 in IPv6)"));
                return None;
            }
            (Some(_), None) => {
                r.missing(
                    t,
                    "tunnel_vip",
                    "tunnel needs the service address inside it (tunnel_vip)",
                );
                return None;
            }
            (None, Some(vip)) => {
                r.bad(
                    &vip,
                    "tunnel_vip is the address inside a tunnel: set tunnel = \"ipip\" too",
                );
                return None;
            }
            (Some(_), Some(vip)) => match vip.v.parse::<IpAddr>() {
                Ok(ip) if ip.is_unspecified() || ip.is_multicast() => {
                    r.bad(&vip, "expected a unicast address");
                    return None;
                }
                Ok(ip) => Some(TunnelTo { vip: ip }),
                Err(_) => {
                    r.bad(&vip, "expected an IPv4 or IPv6 address");
                    return None;
                }
            },
        };
        Some(TcpCheck { tunnel })
    }

    fn protocol(_s: &TcpCheck) -> Protocol {
        Protocol::Tcp
    }

    fn identity(s: &TcpCheck, _endpoint: &EndpointCheck<'_>, out: &mut String) {
        if let Some(t) = &s.tunnel {
            key_field(out, "tunnel", IPIP);
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
                };
                let inner = std::net::SocketAddr::new(t.vip, endpoint.target.port());
                via.check(&inner).map_err(TunnelError)?;
                ProbeKind::L4Tunnel(Arc::new(*t))
            }
        })
    }
}

impl super::kinds::Probe {
    /// The service address a tunnelled TCP check sends to inside its tunnel.
    pub fn tunnel_vip(&self) -> Option<IpAddr> {
        match self {
            Self::Tcp(TcpCheck { tunnel: Some(t) }) => Some(t.vip),
            _ => None,
        }
    }
}
