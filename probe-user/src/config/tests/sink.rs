//! `[[sink]]` tests: every field's rule, and the resolved sinks of a good file.
use super::*;

/// The one-profile config of `cfg` with `sink` appended as a `[[sink]]` table.
fn with_sink(sink: &str) -> String {
    cfg("lb", "", "", "") + "\n[[sink]]\n" + sink
}

const NFT_MAP: &str = "profile = \"web\"\nkind = \"nftables\"\nfamily = \"ip\"\ntable = \"lb\"\nmap = \"web_slots\"\n";

#[test]
fn nftables_map_and_set_and_bpf_sinks_resolve_with_defaults() {
    let text = with_sink(NFT_MAP)
        + "\n[[sink]]\nname = \"web-v6\"\nprofile = \"web\"\nkind = \"nftables\"\nfamily = \"inet\"\n\
           table = \"lb\"\nset = \"web_up\"\non_stop = \"clear\"\n\
           \n[[sink]]\nprofile = \"web\"\nkind = \"bpf\"\nmap = \"web_lb\"\nslots = 1024\n";
    let c = ok(&text);
    assert_eq!(
        c.sinks,
        [
            Sink {
                name: "web_slots".into(),
                profile: "web".into(),
                on_stop: OnStop::Keep,
                kind: SinkKind::Nftables(NftSink {
                    family: NftFamily::Ip,
                    table: "lb".into(),
                    target: NftTarget::Map {
                        name: "web_slots".into(),
                        slots: 64
                    },
                }),
            },
            Sink {
                name: "web-v6".into(),
                profile: "web".into(),
                on_stop: OnStop::Clear,
                kind: SinkKind::Nftables(NftSink {
                    family: NftFamily::Inet,
                    table: "lb".into(),
                    target: NftTarget::Set { name: "web_up".into() },
                }),
            },
            Sink {
                name: "web_lb".into(),
                profile: "web".into(),
                on_stop: OnStop::Keep,
                kind: SinkKind::Bpf(BpfSink {
                    map: "web_lb".into(),
                    slots: 1024
                }),
            },
        ]
    );
}

rule!(
    sink_profile_missing,
    with_sink("kind = \"bpf\"\nmap = \"m\"\n"),
    "sink[0].profile"
);
rule!(
    sink_profile_unknown,
    with_sink("profile = \"db\"\nkind = \"bpf\"\nmap = \"m\"\n"),
    "sink[0].profile"
);
rule!(
    sink_kind_missing,
    with_sink("profile = \"web\"\nmap = \"m\"\n"),
    "sink[0].kind"
);
rule!(
    sink_kind_unknown,
    with_sink("profile = \"web\"\nkind = \"ipvs\"\n"),
    "sink[0].kind"
);
rule!(
    sink_family_unknown,
    with_sink(&NFT_MAP.replace("\"ip\"", "\"arp\"")),
    "sink[0].family"
);
rule!(
    sink_table_missing,
    with_sink(&NFT_MAP.replace("table = \"lb\"\n", "")),
    "sink[0].table"
);
rule!(
    sink_table_name_unsafe,
    with_sink(&NFT_MAP.replace("\"lb\"", "\"lb; flush ruleset\"")),
    "sink[0].table"
);
rule!(
    sink_slots_zero,
    with_sink(&(NFT_MAP.to_string() + "slots = 0\n")),
    "sink[0].slots"
);
rule!(
    sink_slots_too_many,
    with_sink(&(NFT_MAP.to_string() + "slots = 70000\n")),
    "sink[0].slots"
);
rule!(
    sink_map_and_set,
    with_sink(&(NFT_MAP.to_string() + "set = \"s\"\n")),
    "sink[0].set"
);
rule!(
    sink_neither_map_nor_set,
    with_sink(&NFT_MAP.replace("map = \"web_slots\"\n", "")),
    "sink[0].map"
);
rule!(
    sink_slots_on_a_set,
    with_sink(&NFT_MAP.replace("map = \"web_slots\"\n", "set = \"s\"\nslots = 8\n")),
    "sink[0].slots"
);
rule!(
    sink_bpf_with_a_table,
    with_sink("profile = \"web\"\nkind = \"bpf\"\nmap = \"m\"\ntable = \"lb\"\n"),
    "sink[0].table"
);
rule!(
    sink_on_stop_unknown,
    with_sink(&(NFT_MAP.to_string() + "on_stop = \"flush\"\n")),
    "sink[0].on_stop"
);
rule!(
    sink_names_collide,
    with_sink(NFT_MAP) + "\n[[sink]]\n" + NFT_MAP,
    "sink[1].name"
);
