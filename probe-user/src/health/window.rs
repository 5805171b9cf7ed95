//! The SPEC section 3 health-check windows: how long a run of results takes to flip a target.
//!
//! They hold when probes to one target are sequential at plain `interval` spacing.
use std::time::Duration;

/// Probe timing of one target, as configured; the formula windows are computed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeTiming {
    /// Gap between the end of one probe and the start of the next.
    pub interval: Duration,
    /// How long a probe waits for an answer before counting as failed.
    pub timeout: Duration,
}

/// Time from the start of the first failed probe to "unhealthy":
/// `timeout * unhealthy + interval * (unhealthy - 1)`.
pub fn fail_window(timeout: Duration, interval: Duration, unhealthy: u32) -> Duration {
    run_window(timeout, interval, unhealthy)
}

/// Time from the start of the first successful probe to "healthy":
/// `response_time * healthy + interval * (healthy - 1)`.
pub fn success_window(response_time: Duration, interval: Duration, healthy: u32) -> Duration {
    run_window(response_time, interval, healthy)
}

/// Mean of the response times, or zero for none; the success window is stated for one figure.
pub fn mean_response_time(times: impl IntoIterator<Item = Duration>) -> Duration {
    let (sum, n) = times
        .into_iter()
        .fold((0u128, 0u128), |(sum, n), t| (sum + t.as_nanos(), n + 1));
    if n == 0 {
        return Duration::ZERO;
    }
    // Round to the nearest nanosecond so a run of equal times gives that time back exactly.
    let mean = (sum + n / 2) / n;
    Duration::from_nanos(u64::try_from(mean).unwrap_or(u64::MAX))
}

/// `n` probes of length `each`, separated by `n - 1` gaps of `interval`.
fn run_window(each: Duration, interval: Duration, n: u32) -> Duration {
    each.saturating_mul(n)
        .saturating_add(interval.saturating_mul(n.saturating_sub(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn seed_examples() {
        assert_eq!(fail_window(5 * S, 2 * S, 3), 19 * S, "lb fail window");
        assert_eq!(success_window(S, 2 * S, 3), 7 * S, "lb success window");
        assert_eq!(fail_window(3 * S, 2 * S, 3), 13 * S, "ga fail window");
        assert_eq!(
            fail_window(10 * S, 30 * S, 4),
            130 * S,
            "tm Degraded at the 4th failure"
        );
    }

    #[test]
    fn threshold_one_is_a_single_probe() {
        assert_eq!(fail_window(5 * S, 2 * S, 1), 5 * S);
        assert_eq!(
            success_window(Duration::from_millis(7), 2 * S, 1),
            Duration::from_millis(7)
        );
    }

    #[test]
    fn mean_rounds_to_nearest_and_handles_empty() {
        assert_eq!(mean_response_time([]), Duration::ZERO);
        let ms = Duration::from_millis;
        assert_eq!(mean_response_time([ms(1), ms(2), ms(6)]), ms(3));
        assert_eq!(
            mean_response_time([Duration::from_nanos(1), Duration::from_nanos(2)]),
            Duration::from_nanos(2)
        );
    }

    #[test]
    fn saturates_instead_of_panicking() {
        assert_eq!(fail_window(Duration::MAX, S, 10), Duration::MAX);
    }
}
