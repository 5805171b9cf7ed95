//! The UDP check's settings, in its own words: its keys (their entries in the reference), how
//! they are read, and what they add to a check's identity. Plain mode (no `response`) runs on
//! the kernel engine; request/response mode is `UdpRequest`, a task.
use serde::Serialize;

use crate::{
    probe::key_field,
    rules::{limits::MAX_UDP_PAYLOAD, Protocol},
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
    Some(UdpCheck {
        request: request.unwrap_or_default(),
        response,
    })
}

impl UdpCheck {
    /// What it sends and expects, for the check's identity.
    pub fn identity(&self, out: &mut String) {
        key_field(out, "request", &self.request);
        if let Some(r) = &self.response {
            key_field(out, "response", r);
        }
    }
}
