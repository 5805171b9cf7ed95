//! `kind = "route"`: the prefixes a VIP is announced with, and where and how their routes are
//! written. What the reader cannot check here (a prefix or a device in two route sinks) is
//! checked over all sinks by `unique_routes`.
use std::time::Duration;

use ipnet::IpNet;

use serde::Serialize;

use crate::{
    rules::SinkType,
    schema::{
        keys::{
            said, words,
            Allowed::{Int, Millis},
            Key,
            Reload::Applies,
            Type::{self, Integer, Strings},
            Unset::{Required, Value},
        },
        read::{parse_duration, Reader, Table},
    },
};

/// Routes to a VIP's prefixes in a kernel routing table, which the node's routing daemon
/// (BIRD, FRR) learns and announces by BGP, while the profile can serve (`sinks::route`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteSink {
    /// What is announced, usually one /32 or /128 per VIP; host bits clear.
    pub prefixes: Vec<IpNet>,
    /// The TUN device the routes go through, which probed makes and which goes with it.
    pub device: String,
    pub kernel_table: u32,
    /// The route protocol number the routing daemon selects probed's routes by.
    pub route_protocol: u8,
    pub metric: u32,
    /// Below `min_eligible`, announce with this metric instead of withdrawing (None:
    /// withdraw).
    pub demote_metric: Option<u32>,
    /// Serving endpoints (`sinks::route::decide`) needed to announce.
    pub min_eligible: u32,
    /// The announcement changes at most once per this; a better state must hold this long.
    pub hold_down: Duration,
}

/// Its keys.
pub const KEYS: &[Key] = &[
        Key::new(
            "prefixes",
            Strings,
            Required,
            words("1 to 64 IPv4 or IPv6 prefixes (a VIP: /32 or /128) with their host bits clear, each in one route sink only"),
            Applies,
            "What the node announces while the profile can serve: a route to each prefix in kernel_table, \
             which the routing daemon (BIRD, FRR) learns and announces by BGP.",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "device",
            Type::String,
            said("\"probed-\" and the sink's name"),
            words("1 to 15 letters, digits, '_' or '-'; unique among route sinks"),
            Applies,
            "The TUN device the routes go through. probed makes it, and it goes when probed ends, \
             however it ends (stop, SIGKILL, OOM, panic): the kernel removes its routes, and the routing \
             daemon withdraws them.",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "kernel_table",
            Integer,
            Value("201"),
            Int(1, 4_294_967_294),
            Applies,
            "The kernel routing table the routes are written to (BIRD: kernel table; FRR: ip \
             import-table). Not the main table: nothing on the node forwards by it.",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "route_protocol",
            Integer,
            Value("201"),
            Int(5, 254),
            Applies,
            "The routes' protocol number (ip route ... proto N), by which the routing daemon picks \
             probed's routes (BIRD: krt_source = N).",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "metric",
            Integer,
            Value("100"),
            Int(0, 4_294_967_295),
            Applies,
            "The metric of an announced route (BIRD: krt_metric).",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "demote_metric",
            Integer,
            said("none: below min_eligible the routes are withdrawn"),
            words("0 to 4294967295, not metric"),
            Applies,
            "Below min_eligible serving endpoints (but some enabled), keep the routes with this metric \
             instead of withdrawing them; the routing daemon's export filter maps it to worse attributes \
             (a community, AS-path prepending), so traffic still lands here when no node announces \
             better. A disabled profile and a stop still withdraw.",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "min_eligible",
            Integer,
            Value("1"),
            Int(1, 100_000),
            Applies,
            "Serving endpoints needed to announce: eligible and Online, or Unmonitored (always-serve). \
             Degraded endpoints made eligible by fail-open and endpoints still being checked do not \
             count.",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "hold_down",
            Type::Duration,
            Value("\"5s\""),
            Millis(0, 3_600_000),
            Applies,
            "The announcement changes at most once per hold_down, and a better state (withdrawn to \
             demoted to announced) must hold this long without a break first; a worse one is applied \
             as soon as the rate allows. A start resumes the saved health at once.",
        )
        .sinks(&[SinkType::Route], ""),
];

const MAX_PREFIXES: usize = 64;
const MAX_HOLD_DOWN: Duration = Duration::from_secs(3600);
const DEFAULT_HOLD_DOWN: Duration = Duration::from_secs(5);
const DEFAULT_TABLE: u32 = 201;
const DEFAULT_PROTOCOL: u8 = 201;
const DEFAULT_METRIC: u32 = 100;
const DEVICE_RULE: &str = "expected 1 to 15 letters, digits, '_' or '-' (an interface name)";

