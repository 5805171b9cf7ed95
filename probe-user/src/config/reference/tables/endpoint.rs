//! The keys of `[[profile.endpoint]]`.
use super::*;

const PLAIN: &str = "plain endpoints, not nested ones";

pub const ENDPOINT: Section = Section {
    path: "profile.endpoint",
    header: "[[profile.endpoint]]",
    about: "One backend of the profile, probed with the profile's check. An endpoint with profile = \
            \"CHILD\" is a nested profile instead: it is not probed, its status follows the child's \
            endpoints, and it takes only name, profile, weight, priority, state, subnets, region and \
            min_child_endpoints.",
    kinds: crate::probe::kinds::ENDPOINT_KEYS,
    own: &[
        Key::new(
            "name",
            Type::String,
            said("ADDRESS:PORT; for a nested endpoint, the child's name"),
            words("1 to 63 letters, digits, '-', '_', '.', ':', '[' or ']'; unique in the profile"),
            Recheck,
            "Names the endpoint in the API, events and metrics. A renamed endpoint is a new one.",
        ),
        Key::new(
            "address",
            Type::String,
            Required,
            words("a unicast IPv4 or IPv6 address"),
            Recheck,
            "The backend's address: what is probed, answered in DNS and written to sinks.",
        )
        .only(PLAIN),
        Key::new(
            "port",
            Integer,
            said("the health check's port, else 80 for http and 443 for https"),
            Int(1, 65_535),
            Recheck,
            "The port probed, and written to sinks that hold ports.",
        )
        .only(PLAIN),
        Key::new(
            "weight",
            Integer,
            Value("1"),
            Int(1, 1000),
            Applies,
            "The endpoint's share under weighted routing and in slot tables. A haproxy sink takes \
             weights up to 256.",
        ),
        Key::new(
            "priority",
            Integer,
            said("the endpoint's position in the profile, from 1"),
            Int(1, 1000),
            Applies,
            "The order of priority and multivalue routing, lowest first; unique in the profile under \
             priority routing.",
        ),
        Key::new(
            "state",
            Type::String,
            Value("\"enabled\""),
            OneOf(AdminState::NAMES),
            Applies,
            "The admin state: disabled takes the endpoint out of rotation; always-serve keeps it \
             eligible whatever its checks say; drain keeps probing it but sends it no new traffic \
             (always-serve and drain are refused on a nested endpoint). A change here replaces a \
             state set through the API, which otherwise survives reloads and restarts.",
        ),
        Key::new(
            "subnets",
            Strings,
            Value("[]"),
            words("CIDRs, each mapped by one endpoint of the profile"),
            Applies,
            "Sources in these subnets get this endpoint. One endpoint of the profile may have none: it \
             gets every source no subnet maps.",
        )
        .only("routing = \"subnet\""),
        Key::new(
            "region",
            Type::String,
            said("none; required under geographic routing"),
            words("a lower-case name (see name in [[dns.region]]), or \"world\"; one endpoint per region"),
            Applies,
            "Queries from the sources of the [[dns.region]] of this name get this endpoint; the world \
             endpoint gets every source whose region has no endpoint of its own.",
        )
        .only("routing = \"geographic\""),
        Key::new(
            "haproxy_server",
            Type::String,
            said("the endpoint's name"),
            words("1 to 63 letters, digits, '-', '_', '.' or ':'"),
            Applies,
            "The HAProxy server a haproxy sink sets for this endpoint.",
        )
        .only(PLAIN),
        Key::new(
            "profile",
            Type::String,
            said("none: a plain endpoint"),
            words("the name of another profile, without loops"),
            Applies,
            "Makes the endpoint a nested profile: the child named here, whose routing picks the \
             addresses its answers hold.",
        ),
        Key::new(
            "min_child_endpoints",
            Integer,
            Value("1"),
            Int(1, 1000),
            Applies,
            "The nested endpoint is Degraded while fewer of the child's endpoints are available \
             (Online, CheckingEndpoint or Unmonitored).",
        )
        .only("nested endpoints"),
    ],
};
