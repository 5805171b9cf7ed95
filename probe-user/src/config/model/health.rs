//! `[profile.health]`: what a probe sends and expects, and when.
use std::time::Duration;

use serde::Serialize;

pub use crate::probe::{
    http::config::{CheckOverride, ClientCertFiles, HttpSettings, TlsVerifySetting},
    tcp::TcpCheck,
    udp::UdpCheck,
    Probe,
};

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
    /// The agent check beside it (`probe::agent`), not part of the check's identity.
    pub agent: Option<crate::probe::agent::AgentSettings>,
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
        self.probe.protocol()
    }

    pub fn http(&self) -> Option<&HttpSettings> {
        match &self.probe {
            Probe::Http(h) => Some(h),
            _ => None,
        }
    }
}
