//! Geographic: the endpoint mapped to the query's region, or the `world` endpoint when the
//! region has none. No failover (SPEC 4): if the mapped endpoint is not eligible the answer is
//! empty (NODATA), never another region's endpoint. Fail-open still applies through `eligible`.
use super::Choice;

/// The region that catches every query whose region has no endpoint of its own.
pub(super) const WORLD: &str = "world";

pub(super) fn pick(c: &Choice<'_, '_>) -> Vec<usize> {
    let find = |want: &str| (0..c.candidates.len()).find(|&i| c.candidates[i].region == Some(want));
    let mapped = c.query.region.and_then(find).or_else(|| find(WORLD));
    mapped.filter(|&i| c.eligible[i]).into_iter().collect()
}
