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
    kinds: &[
        crate::sinks::nftables::KEYS,
        crate::sinks::haproxy::KEYS,
        crate::sinks::exec::KEYS,
        crate::sinks::route::KEYS,
    ],
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
            "slots",
            Integer,
            Value("64"),
            Int(1, MAX_SLOTS as i64),
            Applies,
            "The slots of the slot table; each names one eligible endpoint, in proportion to weight, and \
             only the slots of an endpoint that leaves or returns move.",
        )
        .sinks(MAPS, "with map"),
    ],
};
