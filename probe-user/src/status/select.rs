//! Which endpoints answer a query, per routing method (SPEC section 4). Pure: the caller
//! passes statuses, measured RTTs and a random source.
use std::{net::IpAddr, time::Duration};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::{effective_eligibility, EndpointStatus};
pub use crate::rng::SplitMix64;

/// How deep nested profiles are followed for one answer (DNS and `/v1/select` alike).
/// Configurations refuse loops; this only bounds the work of a pathological chain.
pub const MAX_NESTING: usize = 8;

/// Region name that catches every query whose region has no endpoint of its own.
pub const WORLD_REGION: &str = "world";

/// How a profile picks among its eligible endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "method")]
pub enum Routing {
    /// The first eligible endpoint by priority (lowest number first).
    Priority,
    /// One eligible endpoint at random, in proportion to its weight.
    Weighted,
    /// Up to `max_answers` eligible endpoints, in priority order.
    Multivalue { max_answers: u8 },
    /// The endpoint whose subnets contain the query's source address.
    Subnet,
    /// The endpoint mapped to the query's region; no failover.
    Geographic,
    /// The eligible endpoint with the lowest measured RTT.
    Performance,
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
    let picked = match routing {
        Routing::Priority => by_priority(candidates, &eligible).into_iter().take(1).collect(),
        Routing::Multivalue { max_answers } => by_priority(candidates, &eligible)
            .into_iter()
            .take(usize::from(max_answers))
            .collect(),
        Routing::Weighted => weighted(candidates, &eligible, rng).into_iter().collect(),
        Routing::Subnet => subnet(candidates, &eligible, query.source).into_iter().collect(),
        Routing::Geographic => geographic(candidates, &eligible, query.region).into_iter().collect(),
        Routing::Performance => performance(candidates, &eligible).into_iter().collect(),
    };
    Answer::Endpoints(picked)
}

