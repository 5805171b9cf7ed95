//! The zone as the server answers it: each profile's routing, TTL and endpoints from the
//! configuration, each endpoint's status from the change stream (a snapshot, then every
//! change), and what a question gets from them. Pure: no sockets, no clock, no wire format.
use std::{collections::HashSet, net::IpAddr, sync::Arc, time::Duration};

use ipnet::IpNet;

use super::regions::{canonical, Regions};
use crate::{
    changes::{Change, Snapshot},
    config::{Config, Dns},
    hash::FastMap,
    status::{routing, Candidate, EndpointStatus, Family, ProfileStatus, Query, RandomSource, Routing},
};

/// The SOA's timers (seconds): conventional values; probed has no secondaries to drive.
const SOA_REFRESH: u32 = 3600;
const SOA_RETRY: u32 = 600;
const SOA_EXPIRE: u32 = 86_400;

/// What a question asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QType {
    A,
    Aaaa,
    Soa,
    Ns,
    /// ANY: what the name has (RFC 8482 allows less; the sets here are small).
    Any,
    /// Any other type: the name has none of it.
    Other,
}

/// Where the question comes from, as far as routing is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Client {
    /// The EDNS Client Subnet address when the query carries one with a non-zero prefix,
    /// else the address the query came from.
    pub address: IpAddr,
}

/// One question: the name absolute and in lower case.
#[derive(Debug, Clone, Copy)]
pub struct Question<'a> {
    pub name: &'a str,
    pub qtype: QType,
    pub client: Client,
}

/// The zone's SOA, as its fields go on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Soa {
    pub mname: String,
    pub rname: String,
    pub serial: u32,
    pub refresh: u32,
    pub retry: u32,
    pub expire: u32,
    /// The negative TTL (RFC 2308).
    pub minimum: u32,
}

/// What to answer. The wire layer adds the SOA to the authority section of every negative
/// answer (NXDOMAIN and NODATA), with the negative TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Not in the zone: probed is not authoritative for it.
    Refused,
    NxDomain {
        /// The answer depends on the client's location (ECS scope is the query's prefix).
        by_location: bool,
    },
    NoData {
        by_location: bool,
    },
    /// Addresses of the name, each with the owner's TTL.
    Addresses {
        ttl: u32,
        addresses: Vec<IpAddr>,
        by_location: bool,
    },
    /// The apex: its SOA and/or NS records, as the question asked.
    Apex {
        soa: bool,
        ns: bool,
    },
}

#[derive(Debug, Clone, PartialEq)]
struct ZoneEndpoint {
    name: Arc<str>,
    /// Unspecified for a nested endpoint, whose addresses come from `child`.
    address: IpAddr,
    /// A nested endpoint's child profile, by index.
    child: Option<usize>,
    priority: u32,
    weight: u32,
    subnets: Vec<IpNet>,
    region: Option<String>,
    /// As selection counts it: Disabled while the endpoint drains.
    status: EndpointStatus,
    rtt: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq)]
struct ZoneProfile {
    name: Arc<str>,
    enabled: bool,
    /// Its answers depend on the client's location: its method does, or a nested child's.
    by_location: bool,
    /// The same question gets the same answer until the zone changes: no location, no random
    /// pick (weighted), here or in a nested child.
    deterministic: bool,
    routing: Routing,
    ttl: u32,
    /// In configuration order: selection breaks ties by it.
    endpoints: Vec<ZoneEndpoint>,
    by_endpoint: FastMap<Arc<str>, usize>,
}

/// Everything the server answers from.
#[derive(Debug, Clone, PartialEq)]
pub struct Zone {
    origin: String,
    ttl: u32,
    soa: Soa,
    nameservers: Vec<String>,
    /// The addresses of the name servers inside the zone, by absolute name: the zone answers
    /// their A and AAAA questions, and adds them to NS answers.
    ns_addresses: FastMap<String, Vec<IpAddr>>,
    regions: Regions,
    /// How the server limits UDP answers and TCP clients: not the zone's content, but applied
    /// with it, so a reload changes both at once.
    rate_limit: crate::config::DnsRateLimit,
    tcp: crate::config::DnsTcp,
    profiles: Vec<ZoneProfile>,
    /// Absolute owner name -> profile.
    by_name: FastMap<String, usize>,
    by_profile: FastMap<Arc<str>, usize>,
    /// Names that exist only because a profile's name is below them (`eu.tm.example.` for
    /// `api.eu.tm.example.`): they answer NODATA, not NXDOMAIN (RFC 8020).
    empty_non_terminals: HashSet<String>,
    /// The stream's sequence number the statuses reflect.
    seq: u64,
}

