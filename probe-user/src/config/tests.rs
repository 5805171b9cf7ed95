//! Configuration tests: one per rule, each naming the exact field reported.
use super::*;

#[test]
fn placeholder() {}
