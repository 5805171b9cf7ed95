//! Weighted: one eligible endpoint at random, in proportion to its weight; weight 0 never.
use super::{Choice, RandomSource};

pub(super) fn pick(c: &Choice<'_, '_>, rng: &mut dyn RandomSource) -> Vec<usize> {
    let weight = |i: usize| u64::from(c.candidates[i].weight);
    let total: u64 = c.eligible().map(weight).sum();
    if total == 0 {
        return Vec::new();
    }
    // Modulo bias is below 2^-40 for any realistic weight total; not worth rejection sampling.
    let mut ticket = rng.next_u64() % total;
    for i in c.eligible().filter(|&i| weight(i) > 0) {
        if ticket < weight(i) {
            return vec![i];
        }
        ticket -= weight(i);
    }
    Vec::new()
}
