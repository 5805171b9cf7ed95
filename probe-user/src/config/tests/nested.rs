//! Nested endpoints (`profile = "CHILD"`, SPEC 8) tests.
use super::*;

fn two(parent_endpoint: &str) -> String {
    format!(
        "{}\n[[profile.endpoint]]\n{parent_endpoint}\n\n{}",
        cfg("tm", "", "", ""),
        cfg("tm", "", "", "").replace("name = \"web\"", "name = \"eu\"")
    )
}

#[test]
fn a_nested_endpoint_names_its_child_and_takes_its_defaults() {
    let c = ok(&two("profile = \"eu\"\nmin_child_endpoints = 2"));
    let n = &c.profiles[0].nested;
    assert_eq!(n.len(), 1);
    assert_eq!((n[0].name.as_str(), n[0].child.as_str()), ("eu", "eu"));
    assert_eq!((n[0].min_child_endpoints, n[0].priority), (2, 2));
    assert_eq!(c.profiles[0].endpoints.len(), 1, "the plain endpoint stays apart");
}

rule!(
    nested_always_serve,
    two("profile = \"eu\"\nstate = \"always-serve\""),
    "profile[0].endpoint[1].state"
);
rule!(
    nested_with_an_address,
    two("profile = \"eu\"\naddress = \"192.0.2.9\""),
    "profile[0].endpoint[1].address"
);
rule!(nested_unknown_child, two("profile = \"nope\""), "profile[0].endpoint");
rule!(nested_itself, two("profile = \"web\""), "profile[0].endpoint");
rule!(
    nested_min_zero,
    two("profile = \"eu\"\nmin_child_endpoints = 0"),
    "profile[0].endpoint[1].min_child_endpoints"
);

#[test]
fn loops_are_refused_on_every_profile_of_the_loop() {
    let text = two("profile = \"eu\"") + "\n[[profile.endpoint]]\nprofile = \"web\"\n";
    let errs = refused(&text);
    assert_eq!(errs.len(), 2, "{errs}");
    assert!(errs.iter().all(|e| e.problem.contains("would loop")), "{errs}");
    assert!(errs.to_string().contains("web -> eu -> web"), "{errs}");
}
rule!(
    min_child_endpoints_on_a_plain_endpoint,
    cfg("tm", "", "", "min_child_endpoints = 2"),
    "profile[0].endpoint[0].min_child_endpoints"
);
