//! The set of HTTP status codes a probe counts as healthy: classes (`2xx`) and inclusive
//! ranges (`200-299, 301-301`), as the lb and tm dialects write them.
use std::{fmt, ops::RangeInclusive, str::FromStr};

use super::request::{Dialect, HttpCheckError};

/// tm allows at most 8 ranges; classes count as one range each.
pub const MAX_STATUS_RANGES: usize = 8;
const ALLOWED: &str = "a comma-separated list of at most 8 items, each a class 1xx-5xx, a code 100-599 \
                       or a range A-B with 100 <= A <= B <= 599";

/// Healthy status codes: a short list of inclusive ranges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusSet {
    ranges: Vec<RangeInclusive<u16>>,
}

impl StatusSet {
    /// The dialect's default: lb takes every 2xx and 3xx, tm takes 200 alone (so 204 and
    /// redirects fail there).
    pub fn default_for(dialect: Dialect) -> Self {
        match dialect {
            Dialect::Lb => Self {
                ranges: vec![200..=299, 300..=399],
            },
            Dialect::Tm => Self {
                ranges: vec![200..=200],
            },
        }
    }

    /// Parses `2xx,3xx`, `200-299, 301-301`, `200` or any mix; `field` names the setting in
    /// errors (the config key or the CLI flag).
    pub fn parse(field: &'static str, text: &str) -> Result<Self, HttpCheckError> {
        let bad = || HttpCheckError::invalid(field, text, ALLOWED);
        let items: Vec<&str> = text.split(',').map(str::trim).collect();
        if items.len() > MAX_STATUS_RANGES || items.iter().any(|i| i.is_empty()) {
            return Err(bad());
        }
        let mut ranges = Vec::with_capacity(items.len());
        for item in items {
            let lower = item.to_ascii_lowercase();
            let range = if let Some(class) = lower.strip_suffix("xx") {
                let digit: u16 = class.parse().map_err(|_| bad())?;
                if !(1..=5).contains(&digit) || class.len() != 1 {
                    return Err(bad());
                }
                digit * 100..=digit * 100 + 99
            } else if let Some((a, b)) = lower.split_once('-') {
                let a = code(a.trim()).ok_or_else(bad)?;
                let b = code(b.trim()).ok_or_else(bad)?;
                if a > b {
                    return Err(bad());
                }
                a..=b
            } else {
                let c = code(&lower).ok_or_else(bad)?;
                c..=c
            };
            ranges.push(range);
        }
        Ok(Self { ranges })
    }

    pub fn contains(&self, status: u16) -> bool {
        self.ranges.iter().any(|r| r.contains(&status))
    }

    pub fn ranges(&self) -> &[RangeInclusive<u16>] {
        &self.ranges
    }
}

fn code(s: &str) -> Option<u16> {
    if s.len() != 3 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().filter(|c| (100..=599).contains(c))
}

impl fmt::Display for StatusSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            if r.start() % 100 == 0 && *r.end() == r.start() + 99 {
                write!(f, "{}xx", r.start() / 100)?;
            } else {
                write!(f, "{}-{}", r.start(), r.end())?;
            }
        }
        Ok(())
    }
}

/// Parses with the field named `expect_status`.
impl FromStr for StatusSet {
    type Err = HttpCheckError;
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
        for (code, in_lb, in_tm) in [
            (200, true, true),
            (204, true, false),
            (301, true, false),
            (404, false, false),
            (503, false, false),
        ] {
            assert_eq!(lb.contains(code), in_lb, "lb {code}");
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
