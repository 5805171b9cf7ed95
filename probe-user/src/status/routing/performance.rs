//! Performance: the eligible endpoint with the lowest RTT this node measured; endpoints never
//! measured come after every measured one, by priority.
use super::Choice;

pub(super) fn pick(c: &Choice<'_, '_>) -> Vec<usize> {
    c.eligible()
        .min_by_key(|&i| {
            let e = &c.candidates[i];
            (e.rtt.is_none(), e.rtt.unwrap_or_default(), e.priority, i)
        })
        .into_iter()
        .collect()
}
