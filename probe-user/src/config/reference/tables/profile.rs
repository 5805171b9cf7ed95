//! The keys of `[[profile]]`.
use super::*;

pub const PROFILE: Section = Section {
    path: "profile",
    header: "[[profile]]",
    about: "A named group of endpoints, probed with one health check ([profile.health]) and answered \
            for with one routing method. A reload applies every key here.",
    kinds: &[],
    own: &[
        Key::new(
            "name",
            Type::String,
            Required,
            words("1 to 63 letters, digits, '-', '_', '.', ':', '[' or ']'; unique among profiles"),
            Recheck,
            "Names the profile in the API, events, metrics and sinks, and in DNS unless dns_name is \
             set. A renamed profile is a new one: its endpoints start over.",
        ),
        Key::new(
            "enabled",
            Boolean,
            Value("true"),
            Allowed::Any,
            Applies,
            "false: nothing of the profile is probed, its endpoints are Inactive and its DNS name \
             answers NXDOMAIN. A change here replaces an enable or disable set through the API, which \
             otherwise survives reloads and restarts.",
        ),
        Key::new(
            "dialect",
            Type::String,
            Required,
            OneOf(&["lb", "tm", "ga"]),
            Retime,
            "The product whose health-check rules the profile follows: lb (load balancer), tm (DNS \
             traffic manager) or ga (global accelerator). It decides the defaults and ranges of \
             [profile.health] and which of its threshold keys apply.",
        ),
        Key::new(
            "routing",
            Type::String,
            Value("\"priority\""),
            OneOf(Method::NAMES),
            Applies,
            "How DNS answers and /v1/select pick among the eligible endpoints: the lowest priority; one \
             at random by weight; up to max_answers by priority; by the subnets that hold the source; \
             by the source's region ([[dns.region]]), without failover to another region; or the lowest \
             round-trip time this node measured.",
        ),
        Key::new(
            "max_answers",
            Integer,
            Value("2"),
            Int(1, 32),
            Applies,
            "How many endpoints one multivalue answer holds at most.",
        )
        .only("routing = \"multivalue\""),
        Key::new(
            "health",
            Table,
            Required,
            Allowed::Any,
            PerKey,
            "The health check: see [profile.health].",
        ),
        Key::new(
            "endpoint",
            Tables,
            said("none"),
            Allowed::Any,
            PerKey,
            "The endpoints: see [[profile.endpoint]].",
        ),
        Key::new(
            "discovery",
            Table,
            said("none; required with endpoints_from = \"dns\", refused without"),
            Allowed::Any,
            PerKey,
            "Where its endpoints come from with endpoints_from = \"dns\": see [profile.discovery].",
        ),
        Key::new(
            "passive",
            Table,
            said("none: no passive detection"),
            Allowed::Any,
            PerKey,
            "Eject endpoints on what the node's forwarded handshakes to them meet: see \
             [profile.passive].",
        ),
        Key::new(
            "endpoints_from",
            Type::String,
            Value("\"file\""),
            OneOf(&EndpointSource::NAMES),
            Applies,
            "Who owns the profile's endpoints. file: its [[profile.endpoint]] tables. api: the fleet \
             API (POST /v1/profiles/NAME/endpoints, probed endpoints), which adds, updates and removes \
             them at run time without a reload; they are kept in the fleet journal beside the state \
             file (state_file with the extension .fleet), so restarts and reloads keep them, and the \
             file lists none. dns: the records of the name [profile.discovery] gives, asked again at \
             their TTL and applied as the API's batches are (kept in the same journal; the API \
             changes none of them). A profile moved from api or dns to file takes the file's \
             endpoints, each keeping its health where its name and check stay the same.",
        ),
        Key::new(
            "slow_start",
            Duration,
            Value("\"0s\""),
            words("\"0s\" (off) or a duration from 1s to 1h"),
            Applies,
            "How long an endpoint that starts to take traffic again takes to reach its whole weight \
             in the data-path sinks: back from Degraded, re-enabled or undrained, or added to the \
             running profile by a reload or the fleet API. Its share starts at 1% and grows in 20 \
             steps (5%, 10%, ... 95%, whole). The BPF slot tables share by the ramped weight; \
             HAProxy gets it rounded up, never below 1; DNS answers and /v1/select keep the \
             configured weight. An endpoint's first verdict after probed starts, or in a profile \
             that is new, does not ramp (there is no traffic to protect it from yet), and a \
             restart ends every ramp.",
        ),
        Key::new(
            "dns_name",
            Type::String,
            said("the profile's name, in lower case"),
            words("a DNS name relative to the zone, without a final dot; unique in the zone"),
            Applies,
            "The name the profile answers to under [dns] zone.",
        ),
        Key::new(
            "dns_ttl",
            Duration,
            said("[dns] ttl"),
            Seconds(0, 86_400),
            Applies,
            "The TTL of this profile's DNS answers.",
        ),
        Key::new(
            "aggregate",
            Type::String,
            Value("\"50%\""),
            words("\"N%\" with N from 1 to 100, \"any\" or \"all\""),
            Applies,
            "How the verdicts of the nodes that probe an endpoint make its health: healthy while at \
             least N% of the nodes with a verdict see it up, while any does, or only while all do.",
        )
        .only("a node with [cluster]"),
    ],
};
