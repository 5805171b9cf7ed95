//! Probe kinds that run in userspace. The L4 probes live in the kernel engine; HTTP(S) needs
//! a real TCP stack and a TLS library, and UDP request/response needs the reply's content.
//!
//! Every check that runs as a task on the L7 workers is a `TaskProbe`: the runner hands it a
//! target and a budget and takes its `ProbeReport`, whatever its kind. The state the probes
//! of a kind share (a connection pool, a TLS session cache, a bound on sockets) is one field
//! of `Probers`, made once per runner.
pub mod agent;
pub mod http;
pub mod kinds;
pub mod tcp;
pub mod tunnel;
pub mod udp;

use std::{fmt, future::Future, net::SocketAddr, pin::Pin, sync::Arc, time::Duration};

use serde::Serialize;

use crate::{
    engine::{L4Outcome, L4Proto},
    rules::{Dialect, Header, Protocol},
    schema::{
        keys::Key,
        read::{Reader, Table},
    },
};

pub use kinds::{KindId, Probe};

/// How a check is sent: by the kernel engine, or as a task of its kind.
#[derive(Clone, Debug)]
pub enum ProbeKind {
    /// SYN or one UDP datagram through the L4 engine.
    L4(L4Proto),
    /// A TCP SYN through the data path's tunnel to the service address (`tcp::TunnelTo`), the
    /// endpoint's address the outer destination; through the L4 engine.
    L4Tunnel(Arc<tcp::TunnelTo>),
    /// A probe that runs as a task (HTTP(S), gRPC, UDP request/response, ...).
    Task(Arc<dyn TaskProbe>),
}

/// What an endpoint brings to its profile's check besides where it is.
#[derive(Clone, Copy, Debug)]
pub struct EndpointCheck<'a> {
    pub target: SocketAddr,
    /// Headers of its own (tm's HTTP checks; gRPC metadata).
    pub headers: &'a [Header],
    /// Check keys of its own (the HTTP kind's TLS keys and gRPC service).
    pub own: Option<&'a http::config::CheckOverride>,
}

/// A probe kind: what `[profile.health]` says for its protocols, read, named in the check's
/// identity and prepared for an endpoint. Each kind's folder implements it for a type of its
/// own; `kinds.rs` lists the kinds, one line each, and makes `Probe`, `KindId` and every
/// dispatch from that list, so nothing else matches on kinds.
pub(crate) trait CheckKind {
    /// Its settings, as `Probe` holds them.
    type Settings: fmt::Debug + Clone + PartialEq + Serialize;
    /// What the endpoints of one profile share while their checks are prepared (one
    /// prepared check for the endpoints with nothing of their own, a TLS client).
    type Shared: Default;
    /// Why a check the reader took cannot be prepared (a prober-only limit).
    type Error: std::error::Error + Send + Sync + 'static;

    /// Its keys in `[profile.health]`, each limited to its protocols (`Key::protocols`): the
    /// reader refuses them on every other protocol from that alone.
    const KEYS: &'static [Key];

    /// Its keys in `[[profile.endpoint]]` (an endpoint's own part of the check), limited the
    /// same way.
    const ENDPOINT_KEYS: &'static [Key] = &[];

    /// Whether dialect `d` offers protocol `p` (one of the kind's).
    fn offered(_d: Dialect, _p: Protocol) -> bool {
        true
    }

    /// The port probed when neither the endpoint nor the profile names one.
    fn default_port(_p: Protocol) -> Option<u16> {
        None
    }

    /// Its settings from the health table `t` for protocol `p`; None after a problem
    /// (reported on `r`).
    fn read(r: &mut Reader<'_>, t: &Table<'_, '_>, d: Dialect, p: Protocol) -> Option<Self::Settings>;

    /// The protocol these settings speak.
    fn protocol(s: &Self::Settings) -> Protocol;

    /// What a probe sends and expects, field by field (`key_field`), for the check's
    /// identity. Timing and the target are written by the caller.
    fn identity(s: &Self::Settings, endpoint: &EndpointCheck<'_>, out: &mut String);

    /// The same, as releases before the `k2` identity wrote it; a kind added since has none.
    fn legacy(_s: &Self::Settings, _endpoint: &EndpointCheck<'_>) -> String {
        String::new()
    }

    /// The check `endpoint` runs, with `timeout`.
    fn prepare(
        s: &Self::Settings,
        endpoint: &EndpointCheck<'_>,
        timeout: Duration,
        shared: &mut Self::Shared,
    ) -> Result<ProbeKind, Self::Error>;
}

/// The verdict of one probe, whatever its kind.
#[derive(Clone, Debug)]
pub struct ProbeReport {
    pub healthy: bool,
    pub outcome: crate::outcome::Outcome,
    /// Reply round-trip time, or how long the probe waited.
    pub elapsed: Duration,
    pub reason: Arc<str>,
    /// TLS checks: when the server's certificate expires (Unix seconds), as the probe saw it.
    pub cert_not_after: Option<i64>,
}

/// One probe in flight.
pub type Probing<'a> = Pin<Box<dyn Future<Output = ProbeReport> + Send + 'a>>;

/// A prepared check that runs as a task: shared by every probe of the check (and by the
/// checks of endpoints that have nothing of their own).
pub trait TaskProbe: Send + Sync + fmt::Debug {
    /// One probe of `target`, within `budget` when that is shorter than the check's timeout.
    fn run<'a>(&'a self, probers: &'a Probers, target: SocketAddr, budget: Option<Duration>) -> Probing<'a>;

    /// How long one probe may take.
    fn timeout(&self) -> Duration;

    /// Whether a probe only waits on a datagram socket (cheap: its prober bounds how many run)
    /// rather than holding a connection (those share the runner's lanes).
    fn datagram(&self) -> bool {
        false
    }

    /// When the kernel can run the check whole: the request probe_rx sends to `target`.
    fn kernel_request(&self, _target: SocketAddr) -> Option<Arc<[u8]>> {
        None
    }

    /// The data path's tunnel the check takes to the service address, if it does: it then
    /// runs in the kernel only (`kernel_request` to the service address), never in a socket.
    fn tunnel(&self) -> Option<&tunnel::TunnelTo> {
        None
    }

    /// The report of a probe the kernel ran (only for a check with a `kernel_request`).
    fn kernel_report(&self, outcome: L4Outcome, elapsed: Duration) -> ProbeReport {
        ProbeReport {
            healthy: false,
            outcome: crate::outcome::Outcome::LocalError,
            elapsed,
            reason: Arc::from(format!("the kernel ran a probe this check cannot take ({outcome})")),
            cert_not_after: None,
        }
    }

    /// The check as its concrete type (the unit tests look inside).
    #[cfg(test)]
    fn as_any(&self) -> &dyn std::any::Any;
}

/// One field of a check's identity text (`daemon::checks::identity`): `name=LEN:VALUE;`, so
/// that no value can run into the next. A kind writes what it sends and expects with it.
pub fn key_field(out: &mut String, name: &str, value: &str) {
    use std::fmt::Write;
    let _ = write!(out, "{name}={}:{value};", value.len());
}

/// What the probes of each task kind share, one per runner.
#[derive(Default)]
pub struct Probers {
    /// HTTP(S) and gRPC: the TLS client of unverified checks and its session cache.
    pub http: http::HttpProber,
    /// UDP request/response: the bound on sockets in flight.
    pub udp: udp::UdpProber,
}
