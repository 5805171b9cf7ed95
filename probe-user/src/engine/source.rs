//! Where probes come from and how they leave: the source address for each target
//! (configured, or what the routing table would pick), the interface that reaches a target,
//! and the transmit path. Policy only; the system calls behind it are in `kernel::sys` and
//! `kernel::netlink`.
use std::{
    collections::HashMap,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    time::{Duration, Instant},
};

use crate::kernel::sys::{forwarding_enabled, iface_of, route_source};

use super::{TxChoice, TxPath};

/// Picks source addresses: the configured one for the family, else the route's preferred
/// source. On the XDP path the generator's own route lookup picks it; this picker's route
/// lookups serve the raw-socket path and the probes handed back to the stack.
pub struct SourcePicker {
    v4: Option<Ipv4Addr>,
    v6: Option<Ipv6Addr>,
    cache: HashMap<IpAddr, (Option<IpAddr>, Instant)>,
}

/// Most route lookups remembered; past that the cache starts over.
const CACHE_MAX: usize = 1 << 20;
/// How long a route lookup is trusted: routes change, and the next lookup follows them.
const CACHE_TTL: Duration = Duration::from_secs(30);

impl SourcePicker {
    pub fn new(v4: Option<Ipv4Addr>, v6: Option<Ipv6Addr>) -> Self {
        Self {
            v4,
            v6,
            cache: HashMap::new(),
        }
    }

    /// The configured source address for `target`'s family, if any.
    pub fn configured(&self, target: IpAddr) -> Option<IpAddr> {
        match target {
            IpAddr::V4(_) => self.v4.map(IpAddr::V4),
            IpAddr::V6(_) => self.v6.map(IpAddr::V6),
        }
    }

    /// The source address for probes to `target`, or None when there is no route.
    pub fn source_for(&mut self, target: IpAddr, now: Instant) -> Option<IpAddr> {
        if let Some(src) = self.configured(target) {
            return Some(src);
        }
        if let Some(&(src, at)) = self.cache.get(&target) {
            if now.saturating_duration_since(at) < CACHE_TTL {
                return src;
            }
        }
        if self.cache.len() >= CACHE_MAX {
            self.cache.clear();
        }
        let src = route_source(target);
        self.cache.insert(target, (src, now));
        src
    }
}

/// Who picks the source address of a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SourceBy {
    /// `[source].addresses` names one for the family.
    Config,
    /// The generator, from its own route lookup (BPF_FIB_LOOKUP_SRC): nothing to do here.
    Generator,
    /// `SourcePicker`'s route lookup, before the probe is handed over.
    Userspace,
}

/// Decides who picks a probe's source: the configuration when it names one; else the
/// generator, on the XDP path of a kernel whose bpf_fib_lookup takes BPF_FIB_LOOKUP_SRC
/// (Linux 6.7+); else userspace (raw path, or Linux 6.3-6.6).
pub(crate) fn source_by(path: TxPath, configured: bool, fib_src: bool) -> SourceBy {
    match (configured, path, fib_src) {
        (true, _, _) => SourceBy::Config,
        (false, TxPath::Xdp, true) => SourceBy::Generator,
        (false, _, _) => SourceBy::Userspace,
    }
}

/// Whether the kernel has to be asked about BPF_FIB_LOOKUP_SRC at all: only the XDP path
/// uses it, and only for a family without a configured source.
pub(crate) fn needs_fib_src(path: TxPath, v4_configured: bool, v6_configured: bool) -> bool {
    path == TxPath::Xdp && !(v4_configured && v6_configured)
}

/// Whether `iface` advertises XDP transmit of redirected frames (NETDEV_XDP_ACT_NDO_XMIT),
/// which live-frames XDP_TX needs. When the question cannot be asked the answer is no, and
/// the engine uses the raw socket, which always works.
pub fn device_can_xmit_xdp(iface: &str) -> bool {
    crate::kernel::netlink::can_xmit_xdp(iface)
}

/// Why no interface could be picked for probing a target.
#[derive(Debug, thiserror::Error)]
pub enum IfaceError {
    #[error("no route to {0}")]
    NoRoute(IpAddr),
    #[error("no interface holds {0}, the source address the route picks")]
    NoHolder(IpAddr),
}

/// The interface probes to `target` start from: the first of `listed` when the operator
/// listed any (the rest are extra exits), else the one that holds the source address the
/// routing table picks for `target`, so that replies come back where probe_rx listens.
pub fn probe_iface(listed: &[String], target: IpAddr) -> Result<String, IfaceError> {
    if let Some(first) = listed.first() {
        return Ok(first.clone());
    }
    let src = route_source(target).ok_or(IfaceError::NoRoute(target))?;
    iface_of(src).ok_or(IfaceError::NoHolder(src))
}

/// Whether probe_rx can send frames back out of the device a reply came in by (the RST it
/// writes over a SYN+ACK, an HTTP probe's request), or why not. At tcx that is a tc redirect
/// and in generic XDP an skb transmit, which every device takes; in native XDP it is the
/// device's XDP transmit (`ndo_xdp_xmit`), which a device may not have (veth has it only while
/// its peer has NAPI: GRO on, or an XDP program). Where it is missing such frames would be
/// dropped: the stack sends the RSTs instead, and HTTP goes through sockets.
pub(crate) fn frames_back_out<'a>(
    hook: crate::kernel::Hook,
    mode: crate::kernel::AttachMode,
    devs: impl IntoIterator<Item = &'a str>,
    can_xmit: impl Fn(&str) -> bool,
) -> Result<(), NoXdpTransmit> {
    use crate::kernel::{AttachMode, Hook};
    if hook == Hook::Tcx || mode == AttachMode::Skb {
        return Ok(());
    }
    match devs.into_iter().find(|dev| !can_xmit(dev)) {
        Some(dev) => Err(NoXdpTransmit { dev: dev.to_string() }),
        None => Ok(()),
    }
}

