//! Which endpoints answer a query, per routing method (SPEC section 4). Pure: the caller
//! passes statuses, measured RTTs and a random source.
//!
//! A method is one `Method` variant (its wire name, once), one line of `Method::needs` (what
//! it reads, which the DNS zone, the RTT feed and the config reader ask instead of listing
//! methods) and one file here with its `pick`. `pick_nested` follows nested profiles for the
//! DNS zone and `/v1/select` alike, so the two cannot answer differently.
mod geographic;
mod performance;
mod priority;
mod subnet;
mod weighted;

use std::{net::IpAddr, time::Duration};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::{effective_eligibility, EndpointStatus};
pub use crate::rng::SplitMix64;
use crate::wire_enum::wire_enum;

/// How deep nested profiles are followed for one answer (DNS and `/v1/select` alike).
/// Configurations refuse loops; this only bounds the work of a pathological chain.
pub const MAX_NESTING: usize = 8;

/// Region name that catches every query whose region has no endpoint of its own.
pub const WORLD_REGION: &str = geographic::WORLD;

wire_enum! {
    /// How a profile picks among its eligible endpoints.
    #[derive(Debug, Hash)]
    pub enum Method {
        /// The first eligible endpoint by priority (lowest number first).
        Priority = "priority",
        /// One eligible endpoint at random, in proportion to its weight.
        Weighted = "weighted",
        /// Up to `max_answers` eligible endpoints, in priority order.
        Multivalue = "multivalue",
        /// The endpoint whose subnets contain the query's source address.
        Subnet = "subnet",
        /// The endpoint mapped to the query's region; no failover.
        Geographic = "geographic",
        /// The eligible endpoint with the lowest measured RTT.
        Performance = "performance",
    }
}

/// What a method reads besides the endpoints' statuses, and what it asks of their keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Needs {
    /// Its answer depends on where the client is (source address or region): a DNS answer
    /// carries the client subnet scope and is never cached across clients.
    pub location: bool,
    /// Its answer is drawn at random: two equal questions may get different answers.
    pub random: bool,
    /// It reads the round-trip times this node measured.
    pub rtts: bool,
    /// Each endpoint holds a key no other endpoint of the profile may hold (a priority, a
    /// subnet, a region): the reader and the fleet API refuse a second holder.
    pub unique_keys: bool,
}

impl Method {
    /// What the method needs (see `Needs`).
    pub const fn needs(self) -> Needs {
        let none = Needs {
            location: false,
            random: false,
            rtts: false,
            unique_keys: false,
        };
        match self {
            Method::Priority => Needs {
                unique_keys: true,
                ..none
            },
            Method::Weighted => Needs { random: true, ..none },
            Method::Multivalue => none,
            Method::Subnet | Method::Geographic => Needs {
                location: true,
                unique_keys: true,
                ..none
            },
            Method::Performance => Needs { rtts: true, ..none },
        }
    }
}

/// A profile's routing: its method and, for multivalue, how many endpoints one answer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Routing {
    pub method: Method,
    /// Multivalue's answer size; every other method answers with one endpoint.
    #[serde(default = "one", skip_serializing_if = "is_one", deserialize_with = "one_or_more")]
    pub max_answers: u8,
}

fn one() -> u8 {
    1
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_one(n: &u8) -> bool {
    *n == 1
}

fn one_or_more<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    let n = u8::deserialize(d)?;
    Ok(n.max(1))
}

impl Routing {
    /// `method` answering with one endpoint (multivalue's answer size is `multivalue`'s).
    pub const fn of(method: Method) -> Routing {
        Routing { method, max_answers: 1 }
    }

    /// Multivalue answering with up to `max_answers` endpoints.
    pub const fn multivalue(max_answers: u8) -> Routing {
        Routing {
            method: Method::Multivalue,
            max_answers,
        }
    }

    pub const fn needs(self) -> Needs {
        self.method.needs()
    }
}

impl std::fmt::Display for Routing {
    /// As the status table shows it: `priority`, `multivalue(2)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.method {
            Method::Multivalue => write!(f, "{}({})", self.method, self.max_answers),
            m => f.write_str(m.as_str()),
        }
    }
}

/// One endpoint as selection sees it. Build one per configured endpoint, in config order.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate<'a> {
    /// The family of its address; None for a nested profile, which may answer with either.
    pub family: Option<Family>,
    pub status: EndpointStatus,
    pub priority: u32,
    pub weight: u32,
    pub subnets: &'a [IpNet],
    pub region: Option<&'a str>,
    /// Last measured round-trip time, if any.
    pub rtt: Option<Duration>,
}

/// The query being answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query<'a> {
    pub source: IpAddr,
    /// Region of the source, resolved by the caller (GeoIP or similar); geographic routing only.
    pub region: Option<&'a str>,
    /// Only endpoints of this address family may answer (a DNS A or AAAA query); None: any.
    pub family: Option<Family>,
}

