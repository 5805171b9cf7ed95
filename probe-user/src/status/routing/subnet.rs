//! Subnet: the endpoint whose subnets hold the source; the most specific prefix wins should
//! several match. When the mapped endpoint is not eligible, or no subnet matches, the answer
//! falls back to the catch-all endpoint (the one with no subnets, at most one per profile) if
//! it is eligible; otherwise the answer is empty. We chose this fallback so an unmapped client
//! still gets an answer from the endpoint the operator marked as the default.
use super::Choice;

pub(super) fn pick(c: &Choice<'_, '_>) -> Vec<usize> {
    let source = c.query.source;
    let mapped = (0..c.candidates.len())
        .filter_map(|i| {
            let best = c.candidates[i]
                .subnets
                .iter()
                .filter(|n| n.contains(&source))
                .map(ipnet::IpNet::prefix_len)
                .max()?;
            Some((best, i))
        })
        .max_by_key(|&(len, i)| (len, std::cmp::Reverse(i)))
        .map(|(_, i)| i);
    if let Some(i) = mapped.filter(|&i| c.eligible[i]) {
        return vec![i];
    }
    c.eligible()
        .find(|&i| c.candidates[i].subnets.is_empty())
        .into_iter()
        .collect()
}
