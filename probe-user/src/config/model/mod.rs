//! The resolved configuration: every default filled in, every value typed. Nothing here can be
//! out of range, because only `validate` builds it.

use serde::Serialize;

mod cluster;
mod daemon;
mod dns;
mod endpoint;
mod health;
mod profile;
mod sink;
mod source;

pub use cluster::*;
pub use daemon::*;
pub use dns::*;
pub use endpoint::*;
pub use health::*;
pub use profile::*;
pub use sink::*;
pub use source::*;

pub use crate::rules::{Dialect, Header, HostName, HttpPath, Method, Protocol, StatusRange, Thresholds};
pub use crate::status::{AdminState, Routing};

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    pub daemon: Daemon,
    pub source: Source,
    pub profiles: Vec<Profile>,
    /// `[[sink]]`: what the node's data path is told, per profile.
    pub sinks: Vec<Sink>,
    /// `[dns]`: the authoritative DNS server; None when the file has no `[dns]`.
    pub dns: Option<Dns>,
    /// `[cluster]`: this node shares verdicts with others; None: it probes alone.
    pub cluster: Option<Cluster>,
}

impl Config {
    pub fn endpoint_count(&self) -> usize {
        self.profiles.iter().map(|p| p.endpoints.len()).sum()
    }

    pub fn profile(&self, name: &str) -> Option<&Profile> {
        self.profiles.iter().find(|p| p.name == name)
    }

    /// A copy of everything but the profiles: the daemon's own settings, cheap to copy at any
    /// fleet size.
    pub fn without_profiles(&self) -> Config {
        Config {
            daemon: self.daemon.clone(),
            source: self.source.clone(),
            profiles: Vec::new(),
            sinks: self.sinks.clone(),
            dns: self.dns.clone(),
            cluster: self.cluster.clone(),
        }
    }
}
