use super::*;
use EndpointStatus as S;

fn cand(status: S) -> Candidate<'static> {
    Candidate {
        family: Some(Family::Ipv4),
        status,
        priority: 1,
        weight: 1,
        subnets: &[],
        region: None,
        rtt: None,
    }
}

fn q(source: &str) -> Query<'static> {
    Query {
        source: source.parse().unwrap(),
        region: None,
        family: None,
    }
}

fn run(routing: Routing, cands: &[Candidate<'_>], query: &Query<'_>) -> Answer {
    select(true, routing, cands, query, &mut SplitMix64(7))
}

fn prio(status: S, priority: u32) -> Candidate<'static> {
    Candidate {
        priority,
        ..cand(status)
    }
}

#[test]
fn disabled_profile_answers_nxdomain() {
    let cands = [cand(S::Inactive)];
    let answer = select(
        false,
        Routing::of(Method::Priority),
        &cands,
        &q("192.0.2.1"),
        &mut SplitMix64(1),
    );
    assert_eq!(answer, Answer::NxDomain);
}

#[test]
fn priority_picks_lowest_number_and_fails_over() {
    let cands = [prio(S::Online, 3), prio(S::Online, 1), prio(S::Online, 2)];
    assert_eq!(
        run(Routing::of(Method::Priority), &cands, &q("192.0.2.1")),
        Answer::Endpoints(vec![1])
    );
    let cands = [prio(S::Online, 3), prio(S::Degraded, 1), prio(S::Disabled, 2)];
    assert_eq!(
        run(Routing::of(Method::Priority), &cands, &q("192.0.2.1")),
        Answer::Endpoints(vec![0])
    );
    // CheckingEndpoint is eligible, so a fresh endpoint is served.
    let cands = [prio(S::Stopped, 1), prio(S::CheckingEndpoint, 2)];
    assert_eq!(
        run(Routing::of(Method::Priority), &cands, &q("192.0.2.1")),
        Answer::Endpoints(vec![1])
    );
}

#[test]
fn fail_open_serves_degraded_when_all_are_degraded() {
    let cands = [prio(S::Degraded, 2), prio(S::Disabled, 1), prio(S::Degraded, 1)];
    assert_eq!(
        run(Routing::of(Method::Priority), &cands, &q("192.0.2.1")),
        Answer::Endpoints(vec![2])
    );
    let multi = Routing::multivalue(4);
    assert_eq!(run(multi, &cands, &q("192.0.2.1")), Answer::Endpoints(vec![2, 0]));
    // Disabled and Stopped alone: nothing to fail open to.
    let cands = [cand(S::Disabled), cand(S::Stopped)];
    assert_eq!(
        run(Routing::of(Method::Priority), &cands, &q("192.0.2.1")),
        Answer::Endpoints(vec![])
    );
}

#[test]
fn weighted_follows_weights_and_skips_ineligible() {
    let mut cands = [cand(S::Online), cand(S::Online), cand(S::Degraded)];
    cands[0].weight = 1;
    cands[1].weight = 3;
    cands[2].weight = 100;
    let mut rng = SplitMix64(42);
    let mut hits = [0u32; 3];
    for _ in 0..4000 {
        match select(true, Routing::of(Method::Weighted), &cands, &q("192.0.2.1"), &mut rng) {
            Answer::Endpoints(v) => hits[v[0]] += 1,
            Answer::NxDomain => panic!("enabled profile answered NXDOMAIN"),
        }
    }
    assert_eq!(hits[2], 0, "a Degraded endpoint got traffic");
    // Expect about 1000 / 3000; allow generous slack.
    assert!((800..1200).contains(&hits[0]), "{hits:?}");
    assert!((2800..3200).contains(&hits[1]), "{hits:?}");
    // Same seed, same answers.
    let a = select(
        true,
        Routing::of(Method::Weighted),
        &cands,
        &q("192.0.2.1"),
        &mut SplitMix64(9),
    );
    let b = select(
        true,
        Routing::of(Method::Weighted),
        &cands,
        &q("192.0.2.1"),
        &mut SplitMix64(9),
    );
    assert_eq!(a, b);
}

#[test]
fn multivalue_returns_up_to_n_eligible() {
    let cands = [
        prio(S::Online, 1),
        prio(S::Degraded, 2),
        prio(S::Online, 3),
        prio(S::Unmonitored, 4),
    ];
    let two = Routing::multivalue(2);
    assert_eq!(run(two, &cands, &q("192.0.2.1")), Answer::Endpoints(vec![0, 2]));
    let eight = Routing::multivalue(8);
    assert_eq!(run(eight, &cands, &q("192.0.2.1")), Answer::Endpoints(vec![0, 2, 3]));
}

