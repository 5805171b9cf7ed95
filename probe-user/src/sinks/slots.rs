//! Slot tables: N slots, each naming one eligible backend, in proportion to weight, and
//! consistent, so that a backend leaving or returning moves (nearly) only the slots it loses or
//! gains. A load balancer hashes a flow to a slot (`jhash ... mod N map @slots` in nftables, or
//! an index into a pinned BPF array) and forwards to that slot's backend.
//!
//! Two layers:
//! - `build` is Maglev's table (Eisenbud et al., NSDI 2016): each backend walks its own
//!   permutation of the slots and claims the next free one, round after round, a backend of
//!   weight w taking w turns per round. The permutations depend only on the backend's name,
//!   so the same eligible set gives the same table in every process. But one backend leaving
//!   moves a few percent of the other backends' slots as well (measured in the tests).
//! - `rebalance` starts from the table the data path holds and moves only what must move: each
//!   backend keeps its slots up to its weighted share (exact, to the slot), slots of a backend
//!   that left go to those below their share, and a backend that returns takes its share from
//!   those above theirs. Freed slots go where Maglev's table would put them when it can, so a
//!   table drifts toward the Maglev table rather than away from it. One backend leaving or
//!   returning thus moves exactly its own slots (connections hashed to any other slot keep
//!   their backend), and a restart that reads the table back rewrites nothing.
//!
//! Pure: no clock, no I/O. The hash is spelled out here (FNV-1a and SplitMix64's finaliser)
//! because std's hashers are not promised to stay the same across Rust releases, and a table
//! that changed with the compiler would move every flow on an upgrade.
use crate::hash::{mix64, stable};

/// One candidate backend: a stable name (the endpoint's) and its weight (0 takes no slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub name: &'a str,
    pub weight: u32,
}

