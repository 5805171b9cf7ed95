//! `[profile.health]`: what a probe sends and expects, and when.
use std::time::Duration;

use serde::Serialize;

pub use crate::probe::udp::UdpCheck;

use super::*;

/// The health check of a profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HealthCheck {
    pub probe: Probe,
    /// Port from the profile; each endpoint's resolved port is in `Endpoint::port`.
    pub port: Option<u16>,
    pub interval: Duration,
    pub timeout: Duration,
    pub thresholds: Thresholds,
    /// Optional pacing beyond the plain interval (HAProxy fastinter/downinter, jitter).
    /// When all of it is unset, the SPEC windows hold exactly.
    pub pacing: Pacing,
}

/// Intervals and jitter that change when probes go out, all off by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Pacing {
    /// Gap between probes while a state change is pending (a run toward a transition).
    pub fast_interval: Option<Duration>,
    /// Gap between probes while the target is settled Unhealthy.
    pub down_interval: Option<Duration>,
    /// Up to this much random extra delay before a target's very first probe.
    pub initial_jitter: Duration,
    /// Each gap is lengthened by up to this percentage of itself, drawn at random.
    pub jitter_percent: u8,
}

impl HealthCheck {
    pub fn protocol(&self) -> Protocol {
        match &self.probe {
            Probe::Tcp => Protocol::Tcp,
            Probe::Udp(_) => Protocol::Udp,
            Probe::Http(h) => match (h.grpc.is_some(), h.tls) {
                (false, false) => Protocol::Http,
                (false, true) => Protocol::Https,
                (true, false) => Protocol::Grpc,
                (true, true) => Protocol::Grpcs,
            },
        }
    }

    pub fn http(&self) -> Option<&HttpCheck> {
        match &self.probe {
            Probe::Http(h) => Some(h),
            _ => None,
        }
    }
}

/// What a probe sends and what counts as success.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Probe {
    Tcp,
    Udp(UdpCheck),
    Http(Box<HttpCheck>),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HttpCheck {
    pub tls: bool,
    pub method: Method,
    pub path: HttpPath,
    /// Host header from `host`; None means the endpoint's address, unless a Host header is set.
    pub host: Option<HostName>,
    pub headers: Vec<Header>,
    pub healthy_status: Vec<StatusRange>,
    pub body_match: Option<String>,
    /// HTTPS: how the server's certificate is checked.
    pub tls_verify: TlsVerifySetting,
    /// HTTPS: the name sent as SNI and, with `tls_verify = "ca"`, verified; None: the Host
    /// (`host`, or a Host header), else no SNI and the address.
    pub server_name: Option<HostName>,
    /// HTTPS: the client certificate (chain) and key files presented to servers that ask
    /// (mTLS backends).
    pub client_cert: Option<ClientCertFiles>,
    /// HTTPS: `min_version = "1.3"`: TLS 1.3 only (else 1.2 and 1.3).
    pub tls13_only: bool,
    /// Over TLS: a full handshake with each target at least this often, in seconds
    /// (`tls_reverify`); a session is resumed only within it.
    pub tls_reverify_s: u32,
    /// Over TLS: a notice when the server's certificate expires within this many days (0:
    /// never). Not part of the check: it changes no probe and no verdict.
    pub cert_warn_days: u16,
    /// `protocol = "grpc"` or `"grpcs"`: the service whose health is asked (`""`: the
    /// server's own). The call is fixed (`grpc.health.v1.Health/Check`, SERVING is healthy),
    /// so method, path, healthy_status and body_match keep their defaults and are not used;
    /// headers are sent as metadata.
    pub grpc: Option<String>,
}

/// `client_cert` and `client_key`: PEM files, read when the configuration is loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClientCertFiles {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
}

/// `tls_verify`: what an HTTPS check requires of the server's certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub enum TlsVerifySetting {
    /// One must be presented; chain, name and dates are not checked (SPEC 1, the tm's rule).
    #[default]
    Presence,
    /// It must chain to a root of `ca_file` (None: the system's roots), match the server name
    /// and be within its dates.
    Ca { ca_file: Option<std::path::PathBuf> },
}

impl HttpCheck {
    /// Whether `code` is in the healthy set (the config tests' shorthand).
    #[cfg(test)]
    pub fn status_ok(&self, code: u16) -> bool {
        self.healthy_status.iter().any(|r| r.contains(code))
    }
}
