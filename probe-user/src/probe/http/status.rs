//! The set of HTTP status codes a probe counts as healthy: built from typed ranges (the resolved
//! config) or from the command line's text (`2xx,3xx`, `200-299, 301-301`, `204`).
use std::{fmt, str::FromStr};

use crate::rules::{limits::MAX_STATUS_RANGES, Dialect, Rule, RuleError, StatusRange};

/// Healthy status codes: one to `MAX_STATUS_RANGES` inclusive ranges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusSet {
    ranges: Vec<StatusRange>,
}

impl StatusSet {
    /// The dialect's default: lb and ga take every 2xx and 3xx, tm takes 200 alone.
    pub fn default_for(dialect: Dialect) -> Self {
        Self {
            ranges: dialect.default_status().to_vec(),
        }
    }

    pub fn new(ranges: Vec<StatusRange>) -> Result<Self, RuleError> {
        let shown = || ranges.iter().copied().map(show).collect::<Vec<_>>().join(", ");
        if ranges.is_empty() {
            return Err(RuleError::new("status", shown(), Rule::NoStatus));
        }
        if ranges.len() > MAX_STATUS_RANGES {
            return Err(RuleError::new("status", shown(), Rule::TooManyRanges));
        }
        Ok(Self { ranges })
    }

    /// Parses `2xx,3xx`, `200-299, 301-301`, `200` or any mix; `field` names the setting in
    /// errors (the command-line flag).
    pub fn parse(field: &'static str, text: &str) -> Result<Self, RuleError> {
        let bad = || RuleError::new(field, text, Rule::StatusList);
        let items: Vec<&str> = text.split(',').map(str::trim).collect();
        if items.len() > MAX_STATUS_RANGES {
            return Err(bad());
        }
        let ranges = items
            .into_iter()
            .map(|item| StatusRange::parse_class(item).or_else(|_| StatusRange::parse_range(item)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| bad())?;
        Self::new(ranges).map_err(|_| bad())
    }

    pub fn contains(&self, status: u16) -> bool {
        self.ranges.iter().any(|r| r.contains(status))
    }

    pub fn ranges(&self) -> &[StatusRange] {
        &self.ranges
    }
}

/// A class as `2xx`, anything else as `first-last`.
fn show(r: StatusRange) -> String {
    if r.is_class() {
        format!("{}xx", r.first() / 100)
    } else {
        format!("{}-{}", r.first(), r.last())
    }
}

impl fmt::Display for StatusSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let all: Vec<String> = self.ranges.iter().copied().map(show).collect();
        f.write_str(&all.join(", "))
    }
}

/// Parses with the field named `expect_status`.
impl FromStr for StatusSet {
    type Err = RuleError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse("expect_status", s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dialect_defaults() {
        let lb = StatusSet::default_for(Dialect::Lb);
        let tm = StatusSet::default_for(Dialect::Tm);
        let ga = StatusSet::default_for(Dialect::Ga);
        for (code, in_lb, in_tm) in [
            (200, true, true),
            (204, true, false),
            (301, true, false),
            (404, false, false),
            (503, false, false),
        ] {
            assert_eq!(lb.contains(code), in_lb, "lb {code}");
            assert_eq!(ga.contains(code), in_lb, "ga {code}");
            assert_eq!(tm.contains(code), in_tm, "tm {code}");
        }
    }

    #[test]
    fn classes_ranges_and_codes() {
        let s: StatusSet = "200-299, 301-301".parse().unwrap();
        assert!(s.contains(204) && s.contains(301) && !s.contains(302) && !s.contains(404));
        let s: StatusSet = "2XX,404".parse().unwrap();
        assert!(s.contains(299) && s.contains(404) && !s.contains(405));
        assert_eq!(s.to_string(), "2xx, 404-404");
        let eight = ["200"; 8].join(",");
        assert!(StatusSet::parse("expect_status", &eight).is_ok());
    }

    #[test]
    fn typed_ranges_are_counted() {
        assert!(StatusSet::new(vec![StatusRange::CLASS_2XX]).is_ok());
        assert_eq!(StatusSet::new(Vec::new()).unwrap_err().rule, Rule::NoStatus);
        let nine = vec![StatusRange::ONLY_200; 9];
        assert_eq!(StatusSet::new(nine).unwrap_err().rule, Rule::TooManyRanges);
    }

    #[test]
    fn bad_forms_name_field_and_value() {
        for bad in [
            "",
            "2xx,",
            "6xx",
            "0xx",
            "22xx",
            "abc",
            "99",
            "600",
            "299-200",
            "200-",
            "-200",
            "200-299-300",
            "+200",
            "200,201,202,203,204,205,206,207,208",
        ] {
            let err = StatusSet::parse("expect_status", bad).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains("expect_status"), "{bad:?}: {msg}");
            assert!(msg.contains(&format!("{bad:?}")), "{bad:?}: {msg}");
            assert!(msg.contains("at most 8"), "{bad:?}: {msg}");
        }
    }
}