/// A device probe_rx runs on in native XDP that cannot transmit XDP frames: plain HTTP checks
/// go through sockets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{dev} does not advertise XDP transmit (ndo_xdp_xmit), so probe_rx cannot send the request that \
     answers a SYN+ACK there (on veth: turn GRO on at the peer, or attach an XDP program to it; or set \
     [source] xdp_mode = \"skb\" or hook = \"tcx\")"
)]
pub struct NoXdpTransmit {
    pub dev: String,
}

/// Picks the transmit path and says why, for the operator. Every interface a probe may
/// leave by must take redirected XDP frames.
pub(crate) fn choose_path(iface: &str, more: &[String], choice: TxChoice) -> (TxPath, String) {
    if let TxChoice::Force(p) = choice {
        return (p, "chosen in the configuration".into());
    }
    for dev in std::iter::once(iface).chain(more.iter().map(String::as_str)) {
        if !device_can_xmit_xdp(dev) {
            return (
                TxPath::Raw,
                format!("{dev} does not advertise XDP transmit (ndo_xdp_xmit)"),
            );
        }
    }
    let (v4, v6) = forwarding_enabled(iface);
    if !v4 && !v6 {
        return (
            TxPath::Raw,
            format!(
                "forwarding is off on {iface}, so bpf_fib_lookup cannot route probes; the XDP path needs \
                 net.ipv4.conf.{iface}.forwarding=1 (and net.ipv6.conf.{iface}.forwarding=1), which makes \
                 the node route IPv4 arriving on {iface} and stops IPv6 RA acceptance there unless \
                 accept_ra=2 (docs/design/l4-engine.md, \"Transmit path\")"
            ),
        );
    }
    let note = match (v4, v6) {
        (true, false) => "; IPv6 probes go through the raw socket (IPv6 forwarding is off)",
        (false, true) => "; IPv4 probes go through the raw socket (IPv4 forwarding is off)",
        _ => "",
    };
    (TxPath::Xdp, format!("{iface} supports XDP transmit{note}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_http_needs_xdp_transmit_only_in_native_xdp() {
        use crate::kernel::{AttachMode, Hook};
        let none = |_: &str| false;
        let all = |_: &str| true;
        assert!(frames_back_out(Hook::Xdp, AttachMode::Driver, ["pr0"], all).is_ok());
        let e = frames_back_out(Hook::Xdp, AttachMode::Driver, ["pr0", "pr1"], |d: &str| d == "pr0").unwrap_err();
        assert_eq!(e.dev, "pr1");
        assert!(e.to_string().starts_with("pr1 does not advertise XDP transmit"), "{e}");
        assert!(
            frames_back_out(Hook::Xdp, AttachMode::Skb, ["pr0"], none).is_ok(),
            "generic XDP"
        );
        assert!(
            frames_back_out(Hook::Tcx, AttachMode::Driver, ["pr0"], none).is_ok(),
            "tcx"
        );
    }

    #[test]
    fn listed_interface_wins_over_the_route() {
        let listed = vec!["probe0".to_string(), "probe1".to_string()];
        assert_eq!(probe_iface(&listed, Ipv4Addr::LOCALHOST.into()).unwrap(), "probe0");
        assert_eq!(probe_iface(&[], Ipv4Addr::LOCALHOST.into()).unwrap(), "lo");
    }

    #[test]
    fn source_is_picked_by_config_then_generator_then_userspace() {
        use SourceBy::*;
        // (path, configured, kernel takes BPF_FIB_LOOKUP_SRC) -> who picks
        let table = [
            (TxPath::Xdp, true, true, Config),
            (TxPath::Xdp, true, false, Config),
            (TxPath::Raw, true, true, Config),
            (TxPath::Xdp, false, true, Generator),
            (TxPath::Xdp, false, false, Userspace),
            (TxPath::Raw, false, true, Userspace),
            (TxPath::Raw, false, false, Userspace),
        ];
        for (path, configured, fib_src, want) in table {
            assert_eq!(
                source_by(path, configured, fib_src),
                want,
                "{path:?} {configured} {fib_src}"
            );
        }
    }

    #[test]
    fn kernel_is_asked_only_when_the_generator_would_pick() {
        assert!(needs_fib_src(TxPath::Xdp, false, false));
        assert!(needs_fib_src(TxPath::Xdp, true, false));
        assert!(needs_fib_src(TxPath::Xdp, false, true));
        assert!(!needs_fib_src(TxPath::Xdp, true, true));
        assert!(!needs_fib_src(TxPath::Raw, false, false));
    }

    #[test]
    fn forced_path_is_taken_as_is() {
        let (path, why) = choose_path("no-such-if0", &[], TxChoice::Force(TxPath::Xdp));
        assert_eq!(path, TxPath::Xdp);
        assert_eq!(why, "chosen in the configuration");
        let (path, why) = choose_path("no-such-if0", &[], TxChoice::Auto);
        assert_eq!(path, TxPath::Raw, "{why}");
    }
}
