//! `GET /v1/select/{profile}?source=IP[&region=R]`: which endpoints a query would get now.
use std::net::IpAddr;

use crate::{
    daemon::{control::RequestError, table::Table, views::SelectView},
    rng::SplitMix64,
    status::{self, Candidate, Query},
};

pub(super) fn select(
    table: &Table,
    rng: &mut SplitMix64,
    profile: &str,
    source: IpAddr,
    region: Option<String>,
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
    let answer = status::select(
        entry.cfg.enabled,
        entry.cfg.routing,
        &candidates,
        &Query {
            source,
            region: region.as_deref(),
            family: None,
        },
        rng,
    );
    let picked = match &answer {
        status::Answer::NxDomain => &[][..],
        status::Answer::Endpoints(v) => v.as_slice(),
    };
    Ok(SelectView {
        profile: profile.into(),
        source: source.to_string(),
        region,
        nxdomain: answer == status::Answer::NxDomain,
        endpoints: picked.iter().map(|&i| targets[i].name.to_string()).collect(),
        addresses: picked
            .iter()
            .map(|&i| targets[i].endpoint.address.to_string())
            .collect(),
    })
}
