//! `GET /v1/select/{profile}?source=IP[&region=R][&family=ipv4|ipv6]`: which endpoints a query
//! from `source` would get now. Regions come from `[[dns.region]]` when the request names none,
//! so the answer is the one the DNS server gives the same source.
use crate::{
    config::DnsRegion,
    daemon::{
        control::{RequestError, SelectQuery},
        table::Table,
        views::SelectView,
    },
    dns::regions::Regions,
    rng::SplitMix64,
    status::{self, Candidate, Query},
};

pub(super) fn select(
    table: &Table,
    regions: &[DnsRegion],
    rng: &mut SplitMix64,
    profile: &str,
    query: SelectQuery,
) -> Result<SelectView, RequestError> {
    let (_, entry) = table
        .profile(profile)
        .ok_or_else(|| RequestError::NoProfile(profile.into()))?;
    let targets: Vec<_> = entry.owners.iter().map(|id| &table.targets[id]).collect();
    let candidates: Vec<Candidate<'_>> = targets
        .iter()
        .map(|t| Candidate {
            address: t.endpoint.address,
            status: t.status,
            priority: t.endpoint.priority,
            weight: t.endpoint.weight,
            subnets: &t.endpoint.subnets,
            region: t.endpoint.region.as_deref(),
            rtt: t.last_rtt,
        })
        .collect();
    let source = crate::dns::regions::canonical(query.source);
    let region = query
        .region
        .or_else(|| Regions::new(regions).region_of(source).map(str::to_string));
    let answer = status::select(
        entry.enabled(),
        entry.cfg.routing,
        &candidates,
        &Query {
            source,
            region: region.as_deref(),
            family: query.family,
        },
        rng,
    );
    let picked = match &answer {
        status::Answer::NxDomain => &[][..],
        status::Answer::Endpoints(v) => v.as_slice(),
    };
    Ok(SelectView {
        profile: profile.into(),
        source: query.source.to_string(),
        region,
        nxdomain: answer == status::Answer::NxDomain,
        endpoints: picked.iter().map(|&i| targets[i].name.to_string()).collect(),
        addresses: picked
            .iter()
            .map(|&i| targets[i].endpoint.address.to_string())
            .collect(),
    })
}
