//! The one `Dialect` (lb, tm, ga): which protocols and methods a product offers, its defaults,
//! and its interval and timeout ranges, from SPEC section 2. Threshold rules are in
//! thresholds.rs.
use std::{fmt, str::FromStr, time::Duration};

use serde::Serialize;

use crate::wire_enum::wire_enum;

use super::{
    error::{Rule, RuleError},
    http::{Method, StatusRange},
};

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

wire_enum! {
    /// What a health check speaks: each kind's name, once.
    #[derive(Debug, Hash)]
    pub enum Protocol {
        Tcp = "tcp",
        Udp = "udp",
        Http = "http",
        Https = "https",
        /// gRPC health checking over HTTP/2 cleartext (prior knowledge).
        Grpc = "grpc",
        /// gRPC health checking over TLS.
        Grpcs = "grpcs",
    }
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
    pub const ALL: [Dialect; 3] = [Dialect::Lb, Dialect::Tm, Dialect::Ga];

    /// The name as written in a config file: lower case only.
    pub fn parse(s: &str) -> Option<Dialect> {
        Dialect::ALL.into_iter().find(|d| d.name() == s)
    }

    pub fn name(self) -> &'static str {
        match self {
            Dialect::Lb => "lb",
            Dialect::Tm => "tm",
            Dialect::Ga => "ga",
        }
    }

    pub fn default_interval(self) -> Duration {
        match self {
            Dialect::Lb | Dialect::Ga => secs(2),
            Dialect::Tm => secs(30),
        }
    }

    pub fn check_interval(self, d: Duration) -> Result<(), RuleError> {
        let (ok, allowed) = match self {
            Dialect::Lb => ((LB_INTERVAL.0..=LB_INTERVAL.1).contains(&d), "lb allows 100ms to 300s"),
            Dialect::Tm => (d == secs(10) || d == secs(30), "tm allows 10s or 30s"),
            Dialect::Ga => (
                whole_secs(d) && (secs(1)..=secs(50)).contains(&d),
                "ga allows whole seconds from 1s to 50s",
            ),
        };
        if ok {
            Ok(())
        } else {
            Err(RuleError::new(
                "interval",
                format!("{d:?}"),
                Rule::Timing(allowed.to_string()),
            ))
        }
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

    pub fn check_timeout(self, interval: Duration, d: Duration) -> Result<(), RuleError> {
        let allowed = match self {
            Dialect::Lb if (LB_TIMEOUT.0..=LB_TIMEOUT.1).contains(&d) => return Ok(()),
            Dialect::Lb => "lb allows 100ms to 60s".to_string(),
            Dialect::Tm => {
                let max = if interval == secs(10) { 9 } else { 10 };
                if whole_secs(d) && (secs(5)..=secs(max)).contains(&d) {
                    return Ok(());
                }
                format!(
                    "tm allows whole seconds from 5s to {max}s with interval {}s",
                    interval.as_secs()
                )
            }
            Dialect::Ga if d == secs(3) => return Ok(()),
            Dialect::Ga => "ga fixes the timeout at 3s".to_string(),
        };
        Err(RuleError::new("timeout", format!("{d:?}"), Rule::Timing(allowed)))
    }

    /// The methods an HTTP check may use; the first is the default.
    pub fn methods(self) -> &'static [Method] {
        match self {
            Dialect::Lb => &[Method::Head, Method::Get],
            Dialect::Tm | Dialect::Ga => &[Method::Get],
        }
    }

    /// Healthy status codes when none are configured: tm takes 200 alone (so 204 and redirects
    /// fail there); ga's guide names none, so it takes 2xx and 3xx like lb.
    pub fn default_status(self) -> &'static [StatusRange] {
        match self {
            Dialect::Tm => &[StatusRange::ONLY_200],
            Dialect::Lb | Dialect::Ga => &[StatusRange::CLASS_2XX, StatusRange::CLASS_3XX],
        }
    }
}

impl Method {
    /// The dialect's default method: HEAD for lb, GET for tm and ga.
    pub fn default_for(dialect: Dialect) -> Method {
        dialect.methods()[0]
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Any case, for the command line (`--dialect TM`).
impl FromStr for Dialect {
    type Err = RuleError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Dialect::parse(&s.to_ascii_lowercase()).ok_or_else(|| RuleError::new("dialect", s, Rule::Dialect))
    }
}

fn whole_secs(d: Duration) -> bool {
    d.subsec_nanos() == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in Dialect::ALL {
            assert_eq!(Dialect::parse(d.name()), Some(d));
            assert_eq!(d.name().to_uppercase().parse::<Dialect>().unwrap(), d);
        }
        assert_eq!(Dialect::parse("LB"), None, "config files spell dialects in lower case");
        assert_eq!(
            "xx".parse::<Dialect>().unwrap_err().to_string(),
            "dialect \"xx\" is not allowed: lb, tm or ga"
        );
    }

    #[test]
    fn tm_timeout_depends_on_interval() {
        assert_eq!(Dialect::Tm.default_timeout(secs(30)), secs(10));
        assert_eq!(Dialect::Tm.default_timeout(secs(10)), secs(9));
        assert!(Dialect::Tm.check_timeout(secs(30), secs(10)).is_ok());
        assert!(Dialect::Tm.check_timeout(secs(10), secs(10)).is_err());
        assert!(Dialect::Tm.check_timeout(secs(10), secs(5)).is_ok());
        let e = Dialect::Tm.check_timeout(secs(30), secs(4)).unwrap_err();
        assert_eq!(
            e.rule.to_string(),
            "tm allows whole seconds from 5s to 10s with interval 30s"
        );
        assert_eq!((e.field, e.value.as_str()), ("timeout", "4s"));
    }

    #[test]
    fn interval_rules() {
        assert!(Dialect::Lb.check_interval(millis(100)).is_ok());
        assert!(Dialect::Ga.check_interval(millis(1500)).is_err());
        assert_eq!(
            Dialect::Tm.check_interval(secs(45)).unwrap_err().to_string(),
            "interval \"45s\" is not allowed: tm allows 10s or 30s"
        );
    }

    #[test]
    fn http_defaults() {
        assert_eq!(Method::default_for(Dialect::Lb), Method::Head);
        assert_eq!(Method::default_for(Dialect::Tm), Method::Get);
        assert_eq!(Method::default_for(Dialect::Ga), Method::Get);
        assert_eq!(Dialect::Tm.default_status(), [StatusRange::ONLY_200]);
    }
}
