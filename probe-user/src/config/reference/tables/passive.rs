//! The keys of `[profile.passive]`.
use super::*;

pub const PASSIVE: Section = Section {
    path: "profile.passive",
    header: "[profile.passive]",
    about: "Passive detection: the node watches the TCP handshakes it forwards to the profile's \
            endpoints (the clients' SYNs leaving by the interfaces named, and what the backends \
            answer) and ejects an endpoint on what they meet: consecutive_failures failed \
            handshakes in a row, or with failure_ratio, that share of failures over window once \
            min_attempts handshakes were seen. A failed handshake is one the backend refused \
            (RST), one an ICMP destination unreachable answered, or one not answered within \
            timeout (the client sent its SYN again, or the SYN+ACK came later). An ejected \
            endpoint is Unhealthy as after failed checks, and returns only when its active check \
            passes healthy_threshold times in a row. At most max_ejection_percent of the profile's \
            endpoints are ejected by passive detection at once, so a fault on the clients' side \
            cannot empty the pool. Not for UDP checks; the endpoints' address and port are \
            where the clients' connections go. The observers run at tcx egress and ingress (Linux 6.6+) and change no \
            packet. They cannot see what does not pass tc on the node: replies that bypass it \
            (direct server return) or flows an XDP program redirects.",
    kinds: &[],
    own: &[
        Key::new(
            "interfaces",
            Strings,
            said("[source].interfaces; one of the two is required"),
            words("interface names"),
            Applies,
            "The node's interfaces toward the backends, where the forwarded SYNs leave and the \
             answers come in.",
        ),
        Key::new(
            "consecutive_failures",
            Integer,
            said("5 without failure_ratio"),
            Int(1, 10_000),
            Applies,
            "Eject after this many failed handshakes in a row (a completed one starts the count \
             over).",
        ),
        Key::new(
            "failure_ratio",
            Integer,
            said("none"),
            Int(1, 100),
            Applies,
            "Eject when this percentage of the handshakes decided within window failed, once at \
             least min_attempts were; with consecutive_failures too, whichever comes first.",
        ),
        Key::new(
            "min_attempts",
            Integer,
            Value("10"),
            Int(1, 1_000_000),
            Applies,
            "With failure_ratio: the fewest handshakes within window it is judged on.",
        ),
        Key::new(
            "window",
            Duration,
            Value("\"10s\""),
            Millis(1_000, 600_000),
            Applies,
            "With failure_ratio: how far back it looks.",
        ),
        Key::new(
            "timeout",
            Duration,
            said("the health check's timeout"),
            Millis(100, 60_000),
            Applies,
            "A handshake not answered within this failed. Clients send their SYN again after \
             1 s (Linux), so a timeout under that counts a slow SYN+ACK as the failure it is for \
             the client.",
        ),
        Key::new(
            "max_ejection_percent",
            Integer,
            Value("10"),
            Int(0, 100),
            Applies,
            "The most of the profile's endpoints passive detection may eject at once, as a share \
             (rounded down, but at least one while this is above 0). Endpoints down by their \
             active checks do not count toward it.",
        ),
    ],
};
