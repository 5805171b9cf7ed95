//! Probe kinds that run in userspace. The L4 probes live in the kernel engine; HTTP(S) needs
//! a real TCP stack and a TLS library, and UDP request/response needs the reply's content.
//!
//! Every check that runs as a task on the L7 workers is a `TaskProbe`: the runner hands it a
//! target and a budget and takes its `ProbeReport`, whatever its kind. The state the probes
//! of a kind share (a connection pool, a TLS session cache, a bound on sockets) is one field
//! of `Probers`, made once per runner.
pub mod agent;
pub mod http;
pub mod udp;

use std::{fmt, future::Future, net::SocketAddr, pin::Pin, sync::Arc, time::Duration};

use crate::engine::L4Outcome;

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
