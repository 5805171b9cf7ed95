//! The keys of `[profile.health]`.
use super::*;

pub const HEALTH: Section = Section {
    path: "profile.health",
    header: "[profile.health]",
    about: "The profile's health check, by its dialect's rules. The keys of one protocol are refused on \
            another. Every key here but the thresholds is part of the check: changing it makes each \
            endpoint's check a new one.",
    kinds: crate::probe::kinds::HEALTH_KEYS,
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
