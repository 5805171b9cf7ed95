//! `protocol = "grpc"` and `"grpcs"`: the service, metadata, what a gRPC check refuses, and
//! the TLS keys on grpcs alone.
use super::*;

const GRPC: &str = "protocol = \"grpc\"\nport = 50051\n";
const GRPCS: &str = "protocol = \"grpcs\"\nport = 50051\n";

fn grpc_of(c: &Config) -> HttpSettings {
    match &c.profiles[0].health.probe {
        Probe::Http(h) => (**h).clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn grpc_checks_read_in_every_dialect_with_the_service_and_metadata() {
    for dialect in ["lb", "tm", "ga"] {
        let c = ok(&cfg(dialect, "", GRPC, ""));
        assert_eq!(c.profiles[0].health.protocol(), Protocol::Grpc, "{dialect}");
        assert_eq!(
            grpc_of(&c).grpc.as_deref(),
            Some(""),
            "the server's own health by default"
        );
    }
    let c = ok(&cfg(
        "lb",
        "",
        &format!("{GRPCS}service = \"shop.Cart\"\nhost = \"cart.example.test\"\nheaders = [\"x-probe:probed\"]\n"),
        "",
    ));
    let h = grpc_of(&c);
    assert_eq!(c.profiles[0].health.protocol(), Protocol::Grpcs);
    assert_eq!(h.grpc.as_deref(), Some("shop.Cart"));
    assert!(h.tls);
    assert_eq!(h.host.as_ref().map(HostName::as_str), Some("cart.example.test"));
    assert_eq!(h.headers.len(), 1);
}

rule!(
    grpc_without_a_port,
    cfg("lb", "", "protocol = \"grpc\"", ""),
    "profile[0].endpoint[0].port"
);
rule!(
    grpc_with_a_path,
    cfg("lb", "", &format!("{GRPC}path = \"/health\""), ""),
    "profile[0].health.path"
);
rule!(
    grpc_with_a_status,
    cfg("ga", "", &format!("{GRPC}status = [\"200\"]"), ""),
    "profile[0].health.status"
);
rule!(
    grpc_with_a_method,
    cfg("lb", "", &format!("{GRPC}method = \"POST\""), ""),
    "profile[0].health.method"
);
rule!(
    grpc_with_a_body_match,
    cfg("lb", "", &format!("{GRPC}body_match = \"ok\""), ""),
    "profile[0].health.body_match"
);
rule!(
    service_on_http,
    cfg("lb", "", "service = \"shop.Cart\"", ""),
    "profile[0].health.service"
);
rule!(
    service_on_tcp,
    cfg("lb", "", "protocol = \"tcp\"\nport = 1\nservice = \"x\"", ""),
    "profile[0].health.service"
);
rule!(
    service_too_long,
    cfg("lb", "", &format!("{GRPC}service = \"{}\"", "s".repeat(257)), ""),
    "profile[0].health.service"
);
rule!(
    metadata_may_not_set_the_content_type,
    cfg("lb", "", &format!("{GRPC}headers = [\"Content-Type:text/plain\"]"), ""),
    "profile[0].health.headers[0]"
);
rule!(
    metadata_may_not_set_grpc_keys,
    cfg("lb", "", &format!("{GRPC}headers = [\"grpc-timeout:1S\"]"), ""),
    "profile[0].health.headers[0]"
);
rule!(
    tls_verify_on_cleartext_grpc,
    cfg("lb", "", &format!("{GRPC}tls_verify = \"ca\""), ""),
    "profile[0].health.tls_verify"
);
rule!(
    min_version_on_cleartext_grpc,
    cfg("lb", "", &format!("{GRPC}min_version = \"1.3\""), ""),
    "profile[0].health.min_version"
);

#[test]
fn grpcs_takes_the_tls_keys_and_says_why_grpc_does_not() {
    let c = ok(&cfg(
        "lb",
        "",
        &format!("{GRPCS}tls_verify = \"ca\"\nserver_name = \"cart.example.test\"\nmin_version = \"1.3\"\n"),
        "",
    ));
    let h = grpc_of(&c);
    assert_eq!(h.tls_verify, TlsVerifySetting::Ca { ca_file: None });
    assert!(h.tls13_only);
    let errs = refused(&cfg("lb", "", &format!("{GRPC}server_name = \"a.example\""), ""));
    assert!(
        errs.to_string()
            .contains("server_name applies to protocol = \"https\" or \"grpcs\"; the protocol is grpc"),
        "{errs}"
    );
    let errs = refused(&cfg("lb", "", &format!("{GRPC}path = \"/x\""), ""));
    assert!(errs.to_string().contains("grpc.health.v1.Health/Check"), "{errs}");
}

#[test]
fn an_endpoint_may_set_its_own_tls_keys_and_service() {
    let c = ok(&cfg(
        "lb",
        "",
        &format!("{GRPCS}service = \"shop.Cart\"\n"),
        "server_name = \"b.example.test\"\nservice = \"shop.Other\"\nmin_version = \"1.3\"\n",
    ));
    let e = &c.profiles[0].endpoints[0];
    let own = e.check_override().expect("the endpoint's own keys");
    assert_eq!(own.service.as_deref(), Some("shop.Other"));
    assert_eq!(own.tls13_only, Some(true));
    assert_eq!(own.tls_verify, None, "left out: the profile's");
    assert!(own.changes_client());
    let merged = grpc_of(&c).with_override(own);
    assert_eq!(merged.grpc.as_deref(), Some("shop.Other"));
    assert_eq!(
        merged.server_name.as_ref().map(HostName::as_str),
        Some("b.example.test")
    );
    assert!(merged.tls13_only);
    // An endpoint without any keeps none.
    let c = ok(&cfg("lb", "", GRPCS, ""));
    assert!(c.profiles[0].endpoints[0].check_override().is_none());
}

rule!(
    endpoint_service_on_http,
    cfg("lb", "", "", "service = \"x\""),
    "profile[0].endpoint[0].service"
);
rule!(
    endpoint_tls_verify_on_cleartext,
    cfg("lb", "", GRPC, "tls_verify = \"ca\""),
    "profile[0].endpoint[0].tls_verify"
);
rule!(
    endpoint_ca_file_without_its_own_tls_verify,
    cfg(
        "lb",
        "",
        &format!("{GRPCS}tls_verify = \"ca\""),
        "ca_file = \"/etc/ssl/ca.pem\""
    ),
    "profile[0].endpoint[0].ca_file"
);
rule!(
    endpoint_client_cert_without_key,
    cfg("lb", "", GRPCS, "client_cert = \"/etc/probed/c.pem\""),
    "profile[0].endpoint[0].client_key"
);

rule!(
    endpoint_metadata_may_not_set_te,
    cfg("lb", "", GRPC, "headers = [\"te:gzip\"]"),
    "profile[0].endpoint[0].headers[0]"
);

#[test]
fn endpoints_add_metadata_in_every_dialect() {
    for dialect in ["lb", "tm", "ga"] {
        let c = ok(&cfg(dialect, "", GRPC, "headers = [\"x-tenant:blue\"]"));
        assert_eq!(c.profiles[0].endpoints[0].headers().len(), 1, "{dialect}");
    }
}
