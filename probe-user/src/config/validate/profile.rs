//! `[[profile]]`: its name, dialect and routing; its health check and endpoints are read by
//! their own files, with the dialect and routing found here.
use std::{collections::HashSet, time::Duration};

use toml::de::DeValue;

use super::{endpoint::EndpointList, health::health, read_runs, valid_name, Runs};
use crate::config::{
    model::*,
    read::{Reader, Table},
    reference,
};
use crate::status::{Method, Routing};

pub(super) fn profile(
    r: &mut Reader<'_>,
    v: &toml::Spanned<DeValue<'_>>,
    index: usize,
    seen: &mut HashSet<String>,
    runs: Runs<'_>,
) -> (Option<Profile>, Option<String>) {
    let Some(t) = r.table(v, format!("profile[{index}]"), &reference::PROFILE) else {
        return (None, None);
    };
    let name = match r.string(&t, "name") {
        None => {
            r.missing(&t, "name", "every profile needs a name");
            None
        }
        Some(item) if !valid_name(&item.v) => {
            r.bad(&item, super::NAME_RULE);
            None
        }
        Some(item) if !seen.insert(item.v.clone()) => {
            r.bad(&item, "another profile already has this name");
            None
        }
        Some(item) => Some(item.v),
    };
    let enabled = r.boolean(&t, "enabled").is_none_or(|b| b.v);
    let dialect = match r.string(&t, "dialect") {
        None => {
            r.missing(&t, "dialect", "every profile needs a dialect: lb, tm or ga");
            None
        }
        Some(item) => Dialect::parse(&item.v).or_else(|| {
            r.bad(&item, "expected lb, tm or ga");
            None
        }),
    };
    let routing = routing(r, &t);
    let dns_name = super::dns::dns_name(r, &t);
    let aggregate = super::cluster::aggregate(r, &t);
    let dns_ttl = match r.string(&t, "dns_ttl") {
        None => Some(None),
        Some(item) => super::dns::ttl_value(r, &item).map(Some),
    };
    let health = match (Reader::get(&t, "health"), dialect) {
        (None, _) => {
            r.missing(&t, "health", "every profile needs a [profile.health] table");
            None
        }
        // Without a dialect there are no rules to check the health check against.
        (Some(_), None) => None,
        (Some(h), Some(d)) => health(r, h, &t.child("health"), d),
    };
    let endpoints_from = endpoints_from(r, &t);
    let slow_start = slow_start(r, &t);
    let discovery = discovery(r, &t, endpoints_from, routing);
    let passive = match Reader::get(&t, "passive") {
        None => Some(None),
        Some(v) => super::passive::passive(r, v, t.child("passive"), health.as_ref()).map(Some),
    };
    let written = Reader::get(&t, "endpoint");
    if let (Some(from), Some(v)) = (endpoints_from.filter(|f| f.at_run_time()), written) {
        r.error(
            v.span(),
            &t.child("endpoint"),
            Some(crate::config::read::show(v.get_ref())),
            not_listed(from),
        );
    }
    let endpoints = match (health.as_ref(), dialect, routing) {
        (Some(health), Some(dialect), Some(routing)) => {
            let path = t.child("endpoint");
            let mut list = EndpointList::new(r, path, (health, dialect, routing), runs.endpoints);
            if let Some(v) = written {
                list.array(r, v);
            }
            if let Some(from) = endpoints_from.filter(|f| f.at_run_time() && !runs.ranges.is_empty()) {
                r.error(runs.ranges[0].clone(), &t.child("endpoint"), None, not_listed(from));
            }
            read_runs(r, runs.ranges, Some(&mut list));
            list.finish(r)
        }
        _ => {
            // Nothing to read them against (the profile is refused for that); their syntax is
            // still the file's.
            read_runs(r, runs.ranges, None);
            None
        }
    };
    let shown_name = name.clone();
    let profile = endpoints.and_then(|endpoints| {
        Some(Profile {
            name: name?,
            enabled,
            dialect: dialect?,
            routing: routing?,
            health: health?,
            endpoints: endpoints.0,
            nested: endpoints.1,
            dns_name: dns_name?,
            dns_ttl: dns_ttl?,
            aggregate: aggregate?,
            endpoints_from: endpoints_from?,
            slow_start: slow_start?,
            discovery: discovery?,
            passive: passive?,
        })
    });
    (profile, shown_name)
}

