//! `[dns]` and the profiles' `dns_name`/`dns_ttl`: where the authoritative server listens, the
//! zone it answers for, its TTLs, name servers, rate limits and TCP bounds, and the regions
//! geographic routing maps sources to. Each profile's name in the zone is checked here, once
//! every profile is read.
mod limits;
mod nameservers;
mod regions;

use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    time::Duration,
};

use toml::de::DeValue;

use super::opt_table;
use crate::{
    config::{
        model::*,
        read::{parse_duration, Item, Reader, Table},
        reference,
    },
    rules::is_dns_name,
};

pub(super) fn dns(r: &mut Reader<'_>, v: Option<&toml::Spanned<DeValue<'_>>>) -> Option<Option<Dns>> {
    let Some(t) = opt_table(r, v, "dns", &reference::DNS)? else {
        return Some(None);
    };
    let listen = listen(r, &t);
    let zone = match r.string(&t, "zone") {
        None => {
            r.missing(
                &t,
                "zone",
                "the server needs the zone it answers for, e.g. zone = \"tm.example.\"",
            );
            None
        }
        Some(item) => absolute_name(r, &item),
    };
    let ttl = seconds(r, &t, "ttl").unwrap_or(Some(Dns::DEFAULT_TTL));
    let negative_ttl = seconds(r, &t, "negative_ttl");
    if let Some(old) = r.strings(&t, "nameservers") {
        r.bad(
            &old,
            "name servers are [[dns.nameserver]] tables now, each with its name and, for a name \
             inside the zone, its addresses: [[dns.nameserver]] name = \"ns1.tm.example.\" \
             addresses = [\"192.0.2.53\"]",
        );
    }
    let nameservers = match (&zone, &listen) {
        (Some(zone), Some(listen)) => nameservers::nameservers(r, &t, zone, listen),
        _ => None,
    };
    let rate_limit = limits::rate_limit(r, Reader::get(&t, "rate_limit"));
    let tcp = limits::tcp(r, Reader::get(&t, "tcp"));
    let geoip_db = match r.string(&t, "geoip_db") {
        None => Some(None),
        Some(item) if item.v.starts_with('/') => Some(Some(std::path::PathBuf::from(&item.v))),
        Some(item) => {
            r.bad(&item, "expected an absolute path to a MaxMind-format (.mmdb) database");
            None
        }
    };
    let regions = regions::regions(r, Reader::get(&t, "region"), Reader::get(&t, "geoip_db").is_some());
    let ttl = ttl?;
    Some(Some(Dns {
        listen: listen?,
        zone: zone?,
        ttl,
        negative_ttl: negative_ttl.unwrap_or(Some(ttl))?,
        nameservers: nameservers?,
        rate_limit: rate_limit?,
        tcp: tcp?,
        regions: regions?,
        geoip_db: geoip_db?,
    }))
}

fn listen(r: &mut Reader<'_>, t: &Table<'_, '_>) -> Option<Vec<SocketAddr>> {
    let Some(list) = r.strings(t, "listen") else {
        r.missing(
            t,
            "listen",
            "the server needs addresses to answer on, e.g. listen = [\"192.0.2.53:53\", \"[2001:db8::53]:53\"]",
        );
        return None;
    };
    if list.v.is_empty() {
        r.bad(&list, "expected at least one \"ADDRESS:PORT\"");
        return None;
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let mut ok = true;
    for item in &list.v {
        match item.v.parse::<SocketAddr>() {
            Ok(a) if a.port() == 0 => {
                r.bad(item, "expected a port from 1 to 65535");
                ok = false;
            }
            Ok(a) if !seen.insert(a) => {
                r.bad(item, "listed twice");
                ok = false;
            }
            Ok(a) => out.push(a),
            Err(_) => {
                r.bad(
                    item,
                    "expected \"ADDRESS:PORT\", e.g. \"192.0.2.53:53\" or \"[2001:db8::53]:53\"",
                );
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

/// A name written with or without its final dot, returned absolute and in lower case.
fn absolute_name(r: &mut Reader<'_>, item: &Item<String>) -> Option<String> {
    if item.v.ends_with("..") || !is_dns_name(&item.v) {
        r.bad(
            item,
            "expected a DNS name: labels of letters, digits and inner '-', joined by dots",
        );
        return None;
    }
    let lower = item.v.to_ascii_lowercase();
    Some(if lower.ends_with('.') {
        lower
    } else {
        format!("{lower}.")
    })
}

/// `None`: the key is absent; `Some(None)`: present and wrong (reported).
fn seconds(r: &mut Reader<'_>, t: &Table<'_, '_>, key: &str) -> Option<Option<u32>> {
    let item = r.string(t, key)?;
    Some(ttl_value(r, &item))
}

/// A TTL: a duration in whole seconds, from 0 to a day.
pub(super) fn ttl_value(r: &mut Reader<'_>, item: &Item<String>) -> Option<u32> {
    let max = Duration::from_secs(u64::from(Dns::MAX_TTL));
    match parse_duration(&item.v) {
        Some(d) if d.subsec_millis() == 0 && d <= max => u32::try_from(d.as_secs()).ok(),
        _ => {
            r.bad(item, "expected whole seconds from \"0s\" to \"86400s\" (a day)");
            None
        }
    }
}

/// A profile's `dns_name`: one or more labels under the zone, stored in lower case.
pub(super) fn dns_name(r: &mut Reader<'_>, t: &Table<'_, '_>) -> Option<Option<String>> {
    let Some(item) = r.string(t, "dns_name") else {
        return Some(None);
    };
    if item.v.ends_with('.') || !is_dns_name(&item.v) {
        r.bad(
            &item,
            "expected a name relative to [dns].zone, without a final dot: labels of letters, digits and inner '-'",
        );
        return None;
    }
    Some(Some(item.v.to_ascii_lowercase()))
}

/// Once every profile is read: each one's name in the zone is a DNS name and no two share one.
/// `spans[i]` is where profile `i` was written. Profiles are checked only when the file has
/// `[dns]`.
pub(super) fn profile_names(
    r: &mut Reader<'_>,
    dns: &Dns,
    profiles: &[Option<Profile>],
    spans: &[std::ops::Range<usize>],
) {
    let mut taken: HashMap<String, &str> = HashMap::new();
    let servers: Vec<&NameServer> = dns.nameservers.iter().filter(|ns| !ns.addresses.is_empty()).collect();
    for ns in &servers {
        taken.insert(ns.name.clone(), "");
    }
    for (i, (p, span)) in profiles.iter().zip(spans).enumerate() {
        let Some(p) = p else { continue };
        let field = format!("profile[{i}].dns_name");
        if p.dns_name.is_none() && (p.name.ends_with('.') || !is_dns_name(&p.name)) {
            let problem = "this profile's name is not a DNS name; give the profile a dns_name";
            r.error(span.clone(), &field, Some(format!("{:?}", p.name)), problem);
            continue;
        }
        let name = dns.name_of(p);
        if name.len() > crate::rules::limits::MAX_HOST_LEN {
            let problem = "the name under the zone is longer than 253 characters";
            r.error(span.clone(), &field, Some(format!("{name:?}")), problem);
        } else if let Some(other) = taken.insert(name.clone(), &p.name) {
            let problem = if other.is_empty() {
                "a [[dns.nameserver]] has this name; give the profile another dns_name".to_string()
            } else {
                format!("profile {other:?} already answers to this name; give one of them another dns_name")
            };
            r.error(span.clone(), &field, Some(format!("{name:?}")), problem);
        }
    }
}
