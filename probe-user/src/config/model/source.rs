//! `[source]`: where probes leave from.
use std::net::IpAddr;

use serde::Serialize;

/// `[source]`: where probes leave from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source {
    /// Interfaces to send on; empty means the route decides.
    pub interfaces: Vec<String>,
    /// Source addresses; empty means the route's preferred source.
    pub addresses: Vec<IpAddr>,
    pub ports: PortRange,
    /// How probe_rx attaches to the interface (XDP hook).
    pub xdp_mode: crate::kernel::AttachMode,
    /// Where the reply matcher runs: XDP, or tcx ingress beside another XDP owner.
    pub hook: crate::kernel::Hook,
}

impl Source {
    pub fn ipv4(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.addresses.iter().copied().filter(IpAddr::is_ipv4)
    }

    pub fn ipv6(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.addresses.iter().copied().filter(IpAddr::is_ipv6)
    }
}

/// Inclusive range of probe source ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    pub fn len(&self) -> u32 {
        u32::from(self.last) - u32::from(self.first) + 1
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn contains(&self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }
}