impl Zone {
    /// The zone of `config` with the statuses of `snapshot`; `serial` numbers this version of
    /// it (the SOA's serial: seconds since the epoch when it was built, in practice).
    pub fn build(config: &Config, dns: &Dns, regions: Regions, snapshot: &Snapshot, serial: u32) -> Zone {
        let enabled: FastMap<&str, bool> = snapshot
            .profiles
            .iter()
            .map(|(name, status, _)| (&**name, *status != ProfileStatus::Disabled))
            .collect();
        let statuses: FastMap<(&str, &str), EndpointStatus> = snapshot
            .endpoints
            .iter()
            // What selection reads: out of rotation while draining (`status::counted`).
            .map(|(p, e, state)| ((&**p, &**e), crate::status::counted(state.admin, state.status)))
            .collect();
        let mut zone = Zone {
            origin: dns.zone.clone(),
            ttl: dns.ttl,
            soa: Soa {
                mname: dns.nameservers[0].name.clone(),
                rname: format!("hostmaster.{}", dns.zone),
                serial,
                refresh: SOA_REFRESH,
                retry: SOA_RETRY,
                expire: SOA_EXPIRE,
                minimum: dns.negative_ttl,
            },
            nameservers: dns.nameservers.iter().map(|ns| ns.name.clone()).collect(),
            ns_addresses: dns
                .nameservers
                .iter()
                .filter(|ns| !ns.addresses.is_empty())
                .map(|ns| (ns.name.clone(), ns.addresses.clone()))
                .collect(),
            regions,
            rate_limit: dns.rate_limit.clone(),
            tcp: dns.tcp.clone(),
            profiles: Vec::new(),
            by_name: FastMap::default(),
            by_profile: FastMap::default(),
            empty_non_terminals: HashSet::new(),
            seq: snapshot.seq,
        };
        let index: FastMap<&str, usize> = config
            .profiles
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.as_str(), i))
            .collect();
        let server_names: Vec<String> = zone.ns_addresses.keys().cloned().collect();
        for name in &server_names {
            zone.add_parents(name);
        }
        for p in &config.profiles {
            let name: Arc<str> = Arc::from(p.name.as_str());
            let status_of = |endpoint: &str| {
                statuses
                    .get(&(p.name.as_str(), endpoint))
                    .copied()
                    .unwrap_or(EndpointStatus::CheckingEndpoint)
            };
            let plain = p.endpoints.iter().map(|e| ZoneEndpoint {
                name: e.name.clone(),
                address: e.address,
                child: None,
                priority: e.priority,
                weight: e.weight,
                subnets: e.subnets().to_vec(),
                region: e.region().map(str::to_string),
                status: status_of(&e.name),
                rtt: None,
            });
            let nested = p.nested.iter().map(|n| ZoneEndpoint {
                name: Arc::from(n.name.as_str()),
                address: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                child: index.get(n.child.as_str()).copied(),
                priority: n.priority,
                weight: n.weight,
                subnets: n.subnets.clone(),
                region: n.region.clone(),
                status: status_of(&n.name),
                rtt: None,
            });
            let endpoints: Vec<ZoneEndpoint> = plain.chain(nested).collect();
            let owner = dns.name_of(p);
            zone.add_parents(&owner);
            let index = zone.profiles.len();
            zone.by_name.insert(owner, index);
            zone.by_profile.insert(name.clone(), index);
            zone.profiles.push(ZoneProfile {
                enabled: enabled.get(p.name.as_str()).copied().unwrap_or(p.enabled),
                by_location: p.routing.needs().location,
                deterministic: !(p.routing.needs().location || p.routing.needs().random),
                routing: p.routing,
                ttl: p.dns_ttl.unwrap_or(dns.ttl),
                by_endpoint: endpoints.iter().enumerate().map(|(i, e)| (e.name.clone(), i)).collect(),
                endpoints,
                name,
            });
        }
        // A profile's or name server's own name is never an empty non-terminal, even under
        // another's.
        let owners: Vec<String> = zone.by_name.keys().chain(&server_names).cloned().collect();
        for o in owners {
            zone.empty_non_terminals.remove(&o);
        }
        // A parent answers by location when any profile nested under it does.
        for _ in 0..zone.profiles.len() {
            let by_location: Vec<bool> = zone
                .profiles
                .iter()
                .map(|p| {
                    p.routing.needs().location
                        || p.endpoints
                            .iter()
                            .filter_map(|e| e.child)
                            .any(|c| zone.profiles[c].by_location)
                })
                .collect();
            let deterministic: Vec<bool> = zone
                .profiles
                .iter()
                .map(|p| {
                    p.deterministic
                        && p.endpoints
                            .iter()
                            .filter_map(|e| e.child)
                            .all(|c| zone.profiles[c].deterministic)
                })
                .collect();
            let moved = zone.profiles.iter().zip(&by_location).any(|(p, b)| p.by_location != *b)
                || zone
                    .profiles
                    .iter()
                    .zip(&deterministic)
                    .any(|(p, d)| p.deterministic != *d);
            for ((p, b), d) in zone.profiles.iter_mut().zip(by_location).zip(deterministic) {
                p.by_location = b;
                p.deterministic = d;
            }
            if !moved {
                break;
            }
        }
        zone
    }

    /// Records the names between `owner` and the apex as empty non-terminals.
    fn add_parents(&mut self, owner: &str) {
        let mut parent = owner;
        while let Some((_, rest)) = parent.split_once('.') {
            if rest.len() <= self.origin.len() {
                break;
            }
            self.empty_non_terminals.insert(rest.to_string());
            parent = rest;
        }
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }

    pub fn soa(&self) -> &Soa {
        &self.soa
    }

    pub fn nameservers(&self) -> &[String] {
        &self.nameservers
    }

    /// The addresses of a name server inside the zone (none for one outside it).
    pub fn nameserver_addresses(&self, name: &str) -> &[IpAddr] {
        self.ns_addresses.get(name).map_or(&[], Vec::as_slice)
    }

    /// The TTL of the apex's own records.
    pub fn ttl(&self) -> u32 {
        self.ttl
    }

    pub fn rate_limit(&self) -> &crate::config::DnsRateLimit {
        &self.rate_limit
    }

    pub fn tcp(&self) -> &crate::config::DnsTcp {
        &self.tcp
    }

    pub fn regions(&self) -> &Regions {
        &self.regions
    }

    /// Takes in one change of the stream; changes the snapshot already held are skipped.
    /// Returns whether the zone changed.
    pub fn apply(&mut self, change: &Change) -> bool {
        if change.seq() <= self.seq {
            return false;
        }
        self.seq = change.seq();
        match change {
            Change::Endpoint(c) => {
                let Some(p) = self.by_profile.get(&c.profile).map(|&i| &mut self.profiles[i]) else {
                    return false;
                };
                let Some(&i) = p.by_endpoint.get(&c.endpoint) else {
                    return false;
                };
                let status = if c.removed {
                    EndpointStatus::Inactive
                } else {
                    crate::status::counted(c.state.admin, c.state.status)
                };
                std::mem::replace(&mut p.endpoints[i].status, status) != status
            }
            Change::Profile(c) => {
                let Some(p) = self.by_profile.get(&c.profile).map(|&i| &mut self.profiles[i]) else {
                    return false;
                };
                let enabled = c.to.is_some_and(|s| s != ProfileStatus::Disabled);
                std::mem::replace(&mut p.enabled, enabled) != enabled
            }
            Change::Notice(_) => false,
        }
    }

    /// Whether a question for `name` (absolute, lower case) gets the same answer from any
    /// client until the zone changes: every name but those of profiles that route by location
    /// or at random (weighted), themselves or through a nested child.
    pub fn deterministic(&self, name: &str) -> bool {
        self.by_name.get(name).is_none_or(|&i| self.profiles[i].deterministic)
    }

    /// Profiles whose answers depend on measured round-trip times.
    pub fn wants_rtts(&self) -> bool {
        self.profiles.iter().any(|p| p.routing.needs().rtts)
    }

    /// Sets an endpoint's last measured round-trip time (performance routing).
    pub fn set_rtt(&mut self, profile: &str, endpoint: &str, rtt: Option<Duration>) {
        let Some(p) = self.by_profile.get(profile).map(|&i| &mut self.profiles[i]) else {
            return;
        };
        if let Some(&i) = p.by_endpoint.get(endpoint) {
            p.endpoints[i].rtt = rtt;
        }
    }

    /// What `q` gets now.
    pub fn answer(&self, q: &Question<'_>, rng: &mut dyn RandomSource) -> Reply {
        let Some(relative) = within(q.name, &self.origin) else {
            return Reply::Refused;
        };
        if relative.is_empty() {
            return match q.qtype {
                QType::Soa => Reply::Apex { soa: true, ns: false },
                QType::Ns => Reply::Apex { soa: false, ns: true },
                QType::Any => Reply::Apex { soa: true, ns: true },
                QType::A | QType::Aaaa | QType::Other => Reply::NoData { by_location: false },
            };
        }
        if let Some(addresses) = self.ns_addresses.get(q.name) {
            return self.nameserver_answer(addresses, q.qtype);
        }
        let Some(p) = self.by_name.get(q.name).map(|&i| &self.profiles[i]) else {
            return if self.empty_non_terminals.contains(q.name) {
                Reply::NoData { by_location: false }
            } else {
                Reply::NxDomain { by_location: false }
            };
        };
        let by_location = p.by_location;
        if !p.enabled {
            return Reply::NxDomain { by_location: false };
        }
        let families: &[Family] = match q.qtype {
            QType::A => &[Family::Ipv4],
            QType::Aaaa => &[Family::Ipv6],
            QType::Any => &[Family::Ipv4, Family::Ipv6],
            QType::Soa | QType::Ns | QType::Other => return Reply::NoData { by_location: false },
        };
        let index = self.by_name[q.name];
        let addresses: Vec<IpAddr> = families
            .iter()
            .flat_map(|&f| self.pick(index, q.client, f, rng))
            .collect();
        if addresses.is_empty() {
            Reply::NoData { by_location }
        } else {
            Reply::Addresses {
                ttl: p.ttl,
                addresses,
                by_location,
            }
        }
    }
}

