//! What one HTTP(S) check sends and expects: the validated `HttpCheck`, built from the
//! operator's textual settings, and the rules that reject a bad setting before it is used.
use std::{fmt, net::SocketAddr, str::FromStr, time::Duration};

use hyper::header::{HeaderName, HeaderValue};

use super::{status::StatusSet, tls::TlsVerify};

/// Both header levels hold at most this many pairs (tm).
pub const MAX_HEADERS: usize = 8;
/// SPEC: a path is 1-80 characters.
pub const MAX_PATH_LEN: usize = 80;
/// How much of a body a GET reads, by default, looking for `expect_body`.
pub const DEFAULT_BODY_LIMIT: usize = 64 * 1024;
/// The most a check may read; a health check is not a download.
pub const MAX_BODY_LIMIT: usize = 1024 * 1024;
/// The longest accepted timeout; longer than any dialect allows, short enough to catch typos.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);
const PATH_PUNCTUATION: &str = "-/.%?#&_;~!()*[]@$^:',+";
/// Headers the prober sets itself: a custom value would break framing or the close policy.
const RESERVED_HEADERS: [&str; 5] = ["content-length", "transfer-encoding", "connection", "upgrade", "te"];

/// A configuration value that is not allowed: names the field, the value and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpCheckError {
    #[error("{field} {value:?} is not allowed: {allowed}")]
    Invalid {
        field: &'static str,
        value: String,
        allowed: String,
    },
    #[error("{field} {path:?}: {reason}")]
    Roots {
        field: &'static str,
        path: String,
        reason: String,
    },
}

impl HttpCheckError {
    pub(crate) fn invalid(field: &'static str, value: impl Into<String>, allowed: impl Into<String>) -> Self {
        Self::Invalid {
            field,
            value: value.into(),
            allowed: allowed.into(),
        }
    }
}

/// Which product's rules fill in the defaults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Dialect {
    /// The load balancer: HEAD, healthy = 2xx and 3xx.
    #[default]
    Lb,
    /// The traffic manager: GET, healthy = 200 only.
    Tm,
}