/// `kind = "route"` of sink `index`; its default name is "route". `name` is the sink's own,
/// when given, for the device's default name.
pub(crate) fn read(
    r: &mut Reader<'_>,
    t: &Table<'_, '_>,
    (index, name): (usize, Option<&str>),
    claims: &mut Claims,
) -> (Option<RouteSink>, Option<String>) {
    let prefixes = prefixes(r, t, index, claims);
    let device = device(r, t, name.unwrap_or("route"), index, claims);
    let kernel_table = int_in(r, t, "kernel_table", 1, u32::MAX - 1, DEFAULT_TABLE);
    let route_protocol =
        int_in(r, t, "route_protocol", 5, 254, DEFAULT_PROTOCOL.into()).map(|v| u8::try_from(v).expect("in range"));
    let metric = int_in(r, t, "metric", 0, u32::MAX, DEFAULT_METRIC);
    let demote_metric = match r.int(t, "demote_metric") {
        None => Some(None),
        Some(item) => match u32::try_from(item.v) {
            Ok(v) if Some(v) == metric => {
                r.bad(
                    &item,
                    "expected a metric other than metric: a demoted route must differ from an announced one",
                );
                None
            }
            Ok(v) => Some(Some(v)),
            Err(_) => {
                r.bad(&item, "expected 0 to 4294967295");
                None
            }
        },
    };
    let min_eligible = int_in(r, t, "min_eligible", 1, 100_000, 1);
    let hold_down = match r.string(t, "hold_down") {
        None => Some(DEFAULT_HOLD_DOWN),
        Some(item) => match parse_duration(&item.v) {
            Some(d) if d <= MAX_HOLD_DOWN => Some(d),
            _ => {
                r.bad(&item, "expected a duration from \"0s\" to \"1h\", like \"5s\"");
                None
            }
        },
    };
    let kind = (|| {
        Some(RouteSink {
            prefixes: prefixes?,
            device: device?,
            kernel_table: kernel_table?,
            route_protocol: route_protocol?,
            metric: metric?,
            demote_metric: demote_metric?,
            min_eligible: min_eligible?,
            hold_down: hold_down?,
        })
    })();
    (kind, Some("route".into()))
}

fn int_in(r: &mut Reader<'_>, t: &Table<'_, '_>, key: &str, min: u32, max: u32, default: u32) -> Option<u32> {
    match r.int(t, key) {
        None => Some(default),
        Some(item) => match u32::try_from(item.v).ok().filter(|v| (min..=max).contains(v)) {
            Some(v) => Some(v),
            None => {
                r.bad(&item, format!("expected {min} to {max}"));
                None
            }
        },
    }
}

fn prefixes(r: &mut Reader<'_>, t: &Table<'_, '_>, index: usize, claims: &mut Claims) -> Option<Vec<IpNet>> {
    let Some(list) = r.strings(t, "prefixes") else {
        if Reader::get(t, "prefixes").is_none() {
            r.missing(
                t,
                "prefixes",
                "a route sink needs prefixes = [\"VIP/32\", ...], what the node announces",
            );
        }
        return None;
    };
    if list.v.is_empty() || list.v.len() > MAX_PREFIXES {
        r.bad(&list, format!("expected 1 to {MAX_PREFIXES} prefixes"));
        return None;
    }
    let mut out: Vec<IpNet> = Vec::new();
    let mut ok = true;
    for item in &list.v {
        match prefix(&item.v) {
            Err(problem) => {
                r.bad(item, problem);
                ok = false;
            }
            Ok(net) if out.contains(&net) => {
                r.bad(item, "this prefix is already in the list");
                ok = false;
            }
            Ok(net) => match claims.prefixes.iter().find(|(p, _)| *p == net) {
                Some((_, other)) => {
                    r.bad(
                        item,
                        format!("sink[{other}] announces it too: give each prefix one route sink"),
                    );
                    ok = false;
                }
                None => {
                    claims.prefixes.push((net, index));
                    out.push(net);
                }
            },
        }
    }
    ok.then_some(out)
}

/// A prefix as written: an address alone is its /32 or /128.
fn prefix(text: &str) -> Result<IpNet, String> {
    let net = match text.parse::<IpNet>() {
        Ok(net) => net,
        Err(_) => match text.parse::<std::net::IpAddr>() {
            Ok(addr) => IpNet::from(addr),
            Err(_) => return Err("expected an IPv4 or IPv6 prefix, like \"198.51.100.10/32\"".into()),
        },
    };
    if net.trunc() != net {
        return Err(format!(
            "expected the prefix's network address: {} has host bits set (did you mean {}?)",
            net,
            net.trunc()
        ));
    }
    Ok(net)
}

fn device(r: &mut Reader<'_>, t: &Table<'_, '_>, name: &str, index: usize, claims: &mut Claims) -> Option<String> {
    let ok = |d: &str| {
        (1..=crate::kernel::tun::MAX_NAME).contains(&d.len())
            && d.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    let taken = |d: &str| claims.devices.iter().find(|(c, _)| c == d).map(|(_, i)| *i);
    let device = match r.string(t, "device") {
        Some(item) if ok(&item.v) => match taken(&item.v) {
            Some(other) => {
                r.bad(
                    &item,
                    format!("sink[{other}] uses this device too: give each route sink its own"),
                );
                None
            }
            None => Some(item.v),
        },
        Some(item) => {
            r.bad(&item, DEVICE_RULE);
            None
        }
        None => {
            let d = format!("probed-{name}");
            if !ok(&d) {
                r.missing(
                    t,
                    "device",
                    format!("the default device name {d:?} is longer than an interface name may be: set device"),
                );
                None
            } else if let Some(other) = taken(&d) {
                r.missing(t, "device", format!("sink[{other}] uses {d:?} too: set device"));
                None
            } else {
                Some(d)
            }
        }
    };
    if let Some(d) = &device {
        claims.devices.push((d.clone(), index));
    }
    device
}

/// What earlier route sinks took: a prefix in two would have each undo the other's routes,
/// and a device can be made by one only.
#[derive(Default)]
pub(crate) struct Claims {
    prefixes: Vec<(IpNet, usize)>,
    devices: Vec<(String, usize)>,
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_prefix_is_its_network_and_an_address_alone_is_a_host_route() {
        assert_eq!(super::prefix("198.51.100.10").unwrap().to_string(), "198.51.100.10/32");
        assert_eq!(super::prefix("2001:db8::1").unwrap().to_string(), "2001:db8::1/128");
        assert!(super::prefix("198.51.100.10/24")
            .unwrap_err()
            .contains("did you mean 198.51.100.0/24"));
        assert!(super::prefix("vip").is_err());
    }
}