/// Builds a table of `slots` entries over `backends` (in any order): each entry is an index
/// into `backends`, or None for every slot when no backend has a weight.
pub fn build(backends: &[Candidate<'_>], slots: u32) -> Vec<Option<usize>> {
    let n = slots.max(1) as usize;
    let mut table = vec![None; n];
    // Walk in name order so that the table does not depend on the caller's order.
    let mut order: Vec<usize> = (0..backends.len()).filter(|&i| backends[i].weight > 0).collect();
    order.sort_by(|&a, &b| backends[a].name.cmp(backends[b].name));
    if order.is_empty() {
        return table;
    }
    let walks: Vec<Walk> = order.iter().map(|&i| Walk::new(backends[i].name, n as u64)).collect();
    // A round gives each backend its weight in turns, scaled so that the heaviest takes a few
    // at a time rather than thousands (the balance error is one round's claim).
    let heaviest = order.iter().map(|&i| backends[i].weight).max().unwrap_or(1);
    let scale = heaviest.div_ceil(8).max(1);
    let turns: Vec<u32> = order
        .iter()
        .map(|&i| backends[i].weight.div_ceil(scale).max(1))
        .collect();
    let mut next = vec![0u64; order.len()];
    let mut filled = 0usize;
    while filled < n {
        for (k, &backend) in order.iter().enumerate() {
            for _ in 0..turns[k] {
                if filled == n {
                    return table;
                }
                // Each walk visits every slot once in n steps, so a free one is found.
                loop {
                    let slot = walks[k].at(next[k]);
                    next[k] += 1;
                    if table[slot].is_none() {
                        table[slot] = Some(backend);
                        filled += 1;
                        break;
                    }
                }
            }
        }
    }
    table
}

/// The table to hold next: `previous` (what the data path holds, by backend name; any size)
/// changed as little as the weighted shares of `backends` allow. Indices into `backends`.
pub fn rebalance(previous: &[Option<&str>], backends: &[Candidate<'_>], slots: u32) -> Vec<Option<usize>> {
    let by_name: std::collections::HashMap<&str, usize> =
        backends.iter().enumerate().map(|(i, b)| (b.name, i)).collect();
    let held: Vec<Option<usize>> = previous
        .iter()
        .map(|name| name.and_then(|name| by_name.get(name).copied()))
        .collect();
    rebalance_held(&held, backends, slots)
}

/// `rebalance` with the held table given as indices into `backends` (None: a slot that names
/// no backend of `backends`): the sinks' form, with no name hashed per slot.
pub fn rebalance_held(held: &[Option<usize>], backends: &[Candidate<'_>], slots: u32) -> Vec<Option<usize>> {
    let n = slots.max(1) as usize;
    let quota = shares(backends, n);
    let held: Vec<Option<usize>> = (0..n)
        .map(|s| {
            held.get(s)
                .copied()
                .flatten()
                .filter(|b| quota.get(*b).is_some_and(|q| *q > 0))
        })
        .collect();
    // Maglev's table is the preference for slots that must be (re)assigned. Building it costs
    // O(slots) with a large constant, so it is built only for a table that starts (nearly)
    // empty; a table already in use is only patched, which keeps a change of one backend
    // cheap at 65,536 slots.
    let fresh = held.iter().filter(|h| h.is_none()).count() * 2 > n;
    let target = if fresh { build(backends, slots) } else { Vec::new() };
    let wants = |s: usize, b: usize| target.get(s).copied().flatten() == Some(b);
    let mut table: Vec<Option<usize>> = vec![None; n];
    let mut count = vec![0usize; backends.len()];
    // Keep held slots, those Maglev agrees with first, each backend up to its share.
    for agree in [true, false] {
        for s in 0..n {
            if table[s].is_some() {
                continue;
            }
            if let Some(b) = held[s].filter(|b| wants(s, *b) == agree && count[*b] < quota[*b]) {
                table[s] = Some(b);
                count[b] += 1;
            }
        }
    }
    // Free slots: Maglev's choice where it is below its share.
    for (slot, want) in table.iter_mut().zip(target.iter()) {
        if let (None, Some(b)) = (*slot, *want) {
            if count[b] < quota[b] {
                *slot = Some(b);
                count[b] += 1;
            }
        }
    }
    // The rest, in slot order, to whoever is below its share (the furthest below first). The
    // shares sum to the slots, so this fills the table.
    let mut short: Vec<usize> = (0..backends.len()).filter(|b| count[*b] < quota[*b]).collect();
    short.sort_by(|a, b| {
        (quota[*b] - count[*b])
            .cmp(&(quota[*a] - count[*a]))
            .then(backends[*a].name.cmp(backends[*b].name))
    });
    let free: Vec<usize> = (0..n).filter(|s| table[*s].is_none()).collect();
    let mut free = free.into_iter();
    for b in short {
        for s in free.by_ref().take(quota[b] - count[b]) {
            table[s] = Some(b);
        }
    }
    table
}

/// Each backend's share of `n` slots by weight, summing to `n` (largest remainders, ties to
/// the lower name); zero for all when no backend has a weight.
fn shares(backends: &[Candidate<'_>], n: usize) -> Vec<usize> {
    let total: u64 = backends.iter().map(|b| u64::from(b.weight)).sum();
    if total == 0 {
        return vec![0; backends.len()];
    }
    let exact: Vec<(usize, u64)> = backends
        .iter()
        .map(|b| {
            let x = u64::from(b.weight) * n as u64;
            ((x / total) as usize, x % total)
        })
        .collect();
    let mut out: Vec<usize> = exact.iter().map(|(q, _)| *q).collect();
    let mut left = n - out.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..backends.len()).filter(|i| backends[*i].weight > 0).collect();
    order.sort_by(|a, b| {
        exact[*b]
            .1
            .cmp(&exact[*a].1)
            .then(backends[*a].name.cmp(backends[*b].name))
    });
    for i in order {
        if left == 0 {
            break;
        }
        out[i] += 1;
        left -= 1;
    }
    out
}

/// Slots whose backend differs between two tables of the same size, by backend name.
pub fn churn(before: &[Option<&str>], after: &[Option<&str>]) -> usize {
    before.iter().zip(after).filter(|(a, b)| a != b).count()
}

/// One backend's permutation of the slots: offset + j * skip (mod n), with skip coprime to n
/// so that the walk visits every slot once.
struct Walk {
    offset: u64,
    skip: u64,
    n: u64,
}

impl Walk {
    fn new(name: &str, n: u64) -> Walk {
        let h = stable(name.as_bytes());
        let offset = mix64(h) % n;
        let mut skip = if n > 1 {
            mix64(h ^ 0x9e37_79b9_7f4a_7c15) % (n - 1) + 1
        } else {
            1
        };
        while gcd(skip, n) != 1 {
            skip = skip % (n - 1) + 1;
        }
        Walk { offset, skip, n }
    }

    fn at(&self, j: u64) -> usize {
        ((self.offset + (j % self.n) * self.skip) % self.n) as usize
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("backend-{i}")).collect()
    }

    fn table<'a>(names: &'a [String], weights: &[u32], slots: u32) -> Vec<Option<&'a str>> {
        let c: Vec<Candidate<'_>> = names
            .iter()
            .zip(weights)
            .map(|(n, w)| Candidate { name: n, weight: *w })
            .collect();
        build(&c, slots)
            .into_iter()
            .map(|s| s.map(|i| names[i].as_str()))
            .collect()
    }

    fn count(t: &[Option<&str>], name: &str) -> usize {
        t.iter().filter(|s| **s == Some(name)).count()
    }

    #[test]
    fn every_slot_is_filled_and_shares_follow_weights() {
        let n = names(3);
        let t = table(&n, &[1, 1, 1], 64);
        assert!(t.iter().all(Option::is_some));
        for name in &n {
            assert!((21..=22).contains(&count(&t, name)), "{name}: {}", count(&t, name));
        }
        let t = table(&n, &[1, 2, 1], 4096);
        let (a, b, c) = (count(&t, &n[0]), count(&t, &n[1]), count(&t, &n[2]));
        assert!(
            (1000..=1050).contains(&a) && (2000..=2100).contains(&b) && (1000..=1050).contains(&c),
            "{a} {b} {c}"
        );
    }

    #[test]
    fn the_table_depends_on_the_set_not_on_its_order() {
        let n = names(5);
        let forward = table(&n, &[1; 5], 257);
        let mut rev = n.clone();
        rev.reverse();
        assert_eq!(forward, table(&rev, &[1; 5], 257));
        // The hash is fixed: a restart (or an upgrade) builds the same table.
        let first: Vec<Option<&str>> = forward.iter().take(4).copied().collect();
        assert_eq!(
            first,
            [
                Some("backend-0"),
                Some("backend-0"),
                Some("backend-4"),
                Some("backend-3")
            ]
        );
    }

    #[test]
    fn one_backend_leaving_moves_little_more_than_its_own_slots() {
        for (backends, slots) in [(10, 1024u32), (100, 8192), (3, 64)] {
            let n = names(backends);
            let before = table(&n, &vec![1; backends], slots);
            let mut weights = vec![1; backends];
            weights[backends / 2] = 0;
            let after = table(&n, &weights, slots);
            assert_eq!(count(&after, &n[backends / 2]), 0);
            let own = count(&before, &n[backends / 2]);
            let moved = churn(&before, &after);
            // Maglev's bound in practice: a few percent of the table beyond the minimum.
            assert!(
                moved <= own + slots as usize / 10,
                "{backends} backends, {slots} slots: {moved} moved, {own} were its own"
            );
        }
    }

    fn rebalanced<'a>(
        previous: &[Option<&str>],
        names: &'a [String],
        weights: &[u32],
        slots: u32,
    ) -> Vec<Option<&'a str>> {
        let c: Vec<Candidate<'_>> = names
            .iter()
            .zip(weights)
            .map(|(n, w)| Candidate { name: n, weight: *w })
            .collect();
        rebalance(previous, &c, slots)
            .into_iter()
            .map(|s| s.map(|i| names[i].as_str()))
            .collect()
    }

    #[test]
    fn rebalancing_moves_exactly_the_slots_a_backend_loses_or_gains() {
        for (backends, slots) in [(3, 64u32), (10, 1024), (100, 8192), (1000, 16_384)] {
            let n = names(backends);
            let full = rebalanced(&[], &n, &vec![1; backends], slots);
            // Exact shares from the start.
            let per: Vec<usize> = n.iter().map(|b| count(&full, b)).collect();
            assert!(per.iter().max().unwrap() - per.iter().min().unwrap() <= 1, "{per:?}");
            // A restart reads the same table back: nothing moves.
            assert_eq!(rebalanced(&full, &n, &vec![1; backends], slots), full);
            let gone = &n[backends / 2];
            let mut weights = vec![1; backends];
            weights[backends / 2] = 0;
            let without = rebalanced(&full, &n, &weights, slots);
            assert_eq!(
                churn(&full, &without),
                count(&full, gone),
                "only the leaver's slots move"
            );
            assert_eq!(count(&without, gone), 0);
            let per: Vec<usize> = n.iter().filter(|b| *b != gone).map(|b| count(&without, b)).collect();
            assert!(per.iter().max().unwrap() - per.iter().min().unwrap() <= 1, "{per:?}");
            let back = rebalanced(&without, &n, &vec![1; backends], slots);
            assert_eq!(
                churn(&without, &back),
                count(&back, gone),
                "only the returner's slots move"
            );
            assert!(count(&back, gone) >= slots as usize / backends);
        }
    }

    #[test]
    fn rebalancing_follows_weights_exactly() {
        let n = names(3);
        let t = rebalanced(&[], &n, &[1, 2, 1], 64);
        assert_eq!((count(&t, &n[0]), count(&t, &n[1]), count(&t, &n[2])), (16, 32, 16));
        let t2 = rebalanced(&t, &n, &[1, 1, 1], 64);
        // Shares of 64 by 1:1:1 are 22, 21, 21: backend-1 gives up 11 slots, nothing else moves.
        assert_eq!(churn(&t, &t2), 11);
    }

    #[test]
    fn no_weight_means_no_backend() {
        let n = names(2);
        assert!(table(&n, &[0, 0], 16).iter().all(Option::is_none));
        assert!(build(&[], 16).iter().all(Option::is_none));
        assert_eq!(table(&n, &[1, 0], 1), [Some("backend-0")]);
    }
}
