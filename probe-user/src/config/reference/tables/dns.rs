//! The keys of `[dns]` and its tables.
use super::*;

pub const DNS: Section = Section {
    path: "dns",
    header: "[dns]",
    about: "Makes probed the authoritative DNS server of one zone: each profile answers to one name in it, \
            with the endpoints its routing method picks among the eligible ones at the moment of the \
            query.",
    kinds: &[],
    own: &[
        Key::new(
            "listen",
            Strings,
            Required,
            words("at least one ADDRESS:PORT, each once"),
            Restart,
            "Where the server answers, over UDP and TCP on each.",
        ),
        Key::new(
            "zone",
            Type::String,
            Required,
            words("a DNS name, with or without the final dot"),
            Applies,
            "The zone the server answers for.",
        ),
        Key::new(
            "ttl",
            Duration,
            Value("\"30s\""),
            Seconds(0, 86_400),
            Applies,
            "The TTL of answers whose profile sets no dns_ttl, and of the SOA.",
        ),
        Key::new(
            "negative_ttl",
            Duration,
            said("ttl"),
            Seconds(0, 86_400),
            Applies,
            "How long resolvers may keep NXDOMAIN and NODATA answers (the SOA's minimum field).",
        ),
        Key::new(
            "nameserver",
            Tables,
            said("one, ns1.ZONE, at the listen addresses that are not wildcards"),
            Allowed::Any,
            Applies,
            "The zone's name servers: see [[dns.nameserver]].",
        ),
        Key::new(
            "nameservers",
            Strings,
            said("none"),
            words("none: it is refused"),
            Applies,
            "The earlier form of nameserver. It is refused, with the [[dns.nameserver]] tables to write \
             instead.",
        ),
        Key::new(
            "rate_limit",
            Table,
            said("every key at its default: rate limiting is on"),
            Allowed::Any,
            Applies,
            "See [dns.rate_limit].",
        ),
        Key::new(
            "tcp",
            Table,
            said("every key at its default"),
            Allowed::Any,
            Applies,
            "See [dns.tcp].",
        ),
        Key::new(
            "region",
            Tables,
            said("none"),
            Allowed::Any,
            Applies,
            "The regions of geographic routing: see [[dns.region]].",
        ),
        Key::new(
            "geoip_db",
            Type::String,
            said("none"),
            words("an absolute path to a MaxMind-format (.mmdb) database"),
            Applies,
            "Gives a source's country and continent, for the regions that name them. Read into memory \
             at the start and at every reload; a missing or bad file stops the start or refuses the \
             reload.",
        ),
    ],
};

pub const NAMESERVER: Section = Section {
    path: "dns.nameserver",
    header: "[[dns.nameserver]]",
    about: "One NS record of the zone's apex, in the order written; the first is the SOA's primary name \
            server.",
    kinds: &[],
    own: &[
        Key::new(
            "name",
            Type::String,
            Required,
            words("a DNS name other than the zone's own; unique, and no profile's name"),
            Applies,
            "The name server's name.",
        ),
        Key::new(
            "addresses",
            Strings,
            said("none; required for a name inside the zone, refused for one outside it"),
            words("IPv4 or IPv6 addresses that resolvers can query, each once"),
            Applies,
            "The addresses of a name server inside the zone: the server answers for them and adds them \
             to NS answers as glue.",
        ),
    ],
};

pub const RATE_LIMIT: Section = Section {
    path: "dns.rate_limit",
    header: "[dns.rate_limit]",
    about: "Response rate limiting of UDP answers, against reflection. Each source prefix has a bucket per \
            answer that holds a second's worth of them; over the limit an answer is dropped, except every \
            slip-th, which goes out truncated so that a real client retries over TCP, which is not \
            limited.",
    kinds: &[],
    own: &[
        Key::new(
            "responses_per_second",
            Integer,
            Value("20"),
            Int(0, 1_000_000),
            Applies,
            "How many copies of one answer a source prefix gets per second; 0 turns rate limiting off.",
        ),
        Key::new(
            "slip",
            Integer,
            Value("2"),
            Int(0, 10),
            Applies,
            "Of the answers over the limit, every slip-th goes out truncated: 1 truncates them all, 0 \
             drops them all.",
        ),
        Key::new(
            "ipv4_prefix",
            Integer,
            Value("24"),
            Int(8, 32),
            Applies,
            "The prefix length IPv4 sources are grouped by.",
        ),
        Key::new(
            "ipv6_prefix",
            Integer,
            Value("56"),
            Int(16, 128),
            Applies,
            "The prefix length IPv6 sources are grouped by.",
        ),
        Key::new(
            "exempt",
            Strings,
            Value("[]"),
            words("CIDRs"),
            Applies,
            "Sources never limited, such as monitoring or known resolvers.",
        ),
    ],
};

pub const DNS_TCP: Section = Section {
    path: "dns.tcp",
    header: "[dns.tcp]",
    about: "What DNS clients may hold over TCP. A reload applies it to new connections.",
    kinds: &[],
    own: &[
        Key::new(
            "max_clients",
            Integer,
            Value("1024"),
            Int(1, DnsTcp::MAX_CLIENTS as i64),
            Applies,
            "Connections open at once, the descriptor budget of DNS. At the cap a new connection takes \
             the place of the one idle the longest (or whose answer has waited over a second for its \
             reader), and is refused when every one is busy. An IPv6 /48 holds a quarter of them at \
             most, a /32 half.",
        ),
        Key::new(
            "max_clients_per_prefix",
            Integer,
            Value("64"),
            Int(1, DnsTcp::MAX_CLIENTS as i64),
            Applies,
            "Connections open at once from one source prefix (those of [dns.rate_limit]); at most \
             max_clients. At the cap a new one takes the place of that prefix's connection idle the \
             longest.",
        ),
        Key::new(
            "idle_timeout",
            Duration,
            Value("\"5s\""),
            Millis(100, 300_000),
            Applies,
            "A connection that brings no complete query for this long is closed (the bytes of an \
             unfinished query do not count); at most max_lifetime.",
        ),
        Key::new(
            "max_lifetime",
            Duration,
            Value("\"120s\""),
            Millis(1000, 3_600_000),
            Applies,
            "A connection is closed this long after it opened, however busy.",
        ),
    ],
};

pub const REGION: Section = Section {
    path: "dns.region",
    header: "[[dns.region]]",
    about: "The sources that make up one region of geographic routing: a source belongs to the region \
            whose subnets hold it (the most specific wins), else, with geoip_db, to the region that lists \
            its country, else its continent. A source in no region gets the endpoint whose region is \
            world.",
    kinds: &[],
    own: &[
        Key::new(
            "name",
            Type::String,
            Required,
            words(
                "a lower-case name of 1 to 63 letters, digits, '-', '_', '.', ':', '[' or ']'; not \"world\"; unique",
            ),
            Applies,
            "The name endpoints give as their region.",
        ),
        Key::new(
            "subnets",
            Strings,
            said("none; required unless countries or continents are given"),
            words("CIDRs, each in one region"),
            Applies,
            "The source subnets of the region.",
        ),
        Key::new(
            "countries",
            Strings,
            Value("[]"),
            words("ISO 3166-1 alpha-2 codes in upper case, each in one region"),
            Applies,
            "The countries whose sources belong to the region.",
        )
        .only("a [dns] with geoip_db"),
        Key::new(
            "continents",
            Strings,
            Value("[]"),
            words("AF, AN, AS, EU, NA, OC or SA, each in one region"),
            Applies,
            "The continents whose sources belong to the region.",
        )
        .only("a [dns] with geoip_db"),
    ],
};
