//! `[dns]`: the authoritative server, its name servers, limits and regions.
use std::{
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    time::Duration,
};

use ipnet::IpNet;
use serde::Serialize;

use super::*;

/// `[dns]`: probed answers for `zone` as its authoritative server, one name per profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dns {
    /// UDP and TCP on each.
    pub listen: Vec<SocketAddr>,
    /// Absolute, lower case, with the final dot: `tm.example.`.
    pub zone: String,
    /// Seconds; a profile's `dns_ttl` overrides it for that profile's answers.
    pub ttl: u32,
    /// Seconds resolvers may cache NXDOMAIN and NODATA (the SOA's minimum field).
    pub negative_ttl: u32,
    /// The zone's name servers (its NS records), in the order written; `ns1.<zone>` at the
    /// specific `listen` addresses when unset.
    pub nameservers: Vec<NameServer>,
    /// Response rate limiting of UDP answers.
    pub rate_limit: DnsRateLimit,
    /// What TCP clients may hold.
    pub tcp: DnsTcp,
    /// `[[dns.region]]`: source subnets, countries and continents per region, for geographic
    /// routing.
    pub regions: Vec<DnsRegion>,
    /// A MaxMind-format database (GeoLite2/GeoIP2 Country or City) that gives a source's
    /// country and continent, for the regions that name them.
    pub geoip_db: Option<PathBuf>,
}

impl Dns {
    pub const DEFAULT_TTL: u32 = 30;
    /// At most a day: a health-driven answer cached longer defeats failover.
    pub const MAX_TTL: u32 = 86_400;

    /// The settings a reload can only apply with a restart, by their config names.
    pub fn changed_keys<'a>(&'a self, new: &'a Dns) -> impl Iterator<Item = &'static str> + 'a {
        [("dns.listen", self.listen != new.listen)]
            .into_iter()
            .filter_map(|(k, changed)| changed.then_some(k))
    }

    /// The absolute name `profile` answers to: its `dns_name` (else its name, lower case)
    /// under the zone.
    pub fn name_of(&self, profile: &Profile) -> String {
        let label = profile
            .dns_name
            .clone()
            .unwrap_or_else(|| profile.name.to_ascii_lowercase());
        format!("{label}.{}", self.zone)
    }
}

/// `[[dns.nameserver]]`: one NS record of the zone's apex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NameServer {
    /// Absolute, lower case.
    pub name: String,
    /// Its A and AAAA records when the name is inside the zone (the server answers them, and
    /// adds them to NS answers as glue); empty for a name outside it, whose own zone has them.
    pub addresses: Vec<IpAddr>,
}

/// `[dns.rate_limit]`: response rate limiting (RRL) of UDP answers, per source prefix and
/// answer, against reflection: a source (spoofed or not) gets at most `responses_per_second`
/// copies of one answer; of those dropped, every `slip`-th goes out truncated instead (TC set,
/// no records), so a real client retries over TCP, which is not limited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DnsRateLimit {
    /// 0 turns rate limiting off.
    pub responses_per_second: u32,
    /// 0: drop every answer over the limit; 1: truncate every one; n: truncate one in n.
    pub slip: u32,
    /// Sources are grouped by these prefixes.
    pub ipv4_prefix: u8,
    pub ipv6_prefix: u8,
    /// Sources never limited (monitoring, known resolvers).
    pub exempt: Vec<IpNet>,
}

impl Default for DnsRateLimit {
    fn default() -> Self {
        DnsRateLimit {
            responses_per_second: 20,
            slip: 2,
            ipv4_prefix: 24,
            ipv6_prefix: 56,
            exempt: Vec::new(),
        }
    }
}

/// `[dns.tcp]`: the bounds on TCP clients (RFC 7766 section 6.2): the descriptors DNS may hold
/// are `max_clients`, apart from those probes, sinks and state use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DnsTcp {
    /// Connections open at once; one over it is closed as soon as it is accepted.
    pub max_clients: u32,
    /// Connections open at once from one source prefix (`rate_limit`'s prefixes).
    pub max_clients_per_prefix: u32,
    /// A connection with no complete query for this long is closed (bytes of an unfinished
    /// query do not count: a trickle cannot keep it).
    pub idle_timeout: Duration,
    /// A connection is closed this long after it opened, busy or not (after the answers
    /// already asked for).
    pub max_lifetime: Duration,
}

impl Default for DnsTcp {
    fn default() -> Self {
        DnsTcp {
            max_clients: 1024,
            max_clients_per_prefix: 64,
            idle_timeout: Duration::from_secs(5),
            max_lifetime: Duration::from_secs(120),
        }
    }
}

impl DnsTcp {
    /// The most `max_clients` may be: a quarter of the service's LimitNOFILE (65,536).
    pub const MAX_CLIENTS: u32 = 16_384;
}

/// `[[dns.region]]`: the sources that count as one region: by subnet first (the most specific
/// wins), else by the country, else the continent `geoip_db` gives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DnsRegion {
    pub name: String,
    pub subnets: Vec<IpNet>,
    /// ISO 3166-1 alpha-2 codes, upper case.
    pub countries: Vec<String>,
    /// AF, AN, AS, EU, NA, OC, SA.
    pub continents: Vec<String>,
}
