//! `GET /v1/select/{profile}?source=IP[&region=R][&family=ipv4|ipv6]`: which endpoints a query
//! from `source` would get now. Regions come from `[[dns.region]]` when the request names none,
//! so the answer is the one the DNS server gives the same source; nested profiles answer with
//! their child's pick.
use std::net::IpAddr;

use crate::{
    config::Config,
    daemon::{
        protocol::{RequestError, SelectQuery},
        table::Table,
        views::SelectView,
    },
    dns::regions::Regions,
    rng::SplitMix64,
    status::{routing, Candidate, Family, Query},
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
    let fleet = Fleet { table, config };
    let mut picked: Vec<(String, IpAddr)> = Vec::new();
    routing::pick_nested(&fleet, ix, &ask, rng, &mut |trail| {
        let names: Vec<&str> = trail.iter().map(|&(p, e)| fleet.endpoint_name(p, e)).collect();
        let &(p, e) = trail.last().expect("a trail ends at its leaf");
        let target = &table.targets()[&table.profiles()[p].owners[e]];
        picked.push((names.join("/"), target.address().ip()));
    });
    Ok(SelectView {
        profile: profile.into(),
        source: query.source.to_string(),
        region: region.clone(),
        nxdomain: !entry.enabled(),
        endpoints: picked.iter().map(|(name, _)| name.clone()).collect(),
        addresses: picked.iter().map(|(_, a)| a.to_string()).collect(),
    })
}

/// The running table with the config that made it, as selection reads profiles.
struct Fleet<'a> {
    table: &'a Table,
    config: &'a Config,
}

impl Fleet<'_> {
    /// Endpoint `i` of profile `ix`'s name: a plain endpoint's, then a nested one's.
    fn endpoint_name(&self, ix: usize, i: usize) -> &str {
        let entry = &self.table.profiles()[ix];
        match entry.owners.get(i) {
            Some(id) => self.table.targets()[id].name(),
            None => &entry.nested[i - entry.owners.len()].name,
        }
    }
}

impl routing::Profiles for Fleet<'_> {
    fn profile(&self, ix: usize) -> routing::Profile<'_> {
        let entry = &self.table.profiles()[ix];
        // The running config made the table: its endpoints line up with the owners.
        let endpoints = &self.config.profiles[ix].endpoints;
        debug_assert_eq!(endpoints.len(), entry.owners.len());
        let plain = entry.owners.iter().zip(endpoints).map(|(id, e)| {
            let t = &self.table.targets()[id];
            Candidate {
                family: Some(Family::of(t.address().ip())),
                // A draining endpoint answers nothing new: out of rotation, as the counts have it.
                status: t.counts_as(),
                priority: t.brief().priority,
                weight: t.brief().weight,
                subnets: e.subnets(),
                region: e.region(),
                rtt: t.last_rtt().get(),
            }
        });
        let nested = entry.nested.iter().map(|n| Candidate {
            family: None,
            status: n.status,
            priority: n.cfg.priority,
            weight: n.cfg.weight,
            subnets: &n.cfg.subnets,
            region: n.cfg.region.as_deref(),
            rtt: None,
        });
        routing::Profile {
            enabled: entry.enabled(),
            routing: entry.cfg.routing,
            candidates: plain.chain(nested).collect(),
        }
    }

    fn child(&self, ix: usize, i: usize) -> Option<usize> {
        let entry = &self.table.profiles()[ix];
        let nested = i.checked_sub(entry.owners.len())?;
        Some(entry.nested[nested].child)
    }
}
