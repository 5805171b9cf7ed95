//! The one `Thresholds` (consecutive results that change a target's state) and the one mapping
//! from each dialect's own threshold settings onto it (SPEC section 2).
use std::fmt;

use serde::Serialize;

use super::{dialect::Dialect, limits::THRESHOLD_MAX};

/// A threshold setting a dialect reads: its config key, allowed range and default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThresholdKey {
    pub name: &'static str,
    pub min: u32,
    pub max: u32,
    pub default: u32,
}

impl ThresholdKey {
    const fn new(name: &'static str, min: u32, max: u32) -> Self {
        Self {
            name,
            min,
            max,
            default: 3,
        }
    }

    /// The value, if `dialect` allows it here.
    pub fn check(&self, dialect: Dialect, value: i64) -> Result<u32, ThresholdError> {
        u32::try_from(value)
            .ok()
            .filter(|v| (self.min..=self.max).contains(v))
            .ok_or(ThresholdError::OutOfRange {
                dialect,
                field: self.name,
                value,
                min: self.min,
                max: self.max,
            })
    }
}

/// lb: separate healthy and unhealthy thresholds.
const LB_KEYS: [ThresholdKey; 2] = [
    ThresholdKey::new("healthy_threshold", 1, THRESHOLD_MAX),
    ThresholdKey::new("unhealthy_threshold", 1, THRESHOLD_MAX),
];
/// tm: failures tolerated before Degraded; one success recovers.
const TM_KEYS: [ThresholdKey; 1] = [ThresholdKey::new("tolerated_failures", 0, THRESHOLD_MAX - 1)];
/// ga: one threshold, used in both directions.
const GA_KEYS: [ThresholdKey; 1] = [ThresholdKey::new("threshold", 2, THRESHOLD_MAX)];

/// A threshold setting outside its dialect's range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThresholdError {
    #[error("{dialect} {field} = {value} is out of range; allowed {min}..={max}")]
    OutOfRange {
        dialect: Dialect,
        field: &'static str,
        value: i64,
        min: u32,
        max: u32,
    },
    #[error("{dialect} takes {expected} threshold settings ({keys}), got {got}")]
    Count {
        dialect: Dialect,
        expected: usize,
        keys: String,
        got: usize,
    },
}

impl Dialect {
    /// The threshold settings this dialect reads, in the order `thresholds` takes them.
    pub fn threshold_keys(self) -> &'static [ThresholdKey] {
        match self {
            Dialect::Lb => &LB_KEYS,
            Dialect::Tm => &TM_KEYS,
            Dialect::Ga => &GA_KEYS,
        }
    }

    /// The keys for a "use X instead" hint: "healthy_threshold and unhealthy_threshold".
    pub fn threshold_key_names(self) -> String {
        let names: Vec<&str> = self.threshold_keys().iter().map(|k| k.name).collect();
        names.join(" and ")
    }

    /// Checks this dialect's settings (one value per `threshold_keys` entry) and maps them onto
    /// the engine's two thresholds.
    pub fn thresholds(self, values: &[u32]) -> Result<Thresholds, ThresholdError> {
        let keys = self.threshold_keys();
        if values.len() != keys.len() {
            return Err(ThresholdError::Count {
                dialect: self,
                expected: keys.len(),
                keys: self.threshold_key_names(),
                got: values.len(),
            });
        }
        let mut checked = [0u32; 2];
        for ((key, value), out) in keys.iter().zip(values).zip(&mut checked) {
            *out = key.check(self, i64::from(*value))?;
        }
        let [first, second] = checked;
        Ok(match self {
            Dialect::Lb => Thresholds {
                healthy: first,
                unhealthy: second,
            },
            // Degraded at the (tolerated+1)-th consecutive failure, Online again after one success.
            Dialect::Tm => Thresholds {
                healthy: 1,
                unhealthy: first + 1,
            },
            Dialect::Ga => Thresholds {
                healthy: first,
                unhealthy: first,
            },
        })
    }

    /// The thresholds when none of the settings is given.
    pub fn default_thresholds(self) -> Thresholds {
        let defaults: Vec<u32> = self.threshold_keys().iter().map(|k| k.default).collect();
        self.thresholds(&defaults).expect("every default is within its range")
    }
}