/// Eligible positions ordered by priority, ties broken by config order.
fn by_priority(candidates: &[Candidate<'_>], eligible: &[bool]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..candidates.len()).filter(|&i| eligible[i]).collect();
    order.sort_by_key(|&i| (candidates[i].priority, i));
    order
}

fn weighted(candidates: &[Candidate<'_>], eligible: &[bool], rng: &mut dyn RandomSource) -> Option<usize> {
    let pool: Vec<usize> = (0..candidates.len())
        .filter(|&i| eligible[i] && candidates[i].weight > 0)
        .collect();
    let total: u64 = pool.iter().map(|&i| u64::from(candidates[i].weight)).sum();
    if total == 0 {
        return None;
    }
    // Modulo bias is below 2^-40 for any realistic weight total; not worth rejection sampling.
    let mut ticket = rng.next_u64() % total;
    for i in pool {
        let w = u64::from(candidates[i].weight);
        if ticket < w {
            return Some(i);
        }
        ticket -= w;
    }
    None
}

/// The endpoint whose subnets hold the source; the most specific prefix wins should several match.
/// When the mapped endpoint is not eligible, or no subnet matches, the answer falls back to the
/// catch-all endpoint (the one with no subnets, at most one per profile) if it is eligible;
/// otherwise the answer is empty. We chose this fallback so an unmapped client still gets an
/// answer from the endpoint the operator marked as the default.
fn subnet(candidates: &[Candidate<'_>], eligible: &[bool], source: IpAddr) -> Option<usize> {
    let mapped = (0..candidates.len())
        .filter_map(|i| {
            let best = candidates[i]
                .subnets
                .iter()
                .filter(|n| n.contains(&source))
                .map(ipnet::IpNet::prefix_len)
                .max()?;
            Some((best, i))
        })
        .max_by_key(|&(len, i)| (len, std::cmp::Reverse(i)))
        .map(|(_, i)| i);
    if let Some(i) = mapped.filter(|&i| eligible[i]) {
        return Some(i);
    }
    (0..candidates.len()).find(|&i| candidates[i].subnets.is_empty() && eligible[i])
}

/// The endpoint mapped to the query's region, or the `world` endpoint when the region has none.
/// No failover (SPEC 4): if the mapped endpoint is not eligible the answer is empty (NODATA),
/// never another region's endpoint. Fail-open still applies through `eligible`.
fn geographic(candidates: &[Candidate<'_>], eligible: &[bool], region: Option<&str>) -> Option<usize> {
    let find = |want: &str| (0..candidates.len()).find(|&i| candidates[i].region == Some(want));
    let mapped = region.and_then(find).or_else(|| find(WORLD_REGION))?;
    eligible[mapped].then_some(mapped)
}

/// Lowest RTT first; endpoints never measured come after every measured one, by priority.
fn performance(candidates: &[Candidate<'_>], eligible: &[bool]) -> Option<usize> {
    (0..candidates.len()).filter(|&i| eligible[i]).min_by_key(|&i| {
        let c = &candidates[i];
        (c.rtt.is_none(), c.rtt.unwrap_or_default(), c.priority, i)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use EndpointStatus as S;

    fn cand(status: S) -> Candidate<'static> {
        Candidate {
            family: Some(Family::Ipv4),
            status,
            priority: 1,
            weight: 1,
            subnets: &[],
            region: None,
            rtt: None,
        }
    }

    fn q(source: &str) -> Query<'static> {
        Query {
            source: source.parse().unwrap(),
            region: None,
            family: None,
        }
    }

    fn run(routing: Routing, cands: &[Candidate<'_>], query: &Query<'_>) -> Answer {
        select(true, routing, cands, query, &mut SplitMix64(7))
    }

    fn prio(status: S, priority: u32) -> Candidate<'static> {
        Candidate {
            priority,
            ..cand(status)
        }
    }

    #[test]
    fn disabled_profile_answers_nxdomain() {
        let cands = [cand(S::Inactive)];
        let answer = select(false, Routing::Priority, &cands, &q("192.0.2.1"), &mut SplitMix64(1));
        assert_eq!(answer, Answer::NxDomain);
    }

    #[test]
    fn priority_picks_lowest_number_and_fails_over() {
        let cands = [prio(S::Online, 3), prio(S::Online, 1), prio(S::Online, 2)];
        assert_eq!(
            run(Routing::Priority, &cands, &q("192.0.2.1")),
            Answer::Endpoints(vec![1])
        );
        let cands = [prio(S::Online, 3), prio(S::Degraded, 1), prio(S::Disabled, 2)];
        assert_eq!(
            run(Routing::Priority, &cands, &q("192.0.2.1")),
            Answer::Endpoints(vec![0])
        );
        // CheckingEndpoint is eligible, so a fresh endpoint is served.
        let cands = [prio(S::Stopped, 1), prio(S::CheckingEndpoint, 2)];
        assert_eq!(
            run(Routing::Priority, &cands, &q("192.0.2.1")),
            Answer::Endpoints(vec![1])
        );
    }

    #[test]
    fn fail_open_serves_degraded_when_all_are_degraded() {
        let cands = [prio(S::Degraded, 2), prio(S::Disabled, 1), prio(S::Degraded, 1)];
        assert_eq!(
            run(Routing::Priority, &cands, &q("192.0.2.1")),
            Answer::Endpoints(vec![2])
        );
        let multi = Routing::Multivalue { max_answers: 4 };
        assert_eq!(run(multi, &cands, &q("192.0.2.1")), Answer::Endpoints(vec![2, 0]));
        // Disabled and Stopped alone: nothing to fail open to.
        let cands = [cand(S::Disabled), cand(S::Stopped)];
        assert_eq!(
            run(Routing::Priority, &cands, &q("192.0.2.1")),
            Answer::Endpoints(vec![])
        );
    }

    #[test]
    fn weighted_follows_weights_and_skips_ineligible() {
        let mut cands = [cand(S::Online), cand(S::Online), cand(S::Degraded)];
        cands[0].weight = 1;
        cands[1].weight = 3;
        cands[2].weight = 100;
        let mut rng = SplitMix64(42);
        let mut hits = [0u32; 3];
        for _ in 0..4000 {
            match select(true, Routing::Weighted, &cands, &q("192.0.2.1"), &mut rng) {
                Answer::Endpoints(v) => hits[v[0]] += 1,
                Answer::NxDomain => panic!("enabled profile answered NXDOMAIN"),
            }
        }
        assert_eq!(hits[2], 0, "a Degraded endpoint got traffic");
        // Expect about 1000 / 3000; allow generous slack.
        assert!((800..1200).contains(&hits[0]), "{hits:?}");
        assert!((2800..3200).contains(&hits[1]), "{hits:?}");
        // Same seed, same answers.
        let a = select(true, Routing::Weighted, &cands, &q("192.0.2.1"), &mut SplitMix64(9));
        let b = select(true, Routing::Weighted, &cands, &q("192.0.2.1"), &mut SplitMix64(9));
        assert_eq!(a, b);
    }

    #[test]
    fn multivalue_returns_up_to_n_eligible() {
        let cands = [
            prio(S::Online, 1),
            prio(S::Degraded, 2),
            prio(S::Online, 3),
            prio(S::Unmonitored, 4),
        ];
        let two = Routing::Multivalue { max_answers: 2 };
        assert_eq!(run(two, &cands, &q("192.0.2.1")), Answer::Endpoints(vec![0, 2]));
        let eight = Routing::Multivalue { max_answers: 8 };
        assert_eq!(run(eight, &cands, &q("192.0.2.1")), Answer::Endpoints(vec![0, 2, 3]));
    }

    #[test]
    fn subnet_maps_source_and_falls_back_to_catch_all() {
        let eu: Vec<IpNet> = vec!["10.1.0.0/16".parse().unwrap()];
        let us: Vec<IpNet> = vec!["10.2.0.0/16".parse().unwrap(), "2001:db8::/32".parse().unwrap()];
        let mut cands = [cand(S::Online), cand(S::Online), cand(S::Online)];
        cands[0].subnets = &eu;
        cands[1].subnets = &us;
        assert_eq!(run(Routing::Subnet, &cands, &q("10.1.2.3")), Answer::Endpoints(vec![0]));
        assert_eq!(
            run(Routing::Subnet, &cands, &q("2001:db8::5")),
            Answer::Endpoints(vec![1])
        );
        assert_eq!(
            run(Routing::Subnet, &cands, &q("192.0.2.1")),
            Answer::Endpoints(vec![2])
        );
        cands[0].status = S::Degraded;
        assert_eq!(run(Routing::Subnet, &cands, &q("10.1.2.3")), Answer::Endpoints(vec![2]));
        cands[2].status = S::Disabled;
        assert_eq!(run(Routing::Subnet, &cands, &q("192.0.2.1")), Answer::Endpoints(vec![]));
    }

    #[test]
    fn subnet_prefers_the_most_specific_prefix() {
        let wide: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let narrow: Vec<IpNet> = vec!["10.9.0.0/16".parse().unwrap()];
        let mut cands = [cand(S::Online), cand(S::Online)];
        cands[0].subnets = &wide;
        cands[1].subnets = &narrow;
        assert_eq!(run(Routing::Subnet, &cands, &q("10.9.1.1")), Answer::Endpoints(vec![1]));
        assert_eq!(run(Routing::Subnet, &cands, &q("10.8.1.1")), Answer::Endpoints(vec![0]));
    }

    #[test]
    fn geographic_has_no_failover() {
        let mut cands = [cand(S::Online), cand(S::Online), cand(S::Online)];
        cands[0].region = Some("eu");
        cands[1].region = Some("us");
        cands[2].region = Some(WORLD_REGION);
        let from = |region| Query {
            source: "192.0.2.1".parse().unwrap(),
            region: Some(region),
            family: None,
        };
        assert_eq!(
            run(Routing::Geographic, &cands, &from("eu")),
            Answer::Endpoints(vec![0])
        );
        assert_eq!(
            run(Routing::Geographic, &cands, &from("asia")),
            Answer::Endpoints(vec![2])
        );
        assert_eq!(
            run(Routing::Geographic, &cands, &q("192.0.2.1")),
            Answer::Endpoints(vec![2])
        );
        cands[0].status = S::Degraded;
        assert_eq!(run(Routing::Geographic, &cands, &from("eu")), Answer::Endpoints(vec![]));
        // Fail-open still holds: every eligible endpoint Degraded.
        cands[1].status = S::Degraded;
        cands[2].status = S::Degraded;
        assert_eq!(
            run(Routing::Geographic, &cands, &from("eu")),
            Answer::Endpoints(vec![0])
        );
    }

    #[test]
    fn performance_picks_lowest_rtt_then_unmeasured() {
        let ms = Duration::from_millis;
        let mut cands = [cand(S::Online), cand(S::Online), cand(S::Online), cand(S::Online)];
        cands[0].rtt = Some(ms(40));
        cands[1].rtt = Some(ms(5));
        cands[2].rtt = None;
        cands[3].rtt = Some(ms(20));
        assert_eq!(
            run(Routing::Performance, &cands, &q("192.0.2.1")),
            Answer::Endpoints(vec![1])
        );
        cands[1].status = S::Degraded;
        assert_eq!(
            run(Routing::Performance, &cands, &q("192.0.2.1")),
            Answer::Endpoints(vec![3])
        );
        cands[0].status = S::Disabled;
        cands[3].status = S::Stopped;
        assert_eq!(
            run(Routing::Performance, &cands, &q("192.0.2.1")),
            Answer::Endpoints(vec![2])
        );
    }

    #[test]
    fn a_family_sets_the_other_aside_but_fail_open_stays_profile_wide() {
        let v6 = |status| Candidate {
            family: Some(Family::Ipv6),
            ..cand(status)
        };
        let cands = [prio(S::Online, 1), v6(S::Online), prio(S::Online, 3)];
        let ask = |family, cands: &[Candidate<'_>]| {
            let query = Query {
                family: Some(family),
                ..q("192.0.2.1")
            };
            run(Routing::Multivalue { max_answers: 8 }, cands, &query)
        };
        assert_eq!(ask(Family::Ipv4, &cands), Answer::Endpoints(vec![0, 2]));
        assert_eq!(ask(Family::Ipv6, &cands), Answer::Endpoints(vec![1]));
        // The IPv4 endpoints are Degraded but an IPv6 one is Online: no fail-open, no A answer.
        let cands = [prio(S::Degraded, 1), v6(S::Online), prio(S::Degraded, 3)];
        assert_eq!(ask(Family::Ipv4, &cands), Answer::Endpoints(vec![]));
        // Every one Degraded: fail-open serves each family its own.
        let cands = [prio(S::Degraded, 1), v6(S::Degraded), prio(S::Degraded, 3)];
        assert_eq!(ask(Family::Ipv4, &cands), Answer::Endpoints(vec![0, 2]));
        assert_eq!(ask(Family::Ipv6, &cands), Answer::Endpoints(vec![1]));
    }
}
