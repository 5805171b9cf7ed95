//! `[[dns.region]]`: the sources each region holds, by subnet, country or continent.
use std::collections::{HashMap, HashSet};

use ipnet::IpNet;
use toml::de::DeValue;

use crate::{
    config::{
        model::DnsRegion,
        read::{Reader, Table},
        reference,
    },
    status::routing::WORLD_REGION,
};

/// The continent codes of MaxMind's databases.
const CONTINENTS: [&str; 7] = ["AF", "AN", "AS", "EU", "NA", "OC", "SA"];

pub(super) fn regions(
    r: &mut Reader<'_>,
    v: Option<&toml::Spanned<DeValue<'_>>>,
    geoip: bool,
) -> Option<Vec<DnsRegion>> {
    let Some(v) = v else {
        return Some(Vec::new());
    };
    let items = r.tables_of(v, "dns.region", "expected [[dns.region]] tables")?;
    let mut names = HashSet::new();
    let mut owner: HashMap<IpNet, String> = HashMap::new();
    let mut code_owner: HashMap<String, String> = HashMap::new();
    let mut out = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let Some(t) = r.table(item, format!("dns.region[{i}]"), &reference::REGION) else {
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
            Some(item) if !super::super::valid_name(&item.v) || item.v.bytes().any(|b| b.is_ascii_uppercase()) => {
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
