//! Dialect presets: defaults and allowed ranges per dialect, from SPEC.md section 2. Each rule
//! returns the sentence an operator reads when the value is out of range.
use std::time::Duration;

use serde::Serialize;

use super::model::{HttpMethod, Protocol, StatusRange};

/// The product whose health-check rules a profile follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// The load balancer (seeds 000, 002).
    Lb,
    /// The DNS traffic manager (seed 001).
    Tm,
    /// The global accelerator (seed 003).
    Ga,
}

const fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

const fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// lb gives examples, not limits; these bounds are ours. Sub-second values are allowed so tests
/// and demos can run time-scaled.
const LB_INTERVAL: (Duration, Duration) = (millis(100), secs(300));
const LB_TIMEOUT: (Duration, Duration) = (millis(100), secs(60));

impl Dialect {
    pub fn parse(s: &str) -> Option<Dialect> {
        match s {
            "lb" => Some(Dialect::Lb),
            "tm" => Some(Dialect::Tm),
            "ga" => Some(Dialect::Ga),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dialect::Lb => "lb",
            Dialect::Tm => "tm",
            Dialect::Ga => "ga",
        }
    }

    pub fn protocols(self) -> &'static [Protocol] {
        match self {
            Dialect::Lb => &Protocol::ALL,
            Dialect::Tm | Dialect::Ga => &[Protocol::Tcp, Protocol::Http, Protocol::Https],
        }
    }

    pub fn default_interval(self) -> Duration {
        match self {
            Dialect::Lb | Dialect::Ga => secs(2),
            Dialect::Tm => secs(30),
        }
    }

    pub fn check_interval(self, d: Duration) -> Result<(), String> {
        let ok = match self {
            Dialect::Lb => (LB_INTERVAL.0..=LB_INTERVAL.1).contains(&d),
            Dialect::Tm => d == secs(10) || d == secs(30),
            Dialect::Ga => whole_secs(d) && (secs(1)..=secs(50)).contains(&d),
        };
        ok.then_some(()).ok_or_else(|| match self {
            Dialect::Lb => "lb allows 100ms to 300s".to_string(),
            Dialect::Tm => "tm allows 10s or 30s".to_string(),
            Dialect::Ga => "ga allows whole seconds from 1s to 50s".to_string(),
        })
    }

    /// Default timeout; tm's depends on the interval (which must already be valid).
    pub fn default_timeout(self, interval: Duration) -> Duration {
        match self {
            Dialect::Lb => secs(5),
            Dialect::Tm if interval == secs(10) => secs(9),
            Dialect::Tm => secs(10),
            Dialect::Ga => secs(3),
        }
    }

    pub fn check_timeout(self, interval: Duration, d: Duration) -> Result<(), String> {
        match self {
            Dialect::Lb if (LB_TIMEOUT.0..=LB_TIMEOUT.1).contains(&d) => Ok(()),
            Dialect::Lb => Err("lb allows 100ms to 60s".to_string()),
            Dialect::Tm => {
                let max = if interval == secs(10) { 9 } else { 10 };
                if whole_secs(d) && (secs(5)..=secs(max)).contains(&d) {
                    Ok(())
                } else {
                    Err(format!(
                        "tm allows whole seconds from 5s to {max}s with interval {}s",
                        interval.as_secs()
                    ))
                }
            }
            Dialect::Ga if d == secs(3) => Ok(()),
            Dialect::Ga => Err("ga fixes the timeout at 3s".to_string()),
        }
    }

    pub fn methods(self) -> &'static [HttpMethod] {
        match self {
            Dialect::Lb => &[HttpMethod::Head, HttpMethod::Get],
            Dialect::Tm | Dialect::Ga => &[HttpMethod::Get],
        }
    }

    pub fn default_method(self) -> HttpMethod {
        self.methods()[0]
    }

    /// Healthy status codes when none are configured. ga's guide names none; we take 2xx and
    /// 3xx like lb.
    pub fn default_status(self) -> Vec<StatusRange> {
        match self {
            Dialect::Tm => vec![StatusRange { first: 200, last: 200 }],
            Dialect::Lb | Dialect::Ga => vec![
                StatusRange { first: 200, last: 299 },
                StatusRange { first: 300, last: 399 },
            ],
        }
    }

    /// The threshold keys this dialect reads, for "use X instead" hints.
    pub fn threshold_keys(self) -> &'static str {
        match self {
            Dialect::Lb => "healthy_threshold and unhealthy_threshold",
            Dialect::Tm => "tolerated_failures",
            Dialect::Ga => "threshold",
        }
    }
}

fn whole_secs(d: Duration) -> bool {
    d.subsec_nanos() == 0
}

/// Parses `"500ms"` or `"2s"`. Whole numbers only: fractions invite rounding surprises.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let (digits, scale) = if let Some(d) = s.strip_suffix("ms") {
        (d, 1)
    } else if let Some(d) = s.strip_suffix('s') {
        (d, 1000)
    } else {
        return None;
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(Duration::from_millis(n.checked_mul(scale)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2s"), Some(secs(2)));
        assert_eq!(parse_duration("500ms"), Some(millis(500)));
        assert_eq!(parse_duration("0ms"), Some(Duration::ZERO));
        for bad in ["", "s", "2", "2 s", "1.5s", "-1s", "2m", "ms"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn tm_timeout_depends_on_interval() {
        assert_eq!(Dialect::Tm.default_timeout(secs(30)), secs(10));
        assert_eq!(Dialect::Tm.default_timeout(secs(10)), secs(9));
        assert!(Dialect::Tm.check_timeout(secs(30), secs(10)).is_ok());
        assert!(Dialect::Tm.check_timeout(secs(10), secs(10)).is_err());
        assert!(Dialect::Tm.check_timeout(secs(10), secs(5)).is_ok());
        assert!(Dialect::Tm.check_timeout(secs(30), secs(4)).is_err());
    }
}