impl Zone {
    /// A name server's own name: its addresses of the family asked, which the configuration
    /// gives, whatever the health of anything.
    fn nameserver_answer(&self, addresses: &[IpAddr], qtype: QType) -> Reply {
        let wanted = |a: &&IpAddr| match qtype {
            QType::A => a.is_ipv4(),
            QType::Aaaa => a.is_ipv6(),
            QType::Any => true,
            QType::Soa | QType::Ns | QType::Other => false,
        };
        let addresses: Vec<IpAddr> = addresses.iter().filter(wanted).copied().collect();
        if addresses.is_empty() {
            Reply::NoData { by_location: false }
        } else {
            Reply::Addresses {
                ttl: self.ttl,
                addresses,
                by_location: false,
            }
        }
    }

    /// The addresses of family `family` that profile `ix`'s routing method gives `client` now,
    /// a nested endpoint's being those its child's method gives.
    fn pick(&self, ix: usize, client: Client, family: Family, rng: &mut dyn RandomSource) -> Vec<IpAddr> {
        let source = canonical(client.address);
        let query = Query {
            source,
            region: self.regions.region_of(source),
            family: Some(family),
        };
        let mut out = Vec::new();
        routing::pick_nested(self, ix, &query, rng, &mut |trail| {
            let &(p, e) = trail.last().expect("a trail ends at its leaf");
            out.push(self.profiles[p].endpoints[e].address);
        });
        out
    }
}

impl routing::Profiles for Zone {
    fn profile(&self, ix: usize) -> routing::Profile<'_> {
        let p = &self.profiles[ix];
        routing::Profile {
            enabled: p.enabled,
            routing: p.routing,
            candidates: p
                .endpoints
                .iter()
                .map(|e| Candidate {
                    family: e.child.is_none().then(|| Family::of(e.address)),
                    status: e.status,
                    priority: e.priority,
                    weight: e.weight,
                    subnets: &e.subnets,
                    region: e.region.as_deref(),
                    rtt: e.rtt,
                })
                .collect(),
        }
    }

    fn child(&self, ix: usize, i: usize) -> Option<usize> {
        self.profiles[ix].endpoints[i].child
    }
}

/// `name` relative to `origin` (both absolute, lower case): "" for the apex, None outside it.
fn within<'n>(name: &'n str, origin: &str) -> Option<&'n str> {
    if name == origin {
        return Some("");
    }
    let head = name.strip_suffix(origin)?;
    head.strip_suffix('.').filter(|h| !h.is_empty())
}

#[cfg(test)]
mod tests;
