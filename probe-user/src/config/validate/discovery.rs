//! `[profile.discovery]`: the name a profile with `endpoints_from = "dns"` takes its endpoints
//! from, which records, the resolvers asked and how often (`crate::discovery` asks).
use std::{
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use toml::de::DeValue;

use super::cluster::bounded_duration;
use crate::config::{
    model::{Discovery, DiscoveryRecords},
    read::{Reader, Table},
    reference,
};

/// At most this many resolvers: each one that does not answer costs a `timeout`.
const MAX_RESOLVERS: usize = 8;
const HOUR: Duration = Duration::from_secs(3_600);

pub(super) fn discovery(r: &mut Reader<'_>, v: &toml::Spanned<DeValue<'_>>, path: String) -> Option<Discovery> {
    let t = r.table(v, path, &reference::DISCOVERY)?;
    let name = match r.string(&t, "name") {
        None => {
            r.missing(&t, "name", "the DNS name whose records are the profile's endpoints");
            None
        }
        Some(item) => {
            let bare = item.v.strip_suffix('.').unwrap_or(&item.v);
            if is_lookup_name(bare) {
                Some(format!("{}.", bare.to_ascii_lowercase()))
            } else {
                r.bad(
                    &item,
                    "expected a fully qualified DNS name, like \"web.svc.example.com\" or \"_http._tcp.web.example.com\" \
                     (a final dot is allowed)",
                );
                None
            }
        }
    };
    let records = match r.string(&t, "type") {
        None => Some(DiscoveryRecords::Both),
        Some(item) => DiscoveryRecords::parse(&item.v).or_else(|| {
            r.bad(&item, "expected \"A\", \"AAAA\", \"A+AAAA\" or \"SRV\"");
            None
        }),
    };
    let port = match (r.int(&t, "port"), records) {
        (None, Some(DiscoveryRecords::Srv)) => Some(None),
        // No type to read it against (refused for that).
        (None, None) => None,
        (None, Some(_)) => {
            r.missing(&t, "port", "A and AAAA records carry no port: set the endpoints' port");
            None
        }
        (Some(item), Some(DiscoveryRecords::Srv)) => {
            r.bad(&item, "SRV records carry each endpoint's port: leave port out");
            None
        }
        (Some(item), _) => match u16::try_from(item.v).ok().filter(|p| *p != 0) {
            Some(p) => Some(Some(p)),
            None => {
                r.bad(&item, "expected a port from 1 to 65535");
                None
            }
        },
    };
    let resolvers = resolvers(r, &t);
    let second = Duration::from_secs(1);
    let min_ttl = bounded_duration(r, &t, "min_ttl", second, (second, HOUR));
    // Left out, it is no shorter than min_ttl.
    let default_max = min_ttl.unwrap_or(second).max(Duration::from_secs(60));
    let max_ttl = bounded_duration(r, &t, "max_ttl", default_max, (second, HOUR));
    if let (Some(lo), Some(hi)) = (min_ttl, max_ttl) {
        if hi < lo {
            if let Some(item) = r.string(&t, "max_ttl") {
                r.bad(&item, format!("max_ttl ({hi:?}) is below min_ttl ({lo:?})"));
            }
            return None;
        }
    }
    let timeout = bounded_duration(
        r,
        &t,
        "timeout",
        second,
        (Duration::from_millis(100), Duration::from_secs(10)),
    );
    Some(Discovery {
        name: name?,
        records: records?,
        port: port?,
        resolvers: resolvers?,
        min_ttl: min_ttl?,
        max_ttl: max_ttl?,
        timeout: timeout?,
    })
}

/// A name to look up: two labels or more of letters, digits, '-' and '_' (SRV names start
/// with `_service._proto`), 1 to 63 bytes each, 253 in all.
fn is_lookup_name(name: &str) -> bool {
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    (1..=253).contains(&name.len()) && name.contains('.') && name.split('.').all(label_ok)
}

/// `resolvers`: addresses, each with an optional port (53 by default).
fn resolvers(r: &mut Reader<'_>, t: &Table<'_, '_>) -> Option<Vec<SocketAddr>> {
    let Some(list) = r.strings(t, "resolvers") else {
        r.missing(
            t,
            "resolvers",
            "the resolvers to ask, like [\"127.0.0.53\"] (the node's own) or [\"192.0.2.53:53\"]",
        );
        return None;
    };
    if list.v.is_empty() || list.v.len() > MAX_RESOLVERS {
        r.bad(&list, format!("expected 1 to {MAX_RESOLVERS} resolvers"));
        return None;
    }
    let mut out = Vec::with_capacity(list.v.len());
    let mut ok = true;
    for item in &list.v {
        match resolver(&item.v) {
            Some(a) if !out.contains(&a) => out.push(a),
            Some(_) => {
                r.bad(item, "this resolver is listed twice");
                ok = false;
            }
            None => {
                r.bad(
                    item,
                    "expected an address, with a port or not: \"192.0.2.53\", \"192.0.2.53:5353\", \"2001:db8::53\" \
                     or \"[2001:db8::53]:5353\"",
                );
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

/// "ADDRESS" (port 53) or "ADDRESS:PORT" ("[V6]:PORT").
fn resolver(s: &str) -> Option<SocketAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, 53));
    }
    s.parse::<SocketAddr>().ok().filter(|a| a.port() != 0)
}

#[cfg(test)]
mod tests {
    use super::{is_lookup_name, resolver};

    #[test]
    fn resolvers_take_port_53_unless_told() {
        assert_eq!(resolver("192.0.2.53"), Some("192.0.2.53:53".parse().unwrap()));
        assert_eq!(resolver("2001:db8::53"), Some("[2001:db8::53]:53".parse().unwrap()));
        assert_eq!(
            resolver("[2001:db8::53]:5353"),
            Some("[2001:db8::53]:5353".parse().unwrap())
        );
        assert_eq!(resolver("192.0.2.53:0"), None);
        assert_eq!(resolver("ns.example"), None);
    }

    #[test]
    fn lookup_names_take_srv_labels() {
        assert!(is_lookup_name("_http._tcp.web.example"));
        assert!(is_lookup_name("web.svc.example"));
        assert!(!is_lookup_name("web"));
        assert!(!is_lookup_name("web..example"));
        assert!(!is_lookup_name("-web.example"));
        assert!(!is_lookup_name("we b.example"));
    }
}
