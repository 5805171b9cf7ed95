//! A prober namespace and a backend namespace joined by one veth pair, with static
//! neighbours (no ARP/ND wait), GRO on both ends (veth drops XDP_TX frames without it) and
//! optional AnyIP blocks that make whole ranges of backend addresses local.
use crate::Netns;

pub const PROBER_V4: &str = "198.18.0.1";
pub const BACKEND_V4: &str = "198.18.0.2";
pub const PROBER_V6: &str = "2001:2::1";
pub const BACKEND_V6: &str = "2001:2::2";
/// Interface names inside the namespaces.
pub const PROBER_IF: &str = "pr0";
pub const BACKEND_IF: &str = "be0";
/// The second link's ends (`Topology::second_link`) and the backend's address on it.
pub const PROBER_IF2: &str = "pr1";
pub const BACKEND_IF2: &str = "be1";
pub const BACKEND2_V4: &str = "198.18.1.2";

pub struct Topology {
    // Backend first: dropping it removes the veth pair before the prober goes.
    pub backend: Netns,
    pub prober: Netns,
}

impl Topology {
    pub fn new() -> Self {
        let prober = Netns::new("pdp");
        let backend = Netns::new("pdb");
        let topo = Self { backend, prober };
        topo.link(
            (PROBER_IF, &[PROBER_V4, PROBER_V6]),
            (BACKEND_IF, &[BACKEND_V4, BACKEND_V6]),
        );
        topo
    }

    /// A second veth pair between the two namespaces, `pr1` (198.18.1.1/24) and `be1`
    /// (198.18.1.2/24), set up like the first, for tests of probes that leave by another
    /// interface. Removed with the namespaces.
    pub fn second_link(&self) {
        self.link((PROBER_IF2, &["198.18.1.1"]), (BACKEND_IF2, &[BACKEND2_V4]));
    }

    /// One veth pair, prober end and backend end, each with its addresses (IPv4 /24, IPv6
    /// /64), up with GRO on, forwarding on the prober's end and static neighbours both ways.
    fn link(&self, (prober_if, prober_addrs): (&str, &[&str]), (backend_if, backend_addrs): (&str, &[&str])) {
        crate::run(
            "ip",
            &[
                "link",
                "add",
                prober_if,
                "netns",
                &self.prober.name,
                "type",
                "veth",
                "peer",
                "name",
                backend_if,
                "netns",
                &self.backend.name,
            ],
        );
        for (ns, dev, addrs) in [
            (&self.prober, prober_if, prober_addrs),
            (&self.backend, backend_if, backend_addrs),
        ] {
            for a in addrs {
                if a.contains(':') {
                    ns.ip(&["-6", "addr", "add", &format!("{a}/64"), "dev", dev, "nodad"]);
                } else {
                    ns.ip(&["addr", "add", &format!("{a}/24"), "dev", dev]);
                }
            }
            ns.ip(&["link", "set", dev, "up"]);
            ns.exec("ethtool", &["-K", dev, "gro", "on"]);
        }
        // A load-balancer node forwards; bpf_fib_lookup (the XDP path's router) requires it.
        for family in ["ipv4", "ipv6"] {
            self.prober
                .sysctl(&format!("net.{family}.conf.{prober_if}.forwarding"), "1");
        }
        let prober_mac = self.prober.mac(prober_if);
        let backend_mac = self.backend.mac(backend_if);
        for (ns, dev, addrs, mac) in [
            (&self.prober, prober_if, backend_addrs, &backend_mac),
            (&self.backend, backend_if, prober_addrs, &prober_mac),
        ] {
            for a in addrs {
                ns.ip(&["neigh", "replace", a, "lladdr", mac, "dev", dev, "nud", "permanent"]);
            }
        }
    }

    /// Makes `cidr` (e.g. "198.19.0.0/16" or "2001:2:0:1::/64") local to the backend and
    /// routes it from the prober through the veth.
    pub fn anyip(&self, cidr: &str) {
        let v6 = cidr.contains(':');
        let fam = if v6 { "-6" } else { "-4" };
        let via = if v6 { BACKEND_V6 } else { BACKEND_V4 };
        self.backend.ip(&[fam, "route", "add", "local", cidr, "dev", "lo"]);
        self.prober
            .ip(&[fam, "route", "add", cidr, "via", via, "dev", PROBER_IF]);
    }
}

impl Default for Topology {
    fn default() -> Self {
        Self::new()
    }
}

impl Netns {
    /// The MAC address of `dev` inside this namespace.
    pub fn mac(&self, dev: &str) -> String {
        let out = self.ip(&["-o", "link", "show", dev]);
        let after = out
            .split("link/ether ")
            .nth(1)
            .unwrap_or_else(|| panic!("no MAC for {dev}: {out}"));
        after.split_whitespace().next().unwrap().to_string()
    }
}
