//! Which nodes probe a check: rendezvous (highest-random-weight) hashing over the live nodes.
//! Every node ranks the nodes for a check by a hash of (node, check) and the first k probe it,
//! so every node that sees the same members computes the same owners, with no coordination.
//! A node leaving hands each of its checks to the next node in that check's ranking, and a
//! node joining takes only the checks it now ranks among the first k for: about k/N of the
//! checks move, and none moves between two nodes that both stay.
//!
//! With `distinct_regions`, the first pass takes the best-ranked node of each region in rank
//! order, so a check's k probers sit in k regions when there are that many; the rest are
//! filled by rank. Pure: no clock, no I/O.
use crate::hash::{mix64, stable};

/// A live node as sharding sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub region: String,
    /// `stable(name)`, computed once.
    key: u64,
}

impl Member {
    pub fn new(name: &str, region: &str) -> Member {
        Member {
            name: name.to_string(),
            region: region.to_string(),
            key: stable(name.as_bytes()),
        }
    }
}

/// The weight of `member` for the check whose stable hash is `check`.
fn score(member: &Member, check: u64) -> u64 {
    mix64(member.key ^ mix64(check))
}

/// The indexes in `members` of the nodes that probe `check`: all of them when `k` is 0 or at
/// least their number, else the `k` best-ranked (in rank order).
pub fn owners(check: u64, members: &[Member], k: usize, distinct_regions: bool) -> Vec<usize> {
    let mut ranked: Vec<(u64, &str, usize)> = members
        .iter()
        .enumerate()
        .map(|(i, m)| (score(m, check), m.name.as_str(), i))
        .collect();
    // Ties (equal scores) are broken by name, so the order never depends on the list's.
    ranked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    if k == 0 || k >= members.len() {
        return ranked.into_iter().map(|(_, _, i)| i).collect();
    }
    if !distinct_regions {
        return ranked.into_iter().take(k).map(|(_, _, i)| i).collect();
    }
    let mut chosen: Vec<usize> = Vec::with_capacity(k);
    let mut regions: Vec<&str> = Vec::with_capacity(k);
    for &(_, _, i) in &ranked {
        let region = members[i].region.as_str();
        if chosen.len() < k && !regions.contains(&region) {
            regions.push(region);
            chosen.push(i);
        }
    }
    for &(_, _, i) in &ranked {
        if chosen.len() == k {
            break;
        }
        if !chosen.contains(&i) {
            chosen.push(i);
        }
    }
    chosen
}

