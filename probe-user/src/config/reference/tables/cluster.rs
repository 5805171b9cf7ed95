//! The keys of `[cluster]`.
use super::*;

pub const CLUSTER: Section = Section {
    path: "cluster",
    header: "[cluster]",
    about: "Shares verdicts with other probed nodes over authenticated gossip (UDP) and splits the \
            probing among them. Any change here needs a restart: the running node keeps its name, \
            address, key and share.",
    kinds: &[],
    own: &[
        Key::new(
            "node",
            Type::String,
            Required,
            words(NAME),
            Restart,
            "This node's name, unique in the cluster.",
        ),
        Key::new(
            "region",
            Type::String,
            said("the node's name"),
            words(NAME),
            Restart,
            "Where the node probes from; distinct_regions spreads probers over regions.",
        ),
        Key::new(
            "listen",
            Type::String,
            Required,
            words("ADDRESS:PORT"),
            Restart,
            "The UDP address gossip listens on.",
        ),
        Key::new(
            "advertise",
            Type::String,
            said("listen; required when listen is a wildcard"),
            words("ADDRESS:PORT, not a wildcard"),
            Restart,
            "The address other nodes reach this one at.",
        ),
        Key::new(
            "seeds",
            Strings,
            Value("[]"),
            words("ADDRESS:PORT, each once"),
            Restart,
            "Nodes to join through: any live one will do, and the first node of a cluster lists none.",
        ),
        Key::new(
            "probers_per_target",
            Integer,
            Value("0"),
            Int(0, Cluster::MAX_PROBERS as i64),
            Restart,
            "How many live nodes probe each check; 0: every node probes every check.",
        ),
        Key::new(
            "distinct_regions",
            Boolean,
            Value("true"),
            Allowed::Any,
            Restart,
            "Spreads a check's probers over distinct regions first.",
        ),
        Key::new(
            "key_file",
            Type::String,
            Required,
            words("an absolute path"),
            Restart,
            "The file holding the cluster's shared key (at least 32 random bytes), readable by probed \
             only; every gossip datagram carries a tag made with it.",
        ),
        Key::new(
            "verdict_ttl",
            Duration,
            Value("\"60s\""),
            Millis(1000, 3_600_000),
            Restart,
            "How long the verdicts of a node gone silent still count.",
        ),
        Key::new(
            "gossip_interval",
            Duration,
            Value("\"200ms\""),
            Millis(50, 10_000),
            Restart,
            "The time between two rounds of gossip.",
        ),
    ],
};
