//! The HTTP(S) and gRPC kind as the registry (`probe::kinds`) sees it: its settings read, named
//! in the check's identity, and prepared for an endpoint, sharing one prepared check and one
//! TLS client among the endpoints of a profile that add nothing of their own.
use std::{sync::Arc, time::Duration};

use super::{
    config::{self, ClientCertFiles, HttpSettings, TlsVerifySetting},
    task::{tls_client, HttpProbe},
    HttpCheckError, TlsVerify,
};
use crate::{
    probe::{CheckKind, EndpointCheck, ProbeKind, TaskProbe},
    rules::{Dialect, HostName, Protocol},
    schema::{
        keys::Key,
        read::{Reader, Table},
    },
};

/// The HTTP kind (`probe::kinds`): http, https, grpc and grpcs.
pub struct Http;

/// What makes a TLS client: verification, client certificate, TLS 1.3 alone, re-verify bound.
type TlsClientKey = (TlsVerifySetting, Option<ClientCertFiles>, bool, u32);

/// What one profile's endpoints share while their checks are prepared: one prepared check for
/// all that add no headers or keys of their own (~320 bytes per endpoint saved: its path,
/// URI, status set and headers), and the TLS clients (a CA file is read once per profile).
#[derive(Default)]
pub struct Shared {
    /// The check of the profile's endpoints that add nothing.
    plain: Option<Arc<dyn TaskProbe>>,
    /// The profile's TLS client.
    tls: Option<TlsVerify>,
    /// The TLS clients of endpoints with TLS keys of their own, by those keys (few: a linear
    /// search).
    own_tls: Vec<(TlsClientKey, TlsVerify)>,
}

impl Shared {
    /// The TLS client for the settings `h`, which the endpoint's own keys changed if `own`.
    fn client(&mut self, h: &HttpSettings, own: bool) -> Result<TlsVerify, HttpCheckError> {
        if !own {
            if let Some(tls) = &self.tls {
                return Ok(tls.clone());
            }
            let tls = tls_client(h)?;
            self.tls = Some(tls.clone());
            return Ok(tls);
        }
        // An endpoint's own verification or client certificate: its own client (endpoints
        // with the same keys share one).
        let key = (
            h.tls_verify.clone(),
            h.client_cert.clone(),
            h.tls13_only,
            h.tls_reverify_s,
        );
        if let Some((_, tls)) = self.own_tls.iter().find(|(k, _)| *k == key) {
            return Ok(tls.clone());
        }
        let tls = tls_client(h)?;
        self.own_tls.push((key, tls.clone()));
        Ok(tls)
    }
}

impl CheckKind for Http {
    type Settings = Box<HttpSettings>;
    type Shared = Shared;
    type Error = HttpCheckError;

    const KEYS: &'static [Key] = config::HEALTH_KEYS;
    const ENDPOINT_KEYS: &'static [Key] = config::ENDPOINT_KEYS;

    fn default_port(p: Protocol) -> Option<u16> {
        match p {
            Protocol::Http => Some(80),
            Protocol::Https => Some(443),
            // gRPC has no well-known port.
            _ => None,
        }
    }

    fn read(r: &mut Reader<'_>, t: &Table<'_, '_>, d: Dialect, p: Protocol) -> Option<Self::Settings> {
        config::read(r, t, d, p).map(Box::new)
    }

    fn protocol(h: &Self::Settings) -> Protocol {
        match (h.grpc.is_some(), h.tls) {
            (false, false) => Protocol::Http,
            (false, true) => Protocol::Https,
            (true, false) => Protocol::Grpc,
            (true, true) => Protocol::Grpcs,
        }
    }

    fn identity(h: &Self::Settings, endpoint: &EndpointCheck<'_>, out: &mut String) {
        h.identity(endpoint.own, endpoint.headers, out);
    }

    fn legacy(h: &Self::Settings, endpoint: &EndpointCheck<'_>) -> String {
        let headers: Vec<String> = h
            .headers
            .iter()
            .chain(endpoint.headers)
            .map(ToString::to_string)
            .collect();
        let status: Vec<String> = h
            .healthy_status
            .iter()
            .map(|r| format!("{}-{}", r.first(), r.last()))
            .collect();
        format!(
            " {} {} host={:?} headers={:?} status={:?} body={:?}",
            h.method.name(),
            h.path,
            h.host.as_ref().map(HostName::as_str),
            headers,
            Some(status.join(",")),
            h.body_match
        )
    }

    fn prepare(
        profile: &Self::Settings,
        endpoint: &EndpointCheck<'_>,
        timeout: Duration,
        shared: &mut Shared,
    ) -> Result<ProbeKind, HttpCheckError> {
        let plain = endpoint.headers.is_empty() && endpoint.own.is_none();
        if let Some(probe) = shared.plain.as_ref().filter(|_| plain) {
            return Ok(ProbeKind::Task(probe.clone()));
        }
        let merged = endpoint.own.map(|o| profile.with_override(o));
        let h = merged.as_ref().unwrap_or(profile);
        let tls = shared.client(h, endpoint.own.is_some_and(config::CheckOverride::changes_client))?;
        let probe = HttpProbe::prepare(h, timeout, endpoint.headers, tls)?;
        if let Some(t) = &h.tunnel {
            tunnelled(&probe, t, endpoint.target)?;
        }
        let probe: Arc<dyn TaskProbe> = Arc::new(probe);
        if plain {
            shared.plain = Some(probe.clone());
        }
        Ok(ProbeKind::Task(probe))
    }
}

/// Why a check through tunnel `t` cannot be made for the endpoint at `target`: the families
/// of its address and the VIP differ, or the request for the VIP does not fit one of the
/// kernel's templates.
fn tunnelled(
    probe: &HttpProbe,
    t: &crate::probe::tunnel::TunnelTo,
    target: std::net::SocketAddr,
) -> Result<(), HttpCheckError> {
    crate::probe::tunnel::engine_tunnel(t, target)
        .map_err(|why| HttpCheckError::invalid("tunnel_vip", t.vip.to_string(), why))?;
    let inner = std::net::SocketAddr::new(t.vip, target.port());
    if probe.kernel_request(inner).is_none() {
        let len = super::render_request(probe.check(), inner).len();
        return Err(HttpCheckError::invalid(
            "tunnel",
            format!("a request of {len} bytes"),
            format!(
                "a check through a tunnel runs in the kernel, whose requests hold at most {} bytes: \
                 shorten the path or the headers",
                probe_common::http::HTTP_REQ_MAX
            ),
        ));
    }
    Ok(())
}
