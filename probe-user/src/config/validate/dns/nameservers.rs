//! `[[dns.nameserver]]`: the zone's NS records, and the addresses of those inside the zone.
use std::{
    collections::HashSet,
    net::{IpAddr, SocketAddr},
};

use super::absolute_name;
use crate::config::{
    model::NameServer,
    read::{Reader, Table},
    reference,
};

/// The name servers, or the default: `ns1.<zone>` at the `listen` addresses that are not
/// wildcards.
pub(super) fn nameservers(
    r: &mut Reader<'_>,
    t: &Table<'_, '_>,
    zone: &str,
    listen: &[SocketAddr],
) -> Option<Vec<NameServer>> {
    let Some(v) = Reader::get(t, "nameserver") else {
        return default(r, t, zone, listen);
    };
    let items = r.tables_of(
        v,
        "dns.nameserver",
        "expected [[dns.nameserver]] tables, each with a name and (inside the zone) addresses",
    )?;
    if items.is_empty() {
        r.error(v.span(), "dns.nameserver", None, "expected at least one name server");
        return None;
    }
    let mut names = HashSet::new();
    let mut out = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let Some(t) = r.table(item, format!("dns.nameserver[{i}]"), &reference::NAMESERVER) else {
            ok = false;
            continue;
        };
        match one(r, &t, zone, &mut names) {
            Some(ns) => out.push(ns),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

fn one(r: &mut Reader<'_>, t: &Table<'_, '_>, zone: &str, names: &mut HashSet<String>) -> Option<NameServer> {
    let Some(item) = r.string(t, "name") else {
        r.missing(
            t,
            "name",
            "every name server needs its name, e.g. name = \"ns1.tm.example.\"",
        );
        return None;
    };
    let name = absolute_name(r, &item)?;
    if !names.insert(name.clone()) {
        r.bad(&item, "another [[dns.nameserver]] has this name");
        return None;
    }
    if name == zone {
        r.bad(
            &item,
            "the zone's apex cannot be a name server's name here (it would need addresses at the apex)",
        );
        return None;
    }
    let inside = name.ends_with(&format!(".{zone}"));
    let addresses = match r.strings(t, "addresses") {
        None if inside => {
            r.missing(
                t,
                "addresses",
                format!(
                    "{name} is inside the zone, so the zone must answer for its addresses: \
                     list them, e.g. addresses = [\"192.0.2.53\", \"2001:db8::53\"]"
                ),
            );
            return None;
        }
        None => Vec::new(),
        Some(list) if !inside => {
            r.bad(
                &list,
                format!("{name} is outside the zone: its own zone answers for its addresses; remove them"),
            );
            return None;
        }
        Some(list) if list.v.is_empty() => {
            r.bad(&list, "expected at least one address");
            return None;
        }
        Some(list) => {
            let mut out = Vec::new();
            for a in &list.v {
                match a.v.parse::<IpAddr>() {
                    Ok(ip) if ip.is_unspecified() || ip.is_multicast() => {
                        r.bad(a, "expected an address resolvers can send queries to");
                    }
                    Ok(ip) if out.contains(&ip) => r.bad(a, "listed twice"),
                    Ok(ip) => out.push(ip),
                    Err(_) => r.bad(a, "expected an IPv4 or IPv6 address, e.g. \"192.0.2.53\""),
                }
            }
            if out.len() != list.v.len() {
                return None;
            }
            out
        }
    };
    Some(NameServer { name, addresses })
}

fn default(r: &mut Reader<'_>, t: &Table<'_, '_>, zone: &str, listen: &[SocketAddr]) -> Option<Vec<NameServer>> {
    let mut addresses: Vec<IpAddr> = Vec::new();
    for a in listen.iter().map(SocketAddr::ip).filter(|ip| !ip.is_unspecified()) {
        if !addresses.contains(&a) {
            addresses.push(a);
        }
    }
    if addresses.is_empty() {
        r.missing(
            t,
            "nameserver",
            format!(
                "the zone's name server defaults to ns1.{zone} at the listen addresses, but they are \
                 wildcards: add [[dns.nameserver]] with name and addresses"
            ),
        );
        return None;
    }
    Some(vec![NameServer {
        name: format!("ns1.{zone}"),
        addresses,
    }])
}
