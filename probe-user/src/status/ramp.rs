//! Slow start: an endpoint that starts to take traffic again (back from Degraded, re-enabled,
//! undrained) or that joins a running profile takes its weight in steps over the profile's
//! `slow_start`, so that a cold cache or a JIT that has just started is not handed its whole
//! share at once. The ramp is a share of the weight in thousandths: `FULL` outside a ramp.
//! Pure: the table keeps when each ramp started and asks here where it stands.

/// Outside a ramp: the whole weight.
pub const FULL: u16 = 1000;

/// A ramp moves in this many steps: each is a change every sink writes, so the count bounds
/// the work a ramp costs (20 changes per endpoint) while each step moves 5% of the weight.
pub const STEPS: u64 = 20;

/// The first step: 1% of the weight, as HAProxy's `slowstart` begins, not nothing (a share of
/// nothing would keep a backend with a small weight out until the second step).
pub const FIRST: u16 = 10;

/// Where a ramp of `period_ns` stands `elapsed_ns` after it started, in thousandths of the
/// weight: 1%, then 5%, 10%, ... 95% in `STEPS` equal steps, and `FULL` from `period_ns` on
/// (and always with no period).
pub fn permille(elapsed_ns: u64, period_ns: u64) -> u16 {
    if period_ns == 0 || elapsed_ns >= period_ns {
        return FULL;
    }
    let step = u128::from(elapsed_ns) * u128::from(STEPS) / u128::from(period_ns);
    // step < STEPS, so this is below FULL.
    (step as u16 * (FULL / STEPS as u16)).max(FIRST)
}

/// When, counted from its start, a ramp of `period_ns` takes its next step after
/// `elapsed_ns`; None once it is whole.
pub fn next_step_ns(elapsed_ns: u64, period_ns: u64) -> Option<u64> {
    if period_ns == 0 || elapsed_ns >= period_ns {
        return None;
    }
    let step = u128::from(elapsed_ns) * u128::from(STEPS) / u128::from(period_ns) + 1;
    // The first instant at which `permille` gives step `step`.
    let at = (step * u128::from(period_ns)).div_ceil(u128::from(STEPS));
    Some(u64::try_from(at).unwrap_or(u64::MAX).max(elapsed_ns + 1))
}

/// `weight` at `ramp` thousandths, for data paths whose weights are small integers (HAProxy's
/// `set server ... weight`): rounded up, and never below 1 for a positive weight, so an
/// endpoint in its ramp always takes some traffic. A weight of 1 cannot ramp there.
pub fn scaled(weight: u32, ramp: u16) -> u32 {
    if ramp >= FULL || weight == 0 {
        return weight;
    }
    let w = (u64::from(weight) * u64::from(ramp)).div_ceil(u64::from(FULL));
    u32::try_from(w).unwrap_or(u32::MAX).max(1)
}

/// `weight` at `ramp` thousandths, exact: for data paths that share by weight among many
/// (slot tables), where every candidate of one table is scaled alike. A weight is at most
/// 1000 (`[[profile.endpoint]] weight`), so this fits.
pub fn fine(weight: u32, ramp: u16) -> u32 {
    weight.saturating_mul(u32::from(ramp.min(FULL)))
}

/// For serde: the default of a state's ramp, and whether it is that.
pub fn full() -> u16 {
    FULL
}

#[allow(clippy::trivially_copy_pass_by_ref)]
pub fn is_full(ramp: &u16) -> bool {
    *ramp >= FULL
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn ramps_in_steps_from_one_percent_to_whole() {
        let period = 20 * S;
        assert_eq!(permille(0, period), FIRST);
        assert_eq!(permille(S - 1, period), FIRST);
        assert_eq!(permille(S, period), 50);
        assert_eq!(permille(10 * S, period), 500);
        assert_eq!(permille(20 * S - 1, period), 950);
        assert_eq!(permille(20 * S, period), FULL);
        assert_eq!(permille(u64::MAX, period), FULL);
        assert_eq!(permille(0, 0), FULL);
        // Never down while time goes on.
        let mut last = 0;
        for ms in 0..=20_500 {
            let p = permille(ms * 1_000_000, period);
            assert!(p >= last, "{ms} ms: {p} < {last}");
            last = p;
        }
    }

    #[test]
    fn next_step_is_where_the_value_moves() {
        for period in [S, 7 * S + 3, 20 * S, 3_600 * S] {
            let mut at = 0;
            let mut steps = 0;
            while let Some(next) = next_step_ns(at, period) {
                assert!(next > at);
                assert_ne!(
                    permille(next, period),
                    permille(next - 1, period),
                    "period {period}, {next}"
                );
                assert_eq!(permille(at, period), permille(next - 1, period));
                at = next;
                steps += 1;
            }
            assert_eq!(steps, STEPS, "period {period}");
            assert_eq!(permille(at, period), FULL);
        }
        assert_eq!(next_step_ns(5, 0), None);
    }

    #[test]
    fn scaled_weights_round_up_and_keep_one() {
        assert_eq!(scaled(100, 10), 1);
        assert_eq!(scaled(100, 500), 50);
        assert_eq!(scaled(3, 500), 2);
        assert_eq!(scaled(1, 10), 1);
        assert_eq!(scaled(256, FULL), 256);
        assert_eq!(scaled(0, 500), 0);
        assert_eq!(fine(1000, FULL), 1_000_000);
        assert_eq!(fine(7, 50), 350);
    }
}
