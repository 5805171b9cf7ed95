//! The HTTP(S) and gRPC check's keys: its entries in the reference, in `[profile.health]` and,
//! for what an endpoint may set of its own, in `[[profile.endpoint]]`. Each says which
//! protocols take it; the reader refuses it on any other.
use crate::{
    rules::Protocol,
    schema::keys::{
        said, words,
        Allowed::{Any, Bytes, Int, OneOf, Seconds},
        Key,
        Reload::{Applies, Reask},
        Type,
        Type::{Boolean, Duration, Integer, Strings},
        Unset::{Dialect, Value},
    },
};

const HTTP: &[Protocol] = &[Protocol::Http, Protocol::Https];
const HTTP_AND_GRPC: &[Protocol] = &[Protocol::Http, Protocol::Https, Protocol::Grpc, Protocol::Grpcs];
const GRPC: &[Protocol] = &[Protocol::Grpc, Protocol::Grpcs];
const OVER_TLS: &[Protocol] = &[Protocol::Https, Protocol::Grpcs];
/// Why the request's keys are not gRPC's.
const GRPC_CALL: &str = "(a gRPC check's call is grpc.health.v1.Health/Check, and SERVING is healthy)";

/// Its keys in `[profile.health]`.
pub const HEALTH_KEYS: &[Key] = &[
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
        "keep_alive",
        Boolean,
        Value("false"),
        Any,
        Reask,
        "Keeps each endpoint's connection open between checks (HTTP/1.1 keep-alive) and sends the \
             next check's request on it: no connect, handshake or close per check, about a third of \
             the CPU of a connection per check. A kept connection does not go through the backend's \
             accept queue again, so a backend that still answers on open connections but accepts no \
             new ones stays healthy until its server closes them; checks run through sockets (not in \
             the kernel), one descriptor per endpoint stays open, and a server that closes the \
             connection costs a new one at the next check.",
    )
    .protocols(HTTP, GRPC_CALL),
];

/// What an endpoint may set of its check, in `[[profile.endpoint]]`.
pub const ENDPOINT_KEYS: &[Key] = &[
        Key::new(
            "headers",
            Strings,
            Value("[]"),
            words("as headers in [profile.health]"),
            Reask,
            "Request headers of this endpoint's probes, sent with the profile's.",
        )
        .protocols(HTTP_AND_GRPC, "(plain endpoints; http and https: of a tm profile; grpc and grpcs: sent as metadata)"),
        Key::new(
            "tls_verify",
            Type::String,
            said("the profile's"),
            OneOf(&["presence", "ca"]),
            Reask,
            "The profile's tls_verify, for this endpoint alone (with its own ca_file when \"ca\"; a ca_file here needs tls_verify here).",
        )
        .protocols(OVER_TLS, ""),
        Key::new(
            "ca_file",
            Type::String,
            said("the profile's roots"),
            words("an absolute path to a PEM file of CA certificates, read at start and reload"),
            Reask,
            "The roots this endpoint's certificate must chain to, with tls_verify = \"ca\" on the endpoint.",
        )
        .protocols(OVER_TLS, "with tls_verify = \"ca\" on the endpoint"),
        Key::new(
            "server_name",
            Type::String,
            said("the profile's"),
            words("a host name"),
            Reask,
            "The name this endpoint is greeted with (SNI) and verified against.",
        )
        .protocols(OVER_TLS, ""),
        Key::new(
            "client_cert",
            Type::String,
            said("the profile's"),
            words("an absolute path to a PEM file: the certificate, then its chain"),
            Reask,
            "The client certificate this endpoint is shown, with client_key.",
        )
        .protocols(OVER_TLS, ""),
        Key::new(
            "client_key",
            Type::String,
            said("the profile's"),
            words("an absolute path to a PEM private key that only its owner may read"),
            Reask,
            "The key of the endpoint's client_cert.",
        )
        .protocols(OVER_TLS, "with client_cert on the endpoint"),
        Key::new(
            "min_version",
            Type::String,
            said("the profile's"),
            OneOf(&["1.2", "1.3"]),
            Reask,
            "The lowest TLS version this endpoint is accepted with.",
        )
        .protocols(OVER_TLS, ""),
        Key::new(
            "service",
            Type::String,
            said("the profile's"),
            words("a gRPC service name of at most 256 bytes; no control characters"),
            Reask,
            "The gRPC service whose health this endpoint is asked about.",
        )
        .protocols(GRPC, ""),
];