impl FromStr for Dialect {
    type Err = HttpCheckError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "lb" => Ok(Self::Lb),
            "tm" => Ok(Self::Tm),
            _ => Err(HttpCheckError::invalid("dialect", s, "lb or tm")),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn default_port(self) -> u16 {
        match self {
            Self::Http => 80,
            Self::Https => 443,
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Http => "http",
            Self::Https => "https",
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Head,
    Get,
}

impl Method {
    pub fn default_for(dialect: Dialect) -> Self {
        match dialect {
            Dialect::Lb => Self::Head,
            Dialect::Tm => Self::Get,
        }
    }

    pub(crate) fn as_hyper(self) -> hyper::Method {
        match self {
            Self::Head => hyper::Method::HEAD,
            Self::Get => hyper::Method::GET,
        }
    }
}

impl FromStr for Method {
    type Err = HttpCheckError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_uppercase().as_str() {
            "HEAD" => Ok(Self::Head),
            "GET" => Ok(Self::Get),
            _ => Err(HttpCheckError::invalid("method", s, "HEAD or GET")),
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_hyper().as_str())
    }
}

/// The operator's settings for one check, as written in a profile or on the command line.
/// `HttpCheck::new` validates them; `None` means the dialect's default.
#[derive(Clone, Debug)]
pub struct HttpCheckSpec {
    pub scheme: Scheme,
    pub dialect: Dialect,
    pub method: Option<String>,
    pub path: Option<String>,
    /// Sent as the Host header (and used as SNI) instead of the target IP.
    pub domain: Option<String>,
    /// `name:value` pairs from the profile.
    pub profile_headers: Vec<String>,
    /// `name:value` pairs from the endpoint; they replace profile headers of the same name.
    pub endpoint_headers: Vec<String>,
    pub expect_status: Option<String>,
    /// A substring the body must contain (GET only).
    pub expect_body: Option<String>,
    pub body_limit: Option<usize>,
    pub timeout: Duration,
    pub tls: TlsVerify,
}

impl HttpCheckSpec {
    pub fn new(scheme: Scheme, dialect: Dialect, timeout: Duration) -> Self {
        Self {
            scheme,
            dialect,
            method: None,
            path: None,
            domain: None,
            profile_headers: Vec::new(),
            endpoint_headers: Vec::new(),
            expect_status: None,
            expect_body: None,
            body_limit: None,
            timeout,
            tls: TlsVerify::Presented,
        }
    }
}

/// A validated HTTP(S) check: nothing in it can fail at probe time except the network.
#[derive(Clone, Debug)]
pub struct HttpCheck {
    scheme: Scheme,
    method: Method,
    path: String,
    domain: Option<String>,
    /// Merged headers, endpoint over profile; a custom Host is kept apart.
    headers: Vec<(HeaderName, HeaderValue)>,
    host_override: Option<String>,
    status: StatusSet,
    expect_body: Option<Vec<u8>>,
    body_limit: usize,
    timeout: Duration,
    tls: TlsVerify,
}

impl HttpCheck {
    pub fn new(spec: &HttpCheckSpec) -> Result<Self, HttpCheckError> {
        let method = match &spec.method {
            Some(m) => m.parse()?,
            None => Method::default_for(spec.dialect),
        };
        let path = match &spec.path {
            Some(p) => validate_path(p)?.to_string(),
            None => "/".to_string(),
        };
        let domain = spec.domain.as_deref().map(validate_domain).transpose()?;
        let profile = parse_headers("profile_headers", &spec.profile_headers)?;
        let endpoint = parse_headers("endpoint_headers", &spec.endpoint_headers)?;
        let mut headers = profile;
        for (name, value) in endpoint {
            headers.retain(|(n, _)| *n != name);
            headers.push((name, value));
        }
        let mut host_override = None;
        headers.retain(|(n, v)| {
            if *n == hyper::header::HOST {
                // Validated as visible ASCII by parse_headers.
                host_override = Some(v.to_str().unwrap_or_default().to_string());
                false
            } else {
                true
            }
        });
        let status = match &spec.expect_status {
            Some(s) => StatusSet::parse("expect_status", s)?,
            None => StatusSet::default_for(spec.dialect),
        };
        let body_limit = spec.body_limit.unwrap_or(DEFAULT_BODY_LIMIT);
        if body_limit == 0 || body_limit > MAX_BODY_LIMIT {
            return Err(HttpCheckError::invalid(
                "body_limit",
                body_limit.to_string(),
                format!("1-{MAX_BODY_LIMIT} bytes"),
            ));
        }
        let expect_body = match &spec.expect_body {
            None => None,
            Some(b) if method != Method::Get => {
                return Err(HttpCheckError::invalid(
                    "expect_body",
                    b,
                    "only with method GET (HEAD has no body)",
                ))
            }
            Some(b) if b.is_empty() || b.len() > body_limit => {
                return Err(HttpCheckError::invalid(
                    "expect_body",
                    b,
                    format!("1 to body_limit ({body_limit}) bytes"),
                ))
            }
            Some(b) => Some(b.as_bytes().to_vec()),
        };
        if spec.timeout.is_zero() || spec.timeout > MAX_TIMEOUT {
            return Err(HttpCheckError::invalid(
                "timeout",
                format!("{:?}", spec.timeout),
                format!("more than 0 and at most {}s", MAX_TIMEOUT.as_secs()),
            ));
        }
        Ok(Self {
            scheme: spec.scheme,
            method,
            path,
            domain,
            headers,
            host_override,
            status,
            expect_body,
            body_limit,
            timeout: spec.timeout,
            tls: spec.tls.clone(),
        })
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }
    pub fn method(&self) -> Method {
        self.method
    }
    pub fn path(&self) -> &str {
        &self.path
    }
    pub fn status(&self) -> &StatusSet {
        &self.status
    }
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
    pub fn expect_body(&self) -> Option<&[u8]> {
        self.expect_body.as_deref()
    }
    pub fn body_limit(&self) -> usize {
        self.body_limit
    }
    pub fn tls(&self) -> &TlsVerify {
        &self.tls
    }
    /// Custom headers other than Host, endpoint values winning.
    pub fn headers(&self) -> &[(HeaderName, HeaderValue)] {
        &self.headers
    }

