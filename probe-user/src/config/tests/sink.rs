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

// route sinks.
const ROUTE: &str = "profile = \"web\"\nkind = \"route\"\nprefixes = [\"198.51.100.10/32\", \"2001:db8::10\"]\n";

#[test]
fn a_route_sink_resolves_with_defaults_and_always_withdraws_on_stop() {
    let c = ok(&with_sink(ROUTE));
    assert_eq!(
        c.sinks,
        [Sink {
            name: "route".into(),
            profile: "web".into(),
            on_stop: OnStop::Clear,
            kind: SinkKind::Route(RouteSink {
                prefixes: vec!["198.51.100.10/32".parse().unwrap(), "2001:db8::10/128".parse().unwrap()],
                device: "probed-route".into(),
                kernel_table: 201,
                route_protocol: 201,
                metric: 100,
                demote_metric: None,
                min_eligible: 1,
                hold_down: std::time::Duration::from_secs(5),
            }),
        }]
    );
    let c = ok(&with_sink(
        &(ROUTE.to_string()
            + "name = \"vip\"\nkernel_table = 70000\nroute_protocol = 42\nmetric = 10\ndemote_metric = 900\n\
               min_eligible = 2\nhold_down = \"500ms\"\n"),
    ));
    let SinkKind::Route(r) = &c.sinks[0].kind else {
        panic!("a route sink")
    };
    assert_eq!(
        (
            r.device.as_str(),
            r.kernel_table,
            r.route_protocol,
            r.metric,
            r.demote_metric,
            r.min_eligible
        ),
        ("probed-vip", 70000, 42, 10, Some(900), 2)
    );
    assert_eq!(r.hold_down, std::time::Duration::from_millis(500));
}

rule!(
    route_prefixes_missing,
    with_sink("profile = \"web\"\nkind = \"route\"\n"),
    "sink[0].prefixes"
);
rule!(
    route_prefix_with_host_bits,
    with_sink(&ROUTE.replace("198.51.100.10/32", "198.51.100.10/24")),
    "sink[0].prefixes[0]"
);
rule!(
    route_prefix_not_an_address,
    with_sink(&ROUTE.replace("198.51.100.10/32", "vip")),
    "sink[0].prefixes[0]"
);
rule!(
    route_prefix_in_two_sinks,
    with_sink(ROUTE) + "\n[[sink]]\nname = \"other\"\n" + &ROUTE.replace(", \"2001:db8::10\"", ""),
    "sink[1].prefixes[0]"
);
rule!(
    route_device_in_two_sinks,
    with_sink(&(ROUTE.to_string() + "device = \"vips\"\n"))
        + "\n[[sink]]\nname = \"other\"\nprofile = \"web\"\nkind = \"route\"\nprefixes = [\"198.51.100.11\"]\ndevice = \"vips\"\n",
    "sink[1].device"
);
rule!(
    route_default_device_too_long,
    with_sink(&(ROUTE.to_string() + "name = \"a-long-sink-name\"\n")),
    "sink[0].device"
);
rule!(
    route_device_not_an_interface_name,
    with_sink(&(ROUTE.to_string() + "device = \"eth0; ip link\"\n")),
    "sink[0].device"
);
rule!(
    route_protocol_reserved,
    with_sink(&(ROUTE.to_string() + "route_protocol = 2\n")),
    "sink[0].route_protocol"
);
rule!(
    route_table_zero,
    with_sink(&(ROUTE.to_string() + "kernel_table = 0\n")),
    "sink[0].kernel_table"
);
rule!(
    route_demote_metric_equal_to_metric,
    with_sink(&(ROUTE.to_string() + "demote_metric = 100\n")),
    "sink[0].demote_metric"
);
rule!(
    route_hold_down_too_long,
    with_sink(&(ROUTE.to_string() + "hold_down = \"2h\"\n")),
    "sink[0].hold_down"
);
rule!(
    route_on_stop_given,
    with_sink(&(ROUTE.to_string() + "on_stop = \"keep\"\n")),
    "sink[0].on_stop"
);
rule!(
    route_with_an_nft_key,
    with_sink(&(ROUTE.to_string() + "table = \"lb\"\n")),
    "sink[0].table"
);
rule!(
    nft_with_a_route_key,
    with_sink(&(NFT_MAP.to_string() + "prefixes = [\"198.51.100.10\"]\n")),
    "sink[0].prefixes"
);
