//! `restart_needed` against the reference: every key it marks `Restart`, changed alone, is
//! named by a reload, so none is silently neither applied nor reported.
use std::{fmt::Write, os::unix::fs::PermissionsExt};

use super::restart_needed;
use crate::config::{
    reference::{Reload, ROOT, SECTIONS},
    Config,
};

/// Each restart key, by its reference path, with a line that changes it (`section`, `key =
/// value`); a table key of the top level is changed by leaving the table out.
const CHANGES: &[(&str, &str, &str)] = &[
    ("source", "", ""),
    ("dns", "", ""),
    ("cluster", "", ""),
    (
        "daemon.api_listen",
        "daemon",
        "api_listen = \"unix:/run/probed-test/other.sock\"",
    ),
    ("daemon.api_socket_group", "daemon", "api_socket_group = \"4242\""),
    ("daemon.api_socket_mode", "daemon", "api_socket_mode = 0o600"),
    ("daemon.api_token_file", "daemon", "api_token_file = \"{dir}/token2\""),
    (
        "daemon.pin_dir",
        "daemon",
        "pin_dir = \"/sys/fs/bpf/probed-test-other\"",
    ),
    ("daemon.state_file", "daemon", "state_file = \"{dir}/state2.json\""),
    ("daemon.l7_workers", "daemon", "l7_workers = 3"),
    ("daemon.http_probes", "daemon", "http_probes = \"sockets\""),
    ("source.interfaces", "source", "interfaces = [\"veth-other\"]"),
    ("source.addresses", "source", "addresses = [\"198.18.0.9\"]"),
    ("source.port_range", "source", "port_range = \"62000-62999\""),
    ("source.xdp_mode", "source", "xdp_mode = \"skb\""),
    ("source.hook", "source", "hook = \"tcx\""),
    ("dns.listen", "dns", "listen = [\"198.18.0.53:5353\"]"),
    ("cluster.node", "cluster", "node = \"lb-9\""),
    ("cluster.region", "cluster", "region = \"eu\""),
    ("cluster.listen", "cluster", "listen = \"198.18.0.10:7947\""),
    ("cluster.advertise", "cluster", "advertise = \"198.18.0.11:7946\""),
    ("cluster.seeds", "cluster", "seeds = [\"198.18.0.12:7946\"]"),
    ("cluster.probers_per_target", "cluster", "probers_per_target = 2"),
    ("cluster.distinct_regions", "cluster", "distinct_regions = false"),
    ("cluster.key_file", "cluster", "key_file = \"{dir}/cluster2.key\""),
    ("cluster.verdict_ttl", "cluster", "verdict_ttl = \"90s\""),
    ("cluster.gossip_interval", "cluster", "gossip_interval = \"300ms\""),
];

/// The tables of the base configuration, each with its lines: its API on a unix socket, or
/// on loopback TCP with a token (`api_token_file` is a TCP listener's).
fn base(dir: &str, tcp_api: bool) -> Vec<(&'static str, Vec<String>)> {
    let lines = |l: &[&str]| l.iter().map(|s| s.replace("{dir}", dir)).collect::<Vec<_>>();
    let api: &[&str] = if tcp_api {
        &["api_listen = \"127.0.0.1:9180\"", "api_token_file = \"{dir}/token\""]
    } else {
        &["api_listen = \"unix:/run/probed-test/api.sock\""]
    };
    vec![
        (
            "daemon",
            lines(
                &[
                    api,
                    &[
                        "state_file = \"{dir}/state.json\"",
                        "pin_dir = \"/sys/fs/bpf/probed-test\"",
                    ],
                ]
                .concat(),
            ),
        ),
        ("source", lines(&["interfaces = [\"veth-probe\"]"])),
        (
            "dns",
            lines(&["listen = [\"198.18.0.53:53\"]", "zone = \"tm.example.\""]),
        ),
        (
            "cluster",
            lines(&[
                "node = \"lb-1\"",
                "listen = \"198.18.0.10:7946\"",
                "key_file = \"{dir}/cluster.key\"",
            ]),
        ),
    ]
}

fn text(tables: &[(&str, Vec<String>)]) -> String {
    let mut out = String::new();
    for (table, lines) in tables {
        let _ = writeln!(out, "[{table}]");
        for l in lines {
            let _ = writeln!(out, "{l}");
        }
    }
    out.push_str(
        "[[profile]]\nname = \"web\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\nport = 80\n\
         [[profile.endpoint]]\naddress = \"198.18.1.1\"\n",
    );
    out
}

/// Every key the reference marks `Restart`, as `section.key` (`key` alone at the top level).
fn restart_keys() -> Vec<String> {
    std::iter::once(&ROOT)
        .chain(SECTIONS)
        .flat_map(|s| {
            s.keys().filter(|k| k.reload == Reload::Restart).map(|k| {
                if s.path.is_empty() {
                    k.name.to_string()
                } else {
                    format!("{}.{}", s.path, k.name)
                }
            })
        })
        .collect()
}

#[test]
fn every_restart_key_of_the_reference_changed_alone_is_named_by_a_reload() {
    let mut listed: Vec<&str> = CHANGES.iter().map(|c| c.0).collect();
    let mut wanted = restart_keys();
    listed.sort_unstable();
    wanted.sort();
    assert_eq!(listed, wanted, "CHANGES must list exactly the reference's restart keys");

    let dir = std::env::temp_dir().join(format!("probed-restart-keys-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["token", "token2", "cluster.key", "cluster2.key"] {
        let path = dir.join(file);
        std::fs::write(&path, format!("{file}-0123456789abcdef0123456789abcdef0123456789\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let d = dir.display().to_string();
    let parse = |tables: &[(&str, Vec<String>)]| {
        let t = text(tables);
        Config::parse(&t, "t.toml").unwrap_or_else(|e| panic!("{e}\n---\n{t}"))
    };
    for tcp_api in [false, true] {
        let old = parse(&base(&d, tcp_api));
        assert!(restart_needed(&old, &parse(&base(&d, tcp_api)), true).is_empty());
    }
    for &(key, table, line) in CHANGES {
        let tcp_api = key == "daemon.api_token_file";
        let old = parse(&base(&d, tcp_api));
        let mut tables = base(&d, tcp_api);
        if table.is_empty() {
            tables.retain(|(t, _)| *t != key);
        } else {
            let (_, lines) = tables.iter_mut().find(|(t, _)| *t == table).expect("a base table");
            let name = line.split(" = ").next().unwrap();
            lines.retain(|l| !l.starts_with(&format!("{name} = ")));
            lines.push(line.replace("{dir}", &d));
        }
        let named = restart_needed(&old, &parse(&tables), true);
        let section = key.split('.').next().unwrap();
        assert!(
            named.iter().any(|n| n == key || n == section),
            "{key} changed alone: the reload names {named:?}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