    /// The Host header for `target`: a custom Host header, else the domain, else the target
    /// IP with `:port` when the port is not the scheme's default (IPv6 in brackets).
    pub fn host_header(&self, target: SocketAddr) -> String {
        if let Some(h) = self.host_override.as_ref().or(self.domain.as_ref()) {
            return h.clone();
        }
        let ip = match target {
            SocketAddr::V4(a) => a.ip().to_string(),
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
        };
        if target.port() == self.scheme.default_port() {
            ip
        } else {
            format!("{ip}:{}", target.port())
        }
    }

    /// The TLS server name: the host part of the Host header when it is a DNS name, else the
    /// target IP (which rustls never sends as SNI, but strict mode checks it against the
    /// certificate's IP addresses).
    pub fn server_name(&self, target: SocketAddr) -> rustls_pki_types::ServerName<'static> {
        let named = self.host_override.as_ref().or(self.domain.as_ref()).and_then(|h| {
            let host = host_part(h);
            if host.parse::<std::net::IpAddr>().is_ok() {
                return None;
            }
            rustls_pki_types::DnsName::try_from(host.to_string()).ok()
        });
        match named {
            Some(n) => rustls_pki_types::ServerName::DnsName(n),
            None => rustls_pki_types::ServerName::IpAddress(target.ip().into()),
        }
    }
}

/// `name`, `name:port`, `[v6]` or `[v6]:port` without the port and brackets.
fn host_part(h: &str) -> &str {
    if let Some(rest) = h.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match h.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !host.contains(':') => host,
        _ => h,
    }
}

/// SPEC (ga): 1-80 characters, a leading `/`, letters, digits and a fixed punctuation set.
pub fn validate_path(path: &str) -> Result<&str, HttpCheckError> {
    let ok = (1..=MAX_PATH_LEN).contains(&path.len())
        && path.starts_with('/')
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || PATH_PUNCTUATION.contains(c))
        // Belt and braces: the request line is built from it.
        && path.parse::<hyper::Uri>().is_ok();
    if ok {
        Ok(path)
    } else {
        Err(HttpCheckError::invalid(
            "path",
            path,
            format!("1-{MAX_PATH_LEN} characters starting with '/', letters, digits and {PATH_PUNCTUATION}"),
        ))
    }
}

