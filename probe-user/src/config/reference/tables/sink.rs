//! The keys of `[[sink]]`.
use super::*;

/// The sinks that keep a slot table.
const MAPS: &[SinkType] = &[SinkType::Nftables, SinkType::Bpf];

pub const SINK: Section = Section {
    path: "sink",
    header: "[[sink]]",
    about: "Keeps one forwarding structure of the node equal to one profile's eligible endpoints (nested \
            ones left out). nftables: a map of the operator's ruleset used as a slot table, or a set of \
            the eligible addresses; bpf: a pinned slot table for an XDP or tc load balancer; haproxy: \
            the servers of a running HAProxy backend, through its admin socket; exec: a program fed one \
            JSON line per change; route: routes to a VIP in a kernel table, announced by the node's \
            routing daemon while the profile can serve. A reload restarts the sinks whose settings changed, and is refused \
            when a new or changed sink's structure is missing.",
    kinds: &[],
    own: &[
        Key::new(
            "name",
            Type::String,
            said(
                "the map's or set's name (nftables), the map's (bpf), the backend's (haproxy), the program's \
                 file name (exec)",
            ),
            words("1 to 63 letters, digits, '_' or '-', starting with a letter; unique among sinks"),
            Applies,
            "Labels the sink's metrics and its entry in /v1/sinks.",
        ),
        Key::new(
            "profile",
            Type::String,
            Required,
            words("the name of a profile"),
            Applies,
            "The profile whose eligible endpoints the sink follows.",
        ),
        Key::new(
            "kind",
            Type::String,
            Required,
            OneOf(SinkType::NAMES),
            Applies,
            "What the sink drives.",
        ),
        Key::new(
            "on_stop",
            Type::String,
            Value("\"keep\""),
            OneOf(&["keep", "clear"]),
            Applies,
            "What stopping probed does to the structure: keep leaves it as it is, so the node goes on \
             forwarding to the last eligible set; clear empties it. A route sink always withdraws (its \
             routes go with probed's device) and takes no on_stop.",
        ),
        Key::new(
            "family",
            Type::String,
            Required,
            OneOf(&["ip", "ip6", "inet"]),
            Applies,
            "The family of the nftables table.",
        )
        .sinks(&[SinkType::Nftables], ""),
        Key::new(
            "table",
            Type::String,
            Required,
            words(IDENT),
            Applies,
            "The nftables table that holds the map or set.",
        )
        .sinks(&[SinkType::Nftables], ""),
        Key::new(
            "map",
            Type::String,
            said("none; bpf needs it, and nftables needs map or set"),
            words(IDENT),
            Applies,
            "nftables: a map keyed by slot (typeof numgen inc mod SLOTS : ip daddr, with . tcp dport to \
             set the port too). bpf: the pin's name under pin_dir/sinks/; probed creates NAME and \
             NAME_ctl and leaves them when it stops.",
        )
        .sinks(MAPS, ""),
        Key::new(
            "set",
            Type::String,
            said("none"),
            words(IDENT),
            Applies,
            "An nftables set that holds the eligible addresses (and ports, with . inet_service in its \
             type); instead of map.",
        )
        .sinks(&[SinkType::Nftables], ""),
        Key::new(
            "slots",
            Integer,
            Value("64"),
            Int(1, MAX_SLOTS as i64),
            Applies,
            "The slots of the slot table; each names one eligible endpoint, in proportion to weight, and \
             only the slots of an endpoint that leaves or returns move.",
        )
        .sinks(MAPS, "with map"),
        Key::new(
            "socket",
            Type::String,
            Required,
            words("an absolute path"),
            Applies,
            "HAProxy's admin socket (stats socket PATH level admin in haproxy.cfg).",
        )
        .sinks(&[SinkType::Haproxy], ""),
        Key::new(
            "backend",
            Type::String,
            Required,
            words("1 to 63 letters, digits, '-', '_', '.' or ':'"),
            Applies,
            "The HAProxy backend whose servers probed sets: each endpoint's server (its name, or its \
             haproxy_server) gets its state and weight.",
        )
        .sinks(&[SinkType::Haproxy], ""),
        Key::new(
            "down",
            Type::String,
            Value("\"maint\""),
            OneOf(&["maint", "drain"]),
            Applies,
            "The state of a server whose endpoint is not eligible: maint (no traffic) or drain (no new \
             sessions but persistent ones).",
        )
        .sinks(&[SinkType::Haproxy], ""),
        Key::new(
            "command",
            Strings,
            Required,
            words("the program's absolute path, then its arguments; no shell, no PATH search"),
            Applies,
            "The program started and fed one JSON line per change on its standard input.",
        )
        .sinks(&[SinkType::Exec], ""),
        Key::new(
            "prefixes",
            Strings,
            Required,
            words("1 to 64 IPv4 or IPv6 prefixes (a VIP: /32 or /128) with their host bits clear, each in one route sink only"),
            Applies,
            "What the node announces while the profile can serve: a route to each prefix in kernel_table, \
             which the routing daemon (BIRD, FRR) learns and announces by BGP.",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "device",
            Type::String,
            said("\"probed-\" and the sink's name"),
            words("1 to 15 letters, digits, '_' or '-'; unique among route sinks"),
            Applies,
            "The TUN device the routes go through. probed makes it, and it goes when probed ends, \
             however it ends (stop, SIGKILL, OOM, panic): the kernel removes its routes, and the routing \
             daemon withdraws them.",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "kernel_table",
            Integer,
            Value("201"),
            Int(1, 4_294_967_294),
            Applies,
            "The kernel routing table the routes are written to (BIRD: kernel table; FRR: ip \
             import-table). Not the main table: nothing on the node forwards by it.",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "route_protocol",
            Integer,
            Value("201"),
            Int(5, 254),
            Applies,
            "The routes' protocol number (ip route ... proto N), by which the routing daemon picks \
             probed's routes (BIRD: krt_source = N).",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "metric",
            Integer,
            Value("100"),
            Int(0, 4_294_967_295),
            Applies,
            "The metric of an announced route (BIRD: krt_metric).",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "demote_metric",
            Integer,
            said("none: below min_eligible the routes are withdrawn"),
            words("0 to 4294967295, not metric"),
            Applies,
            "Below min_eligible serving endpoints (but some enabled), keep the routes with this metric \
             instead of withdrawing them; the routing daemon's export filter maps it to worse attributes \
             (a community, AS-path prepending), so traffic still lands here when no node announces \
             better. A disabled profile and a stop still withdraw.",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "min_eligible",
            Integer,
            Value("1"),
            Int(1, 100_000),
            Applies,
            "Serving endpoints needed to announce: eligible and Online, or Unmonitored (always-serve). \
             Degraded endpoints made eligible by fail-open and endpoints still being checked do not \
             count.",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "hold_down",
            Duration,
            Value("\"5s\""),
            Millis(0, 3_600_000),
            Applies,
            "The announcement changes at most once per hold_down, and a better state (withdrawn to \
             demoted to announced) must hold this long without a break first; a worse one is applied \
             as soon as the rate allows. A start resumes the saved health at once.",
        )
        .sinks(&[SinkType::Route], ""),
    ],
};