/// How many consecutive results of each kind change a target's state; only a dialect's
/// mapping builds one, so both are always within 1..=10.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Thresholds {
    healthy: u32,
    unhealthy: u32,
}

impl Thresholds {
    /// lb: both thresholds given separately.
    pub fn lb(healthy: u32, unhealthy: u32) -> Result<Self, ThresholdError> {
        Dialect::Lb.thresholds(&[healthy, unhealthy])
    }

    /// tm: failures tolerated before Degraded.
    pub fn tm(tolerated_failures: u32) -> Result<Self, ThresholdError> {
        Dialect::Tm.thresholds(&[tolerated_failures])
    }

    /// ga: one threshold for both directions.
    pub fn ga(threshold: u32) -> Result<Self, ThresholdError> {
        Dialect::Ga.thresholds(&[threshold])
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
    /// lb's default, 3 and 3, which is also ga's.
    fn default() -> Self {
        Dialect::Lb.default_thresholds()
    }
}

impl fmt::Display for Thresholds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "healthy {} / unhealthy {}", self.healthy, self.unhealthy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lb_accepts_its_whole_range_and_keeps_thresholds_apart() {
        for healthy in 1..=10 {
            for unhealthy in 1..=10 {
                let t = Thresholds::lb(healthy, unhealthy).unwrap();
                assert_eq!((t.healthy(), t.unhealthy()), (healthy, unhealthy));
            }
        }
    }

    #[test]
    fn out_of_range_names_dialect_field_value_and_range() {
        assert_eq!(
            Thresholds::lb(0, 3).unwrap_err(),
            ThresholdError::OutOfRange {
                dialect: Dialect::Lb,
                field: "healthy_threshold",
                value: 0,
                min: 1,
                max: 10
            }
        );
        assert_eq!(
            Thresholds::lb(3, 11).unwrap_err().to_string(),
            "lb unhealthy_threshold = 11 is out of range; allowed 1..=10"
        );
        assert_eq!(
            Thresholds::tm(10).unwrap_err().to_string(),
            "tm tolerated_failures = 10 is out of range; allowed 0..=9"
        );
        assert_eq!(
            Thresholds::ga(1).unwrap_err().to_string(),
            "ga threshold = 1 is out of range; allowed 2..=10"
        );
        assert!(Thresholds::ga(11).is_err());
        assert!(LB_KEYS[0].check(Dialect::Lb, -1).is_err());
        assert!(Dialect::Lb.thresholds(&[3]).is_err(), "lb needs both settings");
    }

    #[test]
    fn tm_maps_tolerated_failures_to_unhealthy_plus_one_and_single_success_recovery() {
        for tolerated in 0..=9 {
            let t = Thresholds::tm(tolerated).unwrap();
            assert_eq!((t.healthy(), t.unhealthy()), (1, tolerated + 1));
        }
    }

    #[test]
    fn ga_uses_one_threshold_both_ways_from_two() {
        for threshold in 2..=10 {
            let t = Thresholds::ga(threshold).unwrap();
            assert_eq!((t.healthy(), t.unhealthy()), (threshold, threshold));
        }
    }

    #[test]
    fn defaults_are_three() {
        let lb = Dialect::Lb.default_thresholds();
        assert_eq!((lb.healthy(), lb.unhealthy()), (3, 3));
        assert_eq!(Thresholds::default(), lb);
        let tm = Dialect::Tm.default_thresholds();
        assert_eq!((tm.healthy(), tm.unhealthy()), (1, 4));
        let ga = Dialect::Ga.default_thresholds();
        assert_eq!((ga.healthy(), ga.unhealthy()), (3, 3));
        assert_eq!(
            Dialect::Lb.threshold_key_names(),
            "healthy_threshold and unhealthy_threshold"
        );
    }
}
