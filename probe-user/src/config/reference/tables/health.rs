//! The keys of `[profile.health]`.
use super::*;

const HTTP: &[Protocol] = &[Protocol::Http, Protocol::Https];
/// Why the request's keys are not gRPC's.
const GRPC_CALL: &str = "(a gRPC check's call is grpc.health.v1.Health/Check, and SERVING is healthy)";

pub const HEALTH: Section = Section {
    path: "profile.health",
    header: "[profile.health]",
    about: "The profile's health check, by its dialect's rules. The keys of one protocol are refused on \
            another. Every key here but the thresholds is part of the check: changing it makes each \
            endpoint's check a new one.",
    kinds: &[crate::probe::udp::KEYS],
    own: &[
        Key::new(
            "protocol",
            Type::String,
            Required,
            OneOf(Protocol::NAMES),
            Recheck,
            "What a probe is: a TCP handshake, a UDP datagram, an HTTP or HTTPS request (HTTPS needs \
             a certificate presented, and by default does not verify it), or a gRPC health check \
             (grpc.health.v1.Health/Check over HTTP/2: grpc in cleartext by prior knowledge, grpcs \
             over TLS; SERVING is healthy). lb takes all six; tm and ga all but udp.",
        ),
        Key::new(
            "port",
            Integer,
            said("none: 80 for http, 443 for https; tcp, udp, grpc and grpcs need a port here or on every endpoint"),
            Int(1, 65_535),
            Recheck,
            "The port probed on the endpoints that do not set their own.",
        ),
        Key::new(
            "path",
            Type::String,
            Value("\"/\""),
            words(
                "1 to 80 characters starting with '/': letters, digits and - / . % ? # & _ ; ~ ! ( ) * [ ] \
                 @ $ ^ : ' , +",
            ),
            Reask,
            "The path requested.",
        )
        .protocols(HTTP, GRPC_CALL),
        Key::new(
            "host",
            Type::String,
            said("the endpoint's address"),
            words("a DNS name or an IP address, optionally with :PORT; no '*'"),
            Reask,
            "The Host header (a gRPC call's :authority), and the name sent in TLS. tm sets Host \
             through headers instead, except for gRPC.",
        )
        .protocols(HTTP_AND_GRPC, "(http and https: in lb and ga)"),
        Key::new(
            "method",
            Type::String,
            Dialect(["\"HEAD\"", "\"GET\"", "\"GET\""]),
            OneOf(&["HEAD", "GET"]),
            Reask,
            "The request method, in any case; tm and ga take GET only.",
        )
        .protocols(HTTP, GRPC_CALL),
        Key::new(
            "headers",
            Strings,
            Value("[]"),
            words(
                "at most 8 \"name:value\" strings, each name once; not Content-Length, Transfer-Encoding, \
                 Connection, Upgrade or TE",
            ),
            Reask,
            "Request headers of every probe; tm sets Host this way: \"Host:www.example.com\". For \
             gRPC, the call's metadata (every dialect): not Host, Content-Type, TE or grpc-*.",
        )
        .protocols(HTTP_AND_GRPC, "(http and https: in tm)"),
        Key::new(
            "status",
            Strings,
            Dialect(["[\"2xx\", \"3xx\"]", "[\"200\"]", "[\"2xx\", \"3xx\"]"]),
            words(
                "lb: classes \"2xx\" to \"5xx\"; tm: at most 8 codes or ranges within 100-599, like \"200\" \
                 or \"200-299\" (one string \"200-299, 301\" also works); ga: not configurable",
            ),
            Reask,
            "The status codes that make a response healthy.",
        )
        .protocols(HTTP, GRPC_CALL),
        Key::new(
            "interval",
            Duration,
            Dialect(["\"2s\"", "\"30s\"", "\"2s\""]),
            words("lb: \"100ms\" to \"300s\"; tm: \"10s\" or \"30s\"; ga: whole seconds from \"1s\" to \"50s\""),
            Retime,
            "The time from the end of one probe of an endpoint to the start of the next.",
        ),
        Key::new(
            "timeout",
            Duration,
            Dialect(["\"5s\"", "\"10s\"", "\"3s\""]),
            words(
                "lb: \"100ms\" to \"60s\"; tm: whole seconds from \"5s\" to \"10s\", to \"9s\" with \
                 interval \"10s\"; ga: \"3s\" only",
            ),
            Retime,
            "How long a probe may take before it fails. tm's default is \"9s\" with interval \"10s\".",
        ),
        Key::new(
            "healthy_threshold",
            Integer,
            Value("3"),
            Int(1, THRESHOLD_MAX as i64),
            Retime,
            "Consecutive successes that make an endpoint healthy.",
        )
        .only("dialect = \"lb\""),
        Key::new(
            "unhealthy_threshold",
            Integer,
            Value("3"),
            Int(1, THRESHOLD_MAX as i64),
            Retime,
            "Consecutive failures that make an endpoint unhealthy.",
        )
        .only("dialect = \"lb\""),
        Key::new(
            "tolerated_failures",
            Integer,
            Value("3"),
            Int(0, THRESHOLD_MAX as i64 - 1),
            Retime,
            "Consecutive failures tolerated: the next one makes the endpoint Degraded, and one success \
             makes it Online again.",
        )
        .only("dialect = \"tm\""),
        Key::new(
            "threshold",
            Integer,
            Value("3"),
            Int(2, THRESHOLD_MAX as i64),
            Retime,
            "Consecutive results, successes or failures, that change an endpoint's health.",
        )
        .only("dialect = \"ga\""),
        Key::new(
            "body_match",
            Type::String,
            said("none"),
            Bytes(1, 1024),
            Reask,
            "A string the response body must contain, within its first 64 KiB; not with method HEAD. \
             A check with it runs through a socket, never in the kernel.",
        )
        .protocols(HTTP, GRPC_CALL),
        Key::new(
            "service",
            Type::String,
            Value("\"\""),
            words("a gRPC service name of at most 256 bytes, like \"shop.Cart\"; no control characters"),
            Reask,
            "The service whose health the check asks about; \"\" asks about the server as a whole. \
             SERVING is healthy; NOT_SERVING, UNKNOWN and SERVICE_UNKNOWN fail with that name as the \
             reason, and so does a gRPC error status (UNIMPLEMENTED: no health service; NOT_FOUND: a \
             service the server does not know; UNAVAILABLE; DEADLINE_EXCEEDED). The timeout is sent \
             as the call's deadline.",
        )
        .protocols(GRPC, ""),
        Key::new(
            "tls_verify",
            Type::String,
            Value("\"presence\""),
            OneOf(&["presence", "ca"]),
            Reask,
            "presence: the server must present a certificate, which is not checked (the traffic \
             manager's rule). ca: it must chain to a root of ca_file (or the system's roots), match \
             server_name and be within its dates; a failure is the check's failure, its reason naming it \
             (expired, unknown issuer, not valid for the name).",
        )
        .protocols(OVER_TLS, ""),
        Key::new(
            "ca_file",
            Type::String,
            said("the system's roots"),
            words("an absolute path to a PEM file of CA certificates, read at start and reload"),
            Reask,
            "The roots a certificate must chain to with tls_verify = \"ca\".",
        )
        .protocols(OVER_TLS, "with tls_verify = \"ca\""),
        Key::new(
            "server_name",
            Type::String,
            said("the Host (host, or a Host header); else the address, with no SNI"),
            words("a host name"),
            Reask,
            "The name sent as SNI and, with tls_verify = \"ca\", the name the certificate must be \
             valid for.",
        )
        .protocols(OVER_TLS, ""),
        Key::new(
            "client_cert",
            Type::String,
            said("none: no client certificate"),
            words("an absolute path to a PEM file: the certificate, then its chain"),
            Reask,
            "The certificate presented to servers that ask for one (mTLS backends), with client_key. \
             Read when the configuration is loaded; a renewed file at the same path is taken at the \
             next restart, or by a reload that changes the path.",
        )
        .protocols(OVER_TLS, ""),
        Key::new(
            "client_key",
            Type::String,
            said("none"),
            words("an absolute path to a PEM private key that only its owner (root or the daemon's user) may read"),
            Reask,
            "The client certificate's key.",
        )
        .protocols(OVER_TLS, "with client_cert"),
        Key::new(
            "min_version",
            Type::String,
            Value("\"1.2\""),
            OneOf(&["1.2", "1.3"]),
            Reask,
            "The lowest TLS version the check accepts: 1.2 offers TLS 1.2 and 1.3; 1.3 offers TLS 1.3 \
             alone, and a server that speaks only TLS 1.2 fails the check.",
        )
        .protocols(OVER_TLS, ""),
        Key::new(
            "tls_reverify",
            Duration,
            Value("\"300s\""),
            Seconds(1, 86_400),
            Reask,
            "With tls_verify = \"ca\": a full, verified handshake with each endpoint at least this \
             often. A resumed TLS session carries no certificate, so a session is resumed only within \
             this of the endpoint's own last full handshake, and never once that certificate has \
             expired; sessions are kept per endpoint (address, port and TLS name), never offered to \
             another endpoint behind the same name. A certificate that expires or is replaced by a bad \
             one fails the check within this (plus the failure threshold), as curl fails a new \
             connection at once.",
        )
        .protocols(OVER_TLS, "with tls_verify = \"ca\""),
        Key::new(
            "cert_warn_days",
            Integer,
            Value("14"),
            Int(0, 3650),
            Applies,
            "A cert-expiring event (once per certificate) when the server's certificate expires within \
             this many days; 0: never. The check's verdict does not change. Every TLS check records \
             the certificate's expiry, shown in the status view (tls_cert) and the metric \
             probed_tls_cert_expiry_seconds.",
        )
        .protocols(OVER_TLS, ""),
        Key::new(
            "fast_interval",
            Duration,
            said("interval"),
            Millis(1, MAX_PACING_MS),
            Retime,
            "The time between probes while a change of health is pending (HAProxy's fastinter).",
        ),
        Key::new(
            "down_interval",
            Duration,
            said("interval"),
            Millis(1, MAX_PACING_MS),
            Retime,
            "The time between probes while an endpoint is settled unhealthy (HAProxy's downinter).",
        ),
        Key::new(
            "initial_jitter",
            Duration,
            Value("\"0s\""),
            Millis(0, MAX_PACING_MS),
            Retime,
            "Up to this much random delay before an endpoint's first probe.",
        ),
        Key::new(
            "jitter_percent",
            Integer,
            Value("0"),
            Int(0, 100),
            Retime,
            "Each time between probes is lengthened at random by up to this share of itself. With all \
             four pacing keys left out, probes keep the dialect's windows exactly.",
        ),
    ],
};