#[test]
fn subnet_maps_source_and_falls_back_to_catch_all() {
    let eu: Vec<IpNet> = vec!["10.1.0.0/16".parse().unwrap()];
    let us: Vec<IpNet> = vec!["10.2.0.0/16".parse().unwrap(), "2001:db8::/32".parse().unwrap()];
    let mut cands = [cand(S::Online), cand(S::Online), cand(S::Online)];
    cands[0].subnets = &eu;
    cands[1].subnets = &us;
    assert_eq!(
        run(Routing::of(Method::Subnet), &cands, &q("10.1.2.3")),
        Answer::Endpoints(vec![0])
    );
    assert_eq!(
        run(Routing::of(Method::Subnet), &cands, &q("2001:db8::5")),
        Answer::Endpoints(vec![1])
    );
    assert_eq!(
        run(Routing::of(Method::Subnet), &cands, &q("192.0.2.1")),
        Answer::Endpoints(vec![2])
    );
    cands[0].status = S::Degraded;
    assert_eq!(
        run(Routing::of(Method::Subnet), &cands, &q("10.1.2.3")),
        Answer::Endpoints(vec![2])
    );
    cands[2].status = S::Disabled;
    assert_eq!(
        run(Routing::of(Method::Subnet), &cands, &q("192.0.2.1")),
        Answer::Endpoints(vec![])
    );
}

#[test]
fn subnet_prefers_the_most_specific_prefix() {
    let wide: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
    let narrow: Vec<IpNet> = vec!["10.9.0.0/16".parse().unwrap()];
    let mut cands = [cand(S::Online), cand(S::Online)];
    cands[0].subnets = &wide;
    cands[1].subnets = &narrow;
    assert_eq!(
        run(Routing::of(Method::Subnet), &cands, &q("10.9.1.1")),
        Answer::Endpoints(vec![1])
    );
    assert_eq!(
        run(Routing::of(Method::Subnet), &cands, &q("10.8.1.1")),
        Answer::Endpoints(vec![0])
    );
}

#[test]
fn geographic_has_no_failover() {
    let mut cands = [cand(S::Online), cand(S::Online), cand(S::Online)];
    cands[0].region = Some("eu");
    cands[1].region = Some("us");
    cands[2].region = Some(WORLD_REGION);
    let from = |region| Query {
        source: "192.0.2.1".parse().unwrap(),
        region: Some(region),
        family: None,
    };
    assert_eq!(
        run(Routing::of(Method::Geographic), &cands, &from("eu")),
        Answer::Endpoints(vec![0])
    );
    assert_eq!(
        run(Routing::of(Method::Geographic), &cands, &from("asia")),
        Answer::Endpoints(vec![2])
    );
    assert_eq!(
        run(Routing::of(Method::Geographic), &cands, &q("192.0.2.1")),
        Answer::Endpoints(vec![2])
    );
    cands[0].status = S::Degraded;
    assert_eq!(
        run(Routing::of(Method::Geographic), &cands, &from("eu")),
        Answer::Endpoints(vec![])
    );
    // Fail-open still holds: every eligible endpoint Degraded.
    cands[1].status = S::Degraded;
    cands[2].status = S::Degraded;
    assert_eq!(
        run(Routing::of(Method::Geographic), &cands, &from("eu")),
        Answer::Endpoints(vec![0])
    );
}

#[test]
fn performance_picks_lowest_rtt_then_unmeasured() {
    let ms = Duration::from_millis;
    let mut cands = [cand(S::Online), cand(S::Online), cand(S::Online), cand(S::Online)];
    cands[0].rtt = Some(ms(40));
    cands[1].rtt = Some(ms(5));
    cands[2].rtt = None;
    cands[3].rtt = Some(ms(20));
    assert_eq!(
        run(Routing::of(Method::Performance), &cands, &q("192.0.2.1")),
        Answer::Endpoints(vec![1])
    );
    cands[1].status = S::Degraded;
    assert_eq!(
        run(Routing::of(Method::Performance), &cands, &q("192.0.2.1")),
        Answer::Endpoints(vec![3])
    );
    cands[0].status = S::Disabled;
    cands[3].status = S::Stopped;
    assert_eq!(
        run(Routing::of(Method::Performance), &cands, &q("192.0.2.1")),
        Answer::Endpoints(vec![2])
    );
}

