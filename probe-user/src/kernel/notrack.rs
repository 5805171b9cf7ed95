//! The nftables table that guards the probe ports on the node's output path, per family:
//! - probes that leave through the raw socket (or the stack) are kept out of conntrack:
//!   without it each leaves a SYN_SENT or UDP entry whose reply probe_rx eats in XDP, and at
//!   thousands of probes/s those entries fill the node's conntrack table;
//! - no local socket but probed's (and root's) may send from a probe port toward the probe
//!   interfaces. `ip_local_reserved_ports` only keeps the kernel from choosing those ports; an
//!   unprivileged process could still bind one explicitly and hold connections on the 4-tuples
//!   probes use, making their SYNs meet an established connection and fail. Its packets are
//!   dropped here (its `connect` fails with EPERM).
//!
//! Only the output hook: it sees the node's own packets, never the ones it forwards, so
//! client flows through the node keep conntrack (and their NAT) whatever their ports. Replies
//! to probes need no exemption: probe_rx consumes them before netfilter.
//!
//! For TCP only connection attempts (SYN without ACK) are matched: a TCP probe is a SYN and
//! nothing more leaves by this path, while a local server that listens inside the range
//! answers with SYN+ACK and ACKs, which pass untouched and keep their conntrack (issue 46,
//! L2). UDP has no such tell: a local UDP service bound inside the range loses its replies
//! over the probe interfaces (or, root's, their tracking), so the engine warns at start about
//! every socket bound there (`warn_bound_in_range`). Only the families probed have rules.
//!
//! Why a rule and not holding the ports: holding 4,096 ports for each of TCP and UDP and each
//! family is 16k descriptors taken from the daemon's budget, and a socket that binds with
//! SO_REUSEADDR beside a held, unconnected TCP port still gets it.
use std::{net::IpAddr, os::unix::ffi::OsStrExt, path::Path};

use super::nft::{Nft, NftError};

/// The table's name for an engine pinned at `pin_dir`.
///
/// Named per pin directory rather than shared and reference-counted: a count would live in
/// one process only, while two daemons (or two test engines) in one namespace each have a pin
/// directory of their own. Each owns its table and removing one leaves the other in place;
/// a daemon restarted on the same pin directory replaces what a crashed one left.
pub fn table_name(pin_dir: &Path) -> String {
    let hash = crate::hash::stable(pin_dir.as_os_str().as_bytes());
    format!("probed_notrack_{:08x}", hash >> 32)
}

/// What the rules match: the probe interfaces, source addresses (when configured: per family,
/// else any of that family) and source ports, and the uid the daemon runs as.
#[derive(Clone, Debug)]
pub struct Guard<'a> {
    pub ifaces: &'a [String],
    pub sources: &'a [IpAddr],
    pub sport_min: u16,
    pub sport_max: u16,
    pub uid: u32,
}

impl Guard<'_> {
    /// The packet selectors of the rules: per family probed (both when no source is given),
    /// TCP connection attempts and UDP datagrams from the probe ports.
    fn selectors(&self) -> Vec<String> {
        let ifaces: Vec<String> = self.ifaces.iter().map(|i| format!("\"{i}\"")).collect();
        let ports = format!("{}-{}", self.sport_min, self.sport_max);
        let mut out = Vec::new();
        for (v6, family, keyword) in [(false, "ipv4", "ip"), (true, "ipv6", "ip6")] {
            let addrs: Vec<String> = self
                .sources
                .iter()
                .filter(|a| a.is_ipv6() == v6)
                .map(ToString::to_string)
                .collect();
            let from = if !addrs.is_empty() {
                format!("{keyword} saddr {{ {} }}", addrs.join(", "))
            } else if self.sources.is_empty() {
                format!("meta nfproto {family}")
            } else {
                // Sources of the other family only: nothing of this one is probed.
                continue;
            };
            let on = format!("oifname {{ {} }} {from}", ifaces.join(", "));
            out.push(format!("{on} tcp sport {ports} tcp flags & (syn | ack) == syn"));
            out.push(format!("{on} udp sport {ports}"));
        }
        out
    }
}

/// Warns about every local socket bound inside the probe ports (TCP listening, any UDP) of the
/// families probed: the guard drops what another user's UDP socket there sends over the probe
/// interfaces and leaves root's untracked, and a TCP listener there shares its ports with the
/// probes' SYNs. Nothing is refused: such a service may never talk over those interfaces.
pub fn warn_bound_in_range(guard: &Guard) {
    use crate::kernel::sockdiag::{bound, Transport};
    let families: Vec<bool> = [false, true]
        .into_iter()
        .filter(|v6| guard.sources.is_empty() || guard.sources.iter().any(|a| a.is_ipv6() == *v6))
        .collect();
    let range = guard.sport_min..=guard.sport_max;
    for transport in [Transport::Tcp, Transport::Udp] {
        for &v6 in &families {
            let Ok(sockets) = bound(transport, v6) else {
                continue;
            };
            for s in sockets.iter().filter(|s| range.contains(&s.port)) {
                log::warn!(
                    "a local {} socket of uid {} is bound to {} port {} inside the probe ports {}-{}: \
                     {}; move the service or the probe ports ([source] port_range)",
                    if transport == Transport::Tcp { "TCP" } else { "UDP" },
                    s.uid,
                    s.addr,
                    s.port,
                    guard.sport_min,
                    guard.sport_max,
                    if transport == Transport::Tcp {
                        "its connections share 4-tuples with the probes"
                    } else if s.uid == 0 || s.uid == guard.uid {
                        "its datagrams over the probe interfaces go untracked"
                    } else {
                        "its datagrams over the probe interfaces are dropped"
                    },
                );
            }
        }
    }
}

