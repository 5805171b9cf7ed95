//! SPEC 9: an endpoint probed from several locations is healthy or not by the verdicts of all
//! its probers. Each location counts consecutive results on its own (its threshold machine
//! decides its verdict); this turns the locations' verdicts into one. Pure.
use std::fmt;

/// One location's verdict on a check, as it publishes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Up,
    Down,
    /// No verdict yet (CheckingEndpoint): counts neither way.
    Checking,
}

/// How a profile turns its locations' verdicts into the endpoint's health (`aggregate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Healthy while any location sees it up.
    Any,
    /// Healthy only while every reporting location sees it up.
    All,
    /// Healthy while at least this percentage (1-100) of the reporting locations see it up:
    /// `50%` is the traffic manager's rule (a concern only when fewer than half see it up).
    AtLeast(u8),
}

impl Rule {
    /// The traffic manager's rule, and the default.
    pub const HALF: Rule = Rule::AtLeast(50);

    /// `"any"`, `"all"` or `"N%"` with N from 1 to 100.
    pub fn parse(text: &str) -> Option<Rule> {
        match text {
            "any" => Some(Rule::Any),
            "all" => Some(Rule::All),
            _ => {
                let n: u8 = text.strip_suffix('%')?.parse().ok()?;
                (1..=100).contains(&n).then_some(Rule::AtLeast(n))
            }
        }
    }

    /// The endpoint's health from the locations' verdicts: None while none has one.
    pub fn healthy(self, verdicts: impl IntoIterator<Item = Verdict>) -> Option<bool> {
        let (mut up, mut down) = (0u32, 0u32);
        for v in verdicts {
            match v {
                Verdict::Up => up += 1,
                Verdict::Down => down += 1,
                Verdict::Checking => {}
            }
        }
        if up + down == 0 {
            return None;
        }
        Some(match self {
            Rule::Any => up > 0,
            Rule::All => down == 0,
            Rule::AtLeast(pct) => u64::from(up) * 100 >= u64::from(pct) * u64::from(up + down),
        })
    }
}

impl serde::Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Any => f.write_str("any"),
            Rule::All => f.write_str("all"),
            Rule::AtLeast(n) => write!(f, "{n}%"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Rule, Verdict::*};

    #[test]
    fn the_tm_rule_is_a_concern_only_below_half_up() {
        let r = Rule::HALF;
        assert_eq!(
            r.healthy([Up, Up, Down]),
            Some(true),
            "one location of three sees it down"
        );
        assert_eq!(r.healthy([Up, Down, Down]), Some(false), "two of three");
        assert_eq!(
            r.healthy([Up, Down]),
            Some(true),
            "exactly half up is not fewer than half"
        );
        assert_eq!(r.healthy([Down]), Some(false));
        assert_eq!(
            r.healthy([Up, Checking, Checking]),
            Some(true),
            "no verdict counts neither way"
        );
        assert_eq!(r.healthy([Checking]), None);
        assert_eq!(r.healthy([]), None);
    }

    #[test]
    fn any_all_and_other_percentages() {
        assert_eq!(Rule::Any.healthy([Down, Down, Up]), Some(true));
        assert_eq!(Rule::Any.healthy([Down, Down]), Some(false));
        assert_eq!(Rule::All.healthy([Up, Up, Down]), Some(false));
        assert_eq!(Rule::All.healthy([Up, Checking]), Some(true));
        assert_eq!(Rule::AtLeast(67).healthy([Up, Up, Down]), Some(false), "2/3 is 66.7%");
        assert_eq!(Rule::AtLeast(66).healthy([Up, Up, Down]), Some(true));
        assert_eq!(Rule::AtLeast(100).healthy([Up, Up]), Some(true));
    }

    #[test]
    fn parse_and_display_round_trip() {
        for text in ["any", "all", "1%", "50%", "100%"] {
            assert_eq!(Rule::parse(text).unwrap().to_string(), text);
        }
        for bad in ["", "0%", "101%", "50", "half", "-5%", "50 %", "ALL"] {
            assert_eq!(Rule::parse(bad), None, "{bad:?}");
        }
    }
}
