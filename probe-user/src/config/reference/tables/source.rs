//! The keys of `[source]`.
use super::*;

pub const SOURCE: Section = Section {
    path: "source",
    header: "[source]",
    about: "Where probes leave from and how the reply matcher, probe_rx, attaches. Once the L4 engine \
            runs, a change here needs a restart (the reload names source); until the engine first \
            starts, it starts with the values of the latest reload.",
    kinds: &[],
    own: &[
        Key::new(
            "interfaces",
            Strings,
            Value("[]"),
            words("interface names of 1 to 15 characters, without '/', ':' or spaces"),
            Restart,
            "The interfaces probe_rx attaches to and probes are sent by. None: the interface the route \
             to the first TCP or UDP endpoint leaves by.",
        ),
        Key::new(
            "addresses",
            Strings,
            Value("[]"),
            words("unicast IPv4 or IPv6 addresses"),
            Restart,
            "Source addresses of probes. With none of a family, each probe of that family takes the \
             source its route prefers.",
        ),
        Key::new(
            "port_range",
            Type::String,
            Value("\"61000-65095\""),
            words(
                "\"FIRST-LAST\" with 1024 <= FIRST <= LAST <= 65535, outside the kernel's default \
                 ephemeral range 32768-60999 (an overlap with the node's own \
                 net.ipv4.ip_local_port_range stops the engine's start)",
            ),
            Restart,
            "The source ports of probes. While the engine runs they are added to \
             net.ipv4.ip_local_reserved_ports. Fewer than 4096 ports weaken UDP checks against forged \
             ICMP errors.",
        ),
        Key::new(
            "xdp_mode",
            Type::String,
            Value("\"auto\""),
            OneOf(&AttachMode::NAMES),
            Restart,
            "How probe_rx attaches at XDP. auto: native (driver) mode, else generic (skb) mode with a \
             warning, since generic XDP turns LRO and hardware GRO off on the device; driver: native \
             mode or no start; skb: generic mode only.",
        ),
        Key::new(
            "hook",
            Type::String,
            Value("\"xdp\""),
            OneOf(&Hook::NAMES),
            Restart,
            "Where the reply matcher runs. xdp: at the interface's XDP hook, which it must have to itself \
             (another XDP program there stops the start); tcx: at tc ingress, first in the chain, beside \
             another XDP program (Linux 6.6 or later).",
        ),
    ],
};