fn endpoints_from(r: &mut Reader<'_>, t: &Table<'_, '_>) -> Option<EndpointSource> {
    match r.string(t, "endpoints_from") {
        None => Some(EndpointSource::File),
        Some(item) => match item.v.as_str() {
            "file" => Some(EndpointSource::File),
            "api" => Some(EndpointSource::Api),
            "dns" => Some(EndpointSource::Dns),
            _ => {
                r.bad(
                    &item,
                    "expected \"file\" (the [[profile.endpoint]] tables), \"api\" (POST /v1/profiles/NAME/endpoints) \
                     or \"dns\" (the records [profile.discovery] names)",
                );
                None
            }
        },
    }
}

/// Why a profile whose endpoints come at run time lists none in the file.
fn not_listed(from: EndpointSource) -> &'static str {
    if from == EndpointSource::Dns {
        "a profile with endpoints_from = \"dns\" lists no endpoints: they are the records [profile.discovery] names"
    } else {
        "a profile with endpoints_from = \"api\" lists no endpoints: they come from POST /v1/profiles/NAME/endpoints"
    }
}

/// `[profile.discovery]`: required with `endpoints_from = "dns"`, refused without; such a
/// profile routes by weight, by answers or by RTT (its records give no unique priorities, no
/// subnets, no regions). Some(None) when the profile has none, as it should.
fn discovery(
    r: &mut Reader<'_>,
    t: &Table<'_, '_>,
    from: Option<EndpointSource>,
    routing: Option<Routing>,
) -> Option<Option<Discovery>> {
    let written = Reader::get(t, "discovery");
    match (from, written) {
        (Some(EndpointSource::Dns), None) => {
            r.missing(
                t,
                "discovery",
                "a profile with endpoints_from = \"dns\" needs a [profile.discovery] table",
            );
            None
        }
        (Some(EndpointSource::Dns), Some(v)) => {
            if let Some(routing) = routing.filter(|r| r.needs().unique_keys) {
                let item = r.string(t, "routing");
                let allowed: Vec<&str> = Method::ALL
                    .iter()
                    .filter(|m| !m.needs().unique_keys)
                    .map(|m| m.as_str())
                    .collect();
                let problem = format!(
                    "a profile with endpoints_from = \"dns\" routes {}, not {}: \
                     its records give no unique priorities, subnets or regions",
                    allowed.join(", "),
                    routing.method
                );
                match item {
                    Some(item) => r.bad(&item, problem),
                    None => r.missing(t, "routing", problem),
                }
                return None;
            }
            super::discovery::discovery(r, v, t.child("discovery")).map(Some)
        }
        (_, Some(v)) => {
            r.error(
                v.span(),
                &t.child("discovery"),
                None,
                "[profile.discovery] is for a profile with endpoints_from = \"dns\"",
            );
            None
        }
        (_, None) => Some(None),
    }
}

/// The longest `slow_start`: a ramp is 20 steps, each a change every sink writes.
pub(super) const MAX_SLOW_START: Duration = Duration::from_secs(3_600);

/// `slow_start`: "0s" (off, the default) or a duration from 1s to an hour. Shorter than a
/// second is no ramp at all: its 20 steps would come faster than a sink applies them.
fn slow_start(r: &mut Reader<'_>, t: &Table<'_, '_>) -> Option<Duration> {
    let Some(item) = r.string(t, "slow_start") else {
        return Some(Duration::ZERO);
    };
    match crate::config::read::parse_duration(&item.v) {
        Some(d) if d.is_zero() || (Duration::from_secs(1)..=MAX_SLOW_START).contains(&d) => Some(d),
        _ => {
            r.bad(&item, "expected \"0s\" (off) or a duration from 1s to 1h, like \"30s\"");
            None
        }
    }
}

/// Ours: the traffic manager allows 8; more are for fleets that want them, and an answer that
/// outgrows a UDP message is truncated there and complete over TCP.
const MAX_ANSWERS: u8 = 32;

fn routing(r: &mut Reader<'_>, t: &Table<'_, '_>) -> Option<Routing> {
    let max = r.int(t, "max_answers");
    let method = match r.string(t, "routing") {
        None => Method::Priority,
        Some(item) => match item.v.parse::<Method>() {
            Ok(m) => m,
            Err(_) => {
                r.bad(&item, format!("expected {}", Method::NAMES.join(", ")));
                return None;
            }
        },
    };
    match (method, &max) {
        (Method::Multivalue, None) => Some(Routing::multivalue(2)),
        (Method::Multivalue, Some(item)) => match u8::try_from(item.v).ok().filter(|n| (1..=MAX_ANSWERS).contains(n)) {
            Some(n) => Some(Routing::multivalue(n)),
            None => {
                r.bad(item, format!("multivalue allows 1 to {MAX_ANSWERS} answers"));
                None
            }
        },
        (_, Some(item)) => {
            r.bad(item, "max_answers only applies to routing = \"multivalue\"");
            None
        }
        (m, None) => Some(Routing::of(m)),
    }
}