/// A DNS name (labels of letters, digits and `-`) or an IP literal, 1-253 characters.
fn validate_domain(d: &str) -> Result<String, HttpCheckError> {
    let allowed = "a DNS name (letters, digits, '-' and '.', at most 253 characters) or an IP address; no '*'";
    let is_ip = d.parse::<std::net::IpAddr>().is_ok();
    let is_name = (1..=253).contains(&d.len())
        && d.trim_end_matches('.').split('.').all(|l| {
            (1..=63).contains(&l.len())
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    if is_ip || is_name {
        Ok(d.to_string())
    } else {
        Err(HttpCheckError::invalid("domain", d, allowed))
    }
}

/// Parses up to `MAX_HEADERS` `name:value` pairs of one level.
fn parse_headers(field: &'static str, pairs: &[String]) -> Result<Vec<(HeaderName, HeaderValue)>, HttpCheckError> {
    if pairs.len() > MAX_HEADERS {
        return Err(HttpCheckError::invalid(
            field,
            pairs.join(", "),
            format!("at most {MAX_HEADERS} name:value pairs"),
        ));
    }
    let mut out: Vec<(HeaderName, HeaderValue)> = Vec::with_capacity(pairs.len());
    for pair in pairs {
        let (name, value) = parse_header(field, pair)?;
        if out.iter().any(|(n, _)| *n == name) {
            return Err(HttpCheckError::invalid(field, pair, "each header name once per level"));
        }
        out.push((name, value));
    }
    Ok(out)
}

/// One `name:value` pair: a token name (not one the prober sets itself) and a value of
/// visible ASCII and spaces; a Host value may not contain `*`.
pub fn parse_header(field: &'static str, pair: &str) -> Result<(HeaderName, HeaderValue), HttpCheckError> {
    let Some((name, value)) = pair.split_once(':') else {
        return Err(HttpCheckError::invalid(field, pair, "name:value"));
    };
    let (name, value) = (name.trim(), value.trim());
    let name = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| HttpCheckError::invalid(field, pair, "a header name made of token characters"))?;
    if RESERVED_HEADERS.contains(&name.as_str()) {
        return Err(HttpCheckError::invalid(
            field,
            pair,
            format!(
                "any header except {} (the prober sets them)",
                RESERVED_HEADERS.join(", ")
            ),
        ));
    }
    let visible = value
        .bytes()
        .all(|b| b == b' ' || b == b'\t' || (0x21..0x7f).contains(&b));
    if value.is_empty() || !visible {
        return Err(HttpCheckError::invalid(
            field,
            pair,
            "a non-empty value of visible ASCII characters and spaces",
        ));
    }
    if name == hyper::header::HOST && value.contains('*') {
        return Err(HttpCheckError::invalid(field, pair, "a Host value without '*'"));
    }
    let value =
        HeaderValue::from_str(value).map_err(|_| HttpCheckError::invalid(field, pair, "a valid header value"))?;
    Ok((name, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> HttpCheckSpec {
        HttpCheckSpec::new(Scheme::Http, Dialect::Lb, Duration::from_secs(5))
    }

    fn err_of(s: HttpCheckSpec) -> String {
        HttpCheck::new(&s).unwrap_err().to_string()
    }

    #[test]
    fn defaults_follow_the_dialect() {
        let lb = HttpCheck::new(&spec()).unwrap();
        assert_eq!((lb.method(), lb.path()), (Method::Head, "/"));
        assert!(lb.status().contains(302));
        let tm = HttpCheck::new(&HttpCheckSpec::new(Scheme::Https, Dialect::Tm, Duration::from_secs(10))).unwrap();
        assert_eq!(tm.method(), Method::Get);
        assert!(!tm.status().contains(204));
    }

    #[test]
    fn paths_allowed_and_rejected() {
        // SPEC's set has no '=', so query strings are limited to bare words.
        for good in [
            "/",
            "/health",
            "/a-b_c.d?x&y%20#frag",
            "/~!()*[]@$^:',+;",
            &"/".repeat(80),
        ] {
            assert_eq!(validate_path(good).unwrap(), good);
        }
        for bad in [
            "",
            "health",
            "/a b",
            "/é",
            "/a\"b",
            "/<x>",
            "/a{b}",
            "/a|b",
            "/a\\b",
            &"/".repeat(81),
        ] {
            let mut s = spec();
            s.path = Some(bad.to_string());
            let msg = err_of(s);
            assert!(msg.starts_with(&format!("path {bad:?}")), "{msg}");
            assert!(msg.contains("1-80 characters"), "{msg}");
        }
    }

    #[test]
    fn method_and_dialect_words() {
        assert_eq!("get".parse::<Method>().unwrap(), Method::Get);
        let mut s = spec();
        s.method = Some("POST".into());
        assert_eq!(err_of(s), "method \"POST\" is not allowed: HEAD or GET");
        assert!("ga"
            .parse::<Dialect>()
            .unwrap_err()
            .to_string()
            .starts_with("dialect \"ga\""));
    }

    #[test]
    fn host_header_forms() {
        let check = HttpCheck::new(&spec()).unwrap();
        assert_eq!(check.host_header("198.18.0.2:80".parse().unwrap()), "198.18.0.2");
        assert_eq!(check.host_header("198.18.0.2:8080".parse().unwrap()), "198.18.0.2:8080");
        assert_eq!(check.host_header("[2001:2::2]:80".parse().unwrap()), "[2001:2::2]");
        assert_eq!(check.host_header("[2001:2::2]:81".parse().unwrap()), "[2001:2::2]:81");
        let mut s = spec();
        s.domain = Some("www.example.test".into());
        let check = HttpCheck::new(&s).unwrap();
        assert_eq!(
            check.host_header("198.18.0.2:8080".parse().unwrap()),
            "www.example.test"
        );
        assert_eq!(
            check.server_name("198.18.0.2:443".parse().unwrap()).to_str(),
            "www.example.test"
        );
        s.endpoint_headers = vec!["Host: other.test:8443".into()];
        let check = HttpCheck::new(&s).unwrap();
        assert_eq!(check.host_header("198.18.0.2:80".parse().unwrap()), "other.test:8443");
        assert_eq!(
            check.server_name("198.18.0.2:80".parse().unwrap()).to_str(),
            "other.test"
        );
        assert!(check.headers().is_empty(), "Host is not sent twice");
        let https = HttpCheck::new(&HttpCheckSpec::new(Scheme::Https, Dialect::Tm, Duration::from_secs(1))).unwrap();
        assert_eq!(https.host_header("198.18.0.2:443".parse().unwrap()), "198.18.0.2");
        assert!(matches!(
            https.server_name("198.18.0.2:443".parse().unwrap()),
            rustls_pki_types::ServerName::IpAddress(_)
        ));
    }

    #[test]
    fn endpoint_headers_win_case_insensitively() {
        let mut s = spec();
        s.profile_headers = vec!["X-Probe: profile".into(), "X-Only-Profile: p".into()];
        s.endpoint_headers = vec!["x-probe: endpoint".into()];
        let check = HttpCheck::new(&s).unwrap();
        let h: Vec<(String, String)> = check
            .headers()
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
            .collect();
        assert_eq!(
            h,
            [
                ("x-only-profile".into(), "p".into()),
                ("x-probe".into(), "endpoint".into())
            ]
        );
    }

    #[test]
    fn bad_headers_name_the_level_and_pair() {
        let cases: [(&str, &str); 8] = [
            ("no-colon", "name:value"),
            ("Bad Name: x", "token characters"),
            (": x", "token characters"),
            ("X-Empty:", "non-empty value"),
            ("X-Ctl: a\u{7}b", "visible ASCII"),
            ("Host: *.example.test", "without '*'"),
            ("Content-Length: 5", "the prober sets them"),
            ("Connection: keep-alive", "the prober sets them"),
        ];
        for (pair, allowed) in cases {
            for endpoint in [false, true] {
                let mut s = spec();
                let field = if endpoint {
                    s.endpoint_headers = vec![pair.into()];
                    "endpoint_headers"
                } else {
                    s.profile_headers = vec![pair.into()];
                    "profile_headers"
                };
                let msg = err_of(s);
                assert!(msg.starts_with(&format!("{field} {pair:?}")), "{msg}");
                assert!(msg.contains(allowed), "{msg}");
            }
        }
        let mut s = spec();
        s.profile_headers = (0..9).map(|i| format!("X-{i}: v")).collect();
        assert!(err_of(s).contains("at most 8"));
        let mut s = spec();
        s.endpoint_headers = vec!["X-A: 1".into(), "x-a: 2".into()];
        assert!(err_of(s).contains("once per level"));
    }

    #[test]
    fn other_fields_are_checked() {
        let mut s = spec();
        s.domain = Some("*.example.test".into());
        assert!(err_of(s).starts_with("domain \"*.example.test\""));
        let mut s = spec();
        s.expect_body = Some("ok".into());
        assert!(err_of(s).contains("only with method GET"), "HEAD has no body");
        let mut s = spec();
        s.method = Some("GET".into());
        s.expect_body = Some(String::new());
        assert!(err_of(s).starts_with("expect_body \"\""));
        let mut s = spec();
        s.body_limit = Some(0);
        assert!(err_of(s).starts_with("body_limit \"0\""));
        let mut s = spec();
        s.timeout = Duration::ZERO;
        assert!(err_of(s).starts_with("timeout \"0ns\""));
        let mut s = spec();
        s.expect_status = Some("200-299, 301-301, 7xx".into());
        assert!(err_of(s).starts_with("expect_status \"200-299, 301-301, 7xx\""));
    }
}
