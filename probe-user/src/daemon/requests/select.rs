//! `GET /v1/select/{profile}?source=IP[&region=R][&family=ipv4|ipv6]`: which endpoints a query
//! from `source` would get now. Regions come from `[[dns.region]]` when the request names none,
//! so the answer is the one the DNS server gives the same source; nested profiles answer with
//! their child's pick.
use std::net::IpAddr;

use crate::{
    config::Config,
    daemon::{
        control::{RequestError, SelectQuery},
        table::Table,
        views::SelectView,
    },
    dns::regions::Regions,
    rng::SplitMix64,
    status::{self, Candidate, Family, Query},
};

pub(super) fn select(
    table: &Table,
    config: &Config,
    regions: &Regions,
    rng: &mut SplitMix64,
    profile: &str,
    query: SelectQuery,
) -> Result<SelectView, RequestError> {
    let (ix, entry) = table
        .profile(profile)
        .ok_or_else(|| RequestError::NoProfile(profile.into()))?;
    let source = crate::dns::regions::canonical(query.source);
    let region = query.region.or_else(|| regions.region_of(source).map(str::to_string));
    let ask = Query {
        source,
        region: region.as_deref(),
        family: query.family,
    };
    let picked = pick(table, config, ix, &ask, rng, 0);
    Ok(SelectView {
        profile: profile.into(),
        source: query.source.to_string(),
        region: region.clone(),
        nxdomain: !entry.enabled(),
        endpoints: picked.iter().map(|(name, _)| name.clone()).collect(),
        addresses: picked.iter().map(|(_, a)| a.to_string()).collect(),
    })
}

/// What profile `ix` answers `query` with: (endpoint, address) pairs, best first; a nested
/// endpoint's are its child's answer, named `nested/child-endpoint`.
fn pick(
    table: &Table,
    config: &Config,
    ix: usize,
    query: &Query<'_>,
    rng: &mut SplitMix64,
    depth: usize,
) -> Vec<(String, IpAddr)> {
    let entry = &table.profiles[ix];
    // The running config made the table: its endpoints line up with the owners.
    let endpoints = &config.profiles[ix].endpoints;
    debug_assert_eq!(endpoints.len(), entry.owners.len());
    if depth > status::select::MAX_NESTING {
        return Vec::new();
    }
    let targets: Vec<_> = entry.owners.iter().map(|id| &table.targets[id]).collect();
    let candidates: Vec<Candidate<'_>> = targets
        .iter()
        .zip(endpoints)
        .map(|(t, e)| Candidate {
            family: Some(Family::of(t.address().ip())),
            // A draining endpoint answers nothing new: out of rotation, as the counts have it.
            status: t.counts_as(),
            priority: t.brief().priority,
            weight: t.brief().weight,
            subnets: e.subnets(),
            region: e.region(),
            rtt: t.last_rtt().get(),
        })
        .chain(entry.nested.iter().map(|n| Candidate {
            family: None,
            status: n.status,
            priority: n.cfg.priority,
            weight: n.cfg.weight,
            subnets: &n.cfg.subnets,
            region: n.cfg.region.as_deref(),
            rtt: None,
        }))
        .collect();
    let status::Answer::Endpoints(picked) = status::select(entry.enabled(), entry.cfg.routing, &candidates, query, rng)
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for i in picked {
        match targets.get(i) {
            Some(t) => out.push((t.name().to_string(), t.address().ip())),
            None => {
                let n = &entry.nested[i - targets.len()];
                for (name, address) in pick(table, config, n.child, query, rng, depth + 1) {
                    out.push((format!("{}/{name}", n.name), address));
                }
            }
        }
    }
    out
}
