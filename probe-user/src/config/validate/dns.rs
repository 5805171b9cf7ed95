//! `[dns]` and the profiles' `dns_name`/`dns_ttl`: where the authoritative server listens, the
//! zone it answers for, its TTLs and name servers, and the regions geographic routing maps
//! sources to. Each profile's name in the zone is checked here, once every profile is read.
use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    time::Duration,
};

use ipnet::IpNet;
use toml::de::DeValue;

use super::opt_table;
use crate::{
    config::{
        model::*,
        read::{parse_duration, Item, Reader, Table},
    },
    rules::is_dns_name,
    status::select::WORLD_REGION,
};

const DNS_KEYS: [&str; 7] = [
    "listen",
    "zone",
    "ttl",
    "negative_ttl",
    "nameservers",
    "region",
    "geoip_db",
];
const REGION_KEYS: [&str; 4] = ["name", "subnets", "countries", "continents"];
/// The continent codes of MaxMind's databases.
const CONTINENTS: [&str; 7] = ["AF", "AN", "AS", "EU", "NA", "OC", "SA"];

pub(super) fn dns(r: &mut Reader<'_>, v: Option<&toml::Spanned<DeValue<'_>>>) -> Option<Option<Dns>> {
    let Some(t) = opt_table(r, v, "dns", &DNS_KEYS)? else {
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
    let nameservers = match r.strings(&t, "nameservers") {
        None => zone.as_ref().map(|z| vec![format!("ns1.{z}")]),
        Some(list) if list.v.is_empty() => {
            r.bad(&list, "expected at least one name server, or no nameservers key");
            None
        }
        Some(list) => list.v.iter().map(|item| absolute_name(r, item)).collect(),
    };
    let geoip_db = match r.string(&t, "geoip_db") {
        None => Some(None),
        Some(item) if item.v.starts_with('/') => Some(Some(std::path::PathBuf::from(&item.v))),
        Some(item) => {
            r.bad(&item, "expected an absolute path to a MaxMind-format (.mmdb) database");
            None
        }
    };
    let regions = regions(r, Reader::get(&t, "region"), Reader::get(&t, "geoip_db").is_some());
    let ttl = ttl?;
    Some(Some(Dns {
        listen: listen?,
        zone: zone?,
        ttl,
        negative_ttl: negative_ttl.unwrap_or(Some(ttl))?,
        nameservers: nameservers?,
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

fn regions(r: &mut Reader<'_>, v: Option<&toml::Spanned<DeValue<'_>>>, geoip: bool) -> Option<Vec<DnsRegion>> {
    let Some(v) = v else {
        return Some(Vec::new());
    };
    let DeValue::Array(items) = v.get_ref() else {
        r.error(
            v.span(),
            "dns.region",
            Some(crate::config::read::show(v.get_ref())),
            "expected [[dns.region]] tables",
        );
        return None;
    };
    let mut names = HashSet::new();
    let mut owner: HashMap<IpNet, String> = HashMap::new();
    let mut code_owner: HashMap<String, String> = HashMap::new();
    let mut out = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let Some(t) = r.table(item, format!("dns.region[{i}]"), &REGION_KEYS) else {
            ok = false;
            continue;
        };
        let name = match r.string(&t, "name") {
            None => {
                r.missing(
                    &t,
                    "name",
                    "every region needs a name, the one endpoints give as region",
                );
                None
            }
            Some(item) if item.v == WORLD_REGION => {
                r.bad(
                    &item,
                    format!("{WORLD_REGION:?} is every source no region holds; it needs no subnets"),
                );
                None
            }
            Some(item) if !super::valid_name(&item.v) || item.v.bytes().any(|b| b.is_ascii_uppercase()) => {
                r.bad(&item, "expected a lower-case region name like \"eu-west\"");
                None
            }
            Some(item) if !names.insert(item.v.clone()) => {
                r.bad(&item, "another [[dns.region]] has this name");
                None
            }
            Some(item) => Some(item.v),
        };
        let countries = codes(r, &t, "countries", geoip, |c| {
            c.len() == 2 && c.bytes().all(|b| b.is_ascii_uppercase())
        });
        let continents = codes(r, &t, "continents", geoip, |c| CONTINENTS.contains(&c));
        for (key, list) in [("countries", &countries), ("continents", &continents)] {
            for code in list.iter().flatten() {
                let region = name.clone().unwrap_or_default();
                if let Some(other) = code_owner.insert(code.clone(), region) {
                    r.missing(&t, key, format!("{code} is in region {other:?} already"));
                }
            }
        }
        let subnets = match r.strings(&t, "subnets") {
            // Countries or continents instead (reported above when they are wrong).
            None if Reader::get(&t, "countries").is_some() || Reader::get(&t, "continents").is_some() => {
                Some(Vec::new())
            }
            None => {
                r.missing(
                    &t,
                    "subnets",
                    "a region is the sources in its subnets, countries or continents: list at least one",
                );
                None
            }
            Some(list) => {
                let mut nets = Vec::new();
                for item in &list.v {
                    match item.v.parse::<IpNet>() {
                        Ok(net) => {
                            let net = net.trunc();
                            if let Some(other) = owner.insert(net, name.clone().unwrap_or_default()) {
                                r.bad(item, format!("region {other:?} already holds this subnet"));
                            }
                            nets.push(net);
                        }
                        Err(_) => r.bad(item, "expected a CIDR like \"10.0.0.0/8\" or \"2001:db8::/32\""),
                    }
                }
                Some(nets)
            }
        };
        match (name, subnets, countries, continents) {
            (Some(name), Some(subnets), Some(countries), Some(continents)) => out.push(DnsRegion {
                name,
                subnets,
                countries,
                continents,
            }),
            _ => ok = false,
        }
    }
    ok.then_some(out)
}

/// `countries` or `continents` of a region: codes `valid` accepts, which only a GeoIP
/// database can match a source to.
fn codes(
    r: &mut Reader<'_>,
    t: &Table<'_, '_>,
    key: &str,
    geoip: bool,
    valid: impl Fn(&str) -> bool,
) -> Option<Vec<String>> {
    let Some(list) = r.strings(t, key) else {
        return Some(Vec::new());
    };
    if !geoip {
        r.bad(
            &list,
            "only a GeoIP database tells a source's country or continent: set dns.geoip_db",
        );
        return None;
    }
    let mut out = Vec::new();
    for item in &list.v {
        if valid(&item.v) {
            out.push(item.v.clone());
        } else if key == "countries" {
            r.bad(item, "expected an ISO 3166-1 alpha-2 code in upper case, like \"DE\"");
        } else {
            r.bad(item, format!("expected one of {}", CONTINENTS.join(", ")));
        }
    }
    (out.len() == list.v.len()).then_some(out)
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
            let problem = format!("profile {other:?} already answers to this name; give one of them another dns_name");
            r.error(span.clone(), &field, Some(format!("{name:?}")), problem);
        }
    }
}