/// Whether the node named `me` is among the owners of `check`.
pub fn is_owner(me: &str, check: u64, members: &[Member], k: usize, distinct_regions: bool) -> bool {
    owners(check, members, k, distinct_regions)
        .into_iter()
        .any(|i| members[i].name == me)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn members(names: &[(&str, &str)]) -> Vec<Member> {
        names.iter().map(|(n, r)| Member::new(n, r)).collect()
    }

    fn names(ms: &[Member], idx: &[usize]) -> Vec<String> {
        idx.iter().map(|&i| ms[i].name.clone()).collect()
    }

    const CHECKS: u64 = 20_000;

    #[test]
    fn every_check_gets_k_owners_spread_evenly() {
        let ms = members(&[("a", "x"), ("b", "x"), ("c", "y"), ("d", "y"), ("e", "z")]);
        let mut load: HashMap<String, u64> = HashMap::new();
        for c in 0..CHECKS {
            let o = owners(stable(&c.to_le_bytes()), &ms, 2, false);
            assert_eq!(o.len(), 2);
            assert_ne!(o[0], o[1]);
            for n in names(&ms, &o) {
                *load.entry(n).or_default() += 1;
            }
        }
        // Each node's share is 2/5 of the checks, within 3%.
        let want = CHECKS * 2 / 5;
        for (n, l) in &load {
            assert!(l.abs_diff(want) < want * 3 / 100, "{n}: {l} checks, want about {want}");
        }
    }

    #[test]
    fn the_owners_do_not_depend_on_the_order_nodes_are_listed_in() {
        let ms = members(&[("a", "x"), ("b", "x"), ("c", "y")]);
        let mut reversed = ms.clone();
        reversed.reverse();
        for c in 0..1000u64 {
            let h = stable(&c.to_le_bytes());
            assert_eq!(
                names(&ms, &owners(h, &ms, 2, false)),
                names(&reversed, &owners(h, &reversed, 2, false))
            );
        }
    }

    #[test]
    fn a_node_leaving_moves_only_its_own_checks_each_to_one_new_owner() {
        let all = members(&[("a", "x"), ("b", "x"), ("c", "y"), ("d", "y"), ("e", "z")]);
        let without_c: Vec<Member> = all.iter().filter(|m| m.name != "c").cloned().collect();
        let mut moved = 0u64;
        for c in 0..CHECKS {
            let h = stable(&c.to_le_bytes());
            let before = names(&all, &owners(h, &all, 2, false));
            let after = names(&without_c, &owners(h, &without_c, 2, false));
            if before.contains(&"c".to_string()) {
                // The survivor keeps it; one new node takes c's place.
                let kept: Vec<&String> = before.iter().filter(|n| *n != "c").collect();
                assert!(kept.iter().all(|n| after.contains(n)), "{before:?} -> {after:?}");
                moved += 1;
            } else {
                assert_eq!(before, after, "a check c did not probe stays where it was");
            }
        }
        // c held about 2/5 of the checks: exactly those moved.
        assert!(moved.abs_diff(CHECKS * 2 / 5) < CHECKS * 2 / 100, "{moved}");
    }

    #[test]
    fn a_node_joining_takes_only_the_checks_it_now_ranks_for() {
        let three = members(&[("a", "x"), ("b", "y"), ("c", "z")]);
        let mut four = three.clone();
        four.push(Member::new("d", "w"));
        for c in 0..CHECKS {
            let h = stable(&c.to_le_bytes());
            let before = names(&three, &owners(h, &three, 2, false));
            let after = names(&four, &owners(h, &four, 2, false));
            if after.contains(&"d".to_string()) {
                // d took exactly one place; the other owner was an owner before.
                let other: Vec<&String> = after.iter().filter(|n| *n != "d").collect();
                assert_eq!(other.len(), 1);
                assert!(before.contains(other[0]));
            } else {
                assert_eq!(before, after);
            }
        }
    }

    #[test]
    fn distinct_regions_put_the_probers_of_a_check_in_different_regions() {
        let ms = members(&[("a1", "eu"), ("a2", "eu"), ("a3", "eu"), ("b1", "us"), ("c1", "ap")]);
        for c in 0..5000u64 {
            let h = stable(&c.to_le_bytes());
            let o = owners(h, &ms, 3, true);
            let mut regions: Vec<&str> = o.iter().map(|&i| ms[i].region.as_str()).collect();
            regions.sort_unstable();
            assert_eq!(regions, ["ap", "eu", "us"], "check {c}");
            // More probers than regions: the rest by rank, still k distinct nodes.
            let o = owners(h, &ms, 4, true);
            assert_eq!(o.len(), 4);
            let mut uniq = o.clone();
            uniq.sort_unstable();
            uniq.dedup();
            assert_eq!(uniq.len(), 4);
        }
    }

    #[test]
    fn k_zero_or_at_least_n_means_every_node() {
        let ms = members(&[("a", "x"), ("b", "x")]);
        for k in [0, 2, 5] {
            let mut o = owners(7, &ms, k, false);
            o.sort_unstable();
            assert_eq!(o, [0, 1]);
        }
        assert!(owners(7, &[], 2, false).is_empty());
        assert!(is_owner("a", 7, &ms, 0, false) && is_owner("b", 7, &ms, 0, false));
        let solo = members(&[("a", "x")]);
        assert!(is_owner("a", 99, &solo, 2, true));
        assert!(!is_owner("z", 99, &solo, 2, true));
    }
}
