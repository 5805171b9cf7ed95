//! `[[profile.endpoint]]` tests, one endpoint at a time, then against an earlier one.
use super::*;

rule!(
    endpoint_address_bad,
    cfg("lb", "", "", "").replace("192.0.2.1", "192.0.2"),
    "profile[0].endpoint[0].address"
);
rule!(endpoint_address_missing, "[[profile]]\nname = \"w\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"http\"\n[[profile.endpoint]]\nport = 80", "profile[0].endpoint[0].address");
rule!(
    endpoint_port_bad,
    cfg("lb", "", "", "port = 65536"),
    "profile[0].endpoint[0].port"
);
rule!(
    endpoint_port_missing_for_tcp,
    cfg("lb", "", "protocol = \"tcp\"", ""),
    "profile[0].endpoint[0].port"
);
rule!(
    endpoint_weight_zero,
    cfg("lb", "routing = \"weighted\"", "", "weight = 0"),
    "profile[0].endpoint[0].weight"
);
rule!(
    endpoint_priority_too_big,
    cfg("tm", "", "", "priority = 1001"),
    "profile[0].endpoint[0].priority"
);
rule!(
    endpoint_state_unknown,
    cfg("tm", "", "", "state = \"on\""),
    "profile[0].endpoint[0].state"
);
rule!(
    endpoint_headers_in_lb,
    cfg("lb", "", "", "headers = [\"X-A:b\"]"),
    "profile[0].endpoint[0].headers"
);
rule!(
    endpoint_host_header_with_star,
    cfg("tm", "", "", "headers = [\"Host:*\"]"),
    "profile[0].endpoint[0].headers[0]"
);
rule!(
    endpoint_subnets_without_subnet_routing,
    cfg("tm", "", "", "subnets = [\"10.0.0.0/8\"]"),
    "profile[0].endpoint[0].subnets"
);
rule!(
    endpoint_subnet_bad_cidr,
    cfg("tm", "routing = \"subnet\"", "", "subnets = [\"10.0.0.0/33\"]"),
    "profile[0].endpoint[0].subnets[0]"
);
rule!(
    endpoint_region_missing_for_geographic,
    cfg("ga", "routing = \"geographic\"", "", ""),
    "profile[0].endpoint[0].region"
);
rule!(
    endpoint_region_without_geographic,
    cfg("ga", "", "", "region = \"eu\""),
    "profile[0].endpoint[0].region"
);

/// A profile with two endpoints; the second's extra lines are `second`.
fn two(dialect: &str, profile: &str, first: &str, second: &str) -> String {
    format!(
        "{}[[profile.endpoint]]\naddress = \"192.0.2.2\"\n{second}\n",
        cfg(dialect, profile, "", first)
    )
}

rule!(
    endpoint_priority_duplicate,
    two("tm", "", "priority = 1", "priority = 1"),
    "profile[0].endpoint[1].priority"
);
rule!(
    endpoint_name_duplicate,
    two("tm", "", "name = \"a\"", "name = \"a\""),
    "profile[0].endpoint[1].name"
);
rule!(
    endpoint_listed_twice,
    two("tm", "routing = \"weighted\"", "", "").replace("192.0.2.2", "192.0.2.1"),
    "profile[0].endpoint[1].address"
);
rule!(
    endpoint_subnet_mapped_twice,
    two(
        "tm",
        "routing = \"subnet\"",
        "subnets = [\"10.0.0.0/8\"]",
        "subnets = [\"10.0.0.0/8\"]"
    ),
    "profile[0].endpoint[1].subnets[0]"
);
rule!(
    endpoint_two_catch_alls,
    two("tm", "routing = \"subnet\"", "", ""),
    "profile[0].endpoint[1].subnets"
);
rule!(
    endpoint_region_duplicate,
    two("ga", "routing = \"geographic\"", "region = \"eu\"", "region = \"eu\""),
    "profile[0].endpoint[1].region"
);

// A wrong-typed endpoint port is one error: not a second "expected an integer", nor "missing".
rule!(
    endpoint_port_wrong_type_is_one_error,
    cfg("lb", "", "protocol = \"tcp\"", "port = \"80\""),
    "profile[0].endpoint[0].port"
);
