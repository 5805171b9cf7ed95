//! The UDP check's settings, in its own words: its keys (their entries in the reference), how
//! they are read, and what they add to a check's identity. Plain mode (no `response`) runs on
//! the kernel engine; request/response mode is `UdpRequest`, a task.
use std::{sync::Arc, time::Duration};

use serde::Serialize;

use crate::{
    engine::L4Proto,
    probe::{
        key_field,
        tunnel::{self, TunnelError, TunnelTo},
        CheckKind, EndpointCheck, ProbeKind,
    },
    rules::{limits::MAX_UDP_PAYLOAD, Dialect, Protocol},
    schema::{
        keys::{
            Allowed::Bytes,
            Key,
            Reload::Reask,
            Type,
            Unset::{Text, Value},
        },
        read::{Reader, Table},
    },
};

/// UDP probe payloads. Without a response string, silence means healthy (lb semantics).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UdpCheck {
    pub request: String,
    pub response: Option<String>,
    /// Request/response through the data path's tunnel to the service address.
    pub tunnel: Option<TunnelTo>,
}

/// Its keys in `[profile.health]`.
pub const KEYS: &[Key] = &[
    Key::new(
        "request",
        Type::String,
        Value("\"\""),
        Bytes(0, MAX_UDP_PAYLOAD),
        Reask,
        "The datagram sent. Without response, silence within the timeout is healthy and an ICMP \
         error unhealthy; a backend that rate-limits its ICMP errors can then look healthy on a \
         closed port.",
    )
    .protocols(&[Protocol::Udp], ""),
    Key::new(
        "response",
        Type::String,
        Text("none"),
        Bytes(0, MAX_UDP_PAYLOAD),
        Reask,
        "A string the reply must contain. With it only such a reply within the timeout is healthy, \
         and silence fails.",
    )
    .protocols(&[Protocol::Udp], ""),
];

/// The UDP kind (`probe::kinds`).
pub struct Udp;

impl CheckKind for Udp {
    type Settings = UdpCheck;
    type Shared = ();
    type Error = TunnelError;

    const KEYS: &'static [Key] = KEYS;

    /// Only lb's seeds probe UDP.
    fn offered(d: Dialect, _p: Protocol) -> bool {
        d == Dialect::Lb
    }

    fn read(r: &mut Reader<'_>, t: &Table<'_, '_>, _d: Dialect, _p: Protocol) -> Option<UdpCheck> {
        read(r, t)
    }

    fn protocol(_s: &UdpCheck) -> Protocol {
        Protocol::Udp
    }

    fn identity(s: &UdpCheck, _endpoint: &EndpointCheck<'_>, out: &mut String) {
        s.identity(out);
    }

    fn legacy(s: &UdpCheck, _endpoint: &EndpointCheck<'_>) -> String {
        match &s.response {
            Some(r) => format!(" req={:?} resp={r:?}", s.request),
            None => format!(" req={:?}", s.request),
        }
    }

    fn prepare(
        s: &UdpCheck,
        endpoint: &EndpointCheck<'_>,
        timeout: Duration,
        _shared: &mut (),
    ) -> Result<ProbeKind, Self::Error> {
        let payload: Arc<[u8]> = Arc::from(s.request.as_bytes());
        if let Some(t) = &s.tunnel {
            tunnel::engine_tunnel(t, endpoint.target).map_err(TunnelError)?;
        }
        Ok(match &s.response {
            // Request/response mode: the reply's content decides, so a socket reads it.
            Some(expect) => ProbeKind::Task(Arc::new(super::UdpRequest {
                target: endpoint.target,
                send: payload,
                expect: Arc::from(expect.as_bytes()),
                timeout,
                source: None,
                tunnel: s.tunnel,
            })),
            None => ProbeKind::L4(L4Proto::Udp { payload }),
        })
    }
}

/// Reads its keys from the health table `t`; None after a problem (reported).
pub(crate) fn read(r: &mut Reader<'_>, t: &Table<'_, '_>) -> Option<UdpCheck> {
    let mut payload = |key: &str| {
        let item = r.string(t, key)?;
        if item.v.len() > MAX_UDP_PAYLOAD {
            r.bad(&item, format!("at most {MAX_UDP_PAYLOAD} bytes"));
            return Some(Err(()));
        }
        Some(Ok(item.v))
    };
    let request = payload("request").transpose().ok()?;
    let response = payload("response").transpose().ok()?;
    let tunnel = tunnel::read(r, t)?;
    if tunnel.is_some() {
        // Read again for where to point: read() took them without complaint.
        if response.is_none() {
            let item = r.string(t, "tunnel")?;
            r.bad(
                &item,
                "a plain UDP probe that the tunnel drops reads as silence, which is healthy: \
                 through a tunnel a UDP check needs response (request/response)",
            );
            return None;
        }
        if let Some(item) = r.int(t, "tunnel_mtu") {
            r.bad(
                &item,
                "tunnel_mtu pads the SYN of TCP and HTTP checks; a UDP request is sent as it is",
            );
            return None;
        }
    }
    Some(UdpCheck {
        request: request.unwrap_or_default(),
        response,
        tunnel,
    })
}

impl UdpCheck {
    /// What it sends and expects, for the check's identity.
    pub fn identity(&self, out: &mut String) {
        key_field(out, "request", &self.request);
        if let Some(r) = &self.response {
            key_field(out, "response", r);
        }
        tunnel::identity(self.tunnel.as_ref(), out);
    }
}
