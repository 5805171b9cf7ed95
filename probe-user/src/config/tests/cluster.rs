//! `[cluster]` and the profiles' `aggregate` tests.
use std::time::Duration;

use super::*;
use crate::cluster::aggregate::Rule;

const CLUSTER: &str =
    "[cluster]\nnode = \"lb-1\"\nlisten = \"198.18.0.1:7946\"\nkey_file = \"/etc/probed/cluster.key\"\n";

#[test]
fn defaults() {
    let c = ok(&format!("{CLUSTER}\n{}", cfg("tm", "", "", "")));
    let cl = c.cluster.as_ref().unwrap();
    assert_eq!(
        (cl.node.as_str(), cl.region.as_str()),
        ("lb-1", "lb-1"),
        "a node is its own region"
    );
    assert_eq!(cl.advertise, cl.listen);
    assert!(cl.seeds.is_empty());
    assert_eq!(cl.probers_per_target, 0, "every node probes everything unless told");
    assert!(cl.distinct_regions);
    assert_eq!(cl.verdict_ttl, Duration::from_secs(60));
    assert_eq!(cl.gossip_interval, Duration::from_millis(200));
    assert_eq!(c.profiles[0].aggregate, Rule::HALF);
    assert!(ok(&cfg("tm", "", "", "")).cluster.is_none());
}

#[test]
fn everything_set() {
    let text = format!(
        "[cluster]\nnode = \"lb-2\"\nregion = \"fra\"\nlisten = \"0.0.0.0:7946\"\nadvertise = \"198.18.0.2:7946\"\n\
         seeds = [\"198.18.0.1:7946\", \"[2001:2::1]:7946\"]\nprobers_per_target = 2\ndistinct_regions = false\n\
         key_file = \"/k\"\nverdict_ttl = \"10s\"\ngossip_interval = \"100ms\"\n\n{}",
        cfg("tm", "aggregate = \"any\"", "", "")
    );
    let c = ok(&text);
    let cl = c.cluster.unwrap();
    assert_eq!(cl.region, "fra");
    assert_eq!(cl.advertise.to_string(), "198.18.0.2:7946");
    assert_eq!(cl.seeds.len(), 2);
    assert_eq!(cl.probers_per_target, 2);
    assert!(!cl.distinct_regions);
    assert_eq!(
        (cl.verdict_ttl, cl.gossip_interval),
        (Duration::from_secs(10), Duration::from_millis(100))
    );
    assert_eq!(c.profiles[0].aggregate, Rule::Any);
    let c = ok(&cfg("tm", "aggregate = \"67%\"", "", ""));
    assert_eq!(c.profiles[0].aggregate, Rule::AtLeast(67));
}

rule!(
    node_missing,
    "[cluster]\nlisten = \"198.18.0.1:7946\"\nkey_file = \"/k\"",
    "cluster.node"
);
rule!(node_bad, CLUSTER.replace("lb-1", "lb 1"), "cluster.node");
rule!(
    key_missing,
    "[cluster]\nnode = \"a\"\nlisten = \"198.18.0.1:7946\"",
    "cluster.key_file"
);
rule!(
    key_relative,
    CLUSTER.replace("/etc/probed/cluster.key", "cluster.key"),
    "cluster.key_file"
);
rule!(
    listen_missing,
    "[cluster]\nnode = \"a\"\nkey_file = \"/k\"",
    "cluster.listen"
);
rule!(
    listen_no_port,
    CLUSTER.replace("198.18.0.1:7946", "198.18.0.1"),
    "cluster.listen"
);
rule!(
    wildcard_without_advertise,
    CLUSTER.replace("198.18.0.1:7946", "0.0.0.0:7946"),
    "cluster.advertise"
);
rule!(
    advertise_wildcard,
    format!("{CLUSTER}advertise = \"[::]:7946\""),
    "cluster.advertise"
);
rule!(
    seed_twice,
    format!("{CLUSTER}seeds = [\"198.18.0.2:7946\", \"198.18.0.2:7946\"]"),
    "cluster.seeds[1]"
);
rule!(seed_garbage, format!("{CLUSTER}seeds = [\"lb-2\"]"), "cluster.seeds[0]");
rule!(
    probers_negative,
    format!("{CLUSTER}probers_per_target = -1"),
    "cluster.probers_per_target"
);
rule!(
    probers_too_many,
    format!("{CLUSTER}probers_per_target = 65"),
    "cluster.probers_per_target"
);
rule!(
    ttl_too_short,
    format!("{CLUSTER}verdict_ttl = \"500ms\""),
    "cluster.verdict_ttl"
);
rule!(
    gossip_too_fast,
    format!("{CLUSTER}gossip_interval = \"10ms\""),
    "cluster.gossip_interval"
);
rule!(unknown_key, format!("{CLUSTER}leader = \"a\""), "cluster.leader");
rule!(
    aggregate_zero,
    cfg("tm", "aggregate = \"0%\"", "", ""),
    "profile[0].aggregate"
);
rule!(
    aggregate_word,
    cfg("tm", "aggregate = \"majority\"", "", ""),
    "profile[0].aggregate"
);

#[test]
fn the_errors_say_what_is_allowed() {
    let e = refused(&format!("{CLUSTER}probers_per_target = 65")).to_string();
    assert!(
        e.contains("65") && e.contains("0 (every node probes every check) to 64"),
        "{e}"
    );
    let e = refused(&cfg("tm", "aggregate = \"majority\"", "", "")).to_string();
    assert!(e.contains("majority") && e.contains("\"any\" or \"all\""), "{e}");
    let e = refused("[cluster]\nnode = \"a\"\nlisten = \"198.18.0.1:7946\"").to_string();
    assert!(e.contains("shared key"), "{e}");
}
