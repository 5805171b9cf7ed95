//! The keys of `[profile.discovery]`.
use super::*;

pub const DISCOVERY: Section = Section {
    path: "profile.discovery",
    header: "[profile.discovery]",
    about: "Where a profile with endpoints_from = \"dns\" finds its endpoints: the records of one name, \
            asked of the resolvers given, again when their TTL runs out (within min_ttl and max_ttl). \
            Each address found is an endpoint named ADDRESS:PORT; records that go take their endpoints \
            with them, and one that stays keeps its health. A resolver that fails (no answer in time, \
            SERVFAIL, REFUSED, a garbled answer) changes nothing: the last good set stays, and the name \
            is asked again sooner. An answer that the name has no such records (NXDOMAIN, or no \
            data) is an answer: the profile is then left with no endpoints.",
    kinds: &[],
    own: &[
        Key::new(
            "name",
            Type::String,
            Required,
            words("a fully qualified DNS name (a final dot is allowed)"),
            Applies,
            "The name asked: for A and AAAA its addresses, for SRV its service records \
             (_service._proto.name).",
        ),
        Key::new(
            "type",
            Type::String,
            Value("\"A+AAAA\""),
            OneOf(&crate::config::model::DiscoveryRecords::NAMES),
            Applies,
            "Which records: A, AAAA, both (one question each), or SRV, whose targets' addresses \
             (from the answer's additional section, else asked for) are the endpoints, each with \
             the record's port, its weight (1 to 1000: 0 counts as 1, more than 1000 as 1000) and \
             its priority plus one (at most 1000).",
        ),
        Key::new(
            "port",
            Integer,
            said("none: required for A and AAAA, refused for SRV"),
            Int(1, 65_535),
            Applies,
            "The endpoints' port, for A and AAAA records (SRV records carry their own).",
        ),
        Key::new(
            "resolvers",
            Strings,
            Required,
            words("1 to 8 addresses, each with :PORT or not (53); IPv6 with a port in brackets"),
            Applies,
            "The resolvers asked, in turn until one answers (over UDP, and over TCP when an answer \
             comes truncated).",
        ),
        Key::new(
            "min_ttl",
            Duration,
            Value("\"1s\""),
            Millis(1_000, 3_600_000),
            Applies,
            "The name is asked again no sooner than this, whatever the records' TTL.",
        ),
        Key::new(
            "max_ttl",
            Duration,
            said("\"60s\", or min_ttl when that is longer"),
            Millis(1_000, 3_600_000),
            Applies,
            "And no later than this; also the wait after an answer with no TTL to go by. Not below min_ttl.",
        ),
        Key::new(
            "timeout",
            Duration,
            Value("\"1s\""),
            Millis(100, 10_000),
            Applies,
            "How long each resolver has to answer.",
        ),
    ],
};
