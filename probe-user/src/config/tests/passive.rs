//! `[profile.passive]` tests: its defaults, its rules' bounds, and what it goes with.
use std::time::Duration;

use super::*;

/// A TCP profile with `[profile.passive]` holding `lines`, and `[source]` naming `eth1` when
/// `source` is set.
fn passive(lines: &str, source: bool) -> String {
    let src = if source {
        "[source]\ninterfaces = [\"eth1\"]\n"
    } else {
        ""
    };
    format!(
        "{src}{}",
        cfg(
            "lb",
            &format!("[profile.passive]\n{lines}"),
            "protocol = \"tcp\"\nport = 80\ntimeout = \"2s\"",
            ""
        )
    )
}

#[test]
fn passive_defaults_to_five_in_a_row_on_the_source_interfaces() {
    let c = ok(&passive("", true));
    let p = c.profiles[0].passive.as_ref().expect("passive");
    assert_eq!(p.interfaces, ["eth1"]);
    assert_eq!(p.consecutive, Some(5));
    assert_eq!(p.ratio, None);
    assert_eq!(p.timeout, Duration::from_secs(2), "the check's timeout");
    assert_eq!(p.max_ejection_percent, 10);
    assert_eq!(
        ok(&cfg("lb", "", "protocol = \"tcp\"\nport = 80", "")).profiles[0].passive,
        None
    );
}

#[test]
fn a_failure_ratio_brings_its_window_and_needs_no_count_in_a_row() {
    let c = ok(&passive(
        "interfaces = [\"eth2\"]\nfailure_ratio = 40\nmin_attempts = 30\nwindow = \"30s\"\ntimeout = \"300ms\"",
        false,
    ));
    let p = c.profiles[0].passive.as_ref().expect("passive");
    assert_eq!(p.interfaces, ["eth2"]);
    assert_eq!(p.consecutive, None);
    let r = p.ratio.expect("a ratio");
    assert_eq!((r.percent, r.min_attempts, r.window), (40, 30, Duration::from_secs(30)));
    assert_eq!(p.timeout, Duration::from_millis(300));
}

#[test]
fn passive_without_any_interface_is_refused() {
    expect_error(&passive("", false), "profile[0].passive.interfaces");
}

rule!(
    passive_count_out_of_range,
    passive("consecutive_failures = 0", true),
    "profile[0].passive.consecutive_failures"
);
rule!(
    passive_ratio_out_of_range,
    passive("failure_ratio = 101", true),
    "profile[0].passive.failure_ratio"
);
rule!(
    passive_window_without_a_ratio,
    passive("window = \"5s\"", true),
    "profile[0].passive.window"
);
rule!(
    passive_timeout_out_of_range,
    passive("timeout = \"50ms\"", true),
    "profile[0].passive.timeout"
);
rule!(
    passive_cap_out_of_range,
    passive("max_ejection_percent = 101", true),
    "profile[0].passive.max_ejection_percent"
);
rule!(
    passive_interface_bad,
    passive("interfaces = [\"a/b\"]", true),
    "profile[0].passive.interfaces[0]"
);
rule!(
    passive_key_unknown,
    passive("max_fails = 3", true),
    "profile[0].passive.max_fails"
);

#[test]
fn passive_on_a_udp_check_is_refused() {
    let text = format!(
        "[source]\ninterfaces = [\"eth1\"]\n{}",
        cfg("lb", "[profile.passive]\n", "protocol = \"udp\"\nport = 53", "")
    );
    let errs = refused(&text);
    assert!(
        errs.iter()
            .any(|e| e.field.starts_with("profile[0].passive") && e.to_string().contains("TCP handshakes")),
        "{errs}"
    );
}
