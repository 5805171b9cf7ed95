//! `[cluster]`: this node's name, region and gossip address, the nodes it joins through, how
//! many nodes probe each check, and the shared key that authenticates the cluster's traffic;
//! and each profile's `aggregate` rule.
use std::{collections::HashSet, net::SocketAddr, path::PathBuf, time::Duration};

use toml::de::DeValue;

use super::{opt_table, valid_name};
use crate::{
    cluster::aggregate::Rule,
    config::{
        model::*,
        read::{parse_duration, Item, Reader, Table},
        reference,
    },
};

pub(super) fn cluster(r: &mut Reader<'_>, v: Option<&toml::Spanned<DeValue<'_>>>) -> Option<Option<Cluster>> {
    let Some(t) = opt_table(r, v, "cluster", &reference::CLUSTER)? else {
        return Some(None);
    };
    let node = match r.string(&t, "node") {
        None => {
            r.missing(
                &t,
                "node",
                "every node needs a name unique in its cluster, e.g. node = \"lb-fra-1\"",
            );
            None
        }
        Some(item) => name(r, &item),
    };
    let region = match r.string(&t, "region") {
        None => Some(None),
        Some(item) => name(r, &item).map(Some),
    };
    let listen = match r.string(&t, "listen") {
        None => {
            r.missing(
                &t,
                "listen",
                "the gossip address, UDP, e.g. listen = \"192.0.2.10:7946\"",
            );
            None
        }
        Some(item) => address(r, &item),
    };
    let advertise = match r.string(&t, "advertise") {
        None => Some(None),
        Some(item) => match address(r, &item) {
            Some(a) if a.ip().is_unspecified() => {
                r.bad(
                    &item,
                    "expected the address other nodes reach this one at, not a wildcard",
                );
                None
            }
            a => a.map(Some),
        },
    };
    if let (Some(l), Some(None)) = (&listen, &advertise) {
        if l.ip().is_unspecified() {
            r.missing(
                &t,
                "advertise",
                format!("listen = \"{l}\" is a wildcard: say which address other nodes reach this one at"),
            );
        }
    }
    let seeds = match r.strings(&t, "seeds") {
        None => Some(Vec::new()),
        Some(list) => {
            let mut seen = HashSet::new();
            let mut ok = true;
            let mut out = Vec::new();
            for item in &list.v {
                match address(r, item) {
                    Some(a) if !seen.insert(a) => {
                        r.bad(item, "listed twice");
                        ok = false;
                    }
                    Some(a) => out.push(a),
                    None => ok = false,
                }
            }
            ok.then_some(out)
        }
    };
    let probers = match r.int(&t, "probers_per_target") {
        None => Some(0),
        Some(item) => match usize::try_from(item.v) {
            Ok(k) if k <= Cluster::MAX_PROBERS => Some(k),
            _ => {
                r.bad(
                    &item,
                    format!(
                        "expected 0 (every node probes every check) to {}: the number of nodes that probe each check",
                        Cluster::MAX_PROBERS
                    ),
                );
                None
            }
        },
    };
    let distinct_regions = r.boolean(&t, "distinct_regions").is_none_or(|b| b.v);
    let key_file = match r.string(&t, "key_file") {
        None => {
            r.missing(
                &t,
                "key_file",
                "cluster traffic is authenticated: name a file holding the cluster's shared key \
                 (at least 32 random bytes, e.g. from `head -c 32 /dev/urandom | base64`), readable by probed only",
            );
            None
        }
        Some(item) if item.v.starts_with('/') => Some(PathBuf::from(&item.v)),
        Some(item) => {
            r.bad(&item, "expected an absolute path");
            None
        }
    };
    let verdict_ttl = bounded_duration(
        r,
        &t,
        "verdict_ttl",
        Cluster::DEFAULT_VERDICT_TTL,
        (Duration::from_secs(1), Duration::from_secs(3600)),
    );
    let gossip_interval = bounded_duration(
        r,
        &t,
        "gossip_interval",
        Cluster::DEFAULT_GOSSIP_INTERVAL,
        (Duration::from_millis(50), Duration::from_secs(10)),
    );
    let node = node?;
    let listen = listen?;
    let advertise = advertise?;
    if listen.ip().is_unspecified() && advertise.is_none() {
        return None;
    }
    Some(Some(Cluster {
        region: region?.unwrap_or_else(|| node.clone()),
        node,
        listen,
        advertise: advertise.unwrap_or(listen),
        seeds: seeds?,
        probers_per_target: probers?,
        distinct_regions,
        key_file: key_file?,
        verdict_ttl: verdict_ttl?,
        gossip_interval: gossip_interval?,
    }))
}

fn name(r: &mut Reader<'_>, item: &Item<String>) -> Option<String> {
    if valid_name(&item.v) {
        Some(item.v.clone())
    } else {
        r.bad(item, "expected 1 to 63 letters, digits, '-', '_', '.', ':', '[' or ']'");
        None
    }
}

fn address(r: &mut Reader<'_>, item: &Item<String>) -> Option<SocketAddr> {
    match item.v.parse::<SocketAddr>() {
        Ok(a) if a.port() != 0 => Some(a),
        Ok(_) => {
            r.bad(item, "expected a port from 1 to 65535");
            None
        }
        Err(_) => {
            r.bad(
                item,
                "expected \"ADDRESS:PORT\", e.g. \"192.0.2.10:7946\" or \"[2001:db8::10]:7946\"",
            );
            None
        }
    }
}

pub(super) fn bounded_duration(
    r: &mut Reader<'_>,
    t: &Table<'_, '_>,
    key: &str,
    default: Duration,
    (min, max): (Duration, Duration),
) -> Option<Duration> {
    let Some(item) = r.string(t, key) else {
        return Some(default);
    };
    match parse_duration(&item.v) {
        Some(d) if (min..=max).contains(&d) => Some(d),
        _ => {
            r.bad(
                &item,
                format!("expected a duration from {min:?} to {max:?}, like \"30s\" or \"500ms\""),
            );
            None
        }
    }
}

/// A profile's `aggregate`: how its locations' verdicts make one (used with `[cluster]`).
pub(super) fn aggregate(r: &mut Reader<'_>, t: &Table<'_, '_>) -> Option<Rule> {
    let Some(item) = r.string(t, "aggregate") else {
        return Some(Rule::HALF);
    };
    let rule = Rule::parse(&item.v);
    if rule.is_none() {
        r.bad(
            &item,
            "expected \"N%\" (healthy while at least N% of the probing nodes see it up, 1 to 100; \
             \"50%\" is the default), \"any\" or \"all\"",
        );
    }
    rule
}
