//! `[source]`: the interfaces and addresses probes leave from, their port range and the XDP
//! attach mode.
use std::net::IpAddr;

use toml::de::DeValue;

use super::opt_table;
use crate::config::{
    model::*,
    read::{Item, Reader},
};
use crate::kernel::AttachMode;

/// The kernel's default `net.ipv4.ip_local_port_range`; probe ports must stay clear of it so
/// probes never collide with the node's own outgoing connections.
const EPHEMERAL: (u16, u16) = (32768, 60999);
const DEFAULT_PORTS: PortRange = PortRange {
    first: 61000,
    last: 65095,
};

pub(super) fn source(r: &mut Reader<'_>, v: Option<&toml::Spanned<DeValue<'_>>>) -> Option<Source> {
    let keys = ["interfaces", "addresses", "port_range", "xdp_mode"];
    let Some(t) = opt_table(r, v, "source", &keys)? else {
        return Some(Source {
            interfaces: Vec::new(),
            addresses: Vec::new(),
            ports: DEFAULT_PORTS,
            xdp_mode: AttachMode::Auto,
        });
    };
    let mut ok = true;
    let mut interfaces = Vec::new();
    for item in r.strings(&t, "interfaces").map(|l| l.v).unwrap_or_default() {
        let name = &item.v;
        // IFNAMSIZ is 16 including the terminating NUL.
        let valid = !name.is_empty()
            && name.len() <= 15
            && name.bytes().all(|b| b.is_ascii_graphic() && b != b'/' && b != b':');
        if valid {
            interfaces.push(name.clone());
        } else {
            r.bad(
                &item,
                "expected an interface name of 1-15 characters without '/', ':' or spaces",
            );
            ok = false;
        }
    }
    let mut addresses = Vec::new();
    for item in r.strings(&t, "addresses").map(|l| l.v).unwrap_or_default() {
        match item.v.parse::<IpAddr>() {
            Ok(ip) if !ip.is_unspecified() && !ip.is_multicast() => addresses.push(ip),
            _ => {
                r.bad(&item, "expected a unicast IPv4 or IPv6 address");
                ok = false;
            }
        }
    }
    let ports = match r.string(&t, "port_range") {
        None => Some(DEFAULT_PORTS),
        Some(item) => port_range(r, &item),
    };
    let xdp_mode = match r.string(&t, "xdp_mode") {
        None => Some(AttachMode::Auto),
        Some(item) => {
            let mode = AttachMode::parse(&item.v);
            if mode.is_none() {
                r.bad(
                    &item,
                    "expected \"auto\" (native XDP when the driver takes it, else generic), \"driver\" or \"skb\"",
                );
            }
            mode
        }
    };
    ok.then_some(())?;
    Some(Source {
        interfaces,
        addresses,
        ports: ports?,
        xdp_mode: xdp_mode?,
    })
}

fn port_range(r: &mut Reader<'_>, item: &Item<String>) -> Option<PortRange> {
    let parsed = item
        .v
        .split_once('-')
        .and_then(|(a, b)| Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?)));
    let Some((first, last)) = parsed.filter(|(a, b)| a <= b && *a >= 1024) else {
        r.bad(
            item,
            "expected \"FIRST-LAST\" with 1024 <= FIRST <= LAST <= 65535, e.g. \"61000-65095\"",
        );
        return None;
    };
    if first <= EPHEMERAL.1 && last >= EPHEMERAL.0 {
        r.bad(
            item,
            format!(
                "overlaps the kernel's ephemeral port range {}-{}; use ports above {}, e.g. \"61000-65095\"",
                EPHEMERAL.0, EPHEMERAL.1, EPHEMERAL.1
            ),
        );
        return None;
    }
    Some(PortRange { first, last })
}
