//! What one HTTP(S) check sends and expects: `HttpCheck`, built from typed values
//! (`HttpCheckParts`, what the resolved config hands over), and `HttpCheckSpec`, the command
//! line's front door that parses its strings into those same values.
use std::{fmt, net::SocketAddr, time::Duration};

use hyper::header::{HeaderName, HeaderValue};

use super::{error::HttpCheckError, status::StatusSet, tls::TlsVerify};
use crate::rules::{check_header_level, Dialect, Header, HostName, HttpPath, Method, RuleError, StatusRange};

/// How much of a body a GET reads, by default, looking for `expect_body`.
pub const DEFAULT_BODY_LIMIT: usize = 64 * 1024;
/// The most a check may read; a health check is not a download.
pub const MAX_BODY_LIMIT: usize = 1024 * 1024;
/// The longest accepted timeout; longer than any dialect allows, short enough to catch typos.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);

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

/// Everything a check is made of, as typed values that already passed the shared rules.
#[derive(Clone, Debug)]
pub struct HttpCheckParts {
    pub scheme: Scheme,
    pub method: Method,
    pub path: HttpPath,
    /// Sent as the Host header (and used as the TLS name) instead of the target IP.
    pub host: Option<HostName>,
    pub profile_headers: Vec<Header>,
    /// They replace profile headers of the same name.
    pub endpoint_headers: Vec<Header>,
    pub status: Vec<StatusRange>,
    /// A substring the body must contain (GET only).
    pub body_match: Option<String>,
    pub body_limit: usize,
    pub timeout: Duration,
    pub tls: TlsVerify,
    /// The TLS server name (SNI, and the name verified), instead of the Host's.
    pub server_name: Option<HostName>,
    /// A gRPC check: the service whose health is asked (`""`: the server's own). Method,
    /// path, status and body match are then not used; headers are sent as metadata.
    pub grpc: Option<String>,
}

/// The longest gRPC service name accepted (a fully qualified name is far shorter).
pub const MAX_GRPC_SERVICE: usize = 256;

/// The command line's settings for one check, as typed by the operator; `None` means the
/// dialect's default. `HttpCheck::new` parses them with the rules the config reader uses.
#[derive(Clone, Debug)]
pub struct HttpCheckSpec {
    pub scheme: Scheme,
    pub dialect: Dialect,
    pub method: Option<String>,
    pub path: Option<String>,
    /// Sent as the Host header (and used as SNI) instead of the target IP.
    pub domain: Option<String>,
    /// `name:value` pairs of the first level.
    pub profile_headers: Vec<String>,
    /// `name:value` pairs that replace profile headers of the same name.
    pub endpoint_headers: Vec<String>,
    pub expect_status: Option<String>,
    /// A substring the body must contain (GET only).
    pub expect_body: Option<String>,
    pub body_limit: Option<usize>,
    pub timeout: Duration,
    pub tls: TlsVerify,
    /// The TLS server name, instead of the domain's.
    pub server_name: Option<String>,
    /// A gRPC check of this service.
    pub grpc: Option<String>,
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
            server_name: None,
            grpc: None,
        }
    }

    /// The typed values, defaults filled in from the dialect.
    pub fn parts(&self) -> Result<HttpCheckParts, HttpCheckError> {
        let method = match &self.method {
            Some(m) => m.parse()?,
            None => Method::default_for(self.dialect),
        };
        let path = match &self.path {
            Some(p) => HttpPath::parse(p)?,
            None => HttpPath::root(),
        };
        let host = self
            .domain
            .as_deref()
            .map(HostName::parse)
            .transpose()
            .map_err(|e| e.in_field("domain"))?;
        let server_name = self
            .server_name
            .as_deref()
            .map(HostName::parse)
            .transpose()
            .map_err(|e| e.in_field("server_name"))?;
        let status = match &self.expect_status {
            Some(s) => StatusSet::parse("expect_status", s)?.ranges().to_vec(),
            None => self.dialect.default_status().to_vec(),
        };
        Ok(HttpCheckParts {
            scheme: self.scheme,
            method,
            path,
            host,
            profile_headers: header_level("profile_headers", &self.profile_headers)?,
            endpoint_headers: header_level("endpoint_headers", &self.endpoint_headers)?,
            status,
            body_match: self.expect_body.clone(),
            body_limit: self.body_limit.unwrap_or(DEFAULT_BODY_LIMIT),
            timeout: self.timeout,
            tls: self.tls.clone(),
            server_name,
            grpc: self.grpc.clone(),
        })
    }
}

