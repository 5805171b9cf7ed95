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

// HTTPS certificate verification.
const HTTPS: &str = "protocol = \"https\"\n";

#[test]
fn https_verifies_a_certificate_against_a_ca_file_when_asked() {
    let dir = std::env::temp_dir().join(format!("probed-config-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.pem");
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["ca.example.test".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(&ca, cert.pem()).unwrap();
    let text = |extra: &str| cfg("lb", "", &format!("{HTTPS}{extra}"), "");
    let http = |c: &Config| match &c.profiles[0].health.probe {
        Probe::Http(h) => h.clone(),
        other => panic!("{other:?}"),
    };
    let h = http(&ok(&text("")));
    assert_eq!(
        (h.tls_verify, h.server_name),
        (TlsVerifySetting::Presence, None),
        "the default"
    );
    let h = http(&ok(&text(&format!(
        "tls_verify = \"ca\"\nca_file = \"{}\"\nserver_name = \"www.example.test\"\n",
        ca.display()
    ))));
    assert_eq!(
        h.tls_verify,
        TlsVerifySetting::Ca {
            ca_file: Some(ca.clone())
        }
    );
    assert_eq!(h.server_name.as_ref().map(HostName::as_str), Some("www.example.test"));
    let h = http(&ok(&text("tls_verify = \"ca\"\n")));
    assert_eq!(
        h.tls_verify,
        TlsVerifySetting::Ca { ca_file: None },
        "the system's roots"
    );
    // A file that gives no root is refused at load, naming it.
    let empty = dir.join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let errs = refused(&text(&format!(
        "tls_verify = \"ca\"\nca_file = \"{}\"\n",
        empty.display()
    )));
    assert!(errs.to_string().contains("no usable CA certificate"), "{errs}");
    let _ = std::fs::remove_dir_all(&dir);
}

rule!(
    tls_verify_unknown,
    cfg("lb", "", &format!("{HTTPS}tls_verify = \"strict\""), ""),
    "profile[0].health.tls_verify"
);
rule!(
    tls_verify_on_plain_http,
    cfg("lb", "", "tls_verify = \"ca\"", ""),
    "profile[0].health.tls_verify"
);
rule!(
    tls_verify_on_tcp,
    cfg("lb", "", "protocol = \"tcp\"\nport = 1\ntls_verify = \"ca\"", ""),
    "profile[0].health.tls_verify"
);
rule!(
    ca_file_without_ca,
    cfg("lb", "", &format!("{HTTPS}ca_file = \"/etc/ssl/ca.pem\""), ""),
    "profile[0].health.ca_file"
);
rule!(
    ca_file_relative,
    cfg(
        "lb",
        "",
        &format!("{HTTPS}tls_verify = \"ca\"\nca_file = \"ca.pem\""),
        ""
    ),
    "profile[0].health.ca_file"
);
rule!(
    ca_file_missing,
    cfg(
        "lb",
        "",
        &format!("{HTTPS}tls_verify = \"ca\"\nca_file = \"/nonexistent/ca.pem\""),
        ""
    ),
    "profile[0].health.ca_file"
);
rule!(
    server_name_not_a_name,
    cfg("lb", "", &format!("{HTTPS}server_name = \"a b\""), ""),
    "profile[0].health.server_name"
);

#[test]
fn a_client_certificate_needs_its_key_readable_by_its_owner_alone() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("probed-config-client-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["probe.example.test".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_path, key_path) = (dir.join("client.crt"), dir.join("client.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    let text = || {
        cfg(
            "lb",
            "",
            &format!(
                "{HTTPS}client_cert = \"{}\"\nclient_key = \"{}\"\n",
                cert_path.display(),
                key_path.display()
            ),
            "",
        )
    };
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let errs = refused(&text());
    assert!(errs.to_string().contains("open to its group or others"), "{errs}");
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = ok(&text());
    let Probe::Http(h) = &c.profiles[0].health.probe else {
        panic!("an HTTPS check")
    };
    assert_eq!(
        h.client_cert,
        Some(ClientCertFiles {
            cert: cert_path.clone(),
            key: key_path.clone()
        })
    );
    // Another key than the certificate's.
    let other = rcgen::KeyPair::generate().unwrap();
    std::fs::write(&key_path, other.serialize_pem()).unwrap();
    let errs = refused(&text());
    assert!(errs.to_string().contains("does not match the certificate"), "{errs}");
    let _ = std::fs::remove_dir_all(&dir);
}

rule!(
    client_cert_without_key,
    cfg(
        "lb",
        "",
        &format!("{HTTPS}client_cert = \"/etc/probed/client.crt\""),
        ""
    ),
    "profile[0].health.client_key"
);
rule!(
    client_key_without_cert,
    cfg("lb", "", &format!("{HTTPS}client_key = \"/etc/probed/client.key\""), ""),
    "profile[0].health.client_cert"
);
rule!(
    client_cert_on_plain_http,
    cfg("lb", "", "client_cert = \"/a\"", ""),
    "profile[0].health.client_cert"
);

rule!(
    min_version_unknown,
    cfg("lb", "", &format!("{HTTPS}min_version = \"1.1\""), ""),
    "profile[0].health.min_version"
);
rule!(
    min_version_on_plain_http,
    cfg("lb", "", "min_version = \"1.3\"", ""),
    "profile[0].health.min_version"
);
