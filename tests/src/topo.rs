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
        crate::run(
            "ip",
            &[
                "link",
                "add",
                PROBER_IF,
                "netns",
                &topo.prober.name,
                "type",
                "veth",
                "peer",
                "name",
                BACKEND_IF,
                "netns",
                &topo.backend.name,
            ],
        );
        for (ns, dev, v4, v6) in [
            (&topo.prober, PROBER_IF, PROBER_V4, PROBER_V6),
            (&topo.backend, BACKEND_IF, BACKEND_V4, BACKEND_V6),
        ] {
            ns.ip(&["addr", "add", &format!("{v4}/24"), "dev", dev]);
            ns.ip(&["-6", "addr", "add", &format!("{v6}/64"), "dev", dev, "nodad"]);
            ns.ip(&["link", "set", dev, "up"]);
            ns.exec("ethtool", &["-K", dev, "gro", "on"]);
        }
        // A load-balancer node forwards; bpf_fib_lookup (the XDP path's router) requires it.
        topo.prober
            .sysctl(&format!("net.ipv4.conf.{PROBER_IF}.forwarding"), "1");
        topo.prober
            .sysctl(&format!("net.ipv6.conf.{PROBER_IF}.forwarding"), "1");
        let prober_mac = topo.prober.mac(PROBER_IF);
        let backend_mac = topo.backend.mac(BACKEND_IF);
        for (ns, dev, addrs, mac) in [
            (&topo.prober, PROBER_IF, [BACKEND_V4, BACKEND_V6], &backend_mac),
            (&topo.backend, BACKEND_IF, [PROBER_V4, PROBER_V6], &prober_mac),
        ] {
            for a in addrs {
                ns.ip(&["neigh", "replace", a, "lladdr", mac, "dev", dev, "nud", "permanent"]);
            }
        }
        topo
    }

    /// A second veth pair between the two namespaces, `pr1` (198.18.1.1/24) and `be1`
    /// (198.18.1.2/24), set up like the first, for tests of probes that leave by another
    /// interface. Removed with the namespaces.
    pub fn second_link(&self) {
        crate::run(
            "ip",
            &[
                "link",
                "add",
                PROBER_IF2,
                "netns",
                &self.prober.name,
                "type",
                "veth",
                "peer",
                "name",
                BACKEND_IF2,
                "netns",
                &self.backend.name,
            ],
        );
        for (ns, dev, v4) in [
            (&self.prober, PROBER_IF2, "198.18.1.1"),
            (&self.backend, BACKEND_IF2, BACKEND2_V4),
        ] {
            ns.ip(&["addr", "add", &format!("{v4}/24"), "dev", dev]);
            ns.ip(&["link", "set", dev, "up"]);
            ns.exec("ethtool", &["-K", dev, "gro", "on"]);
        }
        self.prober
            .sysctl(&format!("net.ipv4.conf.{PROBER_IF2}.forwarding"), "1");
        let (prober_mac, backend_mac) = (self.prober.mac(PROBER_IF2), self.backend.mac(BACKEND_IF2));
        self.prober.ip(&[
            "neigh",
            "replace",
            BACKEND2_V4,
            "lladdr",
            &backend_mac,
            "dev",
            PROBER_IF2,
            "nud",
            "permanent",
        ]);
        self.backend.ip(&[
            "neigh",
            "replace",
            "198.18.1.1",
            "lladdr",
            &prober_mac,
            "dev",
            BACKEND_IF2,
            "nud",
            "permanent",
        ]);
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