/// Parses one level of `name:value` pairs; errors carry the level's name.
fn header_level(field: &'static str, pairs: &[String]) -> Result<Vec<Header>, RuleError> {
    let headers = pairs
        .iter()
        .map(|p| Header::parse(p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.in_field(field))?;
    check_header_level(&headers).map_err(|e| e.in_field(field))?;
    Ok(headers)
}

/// A ready HTTP(S) check: nothing in it can fail at probe time except the network.
#[derive(Clone, Debug)]
pub struct HttpCheck {
    scheme: Scheme,
    method: Method,
    path: HttpPath,
    /// The path as hyper's request target, converted once.
    uri: hyper::Uri,
    domain: Option<HostName>,
    /// Merged headers, endpoint over profile; a custom Host is kept apart.
    headers: Vec<(HeaderName, HeaderValue)>,
    host_override: Option<String>,
    status: StatusSet,
    expect_body: Option<Vec<u8>>,
    body_limit: usize,
    timeout: Duration,
    tls: TlsVerify,
    server_name: Option<HostName>,
    grpc: Option<String>,
    /// The connection is kept for the next probe of the target (`kept_alive`).
    keep_alive: bool,
}

impl HttpCheck {
    /// The same check, keeping its connection between probes of a target (HTTP/1.1
    /// keep-alive; not for gRPC, whose calls take a connection each).
    #[must_use]
    pub fn kept_alive(mut self, on: bool) -> Self {
        self.keep_alive = on && self.grpc.is_none();
        self
    }

    /// Whether probes of it keep their connection (`kept_alive`).
    pub fn keeps_alive(&self) -> bool {
        self.keep_alive
    }

    /// The command line's way in: parses `spec`, then builds as `from_parts` does.
    pub fn new(spec: &HttpCheckSpec) -> Result<Self, HttpCheckError> {
        Self::from_parts(spec.parts()?)
    }

    /// Builds a check from typed values. Only what the prober alone knows is checked here
    /// (header levels as a whole, body, timeout); each value passed its own rule when it was made.
    pub fn from_parts(p: HttpCheckParts) -> Result<Self, HttpCheckError> {
        check_header_level(&p.profile_headers).map_err(|e| e.in_field("profile_headers"))?;
        check_header_level(&p.endpoint_headers).map_err(|e| e.in_field("endpoint_headers"))?;
        let mut host_override = None;
        let mut headers = Vec::new();
        let kept = p
            .profile_headers
            .iter()
            .filter(|h| !p.endpoint_headers.iter().any(|e| e.same_name(h.name())));
        for h in kept.chain(&p.endpoint_headers) {
            if h.is_host() {
                host_override = Some(h.value().to_string());
            } else {
                headers.push(wire_header(h)?);
            }
        }
        let uri = p
            .path
            .as_str()
            .parse::<hyper::Uri>()
            .map_err(|e| HttpCheckError::invalid("path", p.path.as_str(), format!("a request target ({e})")))?;
        let status = StatusSet::new(p.status)?;
        if p.body_limit == 0 || p.body_limit > MAX_BODY_LIMIT {
            return Err(HttpCheckError::invalid(
                "body_limit",
                p.body_limit.to_string(),
                format!("1-{MAX_BODY_LIMIT} bytes"),
            ));
        }
        let expect_body = match p.body_match {
            None => None,
            Some(b) if p.method != Method::Get => {
                return Err(HttpCheckError::invalid(
                    "expect_body",
                    b,
                    "only with method GET (HEAD has no body)",
                ))
            }
            Some(b) if b.is_empty() || b.len() > p.body_limit => {
                return Err(HttpCheckError::invalid(
                    "expect_body",
                    b,
                    format!("1 to body_limit ({}) bytes", p.body_limit),
                ))
            }
            Some(b) => Some(b.into_bytes()),
        };
        if let Some(service) = &p.grpc {
            if service.len() > MAX_GRPC_SERVICE || service.chars().any(char::is_control) {
                return Err(HttpCheckError::invalid(
                    "service",
                    service.clone(),
                    format!("a gRPC service name of at most {MAX_GRPC_SERVICE} bytes without control characters"),
                ));
            }
        }
        if p.timeout.is_zero() || p.timeout > MAX_TIMEOUT {
            return Err(HttpCheckError::invalid(
                "timeout",
                format!("{:?}", p.timeout),
                format!("more than 0 and at most {}s", MAX_TIMEOUT.as_secs()),
            ));
        }
        Ok(Self {
            scheme: p.scheme,
            method: p.method,
            path: p.path,
            uri,
            domain: p.host,
            headers,
            host_override,
            status,
            expect_body,
            body_limit: p.body_limit,
            timeout: p.timeout,
            tls: p.tls,
            server_name: p.server_name,
            grpc: p.grpc,
            keep_alive: false,
        })
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }
    pub fn method(&self) -> Method {
        self.method
    }
    pub fn path(&self) -> &str {
        self.path.as_str()
    }
    pub(crate) fn uri(&self) -> &hyper::Uri {
        &self.uri
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
    /// For a gRPC check, the service asked about.
    pub fn grpc_service(&self) -> Option<&str> {
        self.grpc.as_deref()
    }
    /// Custom headers other than Host, endpoint values winning.
    pub fn headers(&self) -> &[(HeaderName, HeaderValue)] {
        &self.headers
    }

    /// The Host header for `target`: a custom Host header, else the domain, else the target
    /// IP with `:port` when the port is not the scheme's default (IPv6 in brackets).
    pub fn host_header(&self, target: SocketAddr) -> String {
        if let Some(h) = self.custom_host() {
            return h.to_string();
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

    fn custom_host(&self) -> Option<&str> {
        self.host_override
            .as_deref()
            .or(self.domain.as_ref().map(HostName::as_str))
    }

    /// The TLS server name: the one set (`server_name`), else the host part of the Host header
    /// when it is a DNS name, else the target IP (which rustls never sends as SNI, but strict mode checks it against the
    /// certificate's IP addresses).
    pub fn server_name(&self, target: SocketAddr) -> rustls_pki_types::ServerName<'static> {
        let given = self.server_name.as_ref().map(HostName::as_str);
        let named = given.or_else(|| self.custom_host()).and_then(|h| {
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

/// A header as hyper sends it; the shared rules admit only what converts, so an error here
/// means those rules and hyper disagree.
fn wire_header(h: &Header) -> Result<(HeaderName, HeaderValue), HttpCheckError> {
    let bad = |e: &dyn std::error::Error| {
        HttpCheckError::invalid("headers", h.to_string(), format!("a header hyper can send ({e})"))
    };
    let name = HeaderName::from_bytes(h.name().as_bytes()).map_err(|e| bad(&e))?;
    let value = HeaderValue::from_str(h.value()).map_err(|e| bad(&e))?;
    Ok((name, value))
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

#[cfg(test)]
mod tests;
