//! Several prober nodes around one backend namespace, each joined to it by a veth pair of its
//! own: node i is 198.18.(10+i).1 on `nd0`, the backend 198.18.(10+i).2 on `n<i>`. The backend
//! forwards between the links, so the nodes reach each other (gossip) through it, and AnyIP
//! blocks make whole ranges of target addresses local to it. For cluster tests: each node runs
//! a daemon, and the backend counts what each node sends with nftables.
use std::path::{Path, PathBuf};

use crate::{
    daemon::{DaemonFiles, RunningDaemon},
    topo::link,
    Netns,
};

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
                crate::topo::Node::RIG,
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

/// The port the star's targets listen on, and their addresses: 198.19.0.(j+1).
pub const TARGET_PORT: u16 = 8080;

pub fn target(j: usize) -> String {
    format!("198.19.0.{}", j + 1)
}

/// Node `i`'s `[cluster]` section: node 0 is the seed, `k` probers per target, `key`, and
/// gossip every `gossip_interval`.
pub fn cluster_section(i: usize, k: usize, key: &Path, gossip_interval: &str) -> String {
    format!(
        "[cluster]\nnode = \"n{i}\"\nlisten = \"{}:7946\"\nseeds = [\"{}:7946\"]\nprobers_per_target = {k}\n\
         key_file = \"{}\"\ngossip_interval = \"{gossip_interval}\"\n\n",
        Star::addr(i),
        Star::addr(0),
        key.display()
    )
}

/// Node `i`'s configuration: one profile "web" of `targets` TCP endpoints (t0, t1, ...) at
/// 200 ms, and `[cluster]` (`cluster_section`) gossiping every 100 ms.
pub fn cluster_config(files: &DaemonFiles, i: usize, targets: usize, k: usize, key: &Path) -> String {
    let mut text = files.header(NODE_IF);
    text += &cluster_section(i, k, key, "100ms");
    text += "[[profile]]\nname = \"web\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\n\
             interval = \"200ms\"\ntimeout = \"200ms\"\nhealthy_threshold = 2\nunhealthy_threshold = 2\n";
    for j in 0..targets {
        text += &format!(
            "\n[[profile.endpoint]]\nname = \"t{j}\"\naddress = \"{}\"\nport = {TARGET_PORT}\n",
            target(j)
        );
    }
    text
}

/// A cluster key file in `dir` only its owner may read: `fill` 44 times.
pub fn key_file(dir: &Path, name: &str, fill: char) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, fill.to_string().repeat(44)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

impl Star {
    /// Drops what node `i` sends to target `j` (at the backend's input), until `restore`.
    pub fn cut(&self, i: usize, j: usize) {
        self.backend.nft(&format!(
            "table inet probed_cut {{\n chain input {{\n type filter hook input priority -10; policy accept;\n }}\n}}\n\
             add rule inet probed_cut input ip saddr {} ip daddr {} tcp dport {TARGET_PORT} drop\n",
            Star::addr(i),
            target(j)
        ));
    }

    /// Removes every `cut`.
    pub fn restore(&self) {
        let _ = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.backend.name,
                "nft",
                "delete",
                "table",
                "inet",
                "probed_cut",
            ])
            .output();
    }
}

/// A cluster ready to start: `n` nodes around one backend that answers TCP on `TARGET_PORT` at
/// every address of 198.19.0.0/24, a daemon's files per node and one shared key.
pub struct Rig {
    // Declared first, dropped last: the namespaces outlive what runs in them.
    pub star: Star,
    pub files: Vec<DaemonFiles>,
    pub key: PathBuf,
    _listener: std::net::TcpListener,
}

impl Rig {
    pub fn new(n: usize) -> Rig {
        let star = Star::new(n);
        star.anyip("198.19.0.0/24");
        let listener = star.backend.tcp_listen(&format!("0.0.0.0:{TARGET_PORT}"));
        let files: Vec<DaemonFiles> = (0..n).map(|_| DaemonFiles::new()).collect();
        let key = key_file(&files[0].dir, "cluster.key", 'k');
        Rig {
            star,
            files,
            key,
            _listener: listener,
        }
    }

    /// Starts node `i` with `targets` endpoints, `k` probers per target and `key`; it re-reads
    /// its file on reload.
    pub fn start_with(&self, i: usize, targets: usize, k: usize, key: &Path) -> RunningDaemon {
        let files = &self.files[i];
        let cfg = files.write_config(&cluster_config(files, i, targets, k, key));
        RunningDaemon::start(&self.star.nodes[i], cfg, Some(&files.config_path()))
            .unwrap_or_else(|e| panic!("start n{i}: {e}"))
    }

    /// Starts node `i` with the rig's key.
    pub fn start(&self, i: usize, targets: usize, k: usize) -> RunningDaemon {
        self.start_with(i, targets, k, &self.key)
    }
}
