//! Threshold dialects (lb, tm, ga) and their mapping onto one pair of validated thresholds.
//!
//! Ranges are those of SPEC section 2; a bad value is refused whole, naming field, value and range.
use std::fmt;

/// Inclusive range shared by every threshold the engine accepts, whatever the dialect.
pub const THRESHOLD_MAX: u32 = 10;

/// Errors from turning a dialect's settings into thresholds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThresholdError {
    #[error("{dialect} {field} = {value} is out of range; allowed {min}..={max}")]
    OutOfRange {
        dialect: &'static str,
        field: &'static str,
        value: u32,
        min: u32,
        max: u32,
    },
}

/// Threshold settings as each source dialect states them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// Load balancer: separate healthy and unhealthy thresholds, 1..=10 each.
    Lb { healthy: u32, unhealthy: u32 },
    /// Traffic manager: failures tolerated before Degraded, 0..=9; one success recovers.
    Tm { tolerated_failures: u32 },
    /// Global accelerator: one threshold, 2..=10, used in both directions.
    Ga { threshold: u32 },
}

impl Dialect {
    pub const LB_DEFAULT: Dialect = Dialect::Lb {
        healthy: 3,
        unhealthy: 3,
    };
    pub const TM_DEFAULT: Dialect = Dialect::Tm { tolerated_failures: 3 };
    pub const GA_DEFAULT: Dialect = Dialect::Ga { threshold: 3 };

    /// Validates the settings and maps them onto the engine's two thresholds.
    pub fn thresholds(self) -> Result<Thresholds, ThresholdError> {
        match self {
            Dialect::Lb { healthy, unhealthy } => Thresholds::lb(healthy, unhealthy),
            Dialect::Tm { tolerated_failures } => Thresholds::tm(tolerated_failures),
            Dialect::Ga { threshold } => Thresholds::ga(threshold),
        }
    }
}

/// How many consecutive results of each kind change a target's state; always within 1..=10.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    healthy: u32,
    unhealthy: u32,
}

impl Thresholds {
    /// lb: both thresholds given separately, each 1..=10.
    pub fn lb(healthy: u32, unhealthy: u32) -> Result<Self, ThresholdError> {
        Ok(Self {
            healthy: in_range("lb", "healthy_threshold", healthy, 1, THRESHOLD_MAX)?,
            unhealthy: in_range("lb", "unhealthy_threshold", unhealthy, 1, THRESHOLD_MAX)?,
        })
    }

    /// tm: Degraded at the (tolerated+1)-th consecutive failure, Online again after one success.
    pub fn tm(tolerated_failures: u32) -> Result<Self, ThresholdError> {
        let tolerated = in_range("tm", "tolerated_failures", tolerated_failures, 0, THRESHOLD_MAX - 1)?;
        Ok(Self {
            healthy: 1,
            unhealthy: tolerated + 1,
        })
    }

    /// ga: one threshold, 2..=10, for both directions.
    pub fn ga(threshold: u32) -> Result<Self, ThresholdError> {
        let threshold = in_range("ga", "healthy_threshold", threshold, 2, THRESHOLD_MAX)?;
        Ok(Self {
            healthy: threshold,
            unhealthy: threshold,
        })
    }

    /// Consecutive successes that make a target Healthy.
    pub fn healthy(&self) -> u32 {
        self.healthy
    }

    /// Consecutive failures that make a target Unhealthy.
    pub fn unhealthy(&self) -> u32 {
        self.unhealthy
    }

    /// The threshold that a run of results of this kind must reach.
    pub fn for_result(&self, success: bool) -> u32 {
        if success {
            self.healthy
        } else {
            self.unhealthy
        }
    }
}

impl Default for Thresholds {
    /// The lb default, 3 and 3, which is also ga's default threshold.
    fn default() -> Self {
        Self {
            healthy: 3,
            unhealthy: 3,
        }
    }
}

impl fmt::Display for Thresholds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "healthy {} / unhealthy {}", self.healthy, self.unhealthy)
    }
}

fn in_range(dialect: &'static str, field: &'static str, value: u32, min: u32, max: u32) -> Result<u32, ThresholdError> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(ThresholdError::OutOfRange {
            dialect,
            field,
            value,
            min,
            max,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lb_accepts_its_whole_range_and_keeps_thresholds_apart() {
        for healthy in 1..=10 {
            for unhealthy in 1..=10 {
                let t = Dialect::Lb { healthy, unhealthy }.thresholds().unwrap();
                assert_eq!((t.healthy(), t.unhealthy()), (healthy, unhealthy));
            }
        }
    }

    #[test]
    fn lb_refuses_out_of_range_naming_the_field() {
        let err = Thresholds::lb(0, 3).unwrap_err();
        assert_eq!(
            err,
            ThresholdError::OutOfRange {
                dialect: "lb",
                field: "healthy_threshold",
                value: 0,
                min: 1,
                max: 10
            }
        );
        let err = Thresholds::lb(3, 11).unwrap_err();
        assert_eq!(
            err.to_string(),
            "lb unhealthy_threshold = 11 is out of range; allowed 1..=10"
        );
    }

    #[test]
    fn tm_maps_tolerated_failures_to_unhealthy_plus_one_and_single_success_recovery() {
        for tolerated in 0..=9 {
            let t = Dialect::Tm {
                tolerated_failures: tolerated,
            }
            .thresholds()
            .unwrap();
            assert_eq!(t.unhealthy(), tolerated + 1);
            assert_eq!(t.healthy(), 1);
        }
        assert_eq!(
            Thresholds::tm(10).unwrap_err().to_string(),
            "tm tolerated_failures = 10 is out of range; allowed 0..=9"
        );
    }

    #[test]
    fn ga_uses_one_threshold_both_ways_from_two() {
        for threshold in 2..=10 {
            let t = Thresholds::ga(threshold).unwrap();
            assert_eq!((t.healthy(), t.unhealthy()), (threshold, threshold));
        }
        assert!(Thresholds::ga(1).is_err());
        assert!(Thresholds::ga(11).is_err());
    }

    #[test]
    fn defaults_are_three() {
        let lb = Dialect::LB_DEFAULT.thresholds().unwrap();
        assert_eq!((lb.healthy(), lb.unhealthy()), (3, 3));
        assert_eq!(Thresholds::default(), lb);
        let tm = Dialect::TM_DEFAULT.thresholds().unwrap();
        assert_eq!((tm.healthy(), tm.unhealthy()), (1, 4));
        let ga = Dialect::GA_DEFAULT.thresholds().unwrap();
        assert_eq!((ga.healthy(), ga.unhealthy()), (3, 3));
    }
}
