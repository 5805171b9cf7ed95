//! The TCP check: a SYN, answered by a SYN+ACK (healthy) or a RST or an ICMP error (not),
//! crafted and matched by the kernel engine. Its one choice is the road: to the endpoint's
//! address, or through the data path's own tunnel (`tunnel`, `tunnel_vip`) to the service
//! address the endpoint answers for, the way the load balancer forwards client flows to it.
use std::{sync::Arc, time::Duration};

use serde::Serialize;

pub use super::tunnel::TunnelTo;
use super::{
    tunnel::{self, TunnelError},
    CheckKind, EndpointCheck, ProbeKind,
};
use crate::{
    engine::L4Proto,
    rules::{Dialect, Protocol},
    schema::{
        keys::Key,
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

impl CheckKind for Tcp {
    type Settings = TcpCheck;
    type Shared = ();
    type Error = TunnelError;

    /// The road's keys are `tunnel::KEYS`, shared with plain HTTP.
    const KEYS: &'static [Key] = &[];

    fn read(r: &mut Reader<'_>, t: &Table<'_, '_>, _d: Dialect, _p: Protocol) -> Option<TcpCheck> {
        tunnel::read(r, t).map(|tunnel| TcpCheck { tunnel })
    }

    fn protocol(_s: &TcpCheck) -> Protocol {
        Protocol::Tcp
    }

    fn identity(s: &TcpCheck, _endpoint: &EndpointCheck<'_>, out: &mut String) {
        tunnel::identity(s.tunnel.as_ref(), out);
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
                tunnel::engine_tunnel(t, endpoint.target).map_err(TunnelError)?;
                ProbeKind::L4Tunnel(Arc::new(*t))
            }
        })
    }
}
