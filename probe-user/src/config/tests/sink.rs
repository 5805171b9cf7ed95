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

// haproxy and exec sinks.
const HAPROXY: &str =
    "profile = \"web\"\nkind = \"haproxy\"\nsocket = \"/run/haproxy/admin.sock\"\nbackend = \"web\"\n";

/// The profile `web` with two endpoints (extra keys for the first, then the second) and `sink`.
fn two_endpoints(first: &str, second: &str, sink: &str) -> String {
    "[[profile]]\nname = \"web\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\nport = 80\n\
     [[profile.endpoint]]\naddress = \"192.0.2.1\"\n"
        .to_string()
        + first
        + "\n[[profile.endpoint]]\naddress = \"192.0.2.2\"\n"
        + second
        + "\n[[sink]]\n"
        + sink
}

#[test]
fn haproxy_and_exec_sinks_resolve_with_defaults() {
    let text = two_endpoints(
        "name = \"b0\"\n",
        "haproxy_server = \"web-2\"\n",
        &(HAPROXY.to_string()
            + "\n[[sink]]\nprofile = \"web\"\nkind = \"exec\"\ncommand = [\"/usr/local/bin/lb-feed\", \"--pool\", \"web\"]\n"),
    );
    let c = ok(&text);
    assert_eq!(c.profiles[0].endpoints[1].haproxy_server(), Some("web-2"));
    assert_eq!(
        c.sinks,
        [
            Sink {
                name: "web".into(),
                profile: "web".into(),
                on_stop: OnStop::Keep,
                kind: SinkKind::Haproxy(HaproxySink {
                    socket: "/run/haproxy/admin.sock".into(),
                    backend: "web".into(),
                    down: HaproxyDown::Maint,
                    servers: [("b0", "b0"), ("192.0.2.2:80", "web-2")]
                        .into_iter()
                        .map(|(e, s)| (e.to_string(), s.to_string()))
                        .collect(),
                }),
            },
            Sink {
                name: "lb-feed".into(),
                profile: "web".into(),
                on_stop: OnStop::Keep,
                kind: SinkKind::Exec(ExecSink {
                    command: vec!["/usr/local/bin/lb-feed".into(), "--pool".into(), "web".into()],
                }),
            },
        ]
    );
    let drain = ok(&with_sink(&(HAPROXY.to_string() + "down = \"drain\"\n")));
    assert!(matches!(&drain.sinks[0].kind, SinkKind::Haproxy(h) if h.down == HaproxyDown::Drain));
}

rule!(
    haproxy_socket_missing,
    with_sink(&HAPROXY.replace("socket = \"/run/haproxy/admin.sock\"\n", "")),
    "sink[0].socket"
);
rule!(
    haproxy_socket_relative,
    with_sink(&HAPROXY.replace("/run/haproxy/admin.sock", "run/admin.sock")),
    "sink[0].socket"
);
rule!(
    haproxy_backend_missing,
    with_sink(&HAPROXY.replace("backend = \"web\"\n", "")),
    "sink[0].backend"
);
rule!(
    haproxy_backend_name_unsafe,
    with_sink(&HAPROXY.replace("backend = \"web\"", "backend = \"web/b0 state maint;shutdown\"")),
    "sink[0].backend"
);
rule!(
    haproxy_down_unknown,
    with_sink(&(HAPROXY.to_string() + "down = \"stopped\"\n")),
    "sink[0].down"
);
rule!(
    haproxy_with_an_nft_key,
    with_sink(&(HAPROXY.to_string() + "table = \"lb\"\n")),
    "sink[0].table"
);
rule!(
    haproxy_key_on_an_nftables_sink,
    with_sink(&(NFT_MAP.to_string() + "socket = \"/run/haproxy/admin.sock\"\n")),
    "sink[0].socket"
);
rule!(
    haproxy_server_name_unsafe,
    cfg("lb", "", "", "haproxy_server = \"b0 state ready\""),
    "profile[0].endpoint[0].haproxy_server"
);
rule!(
    haproxy_server_wrong_type,
    cfg("lb", "", "", "haproxy_server = 3"),
    "profile[0].endpoint[0].haproxy_server"
);
// A default IPv6 name (`[2001:db8::1]:80`) has brackets, which HAProxy names cannot hold.
rule!(
    haproxy_endpoint_name_is_no_server_name,
    with_sink(HAPROXY).replace("192.0.2.1", "2001:db8::1"),
    "sink[0].profile"
);
rule!(
    haproxy_two_endpoints_one_server,
    two_endpoints("name = \"b0\"\n", "haproxy_server = \"b0\"\n", HAPROXY),
    "sink[0].profile"
);
rule!(
    haproxy_weight_beyond_256,
    two_endpoints("weight = 300\n", "", HAPROXY),
    "sink[0].profile"
);

#[test]
fn haproxy_server_needs_no_sink() {
    // The key is the endpoint's; without a haproxy sink it is simply unused.
    let c = ok(&cfg("lb", "", "", "haproxy_server = \"web-1\""));
    assert_eq!(c.profiles[0].endpoints[0].haproxy_server(), Some("web-1"));
}

const EXEC: &str = "profile = \"web\"\nkind = \"exec\"\n";

rule!(exec_command_missing, with_sink(EXEC), "sink[0].command");
rule!(
    exec_command_empty,
    with_sink(&(EXEC.to_string() + "command = []\n")),
    "sink[0].command"
);
rule!(
    exec_program_relative,
    with_sink(&(EXEC.to_string() + "command = [\"lb-feed\", \"-v\"]\n")),
    "sink[0].command[0]"
);
rule!(
    exec_argument_not_a_string,
    with_sink(&(EXEC.to_string() + "command = [\"/bin/lb-feed\", 3]\n")),
    "sink[0].command[1]"
);
rule!(
    exec_with_a_haproxy_key,
    with_sink(&(EXEC.to_string() + "command = [\"/bin/cat\"]\nbackend = \"web\"\n")),
    "sink[0].backend"
);
rule!(
    exec_default_name_unusable,
    with_sink(&(EXEC.to_string() + "command = [\"/opt/feed.py\"]\n")),
    "sink[0].name"
);
rule!(
    sink_kind_wrong_type_is_one_error,
    with_sink("profile = \"web\"\nkind = 3\n"),
    "sink[0].kind"
);
