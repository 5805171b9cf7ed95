//! `[[profile]]` tests: name, dialect, routing, and a health table being there.
use super::*;

rule!(
    profile_name_missing,
    "[[profile]]\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\nport = 1",
    "profile[0].name"
);
rule!(
    profile_name_bad,
    cfg("lb", "", "", "").replace("name = \"web\"", "name = \"a b\""),
    "profile[0].name"
);
rule!(dialect_unknown, cfg("xx", "", "", ""), "profile[0].dialect");
rule!(
    routing_unknown,
    cfg("tm", "routing = \"closest\"", "", ""),
    "profile[0].routing"
);
rule!(
    max_answers_out_of_range,
    cfg("tm", "routing = \"multivalue\"\nmax_answers = 33", "", ""),
    "profile[0].max_answers"
);
rule!(
    max_answers_without_multivalue,
    cfg("tm", "max_answers = 2", "", ""),
    "profile[0].max_answers"
);
rule!(
    health_missing,
    "[[profile]]\nname = \"web\"\ndialect = \"lb\"",
    "profile[0].health"
);

#[test]
fn profile_name_duplicate() {
    let text = format!("{}{}", cfg("lb", "", "", ""), cfg("lb", "", "", ""));
    expect_error(&text, "profile[1].name");
}
