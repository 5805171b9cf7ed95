//! The HTTP(S) and gRPC check as the daemon runs it: its settings (`config`) made into a
//! prepared check once, handed over as typed values (neither the prober's dialect defaults nor
//! its text parsing apply), and run as a task (`TaskProbe`) or, plain, by the kernel.
use std::{sync::Arc, time::Duration};

use super::{
    config::{HttpSettings, TlsVerifySetting},
    request::DEFAULT_BODY_LIMIT,
    HttpCheck, HttpCheckError, HttpCheckParts, HttpOutcome, Phase, Scheme, StatusSet, TlsVerify,
};
use crate::{
    engine::L4Outcome,
    probe::tunnel::TunnelTo,
    probe::{ProbeReport, Probers, Probing, TaskProbe},
    rules::Header,
};

/// A ready HTTP(S) or gRPC check, shared by every probe of one check (behind the `Arc` of
/// its `ProbeKind::Task`).
#[derive(Debug)]
pub struct HttpProbe {
    check: HttpCheck,
    /// Through the data path's tunnel to the service address: run by the kernel only.
    tunnel: Option<TunnelTo>,
}

impl HttpProbe {
    /// The check the profile's HTTP settings describe for an endpoint that adds
    /// `endpoint_headers`, with the profile's TLS
    /// client (`tls_client`, made once per profile).
    pub fn prepare(
        h: &HttpSettings,
        timeout: Duration,
        endpoint_headers: &[Header],
        tls: TlsVerify,
    ) -> Result<HttpProbe, HttpCheckError> {
        let check = HttpCheck::from_parts(HttpCheckParts {
            scheme: if h.tls { Scheme::Https } else { Scheme::Http },
            method: h.method,
            path: h.path.clone(),
            host: h.host.clone(),
            profile_headers: h.headers.clone(),
            endpoint_headers: endpoint_headers.to_vec(),
            status: h.healthy_status.clone(),
            body_match: h.body_match.clone(),
            body_limit: DEFAULT_BODY_LIMIT,
            timeout,
            tls,
            server_name: h.server_name.clone(),
            grpc: h.grpc.clone(),
        })?
        .kept_alive(h.keep_alive);
        Ok(HttpProbe {
            check,
            tunnel: h.tunnel,
        })
    }

    pub fn check(&self) -> &HttpCheck {
        &self.check
    }
}

impl TaskProbe for HttpProbe {
    fn run<'a>(&'a self, probers: &'a Probers, target: std::net::SocketAddr, budget: Option<Duration>) -> Probing<'a> {
        Box::pin(async move {
            if self.tunnel.is_some() {
                // A socket cannot take the tunnel: no verdict rather than the plain road's.
                let o = HttpOutcome::LocalError(
                    "a check through a tunnel runs in the kernel only, and the L4 engine is not running".into(),
                );
                return ProbeReport {
                    healthy: false,
                    outcome: (&o).into(),
                    elapsed: Duration::ZERO,
                    reason: Arc::from(o.to_string()),
                    cert_not_after: None,
                };
            }
            let budget = budget.map_or(self.check.timeout(), |b| b.min(self.check.timeout()));
            let r = probers.http.probe_within(target, &self.check, budget).await;
            ProbeReport {
                healthy: r.healthy(),
                outcome: (&r.outcome).into(),
                elapsed: r.elapsed,
                reason: Arc::from(r.outcome.to_string()),
                cert_not_after: r.cert_not_after,
            }
        })
    }

    fn timeout(&self) -> Duration {
        self.check.timeout()
    }

    /// Plain HTTP/1.1 (not gRPC) whose status alone decides (no body to match), when the
    /// request fits a template.
    fn kernel_request(&self, target: std::net::SocketAddr) -> Option<Arc<[u8]>> {
        let plain = self.check.scheme() == Scheme::Http && self.check.grpc_service().is_none();
        // A kept connection lives in a socket; the kernel's checks open one each.
        if !plain || self.check.expect_body().is_some() || self.check.keeps_alive() {
            return None;
        }
        let request = crate::probe::http::render_request(&self.check, target);
        (request.len() <= probe_common::http::HTTP_REQ_MAX).then(|| Arc::from(request))
    }

    fn tunnel(&self) -> Option<&TunnelTo> {
        self.tunnel.as_ref()
    }

    /// In the socket prober's words.
    fn kernel_report(&self, outcome: L4Outcome, elapsed: Duration) -> ProbeReport {
        let o = kernel_outcome(outcome, self.check.status());
        ProbeReport {
            healthy: o.healthy(),
            outcome: (&o).into(),
            elapsed,
            reason: Arc::from(o.to_string()),
            cert_not_after: None,
        }
    }

    #[cfg(test)]
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The TLS client `h` asks for: by default (SPEC 1, the tm's rule) a certificate must be
/// presented and is not validated; with `tls_verify = "ca"` it must chain to `ca_file` or the
/// system's roots.
pub fn tls_client(h: &HttpSettings) -> Result<TlsVerify, HttpCheckError> {
    let mut tls = match &h.tls_verify {
        TlsVerifySetting::Presence => TlsVerify::Presented,
        TlsVerifySetting::Ca { ca_file: Some(path) } => TlsVerify::strict_ca_file(path)?,
        TlsVerifySetting::Ca { ca_file: None } => TlsVerify::strict_system()?,
    };
    if h.tls13_only {
        tls = tls.tls13_only();
    }
    if h.tls_reverify_s != crate::probe::http::tls::DEFAULT_REVERIFY_S {
        tls = tls.reverify_every(std::time::Duration::from_secs(u64::from(h.tls_reverify_s)));
    }
    match &h.client_cert {
        // Read again (the reader checked it): the key is held by the client only.
        Some(files) => tls.with_client_cert_files(&files.cert, &files.key),
        None => Ok(tls),
    }
}

/// What a kernel HTTP probe's outcome means for a check whose healthy statuses are `status`.
pub fn kernel_outcome(o: L4Outcome, status: &StatusSet) -> HttpOutcome {
    match o {
        L4Outcome::HttpStatus { status: s } if status.contains(s) => HttpOutcome::Passed(s),
        L4Outcome::HttpStatus { status: s } => HttpOutcome::BadStatus(s),
        L4Outcome::Refused => HttpOutcome::Refused,
        L4Outcome::Unreachable { .. } => HttpOutcome::Unreachable,
        L4Outcome::Timeout => HttpOutcome::Timeout(Phase::Connect),
        L4Outcome::HttpResponseTimeout => HttpOutcome::Timeout(Phase::Response),
        L4Outcome::HttpReset => HttpOutcome::Reset,
        L4Outcome::HttpClosed => HttpOutcome::Closed,
        L4Outcome::HttpMalformed => {
            HttpOutcome::Protocol("the response does not start with an HTTP/1.x status line".into())
        }
        L4Outcome::NoRoute => HttpOutcome::Connect("no route to the target".into()),
        L4Outcome::LocalError { errno } => {
            HttpOutcome::LocalError(std::io::Error::from_raw_os_error(errno).to_string())
        }
        // Neither comes for an HTTP probe (Open: the kernel answers the SYN+ACK with the
        // request; Silent is UDP's); no verdict rather than a made-up one.
        L4Outcome::HttpUnsupported | L4Outcome::HttpUndecided { .. } | L4Outcome::Open | L4Outcome::Silent => {
            HttpOutcome::LocalError(format!("the kernel could not run this HTTP probe ({o})"))
        }
    }
}
