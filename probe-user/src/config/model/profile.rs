//! `[[profile]]`: a profile, where its endpoints come from, its discovery.
use std::{net::SocketAddr, time::Duration};

use serde::Serialize;

use super::*;

/// `[[profile]]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Profile {
    pub name: String,
    pub enabled: bool,
    pub dialect: Dialect,
    pub routing: Routing,
    pub health: HealthCheck,
    pub endpoints: Vec<Endpoint>,
    /// Endpoints that are other profiles (`profile = "NAME"`), in configuration order after
    /// the plain ones: their health and addresses come from that child profile (SPEC 8).
    pub nested: Vec<NestedEndpoint>,
    /// `dns_name`: the name answered under `[dns].zone`, relative to it, lower case; None means
    /// the profile's name.
    pub dns_name: Option<String>,
    /// `dns_ttl`: the TTL of this profile's answers; None means `[dns].ttl`.
    pub dns_ttl: Option<u32>,
    /// `aggregate`: how the verdicts of the nodes that probe an endpoint make its health, with
    /// `[cluster]` (SPEC 9); "50%" by default.
    pub aggregate: crate::cluster::aggregate::Rule,
    /// `endpoints_from`: whether the file lists the endpoints or the API owns them.
    pub endpoints_from: EndpointSource,
    /// `slow_start`: how long an endpoint that starts to take traffic again takes to reach its
    /// whole weight in the data-path sinks (`status::ramp`); zero is off.
    pub slow_start: std::time::Duration,
    /// `[profile.discovery]`: with `endpoints_from = "dns"` (and only then), the name whose
    /// records are its endpoints.
    pub discovery: Option<Discovery>,
    /// `[profile.passive]`: ejection on what the node's forwarded handshakes meet.
    pub passive: Option<Passive>,
}

/// `[profile.passive]` (`crate::passive` applies it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Passive {
    /// The node's interfaces toward the backends (resolved: `[source].interfaces` when unset).
    pub interfaces: Vec<String>,
    /// Eject after this many failed handshakes in a row.
    pub consecutive: Option<u32>,
    /// Eject on a share of failures over a window.
    pub ratio: Option<FailureRatio>,
    /// A handshake not answered within this failed.
    pub timeout: Duration,
    /// The most of the profile's endpoints passive detection may eject at once, in percent.
    pub max_ejection_percent: u8,
}

/// `failure_ratio`, `min_attempts` and `window` of `[profile.passive]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FailureRatio {
    pub percent: u8,
    pub min_attempts: u32,
    pub window: Duration,
}

/// `[profile.discovery]`: a name whose records are a profile's endpoints, the resolvers that
/// answer for it, and how often it is asked again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Discovery {
    /// The name asked: absolute, in lower case, with its final dot.
    pub name: String,
    pub records: DiscoveryRecords,
    /// A and AAAA: the endpoints' port (SRV records carry their own).
    pub port: Option<u16>,
    /// Asked in turn until one answers.
    pub resolvers: Vec<SocketAddr>,
    /// The records' TTL, bounded by these, says when the name is asked again.
    pub min_ttl: Duration,
    pub max_ttl: Duration,
    /// How long one resolver has to answer.
    pub timeout: Duration,
}

/// Which records a discovery asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DiscoveryRecords {
    A,
    Aaaa,
    /// Both families: an A and an AAAA question.
    Both,
    /// SRV records: each target's addresses, with its port, weight and priority.
    Srv,
}

impl DiscoveryRecords {
    pub const NAMES: [&'static str; 4] = ["A", "AAAA", "A+AAAA", "SRV"];

    const ALL: [Self; 4] = [Self::A, Self::Aaaa, Self::Both, Self::Srv];

    /// As the configuration writes it (`NAMES`).
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// Any case.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name().eq_ignore_ascii_case(s))
    }
}

/// Where a profile's endpoints come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EndpointSource {
    /// Its `[[profile.endpoint]]` tables.
    #[default]
    File,
    /// The fleet API (`POST /v1/profiles/NAME/endpoints`), kept in the fleet journal beside
    /// the state file; the file lists none.
    Api,
    /// DNS records (`[profile.discovery]`), applied as fleet batches and kept in the fleet
    /// journal as the API's are; the file lists none, and the API changes none.
    Dns,
}

impl EndpointSource {
    pub const NAMES: [&'static str; 3] = ["file", "api", "dns"];

    pub fn name(self) -> &'static str {
        match self {
            EndpointSource::File => "file",
            EndpointSource::Api => "api",
            EndpointSource::Dns => "dns",
        }
    }

    /// Its endpoints come at run time, as fleet batches kept in the fleet journal: the API's
    /// and discovery's, not the file's.
    pub fn at_run_time(self) -> bool {
        self != EndpointSource::File
    }
}

impl Profile {
    pub fn thresholds(&self) -> Thresholds {
        self.health.thresholds
    }

    /// `slow_start` in nanoseconds: 0 when off.
    pub fn slow_start_ns(&self) -> u64 {
        u64::try_from(self.slow_start.as_nanos()).unwrap_or(u64::MAX)
    }

    /// A copy of everything but its endpoints: a profile's settings, which a reload compares
    /// to tell whether the endpoints that stay the same can stay untouched.
    pub fn settings(&self) -> Profile {
        let Profile {
            name,
            enabled,
            dialect,
            routing,
            health,
            endpoints: _,
            nested,
            dns_name,
            dns_ttl,
            aggregate,
            endpoints_from,
            slow_start,
            discovery,
            passive,
        } = self;
        Profile {
            name: name.clone(),
            enabled: *enabled,
            dialect: *dialect,
            routing: *routing,
            health: health.clone(),
            endpoints: Vec::new(),
            nested: nested.clone(),
            dns_name: dns_name.clone(),
            dns_ttl: *dns_ttl,
            aggregate: *aggregate,
            endpoints_from: *endpoints_from,
            slow_start: *slow_start,
            discovery: discovery.clone(),
            passive: passive.clone(),
        }
    }
}
