//! The TCP check: a SYN, answered by a SYN+ACK (healthy) or a RST or an ICMP error (not),
//! crafted and matched by the kernel engine. It has no keys of its own and nothing to prepare
//! beyond the engine's protocol.
use std::time::Duration;

use serde::Serialize;

use super::{CheckKind, EndpointCheck, ProbeKind};
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

/// A TCP check asks nothing beyond its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TcpCheck;

impl CheckKind for Tcp {
    type Settings = TcpCheck;
    type Shared = ();
    type Error = std::convert::Infallible;

    const KEYS: &'static [Key] = &[];

    fn read(_r: &mut Reader<'_>, _t: &Table<'_, '_>, _d: Dialect, _p: Protocol) -> Option<TcpCheck> {
        Some(TcpCheck)
    }

    fn protocol(_s: &TcpCheck) -> Protocol {
        Protocol::Tcp
    }

    fn identity(_s: &TcpCheck, _endpoint: &EndpointCheck<'_>, _out: &mut String) {}

    fn prepare(
        _s: &TcpCheck,
        _endpoint: &EndpointCheck<'_>,
        _timeout: Duration,
        _shared: &mut (),
    ) -> Result<ProbeKind, Self::Error> {
        Ok(ProbeKind::L4(L4Proto::Tcp))
    }
}