/// The commands that (re)create the table, as one transaction: the `add`/`delete` pair
/// removes a table left by a crashed run without failing when there is none.
pub fn ruleset(name: &str, guard: &Guard) -> String {
    let mut uids = vec![0, guard.uid];
    uids.dedup();
    let uids: Vec<String> = uids.iter().map(ToString::to_string).collect();
    let mut rules = String::new();
    for sel in guard.selectors() {
        // A socket of another user: dropped. Packets without a full socket (the stack's own
        // RSTs, time-wait answers) have no uid and pass this rule.
        rules += &format!("        {sel} meta skuid != {{ {} }} counter drop\n", uids.join(", "));
        rules += &format!("        {sel} notrack\n");
    }
    format!(
        "add table inet {name}
delete table inet {name}
table inet {name} {{
    chain output {{
        type filter hook output priority raw; policy accept;
{rules}    }}
}}
"
    )
}

/// An installed table, deleted on drop. It must be dropped in the network namespace it was
/// installed in: libnftables talks to the namespace of the calling thread.
///
/// libnftables is loaded to install the table and again to delete it, not kept in between:
/// its context and the libraries it maps were ~2 MiB of the daemon's resident memory for
/// nothing while it runs.
pub struct NotrackTable {
    name: String,
}

impl NotrackTable {
    /// Installs the table in the caller's network namespace.
    pub fn install(pin_dir: &Path, guard: &Guard) -> Result<Self, NftError> {
        let name = table_name(pin_dir);
        Nft::open()?.run(&ruleset(&name, guard))?;
        Ok(Self { name })
    }

    /// As [`install`](Self::install), but a failure is a warning: probing works without the
    /// table; it costs conntrack entries on nodes that track connections, and leaves the probe
    /// ports open to other local users.
    pub fn install_or_warn(pin_dir: &Path, guard: &Guard) -> Option<Self> {
        let (lo, hi) = (guard.sport_min, guard.sport_max);
        match Self::install(pin_dir, guard) {
            Ok(table) => {
                log::info!(
                    "probe ports {lo}-{hi} out of {}: exempt from conntrack, closed to other users' \
                     sockets (nft table inet {})",
                    guard.ifaces.join(", "),
                    table.name
                );
                Some(table)
            }
            Err(e) => {
                log::warn!(
                    "could not install the guard of probe ports {lo}-{hi} ({e}); probes sent through \
                     the raw socket or the stack will create conntrack entries on this node, and other \
                     local users may bind those ports. Check that nf_tables is available (modprobe nf_tables)"
                );
                None
            }
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for NotrackTable {
    fn drop(&mut self) {
        let deleted = Nft::open().and_then(|mut nft| nft.run(&format!("delete table inet {}", self.name)));
        if let Err(e) = deleted {
            log::warn!("removing nft table inet {}: {e}", self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_table_per_pin_directory() {
        let a = table_name(Path::new("/sys/fs/bpf/probed"));
        let b = table_name(Path::new("/sys/fs/bpf/probed-2"));
        assert_ne!(a, b);
        assert_eq!(a, table_name(Path::new("/sys/fs/bpf/probed")), "stable across runs");
        assert!(a.len() <= 31, "nft names are short: {a}");
    }

    #[test]
    fn the_rules_match_the_probes_own_packets_only() {
        let ifaces = ["pr0".to_string(), "pr1".to_string()];
        let sources: [IpAddr; 1] = ["198.18.0.1".parse().unwrap()];
        let guard = Guard {
            ifaces: &ifaces,
            sources: &sources,
            sport_min: 61000,
            sport_max: 65000,
            uid: 110,
        };
        let r = ruleset("t", &guard);
        let on = r#"oifname { "pr0", "pr1" } ip saddr { 198.18.0.1 }"#;
        let tcp = format!("{on} tcp sport 61000-65000 tcp flags & (syn | ack) == syn");
        let udp = format!("{on} udp sport 61000-65000");
        assert!(!r.contains("ip6") && !r.contains("ipv6"), "only the family probed: {r}");
        for sel in [tcp.as_str(), udp.as_str()] {
            assert!(
                r.contains(&format!("{sel} meta skuid != {{ 0, 110 }} counter drop")),
                "{r}"
            );
            assert!(r.contains(&format!("{sel} notrack")), "{r}");
        }
        assert!(r.contains("hook output priority raw"));
        assert!(
            !r.contains("prerouting"),
            "forwarded and incoming flows keep conntrack: {r}"
        );
        let root = Guard {
            uid: 0,
            sources: &[],
            ..guard
        };
        let r = ruleset("t", &root);
        assert!(r.contains("meta skuid != { 0 } counter drop"));
        assert!(
            r.contains("meta nfproto ipv4 tcp") && r.contains("meta nfproto ipv6 udp"),
            "no source given: both families: {r}"
        );
    }
}
