//! Several prober nodes around one backend namespace, each joined to it by a veth pair of its
//! own: node i is 198.18.(10+i).1 on `nd0`, the backend 198.18.(10+i).2 on `n<i>`. The backend
//! forwards between the links, so the nodes reach each other (gossip) through it, and AnyIP
//! blocks make whole ranges of target addresses local to it. For cluster tests: each node runs
//! a daemon, and the backend counts what each node sends with nftables.
use crate::{topo::link, Netns};

/// The node's end of its link.
pub const NODE_IF: &str = "nd0";

pub struct Star {
    // Backend first: dropping it removes every veth pair before the nodes go.
    pub backend: Netns,
    pub nodes: Vec<Netns>,
}

impl Star {
    pub fn new(n: usize) -> Star {
        assert!((1..=40).contains(&n), "nodes 0 to 39 have addresses");
        let backend = Netns::new("psb");
        let nodes: Vec<Netns> = (0..n).map(|_| Netns::new("psn")).collect();
        backend.sysctl("net.ipv4.conf.all.forwarding", "1");
        for (i, node) in nodes.iter().enumerate() {
            let backend_if = format!("n{i}");
            link(
                node,
                (NODE_IF, &[&Star::addr(i)]),
                &backend,
                (&backend_if, &[&Star::gateway(i)]),
            );
            node.ip(&["route", "add", "default", "via", &Star::gateway(i), "dev", NODE_IF]);
        }
        Star { backend, nodes }
    }

    /// Node i's address.
    pub fn addr(i: usize) -> String {
        format!("198.18.{}.1", 10 + i)
    }

    /// The backend's address on node i's link.
    pub fn gateway(i: usize) -> String {
        format!("198.18.{}.2", 10 + i)
    }

    /// Makes `cidr` (IPv4) local to the backend; the nodes reach it by their default routes.
    pub fn anyip(&self, cidr: &str) {
        self.backend.ip(&["route", "add", "local", cidr, "dev", "lo"]);
    }
}
