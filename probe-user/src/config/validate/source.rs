//! `[source]`: the interfaces and addresses probes leave from, their port range, the hook the
//! reply matcher runs at and the XDP attach mode.
use std::net::IpAddr;

use toml::de::DeValue;

use super::opt_table;
use crate::config::{
    model::*,
    read::{Item, Reader},
    reference,
};
use crate::kernel::{AttachMode, Hook};

/// The kernel's default `net.ipv4.ip_local_port_range`; probe ports must stay clear of it so
/// probes never collide with the node's own outgoing connections.
const EPHEMERAL: (u16, u16) = (32768, 60999);
const DEFAULT_PORTS: PortRange = PortRange {
    first: 61000,
    last: 65095,
};

pub(super) const INTERFACE_RULE: &str = "expected an interface name of 1-15 characters without '/', ':' or spaces";

/// Whether `name` can be an interface's: IFNAMSIZ is 16 including the terminating NUL.
pub(super) fn interface_name_ok(name: &str) -> bool {
    !name.is_empty() && name.len() <= 15 && name.bytes().all(|b| b.is_ascii_graphic() && b != b'/' && b != b':')
}

pub(super) fn source(r: &mut Reader<'_>, v: Option<&toml::Spanned<DeValue<'_>>>) -> Option<Source> {
    let Some(t) = opt_table(r, v, "source", &reference::SOURCE)? else {
        return Some(Source {
            interfaces: Vec::new(),
            addresses: Vec::new(),
            ports: DEFAULT_PORTS,
            xdp_mode: AttachMode::Auto,
            hook: Hook::Xdp,
        });
    };
    let mut ok = true;
    let mut interfaces = Vec::new();
    for item in r.strings(&t, "interfaces").map(|l| l.v).unwrap_or_default() {
        if interface_name_ok(&item.v) {
            interfaces.push(item.v.clone());
        } else {
            r.bad(&item, INTERFACE_RULE);
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
    let hook = match r.string(&t, "hook") {
        None => Some(Hook::Xdp),
        Some(item) => {
            let hook = Hook::parse(&item.v);
            if hook.is_none() {
                r.bad(
                    &item,
                    "expected \"xdp\" (the reply matcher owns the interface's XDP hook) or \"tcx\" \
                     (tc ingress, beside another XDP program; Linux 6.6+)",
                );
            }
            hook
        }
    };
    ok.then_some(())?;
    Some(Source {
        interfaces,
        addresses,
        ports: ports?,
        xdp_mode: xdp_mode?,
        hook: hook?,
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
