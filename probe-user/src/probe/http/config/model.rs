//! An HTTP(S) or gRPC check's settings as the configuration gives them, and what an endpoint
//! may set of them for itself.
use serde::Serialize;

use crate::{
    probe::key_field,
    rules::{Header, HostName, HttpPath, Method, StatusRange},
};

/// A profile's HTTP(S) or gRPC check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HttpSettings {
    pub tls: bool,
    pub method: Method,
    pub path: HttpPath,
    /// Host header from `host`; None means the endpoint's address, unless a Host header is set.
    pub host: Option<HostName>,
    pub headers: Vec<Header>,
    pub healthy_status: Vec<StatusRange>,
    pub body_match: Option<String>,
    /// HTTPS: how the server's certificate is checked.
    pub tls_verify: TlsVerifySetting,
    /// HTTPS: the name sent as SNI and, with `tls_verify = "ca"`, verified; None: the Host
    /// (`host`, or a Host header), else no SNI and the address.
    pub server_name: Option<HostName>,
    /// HTTPS: the client certificate (chain) and key files presented to servers that ask
    /// (mTLS backends).
    pub client_cert: Option<ClientCertFiles>,
    /// HTTPS: `min_version = "1.3"`: TLS 1.3 only (else 1.2 and 1.3).
    pub tls13_only: bool,
    /// Over TLS: a full handshake with each target at least this often, in seconds
    /// (`tls_reverify`); a session is resumed only within it.
    pub tls_reverify_s: u32,
    /// Over TLS: a notice when the server's certificate expires within this many days (0:
    /// never). Not part of the check: it changes no probe and no verdict.
    pub cert_warn_days: u16,
    /// `keep_alive`: the connection is kept between checks (sockets only; not for gRPC).
    pub keep_alive: bool,
    /// `protocol = "grpc"` or `"grpcs"`: the service whose health is asked (`""`: the
    /// server's own). The call is fixed (`grpc.health.v1.Health/Check`, SERVING is healthy),
    /// so method, path, healthy_status and body_match keep their defaults and are not used;
    /// headers are sent as metadata.
    pub grpc: Option<String>,
    /// `tunnel`: plain HTTP through the data path's tunnel to the service address, run whole
    /// by the kernel (`probe::tunnel`); None to the endpoint's address.
    pub tunnel: Option<crate::probe::tunnel::TunnelTo>,
}

/// `client_cert` and `client_key`: PEM files, read when the configuration is loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClientCertFiles {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
}

/// `tls_verify`: what an HTTPS check requires of the server's certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub enum TlsVerifySetting {
    /// One must be presented; chain, name and dates are not checked (SPEC 1, the tm's rule).
    #[default]
    Presence,
    /// It must chain to a root of `ca_file` (None: the system's roots), match the server name
    /// and be within its dates.
    Ca { ca_file: Option<std::path::PathBuf> },
}

impl HttpSettings {
    /// Whether `code` is in the healthy set (the config tests' shorthand).
    #[cfg(test)]
    pub fn status_ok(&self, code: u16) -> bool {
        self.healthy_status.iter().any(|r| r.contains(code))
    }
}

/// What an endpoint may set of its profile's TLS and gRPC check: each key left out is the
/// profile's. (A backend with its own CA, name or client certificate, or its own service.)
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CheckOverride {
    pub tls_verify: Option<TlsVerifySetting>,
    pub server_name: Option<HostName>,
    pub client_cert: Option<ClientCertFiles>,
    pub tls13_only: Option<bool>,
    pub service: Option<String>,
}

impl CheckOverride {
    /// Whether it changes the TLS client (verification, client certificate, versions): the
    /// endpoint then needs a client of its own.
    pub fn changes_client(&self) -> bool {
        self.tls_verify.is_some() || self.client_cert.is_some() || self.tls13_only.is_some()
    }
}

impl HttpSettings {
    /// The profile's check with `o`'s keys in place of its own.
    #[must_use]
    pub fn with_override(&self, o: &CheckOverride) -> HttpSettings {
        let mut h = self.clone();
        if let Some(v) = &o.tls_verify {
            h.tls_verify = v.clone();
        }
        if let Some(n) = &o.server_name {
            h.server_name = Some(n.clone());
        }
        if let Some(c) = &o.client_cert {
            h.client_cert = Some(c.clone());
        }
        if let Some(t) = o.tls13_only {
            h.tls13_only = t;
        }
        if let Some(s) = &o.service {
            h.grpc = Some(s.clone());
        }
        h
    }
}

impl HttpSettings {
    /// What it sends and expects, for the check's identity, as an endpoint with `own` keys and
    /// `endpoint_headers` asks it.
    pub fn identity(&self, own: Option<&CheckOverride>, endpoint_headers: &[Header], out: &mut String) {
        // The endpoint's own TLS keys and service stand in for the profile's.
        let merged = own.map(|own| self.with_override(own));
        let h = merged.as_ref().unwrap_or(self);
        key_field(out, "method", h.method.name());
        key_field(out, "path", &h.path.to_string());
        if let Some(host) = &h.host {
            key_field(out, "host", host.as_str());
        }
        for header in h.headers.iter().chain(endpoint_headers) {
            key_field(out, "header", &header.to_string());
        }
        for r in &h.healthy_status {
            key_field(out, "status", &format!("{}-{}", r.first(), r.last()));
        }
        if let Some(body) = &h.body_match {
            key_field(out, "body", body);
        }
        // Only when set, so that keys of checks without them stay as they were.
        if h.keep_alive {
            key_field(out, "keep_alive", "1");
        }
        crate::probe::tunnel::identity(h.tunnel.as_ref(), out);
        if let TlsVerifySetting::Ca { ca_file } = &h.tls_verify {
            let roots = ca_file
                .as_ref()
                .map_or_else(|| "system".into(), |p| p.display().to_string());
            key_field(out, "tls_verify_ca", &roots);
        }
        if let Some(name) = &h.server_name {
            key_field(out, "server_name", name.as_str());
        }
        if let Some(files) = &h.client_cert {
            key_field(out, "client_cert", &files.cert.display().to_string());
        }
        if h.tls13_only {
            key_field(out, "min_version", "1.3");
        }
        if h.tls_reverify_s != crate::probe::http::tls::DEFAULT_REVERIFY_S {
            key_field(out, "tls_reverify_s", &h.tls_reverify_s.to_string());
        }
        if let Some(service) = &h.grpc {
            key_field(out, "grpc_service", service);
        }
    }
}
