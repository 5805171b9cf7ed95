//! Which region a source address is in, for geographic routing: the `[[dns.region]]` subnets,
//! most specific prefix first. The DNS server and `GET /v1/select` both ask this table, so
//! they route a source alike. Pure.
use std::{net::IpAddr, sync::Arc};

use ipnet::IpNet;

use crate::config::DnsRegion;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Regions {
    /// Longest prefix first, so the first match is the most specific.
    nets: Vec<(IpNet, Arc<str>)>,
}

impl Regions {
    pub fn new(regions: &[DnsRegion]) -> Self {
        let mut nets: Vec<(IpNet, Arc<str>)> = regions
            .iter()
            .flat_map(|r| {
                let name: Arc<str> = Arc::from(r.name.as_str());
                r.subnets.iter().map(move |n| (*n, name.clone()))
            })
            .collect();
        nets.sort_by_key(|(n, _)| std::cmp::Reverse(n.prefix_len()));
        Regions { nets }
    }

    /// The region holding `source`; None sends the query to the `world` endpoint.
    pub fn region_of(&self, source: IpAddr) -> Option<&str> {
        let source = canonical(source);
        self.nets
            .iter()
            .find(|(n, _)| n.contains(&source))
            .map(|(_, name)| &**name)
    }
}

/// An IPv4-mapped IPv6 source (a dual-stack socket's view of an IPv4 client) as the IPv4
/// address it is.
pub fn canonical(source: IpAddr) -> IpAddr {
    match source {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(source, IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(name: &str, nets: &[&str]) -> DnsRegion {
        DnsRegion {
            name: name.into(),
            subnets: nets.iter().map(|n| n.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn the_most_specific_subnet_decides() {
        let regions = Regions::new(&[
            region("eu", &["198.18.0.0/15", "2001:2::/48"]),
            region("eu-west", &["198.18.10.0/24"]),
        ]);
        let at = |s: &str| regions.region_of(s.parse().unwrap());
        assert_eq!(at("198.18.10.7"), Some("eu-west"));
        assert_eq!(at("198.19.1.1"), Some("eu"));
        assert_eq!(at("2001:2::9"), Some("eu"));
        assert_eq!(at("::ffff:198.18.10.7"), Some("eu-west"), "mapped IPv4");
        assert_eq!(at("192.0.2.1"), None);
        assert_eq!(Regions::default().region_of("198.18.10.7".parse().unwrap()), None);
    }
}