/// An address family, as a DNS query type asks for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// A records.
    Ipv4,
    /// AAAA records.
    Ipv6,
}

impl Family {
    pub fn of(address: IpAddr) -> Family {
        if address.is_ipv4() {
            Family::Ipv4
        } else {
            Family::Ipv6
        }
    }
}

/// The answer to a query: positions into the candidate slice, best first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Answer {
    /// The profile is disabled.
    NxDomain,
    /// Zero or more endpoints; empty is a NODATA answer.
    Endpoints(Vec<usize>),
}

/// A source of random numbers, injectable so tests are deterministic.
pub trait RandomSource {
    fn next_u64(&mut self) -> u64;
}

impl RandomSource for SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        SplitMix64::next_u64(self)
    }
}

/// What one method's `pick` reads: the candidates, which of them may answer, the query.
struct Choice<'c, 'a> {
    candidates: &'c [Candidate<'a>],
    /// Per candidate: eligible (fail-open applied) and of the query's family.
    eligible: &'c [bool],
    query: &'c Query<'c>,
    max_answers: u8,
}

impl Choice<'_, '_> {
    /// Eligible positions.
    fn eligible(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.candidates.len()).filter(|&i| self.eligible[i])
    }
}

/// Answers `query` for a profile. Fail-open (every eligible endpoint Degraded) is applied first,
/// over the whole profile, so each method sees Degraded endpoints as Online in that case; then
/// endpoints of another family than the query's are set aside, so a method picks among the
/// rest exactly as it would in a profile of that family alone.
pub fn select(
    profile_enabled: bool,
    routing: Routing,
    candidates: &[Candidate<'_>],
    query: &Query<'_>,
    rng: &mut dyn RandomSource,
) -> Answer {
    if !profile_enabled {
        return Answer::NxDomain;
    }
    let statuses: Vec<EndpointStatus> = candidates.iter().map(|c| c.status).collect();
    let mut eligible = effective_eligibility(&statuses);
    if let Some(family) = query.family {
        for (ok, c) in eligible.iter_mut().zip(candidates) {
            *ok &= c.family.is_none_or(|f| f == family);
        }
    }
    let choice = Choice {
        candidates,
        eligible: &eligible,
        query,
        max_answers: routing.max_answers,
    };
    Answer::Endpoints(match routing.method {
        Method::Priority | Method::Multivalue => priority::pick(&choice),
        Method::Weighted => weighted::pick(&choice, rng),
        Method::Subnet => subnet::pick(&choice),
        Method::Geographic => geographic::pick(&choice),
        Method::Performance => performance::pick(&choice),
    })
}

/// One profile as `pick_nested` reads it.
pub struct Profile<'a> {
    pub enabled: bool,
    pub routing: Routing,
    /// Its endpoints, plain and nested, in the order `Profiles::child` numbers them.
    pub candidates: Vec<Candidate<'a>>,
}

/// Profiles that may nest: the DNS zone and the daemon's table are both.
pub trait Profiles {
    /// Profile `ix` as selection sees it.
    fn profile(&self, ix: usize) -> Profile<'_>;
    /// The profile that endpoint `i` of profile `ix` nests, if it is a nested endpoint.
    fn child(&self, ix: usize, i: usize) -> Option<usize>;
}

/// Where one address of a nested answer came from: the (profile, endpoint position) pairs from
/// the profile asked down to the plain endpoint that answers.
pub type Trail = [(usize, usize)];

/// Answers `query` for profile `ix`, following nested endpoints into their child's own pick
/// (at most `MAX_NESTING` deep): calls `leaf` once per plain endpoint of the answer, best
/// first, with its trail.
pub fn pick_nested(
    profiles: &impl Profiles,
    ix: usize,
    query: &Query<'_>,
    rng: &mut dyn RandomSource,
    leaf: &mut dyn FnMut(&Trail),
) {
    let mut trail = Vec::with_capacity(MAX_NESTING + 1);
    descend(profiles, ix, query, rng, &mut trail, leaf);
}

fn descend(
    profiles: &impl Profiles,
    ix: usize,
    query: &Query<'_>,
    rng: &mut dyn RandomSource,
    trail: &mut Vec<(usize, usize)>,
    leaf: &mut dyn FnMut(&Trail),
) {
    if trail.len() > MAX_NESTING {
        return;
    }
    let p = profiles.profile(ix);
    let Answer::Endpoints(picked) = select(p.enabled, p.routing, &p.candidates, query, rng) else {
        return;
    };
    for i in picked {
        trail.push((ix, i));
        match profiles.child(ix, i) {
            Some(child) => descend(profiles, child, query, rng, trail, leaf),
            None => leaf(trail),
        }
        trail.pop();
    }
}

#[cfg(test)]
mod tests;
