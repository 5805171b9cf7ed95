//! Typed values of an HTTP(S) check: method, path, host, headers and healthy status ranges.
//! Each is built only through the check that makes it valid, so whoever holds one (the resolved
//! config, the prober) never checks it again.
use std::{fmt, net::IpAddr, str::FromStr};

use serde::Serialize;

use super::{
    error::{Rule, RuleError},
    limits::{
        MAX_HEADERS, MAX_HOST_LEN, MAX_LABEL_LEN, MAX_PATH_LEN, PATH_CHARS, RESERVED_HEADERS, STATUS_CODES,
        TOKEN_PUNCTUATION,
    },
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    Head,
    Get,
}

impl Method {
    pub const ALL: [Method; 2] = [Method::Head, Method::Get];

    pub fn name(self) -> &'static str {
        match self {
            Method::Head => "HEAD",
            Method::Get => "GET",
        }
    }
}

impl FromStr for Method {
    type Err = RuleError;
    /// Case-insensitive, as both the config and the command line have always taken it.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Method::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| RuleError::new("method", s, Rule::Method))
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A request path (ga's rule): 1 to 80 characters, a leading `/`, then letters, digits and
/// `PATH_CHARS`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct HttpPath(String);

impl HttpPath {
    /// `/`, the default of every dialect.
    pub fn root() -> Self {
        Self("/".to_string())
    }

    pub fn parse(path: &str) -> Result<Self, RuleError> {
        let bad = |rule| Err(RuleError::new("path", path, rule));
        if !(1..=MAX_PATH_LEN).contains(&path.chars().count()) || !path.starts_with('/') {
            return bad(Rule::PathShape);
        }
        if let Some(c) = path
            .chars()
            .find(|c| !c.is_ascii_alphanumeric() && !PATH_CHARS.contains(*c))
        {
            return bad(Rule::PathChar(c));
        }
        Ok(Self(path.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HttpPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a check sends as Host (and uses as the TLS name): a DNS name or an IP address, with an
/// optional `:port`; never a wildcard.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct HostName(String);

impl HostName {
    pub fn parse(host: &str) -> Result<Self, RuleError> {
        let bad = |rule| Err(RuleError::new("host", host, rule));
        if host.contains('*') {
            return bad(Rule::HostWildcard);
        }
        // A bare IPv6 address holds colons that are not a port separator.
        if host.parse::<IpAddr>().is_ok() {
            return Ok(Self(host.to_string()));
        }
        let name = if let Some(rest) = host.strip_prefix('[') {
            match rest.split_once(']') {
                Some((v6, port)) if v6.parse::<std::net::Ipv6Addr>().is_ok() && is_port_suffix(port, true) => {
                    return Ok(Self(host.to_string()));
                }
                _ => return bad(Rule::HostName),
            }
        } else {
            match host.rsplit_once(':') {
                Some((name, port)) if is_port_suffix(&format!(":{port}"), false) => name,
                _ => host,
            }
        };
        if name.parse::<std::net::Ipv4Addr>().is_ok() || is_dns_name(name) {
            Ok(Self(host.to_string()))
        } else {
            bad(Rule::HostName)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `":8080"` (or nothing, when `empty_ok`).
fn is_port_suffix(s: &str, empty_ok: bool) -> bool {
    match s.strip_prefix(':') {
        None => empty_ok && s.is_empty(),
        Some(p) => !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok_and(|p| p > 0),
    }
}

/// Labels of letters, digits and inner `-`, joined by dots, with an optional final dot.
pub fn is_dns_name(name: &str) -> bool {
    let label_ok = |l: &str| {
        (1..=MAX_LABEL_LEN).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    (1..=MAX_HOST_LEN).contains(&name.len()) && name.strip_suffix('.').unwrap_or(name).split('.').all(label_ok)
}

/// One custom header: an HTTP token name that the prober does not set itself, and a non-empty
/// value of visible ASCII and spaces; a Host value holds no `*`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Header {
    name: String,
    value: String,
}

impl Header {
    /// `name:value`, spaces around either part ignored.
    pub fn parse(pair: &str) -> Result<Self, RuleError> {
        let Some((name, value)) = pair.split_once(':') else {
            return Err(RuleError::new("header", pair, Rule::HeaderPair));
        };
        Self::new(name.trim(), value.trim()).map_err(|e| RuleError {
            value: pair.to_string(),
            ..e
        })
    }

    pub fn new(name: &str, value: &str) -> Result<Self, RuleError> {
        let bad = |rule| Err(RuleError::new("header", format!("{name}:{value}"), rule));
        let token = |b: u8| b.is_ascii_alphanumeric() || TOKEN_PUNCTUATION.as_bytes().contains(&b);
        if name.is_empty() || !name.bytes().all(token) {
            return bad(Rule::HeaderName);
        }
        if RESERVED_HEADERS.iter().any(|r| r.eq_ignore_ascii_case(name)) {
            return bad(Rule::HeaderReserved {
                name: name.to_ascii_lowercase(),
            });
        }
        let visible = |b: u8| b == b' ' || b == b'\t' || (0x21..0x7f).contains(&b);
        if value.is_empty() || !value.bytes().all(visible) {
            return bad(Rule::HeaderValue);
        }
        if name.eq_ignore_ascii_case("host") && value.contains('*') {
            return bad(Rule::HostHeaderWildcard);
        }
        Ok(Self {
            name: name.to_string(),
            value: value.to_string(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn value(&self) -> &str {
        &self.value
    }

    /// Header names compare without regard to case.
    pub fn same_name(&self, other: &str) -> bool {
        self.name.eq_ignore_ascii_case(other)
    }

    pub fn is_host(&self) -> bool {
        self.same_name("host")
    }
}

impl fmt::Display for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.name, self.value)
    }
}

/// The rules for one level of headers (a profile's or an endpoint's): at most `MAX_HEADERS`,
/// each name once.
pub fn check_header_level(headers: &[Header]) -> Result<(), RuleError> {
    let shown = || headers.iter().map(Header::to_string).collect::<Vec<_>>().join(", ");
    if headers.len() > MAX_HEADERS {
        return Err(RuleError::new("headers", shown(), Rule::TooManyHeaders));
    }
    for (i, h) in headers.iter().enumerate() {
        if headers[..i].iter().any(|earlier| earlier.same_name(&h.name)) {
            let name = h.name.clone();
            return Err(RuleError::new("headers", shown(), Rule::HeaderTwice { name }));
        }
    }
    Ok(())
}

/// An inclusive range of healthy status codes within 100-599.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct StatusRange {
    first: u16,
    last: u16,
}

impl StatusRange {
    pub const ONLY_200: StatusRange = StatusRange { first: 200, last: 200 };
    pub const CLASS_2XX: StatusRange = StatusRange { first: 200, last: 299 };
    pub const CLASS_3XX: StatusRange = StatusRange { first: 300, last: 399 };

    pub fn new(first: u16, last: u16) -> Result<Self, RuleError> {
        let (lo, hi) = STATUS_CODES;
        if lo <= first && first <= last && last <= hi {
            Ok(Self { first, last })
        } else {
            Err(RuleError::new("status", format!("{first}-{last}"), Rule::StatusRange))
        }
    }

    /// `"200-299"`, or one code `"200"`; codes are three digits.
    pub fn parse_range(s: &str) -> Result<Self, RuleError> {
        let bad = || RuleError::new("status", s, Rule::StatusRange);
        let (a, b) = s.split_once('-').unwrap_or((s, s));
        let code = |c: &str| {
            let c = c.trim();
            (c.len() == 3 && c.bytes().all(|b| b.is_ascii_digit()))
                .then(|| c.parse::<u16>().ok())
                .flatten()
        };
        let (first, last) = (code(a).ok_or_else(bad)?, code(b).ok_or_else(bad)?);
        Self::new(first, last).map_err(|_| bad())
    }

    /// A class `"2xx"` (any case), 1xx to 5xx.
    pub fn parse_class(s: &str) -> Result<Self, RuleError> {
        let digit = match s.as_bytes() {
            [d @ b'1'..=b'5', x, y] if x.eq_ignore_ascii_case(&b'x') && y.eq_ignore_ascii_case(&b'x') => d - b'0',
            _ => return Err(RuleError::new("status", s, Rule::StatusClass)),
        };
        let first = u16::from(digit) * 100;
        Ok(Self {
            first,
            last: first + 99,
        })
    }

    pub fn first(&self) -> u16 {
        self.first
    }

    pub fn last(&self) -> u16 {
        self.last
    }

    pub fn contains(&self, code: u16) -> bool {
        (self.first..=self.last).contains(&code)
    }

    /// A whole class such as 2xx.
    pub fn is_class(&self) -> bool {
        self.first.is_multiple_of(100) && self.last == self.first + 99
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        for good in [
            "/",
            "/health",
            "/a-b_c.d?x&y%20#frag",
            "/~!()*[]@$^:',+;",
            &"/".repeat(80),
        ] {
            assert_eq!(HttpPath::parse(good).unwrap().as_str(), good);
        }
        for (bad, rule) in [
            ("", Rule::PathShape),
            ("health", Rule::PathShape),
            (&"/".repeat(81), Rule::PathShape),
            ("/a b", Rule::PathChar(' ')),
            ("/é", Rule::PathChar('é')),
            ("/a\"b", Rule::PathChar('"')),
            ("/a{b}", Rule::PathChar('{')),
            ("/a|b", Rule::PathChar('|')),
            ("/a\\b", Rule::PathChar('\\')),
            ("/a=b", Rule::PathChar('=')),
        ] {
            let e = HttpPath::parse(bad).unwrap_err();
            assert_eq!((e.field, e.value.as_str(), &e.rule), ("path", bad, &rule));
        }
        assert_eq!(
            HttpPath::parse("/a b").unwrap_err().to_string(),
            "path \"/a b\" is not allowed: ' ' is not allowed; use letters, digits and \
             - / . % ? # & _ ; ~ ! ( ) * [ ] @ $ ^ : ' , +"
        );
    }

    #[test]
    fn hosts() {
        for good in [
            "www.example.com",
            "www.example.com.",
            "a.example.com:8080",
            "localhost",
            "198.18.0.2",
            "198.18.0.2:8080",
            "2001:2::2",
            "[2001:2::2]",
            "[2001:2::2]:8443",
            &format!("{}.com", "a".repeat(63)),
        ] {
            assert_eq!(HostName::parse(good).unwrap().as_str(), good);
        }
        assert_eq!(HostName::parse("*.example.com").unwrap_err().rule, Rule::HostWildcard);
        for bad in [
            "",
            "-a.example.com",
            "a-.example.com",
            "a..example.com",
            "a_b.example.com",
            "a.example.com:0",
            "a.example.com:x",
            "a.example.com:70000",
            "[2001:2::2",
            "[198.18.0.2]",
            "[2001:2::2]8443",
            &format!("{}.com", "a".repeat(64)),
            &format!("{}a", "a.".repeat(127)),
        ] {
            assert_eq!(HostName::parse(bad).unwrap_err().rule, Rule::HostName, "{bad:?}");
        }
    }

    #[test]
    fn headers() {
        let h = Header::parse(" X-Probe : probed 1 ").unwrap();
        assert_eq!((h.name(), h.value()), ("X-Probe", "probed 1"));
        assert!(Header::parse("host: a.example.com").unwrap().is_host());
        for (pair, rule) in [
            ("no-colon", Rule::HeaderPair),
            ("Bad Name: x", Rule::HeaderName),
            (": x", Rule::HeaderName),
            ("X-Empty:", Rule::HeaderValue),
            ("X-Ctl: a\u{7}b", Rule::HeaderValue),
            ("X-Utf8: é", Rule::HeaderValue),
            ("Host: *.example.test", Rule::HostHeaderWildcard),
            (
                "Content-Length: 5",
                Rule::HeaderReserved {
                    name: "content-length".into(),
                },
            ),
            ("TE: trailers", Rule::HeaderReserved { name: "te".into() }),
        ] {
            let e = Header::parse(pair).unwrap_err();
            assert_eq!((e.value.as_str(), &e.rule), (pair, &rule));
        }
        let level = |pairs: &[&str]| -> Vec<Header> { pairs.iter().map(|p| Header::parse(p).unwrap()).collect() };
        assert!(check_header_level(&level(&["X-A: 1", "X-B: 2"])).is_ok());
        assert_eq!(
            check_header_level(&level(&["X-A: 1", "x-a: 2"])).unwrap_err().rule,
            Rule::HeaderTwice { name: "x-a".into() }
        );
        let nine: Vec<String> = (0..9).map(|i| format!("X-{i}: v")).collect();
        let nine: Vec<&str> = nine.iter().map(String::as_str).collect();
        assert_eq!(
            check_header_level(&level(&nine)).unwrap_err().rule,
            Rule::TooManyHeaders
        );
    }

    #[test]
    fn status_ranges_and_classes() {
        assert_eq!(StatusRange::parse_range("200-299").unwrap(), StatusRange::CLASS_2XX);
        assert_eq!(StatusRange::parse_range(" 200 ").unwrap(), StatusRange::ONLY_200);
        assert_eq!(StatusRange::parse_class("3XX").unwrap(), StatusRange::CLASS_3XX);
        assert!(StatusRange::parse_class("1xx").unwrap().contains(101));
        for bad in [
            "",
            "99",
            "600",
            "299-200",
            "200-",
            "-200",
            "+200",
            "0200",
            "200-299-300",
            "2xx",
        ] {
            assert_eq!(
                StatusRange::parse_range(bad).unwrap_err().rule,
                Rule::StatusRange,
                "{bad:?}"
            );
        }
        for bad in ["0xx", "6xx", "22xx", "2x", "200"] {
            assert_eq!(
                StatusRange::parse_class(bad).unwrap_err().rule,
                Rule::StatusClass,
                "{bad:?}"
            );
        }
        assert!(StatusRange::new(100, 599).is_ok());
        assert!(StatusRange::new(99, 200).is_err() && StatusRange::new(300, 200).is_err());
        assert!(StatusRange::CLASS_2XX.is_class() && !StatusRange::ONLY_200.is_class());
    }

    #[test]
    fn methods() {
        assert_eq!("get".parse::<Method>().unwrap(), Method::Get);
        assert_eq!(
            "POST".parse::<Method>().unwrap_err().to_string(),
            "method \"POST\" is not allowed: HEAD or GET"
        );
    }
}
