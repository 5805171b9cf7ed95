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
/// A client namespace behind the prober (`Topology::client`), for load-balancer tests: the
/// prober's namespace is then the LB node, forwarding between client and backends.
pub const CLIENT_V4: &str = "198.18.200.2";
pub const LB_CLIENT_V4: &str = "198.18.200.1";
pub const CLIENT_V6: &str = "2001:2:200::2";
pub const LB_CLIENT_V6: &str = "2001:2:200::1";
pub const LB_IF: &str = "lb0";
pub const CLIENT_IF: &str = "cl0";

pub struct Topology {
    // Backend first: dropping it removes the veth pair before the prober goes.
    pub backend: Netns,
    pub prober: Netns,
    pub node: Node,
}

/// How the links are set up: the rig's way (GRO on both veth ends, forwarding on the
/// prober's end), or as a user makes a veth pair (neither), or anything between. The rig's
/// way is what XDP transmit and the XDP generator need; the others are what probed must
/// cope with (raw socket sends, HTTP through sockets) without a wrong verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node {
    pub gro: bool,
    pub forwarding: bool,
}

impl Node {
    pub const RIG: Node = Node {
        gro: true,
        forwarding: true,
    };
    pub const PLAIN: Node = Node {
        gro: false,
        forwarding: false,
    };
}

impl Topology {
    pub fn new() -> Self {
        Self::with(Node::RIG)
    }

    /// A prober and a backend joined by one veth pair set up as `node` says.
    pub fn with(node: Node) -> Self {
        let prober = Netns::new("pdp");
        let backend = Netns::new("pdb");
        let topo = Self { backend, prober, node };
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

    /// A client namespace linked to the prober's (`lb0` 198.18.200.1 / 2001:2:200::1, `cl0`
    /// 198.18.200.2 / 2001:2:200::2), routed through the prober to the backend and back: the
    /// prober's namespace becomes a load balancer between the two. Removed when dropped.
    pub fn client(&self) -> Netns {
        let client = Netns::new("pdc");
        link(
            self.node,
            &self.prober,
            (LB_IF, &[LB_CLIENT_V4, LB_CLIENT_V6]),
            &client,
            (CLIENT_IF, &[CLIENT_V4, CLIENT_V6]),
        );
        // The node routes between its links; IPv6 forwards only with the global switch on.
        for family in ["ipv4", "ipv6"] {
            self.prober.sysctl(&format!("net.{family}.conf.all.forwarding"), "1");
        }
        client.ip(&["route", "add", "default", "via", LB_CLIENT_V4, "dev", CLIENT_IF]);
        client.ip(&["-6", "route", "add", "default", "via", LB_CLIENT_V6, "dev", CLIENT_IF]);
        self.backend
            .ip(&["route", "add", "198.18.200.0/24", "via", PROBER_V4, "dev", BACKEND_IF]);
        self.backend.ip(&[
            "-6",
            "route",
            "add",
            "2001:2:200::/64",
            "via",
            PROBER_V6,
            "dev",
            BACKEND_IF,
        ]);
        client
    }

    fn link(&self, prober_end: (&str, &[&str]), backend_end: (&str, &[&str])) {
        link(self.node, &self.prober, prober_end, &self.backend, backend_end);
    }
}

/// One veth pair between `a` (the forwarding side) and `b`, each end with its addresses (IPv4
/// /24, IPv6 /64), up, with GRO on both ends and forwarding on a's end as `node` says, and
/// static neighbours both ways.
pub(crate) fn link(
    node: Node,
    a: &Netns,
    (prober_if, prober_addrs): (&str, &[&str]),
    b: &Netns,
    (backend_if, backend_addrs): (&str, &[&str]),
) {
    crate::run(
        "ip",
        &[
            "link", "add", prober_if, "netns", &a.name, "type", "veth", "peer", "name", backend_if, "netns", &b.name,
        ],
    );
    for (ns, dev, addrs) in [(a, prober_if, prober_addrs), (b, backend_if, backend_addrs)] {
        for addr in addrs {
            if addr.contains(':') {
                ns.ip(&["-6", "addr", "add", &format!("{addr}/64"), "dev", dev, "nodad"]);
            } else {
                ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", dev]);
            }
        }
        ns.ip(&["link", "set", dev, "up"]);
        ns.exec("ethtool", &["-K", dev, "gro", if node.gro { "on" } else { "off" }]);
    }
    // A load-balancer node forwards; bpf_fib_lookup (the XDP path's router) requires it.
    if node.forwarding {
        for family in ["ipv4", "ipv6"] {
            a.sysctl(&format!("net.{family}.conf.{prober_if}.forwarding"), "1");
        }
    }
    let prober_mac = a.mac(prober_if);
    let backend_mac = b.mac(backend_if);
    for (ns, dev, addrs, mac) in [
        (a, prober_if, backend_addrs, &backend_mac),
        (b, backend_if, prober_addrs, &prober_mac),
    ] {
        for addr in addrs {
            ns.static_neighbour(addr, mac, dev);
        }
    }
}

impl Topology {
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

    /// A static neighbour inside this namespace: `addr` is at `mac` on `dev`, for good (no
    /// ARP or ND to wait for, and none to fail).
    pub fn static_neighbour(&self, addr: &str, mac: &str, dev: &str) {
        self.ip(&["neigh", "replace", addr, "lladdr", mac, "dev", dev, "nud", "permanent"]);
    }
}
