//! `[dns.rate_limit]` and `[dns.tcp]`: what one source may get back over UDP, and hold over
//! TCP. Both tables are optional and every key in them has a default.
use std::time::Duration;

use ipnet::IpNet;
use toml::de::DeValue;

use super::super::opt_table;
use crate::config::{
    model::{DnsRateLimit, DnsTcp},
    read::{parse_duration, Reader, Table},
    reference,
};

pub(super) fn rate_limit(r: &mut Reader<'_>, v: Option<&toml::Spanned<DeValue<'_>>>) -> Option<DnsRateLimit> {
    let d = DnsRateLimit::default();
    let Some(t) = opt_table(r, v, "dns.rate_limit", &reference::RATE_LIMIT)? else {
        return Some(d);
    };
    let rate = int(r, &t, "responses_per_second", 0, 1_000_000, "0 (off) to 1000000");
    let slip = int(r, &t, "slip", 0, 10, "0 (drop all over the limit) to 10");
    let v4 = int(r, &t, "ipv4_prefix", 8, 32, "8 to 32");
    let v6 = int(r, &t, "ipv6_prefix", 16, 128, "16 to 128");
    let exempt = match r.strings(&t, "exempt") {
        None => Some(Vec::new()),
        Some(list) => {
            let nets: Vec<IpNet> = list
                .v
                .iter()
                .filter_map(|item| match item.v.parse::<IpNet>() {
                    Ok(net) => Some(net.trunc()),
                    Err(_) => {
                        r.bad(item, "expected a CIDR like \"198.51.100.0/24\" or \"2001:db8::/32\"");
                        None
                    }
                })
                .collect();
            (nets.len() == list.v.len()).then_some(nets)
        }
    };
    Some(DnsRateLimit {
        responses_per_second: rate?.unwrap_or(d.responses_per_second),
        slip: slip?.unwrap_or(d.slip),
        ipv4_prefix: narrow(v4?, d.ipv4_prefix),
        ipv6_prefix: narrow(v6?, d.ipv6_prefix),
        exempt: exempt?,
    })
}

pub(super) fn tcp(r: &mut Reader<'_>, v: Option<&toml::Spanned<DeValue<'_>>>) -> Option<DnsTcp> {
    let d = DnsTcp::default();
    let Some(t) = opt_table(r, v, "dns.tcp", &reference::DNS_TCP)? else {
        return Some(d);
    };
    let max = DnsTcp::MAX_CLIENTS;
    let clients = int(r, &t, "max_clients", 1, max, &format!("1 to {max}"));
    let per_prefix = int(r, &t, "max_clients_per_prefix", 1, max, &format!("1 to {max}"));
    let idle = duration(
        r,
        &t,
        "idle_timeout",
        "from \"100ms\" to \"300s\"",
        Duration::from_millis(100)..=Duration::from_secs(300),
    );
    let lifetime = duration(
        r,
        &t,
        "max_lifetime",
        "from \"1s\" to \"3600s\"",
        Duration::from_secs(1)..=Duration::from_secs(3600),
    );
    let tcp = DnsTcp {
        max_clients: clients?.unwrap_or(d.max_clients),
        max_clients_per_prefix: per_prefix?.unwrap_or(d.max_clients_per_prefix),
        idle_timeout: idle?.unwrap_or(d.idle_timeout),
        max_lifetime: lifetime?.unwrap_or(d.max_lifetime),
    };
    if tcp.max_clients_per_prefix > tcp.max_clients {
        r.missing(&t, "max_clients_per_prefix", "cannot be more than max_clients");
        return None;
    }
    if tcp.idle_timeout > tcp.max_lifetime {
        r.missing(&t, "idle_timeout", "cannot be longer than max_lifetime");
        return None;
    }
    Some(tcp)
}

/// `None`: wrong (reported); `Some(None)`: absent.
fn int(r: &mut Reader<'_>, t: &Table<'_, '_>, key: &str, min: u32, max: u32, allowed: &str) -> Option<Option<u32>> {
    let Some(item) = r.int(t, key) else {
        return Some(None);
    };
    match u32::try_from(item.v).ok().filter(|v| (min..=max).contains(v)) {
        Some(v) => Some(Some(v)),
        None => {
            r.bad(&item, format!("expected a whole number from {allowed}"));
            None
        }
    }
}

fn duration(
    r: &mut Reader<'_>,
    t: &Table<'_, '_>,
    key: &str,
    allowed: &str,
    range: std::ops::RangeInclusive<Duration>,
) -> Option<Option<Duration>> {
    let Some(item) = r.string(t, key) else {
        return Some(None);
    };
    match parse_duration(&item.v).filter(|d| range.contains(d)) {
        Some(d) => Some(Some(d)),
        None => {
            r.bad(&item, format!("expected a duration {allowed}"));
            None
        }
    }
}

/// A prefix length already checked to fit.
fn narrow(v: Option<u32>, default: u8) -> u8 {
    v.and_then(|v| u8::try_from(v).ok()).unwrap_or(default)
}
