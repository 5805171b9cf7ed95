//! `[cluster]`: this node's place among the nodes it shares verdicts with.
use std::{net::SocketAddr, path::PathBuf, time::Duration};

use serde::Serialize;

/// `[cluster]`: this node's place among the probed nodes it shares verdicts with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cluster {
    /// Unique in the cluster: it names this node's verdicts and its share of the probing.
    pub node: String,
    /// Where the node probes from (a location); the node's name when unset.
    pub region: String,
    /// The UDP address gossip listens on.
    pub listen: SocketAddr,
    /// The address other nodes reach this one at (`listen` unless that is a wildcard).
    pub advertise: SocketAddr,
    /// Nodes to join through; the first node of a cluster may list none.
    pub seeds: Vec<SocketAddr>,
    /// k: how many live nodes probe each check; 0: every node probes every check.
    pub probers_per_target: usize,
    /// Spread a check's k probers over distinct regions first.
    pub distinct_regions: bool,
    /// The shared key that authenticates every gossip message.
    pub key_file: PathBuf,
    /// How long a gone node's verdicts still count.
    pub verdict_ttl: Duration,
    pub gossip_interval: Duration,
}

impl Cluster {
    pub const MAX_PROBERS: usize = 64;
    pub const DEFAULT_VERDICT_TTL: Duration = Duration::from_secs(60);
    pub const DEFAULT_GOSSIP_INTERVAL: Duration = Duration::from_millis(200);
}