#[test]
fn a_family_sets_the_other_aside_but_fail_open_stays_profile_wide() {
    let v6 = |status| Candidate {
        family: Some(Family::Ipv6),
        ..cand(status)
    };
    let cands = [prio(S::Online, 1), v6(S::Online), prio(S::Online, 3)];
    let ask = |family, cands: &[Candidate<'_>]| {
        let query = Query {
            family: Some(family),
            ..q("192.0.2.1")
        };
        run(Routing::multivalue(8), cands, &query)
    };
    assert_eq!(ask(Family::Ipv4, &cands), Answer::Endpoints(vec![0, 2]));
    assert_eq!(ask(Family::Ipv6, &cands), Answer::Endpoints(vec![1]));
    // The IPv4 endpoints are Degraded but an IPv6 one is Online: no fail-open, no A answer.
    let cands = [prio(S::Degraded, 1), v6(S::Online), prio(S::Degraded, 3)];
    assert_eq!(ask(Family::Ipv4, &cands), Answer::Endpoints(vec![]));
    // Every one Degraded: fail-open serves each family its own.
    let cands = [prio(S::Degraded, 1), v6(S::Degraded), prio(S::Degraded, 3)];
    assert_eq!(ask(Family::Ipv4, &cands), Answer::Endpoints(vec![0, 2]));
    assert_eq!(ask(Family::Ipv6, &cands), Answer::Endpoints(vec![1]));
}

#[test]
fn routing_keeps_its_wire_form() {
    let multi = serde_json::to_string(&Routing::multivalue(3)).unwrap();
    assert_eq!(multi, r#"{"method":"multivalue","max_answers":3}"#);
    let prio = serde_json::to_string(&Routing::of(Method::Priority)).unwrap();
    assert_eq!(prio, r#"{"method":"priority"}"#);
    for r in [Routing::multivalue(3), Routing::of(Method::Weighted)] {
        let back: Routing = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
    assert_eq!(Routing::multivalue(2).to_string(), "multivalue(2)");
    assert_eq!(Routing::of(Method::Subnet).to_string(), "subnet");
}

#[test]
fn every_method_that_reads_location_or_chance_is_not_deterministic() {
    let moving: Vec<Method> = Method::ALL
        .iter()
        .copied()
        .filter(|m| m.needs().location || m.needs().random)
        .collect();
    assert_eq!(moving, [Method::Weighted, Method::Subnet, Method::Geographic]);
    let unique: Vec<Method> = Method::ALL.iter().copied().filter(|m| m.needs().unique_keys).collect();
    assert_eq!(unique, [Method::Priority, Method::Subnet, Method::Geographic]);
}

/// Two profiles: `top` (priority) nests `child` (multivalue of two) at its first place.
struct Two {
    top_enabled: bool,
}

impl Profiles for Two {
    fn profile(&self, ix: usize) -> Profile<'_> {
        match ix {
            0 => Profile {
                enabled: self.top_enabled,
                routing: Routing::of(Method::Priority),
                candidates: vec![
                    Candidate {
                        family: None,
                        ..prio(S::Online, 1)
                    },
                    prio(S::Online, 2),
                ],
            },
            _ => Profile {
                enabled: true,
                routing: Routing::multivalue(2),
                candidates: vec![prio(S::Online, 1), prio(S::Stopped, 2), prio(S::Online, 3)],
            },
        }
    }

    fn child(&self, ix: usize, i: usize) -> Option<usize> {
        (ix == 0 && i == 0).then_some(1)
    }
}

#[test]
fn a_nested_endpoint_answers_with_its_childs_pick() {
    let mut trails = Vec::new();
    let ask = q("192.0.2.1");
    pick_nested(&Two { top_enabled: true }, 0, &ask, &mut SplitMix64(3), &mut |t| {
        trails.push(t.to_vec());
    });
    assert_eq!(trails, [vec![(0, 0), (1, 0)], vec![(0, 0), (1, 2)]]);
    let mut none = 0;
    pick_nested(&Two { top_enabled: false }, 0, &ask, &mut SplitMix64(3), &mut |_| {
        none += 1;
    });
    assert_eq!(none, 0, "a disabled profile answers nothing");
}

/// A profile that nests itself: the pick stops at MAX_NESTING instead of recursing forever.
struct Loop;

impl Profiles for Loop {
    fn profile(&self, _: usize) -> Profile<'_> {
        Profile {
            enabled: true,
            routing: Routing::of(Method::Priority),
            candidates: vec![Candidate {
                family: None,
                ..prio(S::Online, 1)
            }],
        }
    }

    fn child(&self, _: usize, _: usize) -> Option<usize> {
        Some(0)
    }
}

#[test]
fn a_loop_of_nesting_ends_at_the_bound() {
    let mut leaves = 0;
    pick_nested(&Loop, 0, &q("192.0.2.1"), &mut SplitMix64(3), &mut |_| {
        leaves += 1;
    });
    assert_eq!(leaves, 0);
}
