//! The HTTP(S) keys of `[profile.health]`: path, method, host, headers, status codes and body
//! match, and the messages the shared rules give.
use super::*;

rule!(
    path_with_tcp_in_tm,
    cfg("tm", "", "protocol = \"tcp\"\nport = 22\npath = \"/\"", ""),
    "profile[0].health.path"
);
rule!(
    path_without_slash,
    cfg("ga", "", "path = \"health\"", ""),
    "profile[0].health.path"
);
rule!(
    path_bad_char,
    cfg("ga", "", "path = \"/a b\"", ""),
    "profile[0].health.path"
);
rule!(
    path_too_long,
    cfg("lb", "", &format!("path = \"/{}\"", "a".repeat(80)), ""),
    "profile[0].health.path"
);
rule!(
    method_head_in_tm,
    cfg("tm", "", "method = \"HEAD\"", ""),
    "profile[0].health.method"
);
rule!(
    method_unknown_in_lb,
    cfg("lb", "", "method = \"POST\"", ""),
    "profile[0].health.method"
);
rule!(
    method_with_tcp,
    cfg("lb", "", "protocol = \"tcp\"\nport = 1\nmethod = \"GET\"", ""),
    "profile[0].health.method"
);
rule!(
    headers_over_eight,
    cfg(
        "tm",
        "",
        &format!(
            "headers = [{}]",
            (0..9).map(|i| format!("\"X-{i}:v\"")).collect::<Vec<_>>().join(",")
        ),
        ""
    ),
    "profile[0].health.headers"
);
rule!(
    header_without_colon,
    cfg("tm", "", "headers = [\"X-Probe\"]", ""),
    "profile[0].health.headers[0]"
);
rule!(
    host_header_with_star,
    cfg("tm", "", "headers = [\"Host:*.example.com\"]", ""),
    "profile[0].health.headers[0]"
);
rule!(
    headers_in_lb,
    cfg("lb", "", "headers = [\"X-A:b\"]", ""),
    "profile[0].health.headers"
);
rule!(
    header_the_prober_sets,
    cfg("tm", "", "headers = [\"Content-Length:5\"]", ""),
    "profile[0].health.headers[0]"
);
rule!(
    header_without_value,
    cfg("tm", "", "headers = [\"X-Probe:\"]", ""),
    "profile[0].health.headers[0]"
);
rule!(
    header_twice_in_one_level,
    cfg("tm", "", "headers = [\"X-A:1\", \"x-a:2\"]", ""),
    "profile[0].health.headers"
);
rule!(
    status_empty,
    cfg("tm", "", "status = []", ""),
    "profile[0].health.status"
);
rule!(
    host_in_tm,
    cfg("tm", "", "host = \"a.example.com\"", ""),
    "profile[0].health.host"
);
rule!(
    host_with_star,
    cfg("lb", "", "host = \"*.example.com\"", ""),
    "profile[0].health.host"
);
rule!(
    status_class_bad_in_lb,
    cfg("lb", "", "status = [\"2xx\", \"6xx\"]", ""),
    "profile[0].health.status[1]"
);
rule!(
    status_range_in_lb,
    cfg("lb", "", "status = [\"200-299\"]", ""),
    "profile[0].health.status[0]"
);
rule!(
    status_range_reversed_in_tm,
    cfg("tm", "", "status = [\"299-200\"]", ""),
    "profile[0].health.status"
);
rule!(
    status_over_eight_in_tm,
    cfg("tm", "", "status = \"200,201,202,203,204,205,206,207,208\"", ""),
    "profile[0].health.status"
);
rule!(
    status_in_ga,
    cfg("ga", "", "status = [\"200-299\"]", ""),
    "profile[0].health.status"
);
rule!(
    body_match_with_head,
    cfg("lb", "", "body_match = \"OK\"", ""),
    "profile[0].health.body_match"
);
rule!(
    body_match_with_tcp,
    cfg("tm", "", "protocol = \"tcp\"\nport = 1\nbody_match = \"OK\"", ""),
    "profile[0].health.body_match"
);

#[test]
fn hosts_may_carry_a_port_or_be_an_address() {
    for host in ["a.example.com:8080", "198.18.0.2", "[2001:2::2]:8443"] {
        let c = ok(&cfg("lb", "", &format!("host = \"{host}\""), ""));
        let http = c.profiles[0].health.http().unwrap();
        assert_eq!(http.host.as_ref().map(HostName::as_str), Some(host));
    }
}

#[test]
fn rule_messages_come_from_the_shared_rules() {
    let errs = refused(&cfg("tm", "", "headers = [\"Connection:close\"]", ""));
    assert_eq!(
        errs.0[0].problem,
        "the prober sets connection itself; any header but content-length, transfer-encoding, connection, \
         upgrade, te is allowed"
    );
    let errs = refused(&cfg("ga", "", "path = \"/a b\"", ""));
    assert!(
        errs.0[0]
            .problem
            .starts_with("' ' is not allowed; use letters, digits and - / ."),
        "{errs}"
    );
}
