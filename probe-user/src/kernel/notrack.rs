//! The nftables table that keeps probe traffic out of conntrack: without it, every probe the
//! raw socket (or the stack) sends leaves a SYN_SENT or UDP entry whose reply probe_rx eats in
//! XDP, and at thousands of probes/s those entries fill the node's conntrack table.
use std::{os::unix::ffi::OsStrExt, path::Path};

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

/// The commands that (re)create the table, as one transaction: the `add`/`delete` pair
/// removes a table left by a crashed run without failing when there is none.
pub fn ruleset(name: &str, sport_min: u16, sport_max: u16) -> String {
    let ports = format!("{sport_min}-{sport_max}");
    format!(
        "add table inet {name}
delete table inet {name}
table inet {name} {{
    chain output {{
        type filter hook output priority raw; policy accept;
        tcp sport {ports} notrack
        udp sport {ports} notrack
    }}
    chain prerouting {{
        type filter hook prerouting priority raw; policy accept;
        tcp dport {ports} notrack
        udp dport {ports} notrack
    }}
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
    /// Installs the table for the source ports `sport_min..=sport_max` in the caller's
    /// network namespace.
    pub fn install(pin_dir: &Path, sport_min: u16, sport_max: u16) -> Result<Self, NftError> {
        let name = table_name(pin_dir);
        Nft::open()?.run(&ruleset(&name, sport_min, sport_max))?;
        Ok(Self { name })
    }

    /// As [`install`](Self::install), but a failure is a warning: probing works without the
    /// table, it only costs conntrack entries on nodes that track connections.
    pub fn install_or_warn(pin_dir: &Path, sport_min: u16, sport_max: u16) -> Option<Self> {
        match Self::install(pin_dir, sport_min, sport_max) {
            Ok(table) => {
                log::info!(
                    "probe ports {sport_min}-{sport_max} exempt from conntrack (nft table inet {})",
                    table.name
                );
                Some(table)
            }
            Err(e) => {
                log::warn!(
                    "could not install the conntrack exemption for probe ports {sport_min}-{sport_max} \
                     ({e}); probes sent through the raw socket or the stack will create conntrack \
                     entries on this node. Check that nf_tables is available (modprobe nf_tables)"
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
    fn ruleset_covers_both_directions_and_protocols() {
        let r = ruleset("t", 61000, 65000);
        for rule in [
            "tcp sport 61000-65000 notrack",
            "udp sport 61000-65000 notrack",
            "tcp dport 61000-65000 notrack",
            "udp dport 61000-65000 notrack",
        ] {
            assert!(r.contains(rule), "{rule} missing from\n{r}");
        }
        assert!(r.contains("hook output priority raw"));
        assert!(r.contains("hook prerouting priority raw"));
    }
}
